"""ScienceWorld adapter against the real simulator (one JVM shared by the module)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envs.base import INFO_KEYS, TextEnv, make

pytest.importorskip("scienceworld", reason="needs `pip install 'hierarl[scienceworld]'`")

from envs.scienceworld import (
    ENDED_OBSERVATION,
    INVALID_OBSERVATION,
    MOVE_PREFIXES,
    SPLIT_SIZES,
    parse_task_id,
    split_at_moves,
    split_variations,
)

pytestmark = pytest.mark.slow

# Families whose gold paths are short (5-13 steps) and whose valid-action lists are small: the fast end of the 30.
QUICK = ["lifespan-longest-lived", "power-component", "find-plant"]

BAD_ACTIONS = [
    "",
    "   ",
    "x" * 10_000,
    "héllo wörld ☃ 你好",
    "\ud800 lone surrogate",
    "look around\nopen door to kitchen",
    "'; DROP TABLE tasks; --",
    "$(rm -rf /) `reboot`",
    "<action>look around</action>",
    None,
    42,
]


@pytest.fixture(scope="module")
def env():
    e = make("scienceworld", max_steps=50, task_families=QUICK, seed=0)
    yield e
    e.close()


def _assert_info(info: dict) -> None:
    missing = [k for k in INFO_KEYS if k not in info]
    assert not missing, f"info lacks {missing}"
    assert isinstance(info["admissible_actions"], list) and info["admissible_actions"]
    assert all(isinstance(a, str) for a in info["admissible_actions"])
    assert isinstance(info["won"], bool) and isinstance(info["valid_action"], bool)


def test_split_table_matches_the_simulator(env):
    # SPLIT_SIZES is a transcription of the simulator's official splits; check it against the live JVM.
    for family in [*QUICK, "boil"]:
        env._sim.load(family, 0, "")
        assert list(split_variations(family, "train")) == list(env._sim.get_variations_train()), family
        assert list(split_variations(family, "dev")) == list(env._sim.get_variations_dev()), family
        assert list(split_variations(family, "test")) == list(env._sim.get_variations_test()), family
        assert sum(SPLIT_SIZES[family]) == env._sim.get_max_variations(family)
    assert len(SPLIT_SIZES) == 30
    assert sum(sum(s) for s in SPLIT_SIZES.values()) == 7207  # all variations of scienceworld 1.2.3


def test_task_ids_and_parsing(env):
    assert isinstance(env, TextEnv)
    ids = env.task_ids("dev")
    # lifespan-longest-lived 31 + power-component 5 + find-plant 75 dev variations.
    assert len(ids) == 31 + 5 + 75 and ids[0] == "lifespan-longest-lived:62"
    assert parse_task_id("boil:3") == ("boil", 3)
    for bad in ["boil", "boil:x", "nope:1", "boil:30", ":3"]:
        with pytest.raises(ValueError):
            parse_task_id(bad)


def test_reset_step_info_and_determinism(env):
    obs1, info = env.reset(task_id="power-component:12")
    _assert_info(info)
    assert info["task_id"] == "power-component:12" and info["task_type"] == "power-component"
    assert info["split"] == "dev" and info["score"] == 0 and not info["won"]
    assert info["task"].startswith("Your task is to turn on the")
    obs, reward, terminated, truncated, info = env.step("look around")
    _assert_info(info)
    assert obs == obs1 and reward == 0.0 and not terminated and not truncated and info["valid_action"]
    obs2, _ = env.reset(task_id="power-component:12")
    assert obs2 == obs1
    # A seed picks the same task (and hence the same first observation) every time.
    first = [env.reset(seed=123) for _ in range(2)]
    assert first[0][1]["task_id"] == first[1][1]["task_id"] and first[0][0] == first[1][0]
    assert first[0][1]["split"] == "train"


def test_bad_actions_never_raise(env):
    env.reset(task_id="lifespan-longest-lived:0")
    for action in BAD_ACTIONS:
        obs, reward, terminated, truncated, info = env.step(action)
        _assert_info(info)
        assert obs == INVALID_OBSERVATION and not info["valid_action"], repr(action)[:40]
        assert reward == 0.0 and not terminated and info["score"] == 0
    assert not truncated  # 11 steps < 50


def test_failure_terminates_with_negative_score(env):
    env.reset(task_id="lifespan-longest-lived:0")
    obs, reward, terminated, truncated, info = env.step("focus on agent")
    # Focusing on a wrong object ends the task with the simulator's failure score -100 (reward = -100 - 0).
    assert terminated and not truncated and not info["won"]
    assert info["score"] == -100 and reward == -100.0
    obs, reward, terminated, truncated, info = env.step("look around")
    assert obs == ENDED_OBSERVATION and reward == 0.0 and terminated and not info["valid_action"]


def test_truncation_at_max_steps(env):
    saved = env.max_steps
    env.max_steps = 2
    try:
        env.reset(task_id="power-component:0")
        assert env.step("look around")[3] is False
        _, _, terminated, truncated, _ = env.step("look around")
        assert truncated and not terminated
    finally:
        env.max_steps = saved


@pytest.mark.parametrize("task_id", ["lifespan-longest-lived:0", "power-component:0", "find-plant:0"])
def test_gold_path_reaches_100(env, task_id):
    env.reset(task_id=task_id)
    total, steps = 0.0, 0
    while (action := env.expert_action()) is not None:
        _, reward, terminated, truncated, info = env.step(action)
        total, steps = total + reward, steps + 1
        if terminated or truncated:
            break
    assert terminated and info["won"] and info["score"] == 100
    assert total == 100.0  # dense rewards are score increments, so they sum to the final score
    assert env.expert_action() is None


def test_expert_plan_is_the_gold_path_cut_at_moves(env):
    """BC on ScienceWorld crashed in actors/demos.py (no expert plan); the plan flattens to the gold path."""
    env.reset(task_id="find-plant:0")
    plan = env.expert_plan()
    flat = [a for _, acts in plan for a in acts]
    assert flat and flat[0] == env.expert_action()
    for action in flat:
        _, _, terminated, _, info = env.step(action)
    assert terminated and info["won"]
    assert all(acts[0].startswith(MOVE_PREFIXES) for _, acts in plan[1:])


def test_split_at_moves():
    plan = split_at_moves(
        ["look around", "teleport to kitchen", "pick up apple", "focus on apple", "go to hallway"]
    )
    assert plan == [
        ("look around", ["look around"]),
        (
            "teleport to kitchen, then focus on apple",
            ["teleport to kitchen", "pick up apple", "focus on apple"],
        ),
        ("go to hallway", ["go to hallway"]),
    ]


def test_expert_returns_none_off_the_gold_path(env):
    env.reset(task_id="power-component:0")
    env.step("look at agent")  # valid but not on the gold path
    assert env.expert_action() is None and env.expert_plan() == []


def test_jvm_heap_bounded_and_env_untouched(env):
    pid = env._sim._gateway.java_process.pid
    environ = Path(f"/proc/{pid}/environ")
    if not environ.exists():
        pytest.skip("needs Linux /proc to read the JVM's environment")
    if "JAVA_TOOL_OPTIONS" in os.environ:
        pytest.skip("the user's JAVA_TOOL_OPTIONS wins by design")
    assert b"JAVA_TOOL_OPTIONS=-Xmx256m -XX:+UseSerialGC" in environ.read_bytes().split(b"\0")
    assert "JAVA_TOOL_OPTIONS" not in os.environ  # set for the child only
