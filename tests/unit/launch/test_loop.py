"""The training loop (``launch/train.py``'s ``Trainer``) on plain fakes of its parts, without Ray: what it calls, in
which order, and what it logs, pushes and checkpoints. Every fake appends to one event list, so a test reads the
loop's calls as one sequence (take → update → push → eval → checkpoint → log)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common.lora import LoraSpec
from common.rng import process_rngs
from launch import train as train_module
from launch.build import RunParts, Schedule
from launch.config import BCConfig, LearnerConfig
from launch.sources import EmptyIterations, IterationData
from launch.train import Trainer, train

SEED = 7
STATS = dict.fromkeys(
    ("success", "return", "valid_format", "switch_rate", "segment_len", "prompt_tokens", "response_tokens"),
    0.5,
)
"""What an iteration's episodes' statistics hold (the fields the iteration line prints)."""
EVAL = {
    "success": 0.5,
    "ci_low": 0.1,
    "ci_high": 0.9,
    "n": 2,
    "random": 0.0,
    "base": float("nan"),
    "valid_format": 1.0,
    "per_type": {},
    "panel": "fake@1[:2]",
    "outcomes": "10",
    "task_rates": [1.0, 0.0],
    "task_ids": ["a", "b"],
    "samples": 1,
    "temperature": 0.4,
    "episodes": [],
}
"""An evaluation result as ``PanelEvaluator.evaluate`` returns one."""


class WorkerLost(Exception):
    """Stands in for Ray's actor-died errors (``RunParts.worker_lost``)."""


class Learner:
    """Its adapter's "weights" name the group and count its exports, so a push or a checkpoint tells which."""

    def __init__(self, name: str, events: list[tuple]) -> None:
        self.name, self.events, self.exports = name, events, 0

    def adapter_weights(self, adapter: str | None = None) -> dict[str, Any]:
        self.exports += 1
        return {"from": self.name, "export": self.exports}

    def start_rl(self, adapter: str, *, fresh: bool, warmup_steps: int) -> None:
        self.events.append(("start_rl", adapter))

    def shutdown(self) -> None:
        self.events.append(("shutdown", self.name))


class Pool:
    def __init__(self, events: list[tuple]) -> None:
        self.events, self.version, self.pushed = events, 0, []

    def push(self, weights: dict) -> float:
        self.version += 1
        self.pushed = [*self.pushed[-1:], weights]
        self.events.append(("push", self.version))
        return 0.0

    def fault_totals(self, iteration: int, **extra: float) -> dict[str, float]:
        return {"total_rollout_restarts": 0.0, **{f"total_{k}": v for k, v in extra.items()}}

    def close(self) -> None:
        self.events.append(("pool_close",))


class Source:
    """Iteration k's one episode, played by the pool's version before the update; ``empty``: iterations with none."""

    def __init__(self, events: list[tuple], pool: Pool, empty: set[int]) -> None:
        self.events, self.pool, self.empty = events, pool, empty

    def take(self, iteration: int) -> IterationData:
        self.events.append(("take", iteration))
        turns = [] if iteration in self.empty else [SimpleNamespace(policy_version=self.pool.version)]
        return IterationData([SimpleNamespace(turns=turns)], dict(STATS))

    def before_push(self) -> bool:
        self.events.append(("before_push",))
        return False

    def pause(self) -> bool:
        self.events.append(("pause",))
        return False

    def close(self) -> None:
        self.events.append(("source_close",))


class Updater:
    """Records each update; the first ``fail`` updates raise ``WorkerLost`` (a learner worker died mid-update)."""

    def __init__(self, events: list[tuple], learner: Learner, fail: int = 0) -> None:
        self.events, self.learner, self.fail = events, learner, fail
        self.ref_adapters = ("ref_default",)
        self.calls: list[dict[str, Any]] = []

    def update(self, trajs: list, algo: Any, algo_cfg: Any, *, seed: int, **kw: Any) -> tuple[dict, dict]:
        self.events.append(("update", seed, self.learner.name))
        self.calls.append({"trajs": trajs, "algo": algo, **kw})
        if self.fail:
            self.fail -= 1
            raise WorkerLost("a learner worker died")
        return {"loss": 0.5, "optimizer_steps": 1.0}, {"update": 0.0}

    def freeze_reference(self) -> None:
        self.events.append(("freeze_reference",))


