"""The rollout loop and worker when things go wrong, driven by FakeEngine (scripted replies) on the synthetic env:
a context overflow truncates, an env that raises fails its episode and not the loop, more requests than env slots
all run, failed groups are replayed whole or dropped, and env workers that crash or hang cost their group a replay.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.episodes import EpisodeRequest
from actors.inference import SamplingParams
from actors.protocols import AgentFactory
from actors.rollout import RolloutWorker, WorkerConfig
from actors.trajectory import from_numpy_dict
from common.lora import LoraSpec
from envs.synthetic import SyntheticHierEnv
from tests.unit.scripted_engine import FakeEngine, run_episodes, scripted

PARAMS = SamplingParams(temperature=1.0, max_tokens=256)


def test_context_overflow_truncates_episode(tok):
    engine, _ = scripted(tok, [])
    (traj,) = run_episodes(
        engine,
        [SyntheticHierEnv()],
        [EpisodeRequest("stages2-acts2-dist0-seed3", 0, "g", "g/0")],
        agent=AgentFactory("react", "synthetic"),
        params=PARAMS,
        max_steps=5,
        max_prompt_tokens=20,
    )
    assert traj.status == "truncated" and traj.info["truncated_by"] == "context" and not traj.turns


class _Broken(SyntheticHierEnv):
    def step(self, action: str):
        raise RuntimeError("env exploded")


def test_env_exception_fails_episode_not_loop(tok):
    engine, _ = scripted(tok, ["<think>a</think><action>go to shelf</action>"] * 4)
    trajs = run_episodes(
        engine,
        [_Broken(), SyntheticHierEnv()],
        [EpisodeRequest("stages2-acts2-dist0-seed3", 0, "g", f"g/{i}") for i in range(2)],
        agent=AgentFactory("react", "synthetic"),
        params=PARAMS,
        max_steps=2,
    )
    assert [t.traj_id for t in trajs] == ["g/0", "g/1"]
    assert trajs[0].status == "failed" and "env exploded" in trajs[0].failure and trajs[0].turns[-1].truncated
    assert trajs[1].status == "truncated" and len(trajs[1].turns) == 2


def test_more_requests_than_slots_all_run(tok):
    engine, _ = scripted(tok, [])
    reqs = [EpisodeRequest("stages2-acts2-dist0-seed3", 0, "g", f"g/{i}") for i in range(5)]
    trajs = run_episodes(
        engine,
        [SyntheticHierEnv() for _ in range(2)],
        reqs,
        agent=AgentFactory("plan_execute", "synthetic"),
        params=PARAMS,
        max_steps=2,
    )
    assert [t.traj_id for t in trajs] == [r.traj_id for r in reqs]
    assert all(t.status == "truncated" and len(t.turns) == 2 for t in trajs)


_FLAKY_CALLS = {"n": 0}


class FlakyEnv(SyntheticHierEnv):
    """Raises on the first two steps it sees (across instances), then behaves."""

    def step(self, action: str):
        _FLAKY_CALLS["n"] += 1
        if _FLAKY_CALLS["n"] <= 2:
            raise RuntimeError("transient failure")
        return super().step(action)


def _worker(tok, script: Callable, env_name: str, **kw) -> RolloutWorker:
    fields = {
        "model_path": "smollm2",
        "engine": "auto",
        "weight_sync": "lora",
        "dtype": "auto",
        "lora": LoraSpec(
            16, 32, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        ),
        "protocol": "react",
        "gpu_memory_utilization": 0.5,
        "env_name": env_name,
        "env_options": {},
        "num_envs": 3,
        "use_env_pool": False,
        "step_timeout_s": 60.0,
        "max_steps": 2,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 64,
        "max_model_len": 2048,
        "history_length": 2,
        "max_group_retries": 2,
        "seed": 0,
        "agent_options": {},
    }
    cfg = WorkerConfig(**{**fields, **kw})
    return RolloutWorker(cfg, engine=FakeEngine(tok, script))


def test_worker_retries_failed_groups_whole_and_packs(tok):
    _FLAKY_CALLS["n"] = 0
    w = _worker(tok, lambda ids: "<think>x</think><action>go to workbench</action>", f"{__name__}:FlakyEnv")
    tasks = ["stages2-acts2-dist0-seed3", "stages3-acts2-dist0-seed5"]
    groups = w.collect(tasks, group_size=2, seed=7)
    assert sorted(g["task_id"] for g in groups) == sorted(tasks)
    assert w.stats["group_retries"] >= 1 and w.stats["groups_dropped"] == 0
    for g in groups:
        trajs = from_numpy_dict(g["data"])
        assert len(trajs) == 2 and all(t.status != "failed" for t in trajs)
        assert all(t.task_id == g["task_id"] and t.group_id == g["group_id"] for t in trajs)
        assert trajs[0].turns[0].observation == trajs[1].turns[0].observation  # same task + seed: same start
    assert any(g["attempts"] > 1 for g in groups)
    w.close()


def test_worker_drops_group_that_keeps_failing(tok):
    w = _worker(
        tok,
        lambda ids: "<think>x</think><action>take wood</action>",
        f"{__name__}:_Broken",
        max_group_retries=1,
    )
    assert w.collect(["stages2-acts2-dist0-seed3"], group_size=2, seed=0) == []
    assert w.stats["groups_dropped"] == 1 and w.stats["group_retries"] == 1
    w.close()


def test_set_weights_versions_turns(tok):
    w = _worker(tok, lambda ids: "<think>x</think><action>take wood</action>", "synthetic")
    assert w.version() == 0
    assert w.set_weights({}, 3) is True and w.version() == 3
    (g,) = w.collect(["stages2-acts2-dist0-seed3"], 1, 0, packed=False)
    assert {t.policy_version for tr in g.trajectories for t in tr.turns} == {3}
    w.close()


def test_env_workers_killed_or_hung_mid_episode_cost_their_groups_a_replay(tok, tmp_path):
    """Chaos through a real env pool: one env worker dies mid-episode (``os._exit``, as ``kill -9``) and another
    hangs past ``step_timeout_s``.  Each is counted, restarted, and its group replayed whole: every group comes back
    with all its episodes unfailed, and the episodes run are exactly the returned ones plus the replayed groups'."""
    w = _worker(
        tok,
        lambda ids: "<think>x</think><action>go to workbench</action>",
        "tests.fake_envs:FaultsOnceSyntheticEnv",
        env_options={"marker_dir": str(tmp_path)},
        use_env_pool=True,
        num_envs=4,
        step_timeout_s=2.0,
    )
    try:
        tasks = ["stages2-acts2-dist0-seed3", "stages3-acts2-dist0-seed5"]
        groups = w.collect(tasks, group_size=2, seed=7)
        c = w.counters()
    finally:
        w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-crash", "1-hang"]  # both faults happened
    assert (c["env_crashes"], c["env_timeouts"], c["env_restarts"]) == (1, 1, 2)
    assert sorted(g["task_id"] for g in groups) == sorted(tasks) and c["groups_dropped"] == 0
    assert 1 <= c["group_retries"] <= 2  # the two faults hit one group twice or each group once
    assert c["episodes"] == 2 * (len(tasks) + c["group_retries"])  # nothing counted twice, nothing lost
    trajs = [t for g in groups for t in from_numpy_dict(g["data"])]
    assert len({t.traj_id for t in trajs}) == 4 and all(t.status != "failed" for t in trajs)
