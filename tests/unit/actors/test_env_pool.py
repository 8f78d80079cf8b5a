"""EnvPool: batched and async stepping, failure handling (crash, kill, exception, hang), recycling, group
seeding, clean shutdown.  Real worker subprocesses running the fakes in tests/fake_envs.py (~1 s per pool)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.env_pool import EnvPool, EnvResult
from envs.base import INFO_KEYS

COUNTER = "tests.fake_envs:CounterEnv"
FAULTY = "tests.fake_envs:FaultyEnv"


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = re.search(r"^State:\s+(\S)", status, re.M)
    return state is not None and state.group(1) not in ("Z", "X")


def _wait_gone(pids: list[int], within_s: float = 10.0) -> list[int]:
    """Pids still running after waiting up to ``within_s`` (SIGKILL is delivered asynchronously)."""
    end = time.monotonic() + within_s
    while any(_running(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if _running(p)]


def _value_target(obs: str) -> tuple[int, int]:
    m = re.search(r"value (-?\d+), target (\d+)", obs)
    assert m is not None, obs
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def counter_pool() -> Iterator[EnvPool]:
    with EnvPool(COUNTER, 3, {"max_steps": 10}, step_timeout_s=10.0, reset_timeout_s=60.0) as pool:
        yield pool


@pytest.fixture(scope="module")
def faulty_pool() -> Iterator[EnvPool]:
    with EnvPool(FAULTY, 2, {"spawn_child": True}, step_timeout_s=1.0, reset_timeout_s=60.0) as pool:
        yield pool


def test_batched_reset_and_step_play_episodes_to_the_end(counter_pool: EnvPool) -> None:
    results = counter_pool.reset([(0, "count-0", 1), (1, "count-1", 2), (2, "count-2", 3)])
    assert [r.slot for r in results] == [0, 1, 2]
    assert all(r.op == "reset" and not r.done for r in results)
    assert set(INFO_KEYS) <= set(results[0].info)
    assert len({r.info["pid"] for r in results}) == 3  # three separate processes
    state = {r.slot: _value_target(r.observation) for r in results}
    finished: dict[int, EnvResult] = {}
    while len(finished) < 3:
        actions = {s: "inc" for s in range(3) if s not in finished}
        out = counter_pool.step(actions)
        assert set(out) == set(actions)
        for s, r in out.items():
            assert not r.failed
            if r.done:
                finished[s] = r
    for s, r in finished.items():
        value, target = state[s]
        assert r.terminated and not r.truncated and r.reward == 1.0 and r.info["won"]
        assert _value_target(r.observation) == (target, target)
        assert target - value >= 1


def test_submit_and_poll_async_form(counter_pool: EnvPool) -> None:
    assert counter_pool.poll(0) == []  # nothing in flight: returns at once
    counter_pool.reset([(0, "count-3", 0), (1, "count-3", 0)])
    counter_pool.submit_step(0, "dec")
    with pytest.raises(RuntimeError, match="in flight"):
        counter_pool.submit_step(0, "inc")
    counter_pool.submit_step(1, "nonsense")
    got: dict[int, EnvResult] = {}
    while len(got) < 2:
        for r in counter_pool.poll(timeout=10.0):
            got[r.slot] = r
    assert got[0].info["valid_action"] and not got[1].info["valid_action"]
    assert got[1].observation.startswith("Nothing happens.")
    assert counter_pool.busy_slots() == []


def test_step_without_running_episode_is_an_error(counter_pool: EnvPool) -> None:
    counter_pool.reset([(2, "count-0", 5)])
    while not counter_pool.step({2: "dec"})[2].done:  # runs into the step limit
        pass
    with pytest.raises(RuntimeError, match="reset it first"):
        counter_pool.submit_step(2, "inc")
    with pytest.raises(IndexError):
        counter_pool.submit_reset(3)


def test_group_reset_gives_identical_initial_states(counter_pool: EnvPool) -> None:
    counter_pool.reset([(0, "count-4", 11)])
    counter_pool.step({0: "inc"})  # slot 0 has a different history than slots 1 and 2
    group = counter_pool.reset_group([0, 1, 2], "count-2", 42)
    assert len({r.observation for r in group}) == 1
    for r in group[1:]:
        assert {k: v for k, v in r.info.items() if k != "pid"} == {
            k: v for k, v in group[0].info.items() if k != "pid"
        }
    other_seed = counter_pool.reset_group([0, 1], "count-2", 43)
    assert other_seed[0].observation == other_seed[1].observation != group[0].observation


def test_worker_killed_mid_episode_reports_failure_then_restarts(faulty_pool: EnvPool) -> None:
    faulty_pool.reset([(0, "count-1", 0)])
    old_pid = faulty_pool.pids()[0]
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)  # dies while idle, between steps
    assert _wait_gone([old_pid]) == []  # (a zombie until the pool reaps it)
    r = faulty_pool.step({0: "inc"})[0]
    assert r.failed and r.failure == "worker died (signal 9) between steps" and not r.terminated
    assert faulty_pool.pids()[0] not in (None, old_pid)
    assert faulty_pool.reset([(0, "count-1", 0)])[0].failed is False

    faulty_pool.submit_step(0, "hang")  # dies with a step in flight
    pid = faulty_pool.pids()[0]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    (r,) = faulty_pool.poll(timeout=30.0)
    assert r.slot == 0 and r.failed and r.failure == "worker died (signal 9) in step"

    r = faulty_pool.reset([(0, "count-1", 0)])[0]
    assert not r.failed and faulty_pool.step({0: "inc"})[0].failed is False
    assert _wait_gone([old_pid, pid]) == []


def test_crash_and_exception_in_env_fail_the_episode(faulty_pool: EnvPool) -> None:
    faulty_pool.reset([(0, "count-0", 0), (1, "count-0", 0)])
    pids = faulty_pool.pids()
    out = faulty_pool.step({0: "crash", 1: "raise"})
    assert out[0].failed and out[0].failure == "worker died (exit code 3) in step"
    assert out[1].failed and out[1].failure == "exception in step: RuntimeError: FaultyEnv raised on purpose"
    assert "Traceback" in out[1].info["traceback"]
    assert all(new != old for new, old in zip(faulty_pool.pids(), pids, strict=True))  # fresh envs
    assert [r.failed for r in faulty_pool.reset([(0, None, None), (1, None, None)])] == [False, False]


def test_hanging_step_times_out_and_kills_worker_with_its_children(faulty_pool: EnvPool) -> None:
    (start,) = faulty_pool.reset([(1, "count-2", 9)])
    worker_pid, child_pid = start.info["pid"], start.info["child_pid"]
    assert _running(child_pid)
    faulty_pool.submit_step(1, "hang")
    faulty_pool.submit_step(0, "inc")  # a healthy neighbour is not held up by the hung slot
    got: dict[int, EnvResult] = {}
    while len(got) < 2:
        got.update((r.slot, r) for r in faulty_pool.poll(timeout=30.0))
    assert not got[0].failed
    assert got[1].failed and got[1].failure == "timeout after 1.0s in step"
    assert _wait_gone([worker_pid, child_pid]) == []  # the env's subprocess died with its worker
    (again,) = faulty_pool.reset([(1, "count-2", 9)])
    assert not again.failed and again.observation == start.observation and again.info["pid"] != worker_pid


def test_memory_growth_recycles_worker_between_episodes_only() -> None:
    with EnvPool(FAULTY, 1, {"max_steps": 3, "grow_mb": 200}, max_rss_mb=150.0) as pool:
        (r,) = pool.reset([(0, "count-0", 0)])
        pid = pool.pids()[0]
        assert pool.worker_rss_mb(0) < 150.0
        r = pool.step({0: "grow"})[0]
        assert not r.done and pool.worker_rss_mb(0) > 150.0
        while not r.done:
            assert pool.pids()[0] == pid  # over the cap, but mid-episode: no recycling yet
            r = pool.step({0: "inc"})[0]
        assert not r.failed and (r.terminated or r.truncated)
        assert pool.pids()[0] != pid and pool.stats["recycles"] == 1  # recycled once the episode ended
        (r,) = pool.reset([(0, "count-0", 0)])
        assert not r.failed and r.info["pid"] == pool.pids()[0]
        assert pool.worker_rss_mb(0) < 150.0
        assert _wait_gone([pid]) == []


def test_episode_cap_recycles_worker_at_reset() -> None:
    with EnvPool(COUNTER, 1, {}, max_episodes_per_worker=2) as pool:
        pids = [pool.reset([(0, None, seed)])[0].info["pid"] for seed in range(3)]
        assert pids[0] == pids[1] != pids[2]
        assert pool.stats["recycles"] == 1


def test_close_leaves_no_live_processes() -> None:
    with EnvPool(FAULTY, 2, {"spawn_child": True}, step_timeout_s=60.0) as pool:
        starts = pool.reset([(0, None, 0), (1, None, 0)])
        pids = [r.info["pid"] for r in starts] + [r.info["child_pid"] for r in starts]
        assert all(_running(p) for p in pids)
        pool.submit_step(1, "hang")  # one worker busy (hung) at close time
    assert _wait_gone(pids) == []
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit_reset(0)


def test_forkserver_start_method() -> None:
    with EnvPool(COUNTER, 1, {}, start_method="forkserver") as pool:
        (r,) = pool.reset([(0, "count-1", 3)])
        assert not pool.step({0: "inc"})[0].failed
        pid = r.info["pid"]
    assert _wait_gone([pid]) == []


@pytest.mark.parametrize(
    ("env_name", "options", "message"),
    [
        (FAULTY, {"fail_on_init": True}, "FaultyEnv asked to fail on init"),
        ("no-such-env", {}, "unknown environment"),
    ],
)
def test_env_that_cannot_be_built_raises(env_name: str, options: dict, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        EnvPool(env_name, 1, options)