class Checkpoints:
    def __init__(self, events: list[tuple], root: Path) -> None:
        self.events, self.root = events, root
        self.newest: tuple[Path, dict[str, Any]] | None = None
        self.saved: dict[int, tuple[str, dict[str, Any], Any]] = {}

    @property
    def has_latest(self) -> bool:
        return self.newest is not None

    def save(self, iteration: int, learner: Learner, state: dict[str, Any], behaviour: Any = None) -> None:
        self.events.append(("save", iteration))
        self.saved[iteration] = (learner.name, state, behaviour)

    def load_newest(self, learner: Learner) -> tuple[Path, dict[str, Any]] | None:
        self.events.append(("load_newest", learner.name))
        return self.newest


class Log:
    def __init__(self, events: list[tuple]) -> None:
        self.events, self.history = events, []

    def log(self, row: dict[str, Any]) -> None:
        self.events.append(("log", row["iteration"]))
        self.history.append(row)

    def restart(self, history: list[dict[str, Any]]) -> None:
        self.events.append(("restart",))
        self.history = list(history)

    def resume_at(self, iteration: int, last: dict[str, Any] | None) -> None:
        self.events.append(("resume_at", iteration))
        self.history = [last] if last is not None else []

    def close(self) -> None:
        self.events.append(("log_close",))


class Evaluator:
    def __init__(self, events: list[tuple]) -> None:
        self.events = events

    def evaluate(self, n: int, *, is_base: bool = False) -> dict[str, Any]:
        self.events.append(("evaluate", n, is_base))
        return dict(EVAL)


def schedule(run_dir: Path, **changes: Any) -> Schedule:
    """Four RL iterations, an evaluation every second one, a checkpoint after each; no BC."""
    base = Schedule(
        run_dir=run_dir,
        iterations=4,
        seed=SEED,
        eval_every=2,
        checkpoint_every=1,
        eval_episodes=2,
        train_tasks=0,
        eval_zero_shot=False,
        save_trajectories=False,
        one_step_off=False,
        resume=False,
        adapters=(),
        init_adapter="",
        lora=LoraSpec(4, 8, ("q_proj",)),
        bc=None,
        bc_source=None,
        learner=LearnerConfig(critic_warmup_passes=2, max_restarts=1),
    )
    return replace(base, **changes)


def fake_run(
    tmp_path: Path, *, empty: frozenset[int] = frozenset(), fail: int = 0, **changes: Any
) -> tuple[Trainer, list[tuple], list[tuple[int, Path | None]]]:
    """A ``Trainer`` over fakes, the list of events they all append to, and the (first iteration, resumed
    checkpoint) of each iteration source built."""
    events: list[tuple] = []
    pool = Pool(events)
    sources: list[tuple[int, Path | None]] = []

    def source(first: int, resumed_from: Path | None) -> Source:
        sources.append((first, resumed_from))
        return Source(events, pool, set(empty))

    def new_learner() -> Learner:
        events.append(("new_learner",))
        return Learner("learner1", events)

    parts = RunParts(
        schedule=schedule(tmp_path, **changes),
        algo=SimpleNamespace(name="ppo", reward_models=False),
        algo_cfg=None,
        pool=pool,
        updater=Updater(events, Learner("learner0", events), fail),
        new_learner=new_learner,
        worker_lost=(WorkerLost,),
        checkpoints=Checkpoints(events, tmp_path / "checkpoints"),
        keeper=SimpleNamespace(observer=lambda iteration: None, keep_eval=lambda *episodes: None),
        log=Log(events),
        evaluator=Evaluator(events),
        rl_evaluator=None,
        empty=EmptyIterations(limit=3, groups_per_iter=2),
        hisr=None,
        offline=None,
        source=source,
        demonstrations=list,
        tokenizer=None,
        model_path="fake",
        train_ids=["a", "b"],
        bc_ids=["c"],
        rl_panel=None,
    )
    return Trainer(parts), events, sources


