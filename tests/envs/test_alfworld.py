"""ALFWorld adapter on the real TextWorld-PDDL engine and the shared game files (one env per module)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import envs.data as data_module
from envs.base import INFO_KEYS, TextEnv, make
from envs.data import alfworld_data_dir, download_alfworld, shared_alfworld_tarball, unpack_alfworld

pytest.importorskip("alfworld", reason="needs `pip install 'hierarl[alfworld]'`")
pytest.importorskip("fast_downward", reason="needs textworld[pddl] (fast-downward)")

from envs.alfworld import TASK_TYPES, AlfWorldEnv, PlanStep

# alfworld's import sets ALFWORLD_DATA to an empty ~/.cache/alfworld when unset: look for the games, not the variable.
HAVE_DATA = (
    shared_alfworld_tarball().is_file()
    or (Path(os.environ.get("ALFWORLD_DATA", "/nonexistent")) / "json_2.1.1").is_dir()
)
needs_data = pytest.mark.skipif(
    not HAVE_DATA,
    reason=f"ALFWorld games not found: set HIERARL_SHARED (tarball at {shared_alfworld_tarball()}) or ALFWORLD_DATA",
)

BAD_ACTIONS = [
    "",
    "   ",
    "x" * 10_000,
    "héllo wörld ☃ 你好",
    "\ud800 lone surrogate",
    "look\ninventory",
    "'; DROP TABLE games; --",
    "$(rm -rf /) `reboot`",
    "<action>look</action>",
    "Go To Cabinet 1",  # right words, wrong case: ALFWorld matches commands exactly
    None,
    42,
]


@pytest.fixture(scope="module")
def env():
    e = make("alfworld", split="valid_unseen", max_steps=50, expert="handcoded", seed=0)
    yield e
    e.close()


def _assert_info(info: dict) -> None:
    missing = [k for k in INFO_KEYS if k not in info]
    assert not missing, f"info lacks {missing}"
    assert isinstance(info["admissible_actions"], list) and info["admissible_actions"]
    assert isinstance(info["won"], bool) and isinstance(info["valid_action"], bool)
    assert info["task_type"] in TASK_TYPES.values()


def _first_of_each_type(env: AlfWorldEnv, split: str) -> dict[str, str]:
    chosen: dict[str, str] = {}
    for task_id in env.task_ids(split):
        chosen.setdefault(env._by_id[task_id].task_type, task_id)
    return chosen


def test_unpack_is_idempotent_and_paths_resolve(tmp_path, monkeypatch):
    if not shared_alfworld_tarball().is_file():
        pytest.skip(f"no tarball at {shared_alfworld_tarball()} (set HIERARL_SHARED)")
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    target = unpack_alfworld(shared_alfworld_tarball(), tmp_path / "alf")
    assert (target / "json_2.1.1" / "valid_unseen").is_dir()
    assert unpack_alfworld(shared_alfworld_tarball(), tmp_path / "alf") == target  # second call: no work
    assert alfworld_data_dir(target) == target
    assert alfworld_data_dir(target / "json_2.1.1") == target
    monkeypatch.setenv("ALFWORLD_DATA", str(target))
    assert alfworld_data_dir() == target


def test_missing_data_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        alfworld_data_dir(tmp_path / "nothing", tarball=tmp_path / "missing.tar.gz")


def test_download_runs_the_official_script(tmp_path, monkeypatch):
    # No internet in CI: check the command line handed to the official downloader, not the download.
    script = tmp_path / "alfworld-download"
    script.write_text("#!/bin/sh\n")
    calls = []
    monkeypatch.setattr(data_module.shutil, "which", lambda name: str(script))

    def run(cmd, **kw):
        calls.append((cmd, kw["env"]))
        return data_module.subprocess.CompletedProcess(cmd, 0, stderr="")

    monkeypatch.setattr(data_module.subprocess, "run", run)
    dest = download_alfworld(tmp_path / "dest")
    assert dest == (tmp_path / "dest").resolve() and dest.is_dir()
    assert calls[0][0] == [str(script), "--data-dir", str(dest)] and calls[0][1]["ALFWORLD_DATA"] == str(dest)


@pytest.mark.slow
@needs_data
def test_splits_match_alfworlds_filter(env):
    assert isinstance(env, TextEnv)
    assert len(env.task_ids("valid_unseen")) == 134
    assert len(env.task_ids("eval_in_distribution")) == 140  # alias of valid_seen
    assert len(env.task_ids("valid_train")) == 200
    assert env.task_ids("eval_out_of_distribution") == env.task_ids("valid_unseen")
    assert set(_first_of_each_type(env, "valid_unseen")) == set(TASK_TYPES.values())
    with pytest.raises(ValueError):
        env.reset(task_id="valid_unseen/not-a-game/trial_0")


@pytest.mark.slow
@needs_data
def test_reset_step_info_and_determinism(env):
    task_id = env.task_ids()[0]
    obs1, info = env.reset(task_id=task_id)
    _assert_info(info)
    assert obs1.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert info["task"] and info["task"] in obs1 and info["task_id"] == task_id
    assert info["split"] == "valid_unseen" and info["score"] == 0.0 and not info["won"]
    action = info["admissible_actions"][0]
    _, reward, terminated, truncated, info = env.step(action)
    _assert_info(info)
    assert info["valid_action"] and reward == 0.0 and not terminated and not truncated
    assert env.reset(task_id=task_id)[0] == obs1
    a, b = env.reset(seed=7), env.reset(seed=7)
    assert a[1]["task_id"] == b[1]["task_id"] and a[0] == b[0]


@pytest.mark.slow
@needs_data
def test_bad_actions_never_raise(env):
    env.reset(task_id=env.task_ids()[0])
    for action in BAD_ACTIONS:
        obs, reward, terminated, truncated, info = env.step(action)
        _assert_info(info)
        assert obs == "Nothing happens." and not info["valid_action"], repr(action)[:40]
        assert reward == 0.0 and not terminated and not truncated


@pytest.mark.slow
@needs_data
def test_truncation_and_after_end(env):
    saved = env.max_steps
    env.max_steps = 2
    try:
        env.reset(task_id=env.task_ids()[0])
        assert env.step("look")[3] is False
        _, _, terminated, truncated, _ = env.step("look")
        assert truncated and not terminated
        obs, reward, terminated, truncated, info = env.step("look")
        assert (
            obs.startswith("The episode has ended")
            and reward == 0.0
            and truncated
            and not info["valid_action"]
        )
        assert env.expert_action() is None
    finally:
        env.max_steps = saved


@pytest.mark.slow
@needs_data
def test_handcoded_expert_solves_one_game_of_each_type(env):
    random.seed(0)  # the hand-coded expert breaks ties with the global `random`
    chosen = _first_of_each_type(env, "valid_unseen")
    # The hand-coded expert is a heuristic, not a planner: it explores past 50 steps on the three CD-in-safe
    # trials that come first, so pick_two_obj uses the next task (solved in 13 steps).
    chosen["pick_two_obj"] = (
        "valid_unseen/pick_two_obj_and_place-KeyChain-None-Safe-219/trial_T20190909_011803_423115"
    )
    results = {}
    for task_type, task_id in sorted(chosen.items()):
        env.reset(task_id=task_id)
        total, terminated, truncated = 0.0, False, False
        while not (terminated or truncated) and (action := env.expert_action()) is not None:
            _, reward, terminated, truncated, info = env.step(action)
            total += reward
        results[task_type] = (info["won"], total, terminated)
    assert results == {t: (True, 10.0, True) for t in TASK_TYPES.values()}, results


@pytest.mark.slow
@needs_data
def test_pddl_plan_is_the_alfred_high_level_plan(env):
    by_type = _first_of_each_type(env, "valid_unseen")
    env.reset(task_id=by_type["pick_heat_then_place"])
    plan = env.pddl_plan()
    assert plan and all(isinstance(s, PlanStep) for s in plan)
    actions = [s.pddl_action for s in plan]
    assert "HeatObject" in actions and actions[-1] == "PutObject" and "NoOp" not in actions
    heat = plan[actions.index("HeatObject")]
    assert heat.subgoal == f"heat {heat.args[0]}" and heat.description
    assert plan[-1].subgoal == f"put {plan[-1].args[0]} in/on {plan[-1].args[1]}"
    assert plan[0].subgoal.startswith("go to ")


@pytest.mark.slow
@needs_data
def test_no_expert_by_default():
    e = AlfWorldEnv(split="valid_seen", task_types=["pick_and_place"], seed=1)
    try:
        _, info = e.reset()
        assert info["task_type"] == "pick_and_place" and info["split"] == "valid_seen"
        assert e.expert_action() is None
        with pytest.raises(ValueError, match="expert='handcoded'"):
            e.play_expert(e.task_ids()[0])
        assert e.task_ids() and all(e._by_id[t].task_type == "pick_and_place" for t in e.task_ids())
    finally:
        e.close()


def test_task_type_names_cover_alfworlds_six():
    assert sorted(TASK_TYPES) == sorted(
        [
            "pick_and_place_simple",
            "pick_two_obj_and_place",
            "look_at_obj_in_light",
            "pick_clean_then_place_in_recep",
            "pick_heat_then_place_in_recep",
            "pick_cool_then_place_in_recep",
        ]
    )


# -- demonstrations: the hand-coded expert's commands cut by the plan (envs/alfworld_plan.py) --------------------

HEAT_GAME = "valid_unseen/pick_heat_then_place_in_recep-Apple-None-Fridge-10/trial_T20190906_182259_116320"
HEAT_SUBTASKS = ["find and take apple", "heat apple", "put apple in/on fridge"]


@pytest.mark.slow
@needs_data
def test_expert_plan_is_a_winning_demonstration_cut_by_the_plan(env):
    env.reset(task_id=HEAT_GAME)
    plan = env.expert_plan()
    assert [g for g, _ in plan] == HEAT_SUBTASKS and env.expert_failure == ""
    assert [acts[-1].split()[0] for _, acts in plan] == ["take", "heat", "put"]  # each ends with its anchor
    assert plan[0][1][0] == "look"  # the expert's first command joins the first subtask
    assert env.expert_plan() == plan  # the expert's ties are seeded by the task id
    # played on a second engine: this env's game is still at its start, and the commands win it
    flat = [a for _, acts in plan for a in acts]
    for action in flat:
        _, reward, terminated, _, info = env.step(action)
    assert info["won"] and terminated and reward == 10.0 and info["steps"] == len(flat)


@pytest.mark.slow
@needs_data
def test_a_game_the_expert_does_not_win_gives_no_plan(env):
    saved = env.max_steps
    env.max_steps = 3  # the expert needs 8 commands
    try:
        env.reset(task_id=HEAT_GAME)
        assert env.expert_plan() == [] and env.expert_failure == "truncated"
        demo = env._demo_env.play_expert(HEAT_GAME)
        assert demo.outcome == "truncated" and len(demo.actions) == 3 and not demo.subtasks
    finally:
        env.max_steps = saved


@pytest.mark.slow
@needs_data
def test_demonstrations_for_every_protocol(env, tok, capsys):
    """BC's demonstrations on ALFWorld, rendered by actors/demos.py for each protocol: the expert's commands win,
    and the protocol states the three subtasks where its papers do."""
    from actors.demos import collect_demonstrations
    from actors.protocols import PROTOCOLS

    env.reset(task_id=HEAT_GAME)
    flat = [a for _, acts in env.expert_plan() for a in acts]
    options = {"split": "valid_unseen"}
    for protocol in PROTOCOLS:
        (traj,) = collect_demonstrations(
            "alfworld", protocol, [HEAT_GAME], tokenizer=tok, env_options=options
        )
        acting = [
            t for t in traj.turns if t.decision.action is not None and t.role in ("agent", "low", "executor")
        ]
        assert traj.won and [t.decision.action for t in acting] == flat, protocol
        if protocol == "react":
            thoughts = [t.response_text.split("</think>")[0] for t in acting]
            assert {th.removeprefix("<think>Current subgoal: ").rstrip(".") for th in thoughts} == set(
                HEAT_SUBTASKS
            )
            continue
        subgoals = [t.decision.subgoal for t in traj.turns if t.segment_index is not None]
        starts = [
            t
            for i, t in enumerate(traj.turns)
            if i == 0 or t.segment_index != traj.turns[i - 1].segment_index
        ]
        assert [t.decision.subgoal for t in starts] == HEAT_SUBTASKS, (protocol, subgoals)
    # a game without a usable demonstration is skipped and counted
    assert (
        collect_demonstrations(
            "alfworld", "react", [HEAT_GAME], tokenizer=tok, env_options=options, max_steps=3
        )
        == []
    )
    assert "[hierarl] demonstrations: 0 of 1 alfworld tasks; skipped 1 truncated" in capsys.readouterr().out
