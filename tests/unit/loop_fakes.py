"""Plain fakes of a run's parts (``launch.driver.parts.RunParts``) for driving ``launch/driver/train.py``'s ``Trainer`` without
Ray (``tests/unit/launch/test_loop.py``). Every fake appends to one event list, so a test reads the loop's calls as
one sequence (take → update → push → eval → checkpoint → log)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from common.lora import LoraSpec
from launch.config import LearnerConfig
from launch.driver.parts import RunParts, Schedule
from launch.driver.sources import EmptyIterations, IterationData
from launch.driver.stages import DriverStage
from launch.driver.train import Trainer
from launch.driver.update_plan import UpdatePlan, UpdateResult
from launch.driver.weights import AdapterSync

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
    """Its adapter's "weights" name the group's generation ("learner<k>": ``rebuild`` counts k) and count its
    exports, so a push or a checkpoint tells which workers gave them."""

    def __init__(self, name: str, events: list[tuple]) -> None:
        self.name, self.events, self.exports = name, events, 0

    def adapter_weights(self, adapter: str | None = None) -> dict[str, Any]:
        self.exports += 1
        return {"from": self.name, "export": self.exports}

    def start_rl(self, adapter: str, *, fresh: bool, warmup_steps: int) -> None:
        self.events.append(("start_rl", adapter, fresh, warmup_steps))

    def shutdown(self) -> None:
        self.events.append(("shutdown", self.name))

    def load_checkpoint(self, path: str, *, only: Any = None) -> None:
        self.events.append(("load_checkpoint", Path(path).name, tuple(only)))

    def rebuild(self) -> None:
        self.events.append(("rebuild", self.name))
        self.name, self.exports = f"learner{int(self.name.removeprefix('learner')) + 1}", 0


class Pool:
    """The real version bookkeeping (``AdapterSync``, pure) without the transport."""

    def __init__(self, events: list[tuple]) -> None:
        self.events, self.weights = events, AdapterSync()

    def push(self, weights: dict) -> float:
        self.events.append(("push", self.weights.push(weights)))
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
        turns = [] if iteration in self.empty else [SimpleNamespace(policy_version=self.pool.weights.version)]
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
    """Records each update (its algorithm's name and plan); the first ``fail`` updates raise ``WorkerLost`` (a
    learner worker died mid-update). ``with_algorithm`` (behaviour cloning's updater) records to the same list."""

    def __init__(self, events: list[tuple], learner: Learner, fail: int = 0, algo: str = "ppo") -> None:
        self.events, self.learner, self.fail, self.algo = events, learner, fail, SimpleNamespace(name=algo)
        self.ref_adapters = ("ref_default",)
        self.calls: list[dict[str, Any]] = []

    def with_algorithm(self, algo: Any, algo_cfg: Any) -> Updater:
        other = copy.copy(self)
        other.algo = algo
        return other

    def update(self, trajs: list, plan: UpdatePlan) -> UpdateResult:
        self.events.append(("update", plan.seed, self.learner.name))
        self.calls.append({"trajs": trajs, "algo": self.algo, **vars(plan)})
        if self.fail:
            self.fail -= 1
            raise WorkerLost("a learner worker died")
        return UpdateResult({"loss": 0.5, "optimizer_steps": 1.0}, {"update": 0.0})

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


class Stage(DriverStage):
    """A driver stage that records its hooks, shaped like stored data: its own iteration source, the KL reference
    frozen later than the warm start, no critic passes, and a count of the optimizer steps taken in its checkpoint
    state, which its update arguments read (``warmup_left``: of 3 critic-only steps)."""

    reference_at_warm_start = False
    critic_warmup_in_passes = False

    def __init__(self, events: list[tuple], source: Source) -> None:
        self.events, self.source, self.steps = events, source, 0

    def prepare(self, checkpoint: int) -> None:
        self.events.append(("stage_prepare", checkpoint))

    def iteration_source(self, rollouts: Callable[[], Any]) -> Any:
        self.events.append(("stage_source",))
        return self.source

    def annotate(self, trajs: list, turns: Any, logprobs: Any) -> dict[str, float]:
        return {}

    def update_plan(self, plan: UpdatePlan, iteration: int) -> UpdatePlan:
        return replace(plan, reference=iteration > 1, warmup_left=max(0, 3 - self.steps))

    def after_update(self, metrics: Mapping[str, Any]) -> None:
        self.events.append(("stage_after_update",))
        self.steps += int(metrics["optimizer_steps"])

    def state(self) -> dict[str, Any]:
        return {**super().state(), "stage_steps": self.steps}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.events.append(("stage_restore", state["stage_steps"]))
        self.steps = state["stage_steps"]


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
        bc_eval_reused=False,
        learner=LearnerConfig(critic_warmup_passes=2, max_restarts=1),
    )
    return replace(base, **changes)


def fake_run(
    tmp_path: Path,
    *,
    empty: frozenset[int] = frozenset(),
    fail: int = 0,
    staged: bool = False,
    **changes: Any,
) -> tuple[Trainer, list[tuple], list[tuple[int, Path | None]]]:
    """A ``Trainer`` over fakes, the list of events they all append to, and the (first iteration, resumed
    checkpoint) of each rollout source built. ``staged``: the run's driver stage is a ``Stage`` (else the null
    stage)."""
    events: list[tuple] = []
    pool = Pool(events)
    sources: list[tuple[int, Path | None]] = []

    def source(first: int, resumed_from: Path | None) -> Source:
        sources.append((first, resumed_from))
        return Source(events, pool, set(empty))

    parts = RunParts(
        schedule=schedule(tmp_path, **changes),
        pool=pool,
        updater=Updater(events, Learner("learner0", events), fail),
        worker_lost=(WorkerLost,),
        checkpoints=Checkpoints(events, tmp_path / "checkpoints"),
        keeper=SimpleNamespace(observer=lambda iteration: None, keep_eval=lambda *episodes: None),
        log=Log(events),
        evaluator=Evaluator(events),
        rl_evaluator=None,
        empty=EmptyIterations(limit=3, groups_per_iter=2),
        stage=Stage(events, Source(events, pool, set(empty))) if staged else DriverStage(),
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