def iteration_events(it: int, version: int, *, evaluate: bool) -> list[tuple]:
    """One RL iteration's calls: take → update → push → (pause, evaluate) → checkpoint → log."""
    eval_calls = [("pause",), ("evaluate", 2, False)] if evaluate else []
    return [
        ("take", it),
        ("update", SEED + it, "learner0"),
        ("before_push",),
        ("push", version),
        *eval_calls,
        ("save", it),
        ("log", it),
    ]


def test_each_iteration_takes_updates_pushes_evaluates_checkpoints_then_logs(tmp_path, capsys):
    trainer, events, sources = fake_run(tmp_path)
    rows = trainer.run()
    warm_start = [("restart",), ("push", 1), ("freeze_reference",), ("start_rl", "default"), ("save", 0)]
    each = [iteration_events(it, it + 1, evaluate=it % 2 == 0) for it in (1, 2, 3, 4)]
    assert events == [*warm_start, *(e for it in each for e in it), ("source_close",)]
    assert sources == [(1, None)]
    # the critic's warm-up passes on the first RL iteration only
    assert [c["critic_warmup"] for c in trainer.parts.updater.calls] == [2, 0, 0, 0]

    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    row = rows[1]
    fields = ["iteration", "phase", "version", *STATS, "policy_lag", "loss", "optimizer_steps"]
    fields += ["total_rollout_restarts", "total_learner_restarts"]
    assert list(row)[: len(fields)] == fields
    assert row["iteration"] == 2 and row["phase"] == "rl" and row["version"] == 3 and row["policy_lag"] == 0
    assert row["eval_success"] == 0.5 and "eval_success" not in rows[0]
    times = [k for k in row if k.startswith("time_")]
    assert times == [
        "time_rollout",
        "time_update",
        "time_push",
        "time_eval",
        "time_checkpoint",
        "time_iteration",
    ]
    assert list(row)[-len(times) :] == times

    # the checkpoint holds the row as logged, less the times, and the adapter version pushed
    learner, state, behaviour = trainer.parts.checkpoints.saved[2]
    assert learner == "learner0" and behaviour is None
    assert state == {
        "version": 3,
        "record": {k: v for k, v in row.items() if not k.startswith("time_")},
        "offline_steps": 0,
    }
    assert trainer.parts.pool.pushed[-1] == {None: {"from": "learner0", "export": 5}}
    out = capsys.readouterr().out
    assert out.count("iter   ") == 4 and "EVAL 0.50" in out
    assert f"hierarl view {tmp_path}" in out


def test_a_resume_starts_after_the_checkpoints_iteration(tmp_path, capsys):
    trainer, events, sources = fake_run(tmp_path, resume=True)
    path = tmp_path / "checkpoints" / "iter_2"
    last = {"iteration": 2, "phase": "rl", **STATS}
    state = {"iteration": 2, "version": 3, "rng": process_rngs(), "record": last, "offline_steps": 0}
    trainer.parts.checkpoints.newest = (path, state)
    rows = trainer.run()
    resumed = [("load_newest", "learner0"), ("push", 3), ("resume_at", 2)]
    each = [iteration_events(it, it + 1, evaluate=it % 2 == 0) for it in (3, 4)]
    assert events == [*resumed, *(e for it in each for e in it), ("source_close",)]
    assert sources == [(3, path)] and trainer.resumed_from == path
    assert [c["critic_warmup"] for c in trainer.parts.updater.calls] == [0, 0]
    assert [r["iteration"] for r in rows] == [2, 3, 4]
    assert f"resumed from {path} at iteration 3" in capsys.readouterr().out


def test_an_iteration_without_turns_is_logged_empty_and_neither_trained_nor_pushed(tmp_path, capsys):
    trainer, events, _ = fake_run(tmp_path, iterations=3, eval_every=0, empty=frozenset({2}))
    rows = trainer.run()
    assert events[5:] == [
        *iteration_events(1, 2, evaluate=False),
        ("take", 2),
        ("log", 2),
        *iteration_events(3, 3, evaluate=False),
        ("source_close",),
    ]
    assert rows[1] == {"iteration": 2, "phase": "rl", "empty": 1, **STATS}
    assert 2 not in trainer.parts.checkpoints.saved and trainer.parts.empty.in_a_row == 0
    assert "WARNING iteration 2: no samples" in capsys.readouterr().out


