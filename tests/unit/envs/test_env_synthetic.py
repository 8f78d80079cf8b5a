"""SyntheticHierEnv: contract (INFO_KEYS, bad actions), exact expert on every config, determinism, splits."""

from __future__ import annotations

import pytest

from envs import INFO_KEYS, TextEnv, make
from envs.synthetic import SyntheticHierEnv, parse_task_id

BAD_ACTIONS = ["", "x" * 10_000, "héllo ☃ 日本", "'; DROP TABLE tasks; --", "go to\nshelf", "   ", "\x00\x01"]


def _rollout(env: SyntheticHierEnv, task_id: str) -> tuple[list[str], float, dict, list[dict]]:
    """Follow expert_action() to the end; returns (actions, total reward, last info, all infos)."""
    _, info = env.reset(task_id=task_id)
    actions, total, infos = [], 0.0, [info]
    while (action := env.expert_action()) is not None:
        _, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        total += reward
        infos.append(info)
        if terminated or truncated:
            break
    return actions, total, info, infos


def test_registry_builds_a_text_env():
    env = make("synthetic", max_steps=7)
    assert isinstance(env, TextEnv)
    assert env.name == "synthetic" and env.max_steps == 7


@pytest.mark.parametrize("acts", [1, 2, 3])
@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5, 6])
def test_expert_solves_every_config_exactly(stages: int, acts: int):
    env = SyntheticHierEnv(stages=stages, actions_per_stage=acts, distractors=3, success_reward=2.5)
    for task_id in env.task_ids("train")[:3] + env.task_ids("test")[:2]:
        _, _ = env.reset(task_id=task_id)
        plan = env.expert_plan()
        assert len(plan) == stages  # stages - 1 items + the craft
        assert plan[-1][0].startswith("craft the ")
        actions, total, info, infos = _rollout(env, task_id)
        assert actions == [a for _, acts_ in plan for a in acts_]  # the plan is exactly what the expert does
        # item stages take `acts` actions, the craft stage min(acts, 2): (stages-1)*acts + min(acts, 2)
        assert len(actions) == (stages - 1) * acts + min(acts, 2)
        assert info["won"] and total == 2.5 and info["score"] == 1.0
        assert all(i["valid_action"] for i in infos)
        assert env.expert_action() is None and env.expert_plan() == []


def test_every_info_has_all_keys_and_lists_stay_short():
    env = SyntheticHierEnv(actions_per_stage=3, distractors=3)
    for task_id in env.task_ids("train")[::40]:
        obs, _ = env.reset(task_id=task_id)
        assert len(obs.split()) < 60
        _, _, _, infos = _rollout(env, task_id)
        for i in infos:
            assert set(INFO_KEYS) <= set(i)
            if not i["won"]:
                assert len(i["admissible_actions"]) <= 9
                assert i["admissible_actions"] == sorted(i["admissible_actions"])


@pytest.mark.parametrize("bad", BAD_ACTIONS, ids=range(len(BAD_ACTIONS)))
def test_bad_actions_are_invalid_and_change_nothing(bad: str):
    env = SyntheticHierEnv()
    obs0, info0 = env.reset(task_id="stages3-acts2-dist1-seed4")
    obs, reward, terminated, truncated, info = env.step(bad)
    assert info["valid_action"] is False and reward == 0.0 and not terminated and not truncated
    assert set(INFO_KEYS) <= set(info)
    assert obs.startswith("Nothing happens.") and obs.endswith(obs0.split(". ", 2)[-1])
    assert info["admissible_actions"] == info0["admissible_actions"]


def test_non_string_action_does_not_raise():
    env = SyntheticHierEnv()
    env.reset(task_id="stages2-acts1-dist0-seed1")
    _, _, _, _, info = env.step(None)  # type: ignore[arg-type]
    assert info["valid_action"] is False


def test_order_is_enforced():
    env = SyntheticHierEnv(actions_per_stage=1, distractors=0)
    env.reset(task_id="stages3-acts1-dist0-seed0")
    spec = parse_task_id("stages3-acts1-dist0-seed0")
    assert spec is not None and len(spec.needed) == 2
    obs, _, _, _, info = env.step(f"take {spec.needed[1]}")
    assert obs.startswith(f"You need the {spec.needed[0]} first.") and info["valid_action"]
    assert info["subgoals_done"] == 0
    obs, reward, terminated, _, _ = env.step(f"craft {spec.goal}")
    assert obs.startswith("You lack") and reward == 0.0 and not terminated


def test_truncation_at_max_steps():
    env = SyntheticHierEnv(max_steps=3)
    env.reset(task_id="stages4-acts2-dist1-seed2")
    flags = [env.step("dance")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_determinism_same_task_same_first_observation():
    a, b = SyntheticHierEnv(seed=1), SyntheticHierEnv(seed=2)
    for task_id in a.task_ids()[:20]:
        assert a.reset(task_id=task_id) == b.reset(task_id=task_id)
    assert a.reset(seed=5) == b.reset(seed=5)  # seeded choice of task does not depend on the env's own RNG


def test_splits_are_disjoint_by_content():
    env = SyntheticHierEnv(stages=(2, 3, 4))
    train, test = env.task_ids("train"), env.task_ids("test")
    assert train and test and not set(train) & set(test)
    content = {(s.needed, tuple(sorted(s.distractors)), s.goal) for s in map(parse_task_id, train)}
    assert all(
        (s.needed, tuple(sorted(s.distractors)), s.goal) not in content for s in map(parse_task_id, test)
    )
    _, info = env.reset(task_id=test[0])
    assert info["split"] == "test" and info["task_type"] == test[0].split("-")[0]


def test_distractors_clamped_and_bad_task_ids_rejected():
    spec = parse_task_id("stages6-acts3-dist3-seed0")
    assert spec is not None and spec.task_id == "stages6-acts3-dist2-seed0" and len(spec.distractors) == 2
    assert parse_task_id("stages7-acts2-dist0-seed0") is None
    with pytest.raises(ValueError):
        SyntheticHierEnv().reset(task_id="nonsense")


def test_step_latency_is_log_normal_around_its_median_and_off_by_default(monkeypatch):
    """``step_latency_s``: each step sleeps median × exp(σ·z), z ~ N(0, 1); the sleeps are recorded, not timed.
    Over 400 steps at median 2 ms and σ = 1, the sample median is 2 ms within ±15 % (its standard error is
    1.25·σ/√400 ≈ 6 % in log space) and ~5.4 % of the steps exceed 5× the median (P(z > ln 5 = 1.61))."""
    import envs.synthetic as synthetic

    slept: list[float] = []
    monkeypatch.setattr(synthetic.time, "sleep", slept.append)
    env = SyntheticHierEnv(stages=(1,), step_latency_s=0.002, latency_sigma=1.0, seed=0)
    plain = SyntheticHierEnv(stages=(1,), seed=0)
    for e in (env, plain):
        e.reset(task_id=e.task_ids()[0])
        e.max_steps = 10_000
        for _ in range(400):
            e.step("look")
    assert len(slept) == 400  # the plain env never sleeps
    slept.sort()
    assert 0.0017 < slept[200] < 0.0023
    assert 0.02 < sum(x > 0.010 for x in slept) / 400 < 0.10
    with pytest.raises(ValueError, match="step_latency_s"):
        SyntheticHierEnv(step_latency_s=-1.0)