def test_a_lost_learner_worker_rebuilds_the_group_from_a_checkpoint_and_redoes_the_update(tmp_path, capsys):
    trainer, events, _ = fake_run(tmp_path, iterations=1, eval_every=0, fail=1)
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_0", {"iteration": 0})
    rows = trainer.run()
    assert events[5:] == [
        ("take", 1),
        ("update", SEED + 1, "learner0"),
        ("shutdown", "learner0"),
        ("new_learner",),
        ("load_newest", "learner1"),
        ("update", SEED + 1, "learner1"),
        ("before_push",),
        ("push", 2),
        ("save", 1),
        ("log", 1),
        ("source_close",),
    ]
    first, again = trainer.parts.updater.calls
    assert again["trajs"] is first["trajs"] and again["critic_warmup"] == first["critic_warmup"] == 2
    assert trainer.learner.name == "learner1" and trainer.learner_restarts == 1
    assert trainer.parts.pool.pushed[-1] == {None: {"from": "learner1", "export": 1}}
    assert trainer.parts.checkpoints.saved[1][0] == "learner1"
    assert rows[0]["total_learner_restarts"] == 1
    assert "group rebuilt from" in capsys.readouterr().out


def test_a_learner_lost_again_past_max_restarts_ends_the_run(tmp_path):
    trainer, events, _ = fake_run(tmp_path, iterations=1, fail=2)
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_0", {"iteration": 0})
    with pytest.raises(RuntimeError, match=r"learner.max_restarts \(1\) rebuilds were used up"):
        trainer.run()
    assert events.count(("new_learner",)) == 1


def test_a_warm_start_evaluates_the_base_model_then_clones_evaluates_and_freezes_the_reference(tmp_path):
    trainer, events, _ = fake_run(tmp_path, iterations=0, eval_zero_shot=True, bc=BCConfig(epochs=1))
    rows = trainer.run()
    assert events == [
        ("restart",),
        ("push", 1),
        ("evaluate", 2, True),  # the first push of a fresh run: a zero adapter, the base model
        ("log", -1),
        ("update", SEED, "learner0"),  # one BC epoch
        ("push", 2),
        ("evaluate", 2, False),
        ("log", 0),
        ("freeze_reference",),
        ("start_rl", "default"),
        ("save", 0),
        ("source_close",),
    ]
    assert [r["phase"] for r in rows] == ["zero-shot", "bc"]
    assert rows[1]["push_s"] == 0.0 and rows[1]["eval_success"] == 0.5
    assert trainer.parts.updater.calls[0]["algo"].name == "sft"


def test_a_one_step_off_checkpoint_keeps_the_adapter_its_in_flight_rollouts_came_from(tmp_path):
    """The adapter pushed before the last one: the next iteration's prefetched rollouts were played with it."""
    trainer, _, _ = fake_run(tmp_path, iterations=2, one_step_off=True)
    trainer.run()
    saved = trainer.parts.checkpoints.saved
    assert saved[0][2] is None  # one push so far: nothing in flight
    assert [saved[it][2] for it in (1, 2)] == [{"from": "learner0", "export": k} for k in (1, 2)]
    assert saved[2][1]["version"] == 3


def test_train_closes_the_run_whatever_the_loop_raises(tmp_path, monkeypatch):
    """``train``: the workers, the current learner group (here the rebuilt one) and the log closed on an error."""
    trainer, events, _ = fake_run(tmp_path, iterations=1, fail=2)
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_0", {"iteration": 0})
    monkeypatch.setattr(train_module, "build_run", lambda cfg: trainer.parts)
    with pytest.raises(RuntimeError, match="rebuilds were used up"):
        train(None)
    assert events[-3:] == [("pool_close",), ("shutdown", "learner1"), ("log_close",)]
