"""Driver stages: what an algorithm needs from the driver around its updates (HISR's reward models,
``launch/driver/hisr_rewards.py``; STEP-HRL's and Multi2's stored data, ``launch/driver/offline_data.py``) behind one
interface, so that ``Trainer`` (``launch/driver/train.py``) and the update replay (``bench/bench_replay.py``) call the
same hooks for every algorithm and check none of its flags.

At run time, the hooks of ``DriverStage``:

    prepare(k)              the learner group holds checkpoint k's state (0: the warm start's): at the start of RL
                            and after a rebuilt group loaded a checkpoint
    iteration_source(...)   where the RL iterations' trajectories come from (stored data replaces the rollouts)
    annotate                writes model rewards into an update's turns before its targets (None: nothing to write)
    update_plan(plan, k)    iteration k's ``UpdatePlan`` with the stage's part (the KL reference read, critic steps owed;
                            ``staged_update`` has put its ``annotate`` in)
    after_update(metrics)   bookkeeping after each update
    state() / restore(s)    what a checkpoint's ``driver.pt`` keeps of the stage, and reading it back (a resume, a
                            rebuilt learner group)
    reference_at_warm_start, critic_warmup_in_passes
                            whether the warm start freezes the KL reference and the first update warms the critic
                            up in passes (stored data: neither; it does both its own way)

At build time, a ``StageKind``: the run-config sections its builder reads (``StageInputs.section``), the models it
needs in the learner group beside the policy (``StageModels``), its own checks of the run config, and the builder.
``Algorithm.driver_stage`` names a run's kind in ``launch.driver.stage_kinds.STAGE_KINDS``. ``DriverStage`` itself is
the null stage of an algorithm that names none: every hook does nothing and it keeps nothing in checkpoints, so the
loop has no special case for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.trajectory import Trajectory
from launch.driver.sources import IterationSource
from launch.driver.update_plan import Annotate, UpdatePlan, UpdateResult
from learners.algorithm import Algorithm
from learners.learner_spec import CriticSpec

if TYPE_CHECKING:  # annotations only: the module stays importable without Ray (``hierarl train --dry-run``)
    from launch.driver.updater import Updater
    from learners.group import LearnerGroup


class DriverStage:
    """The hooks (module docstring) with nothing to do: the null stage, and the base of every stage."""

    reference_at_warm_start: bool = True
    """The KL reference is the policy RL starts from, frozen by the warm start (π_ref). False: the stage freezes it
    itself (stored data: at the first online iteration, π_off)."""
    critic_warmup_in_passes: bool = True
    """The first RL update starts with ``learner.critic_warmup_passes`` critic-only passes. False: the stage owes the
    critic's warm-up in optimizer steps (stored data: ``algo.warmup_steps``, the plan's ``warmup_left``)."""
    annotate: Annotate | None = None
    """Writes model rewards into the turns of an update before its targets and returns their statistics (HISR's
    reward models); None: nothing to write, and the update times no annotation."""

    def prepare(self, checkpoint: int) -> None:
        """Make the stage's models and data ready on a learner group that holds ``iter_<checkpoint>``'s state (0:
        after the warm start): once before the RL iterations, again after a rebuilt group loaded a checkpoint."""

    def iteration_source(self, rollouts: Callable[[], IterationSource]) -> IterationSource:
        """Where the RL iterations take their trajectories: the run's rollouts (``rollouts()``, built on demand
        because building them starts work), unless the stage has its own."""
        return rollouts()

    def update_plan(self, plan: UpdatePlan, iteration: int) -> UpdatePlan:
        """The loop's ``plan`` for iteration ``iteration`` (its ``annotate`` already the stage's) with the stage's
        part; none here (the KL reference read where the algorithm has one, no critic step owed)."""
        return plan

    def after_update(self, metrics: Mapping[str, Any]) -> None:
        """Bookkeeping after each RL update (``metrics``: the update's)."""

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the stage (``driver.pt``), read back by ``restore``; nothing here."""
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Read back ``state()`` from a checkpoint's driver state (a resume, a rebuilt learner group)."""


@dataclass(frozen=True)
class StageInputs:
    """What a stage kind's builder reads: the algorithm, the run folder and seed, the run-config sections the kind
    declares (``section``), and the run's parts as the few calls a stage makes of them."""

    algo: Algorithm
    algo_cfg: Any
    run_dir: Path
    seed: int
    sections: Mapping[str, Any]
    """Section name → the run config's section (``env``, ``rollout``, ``learner``, ...): the kind's, no other."""
    tokenizer: Any
    pad_id: int
    train_ids: Sequence[str]
    """The tasks RL plays."""
    learner: LearnerGroup
    """The run's learner group (it rebuilds itself when a worker dies)."""
    collect: Callable[..., list[Trajectory]]
    """Rollouts of the current policy (``RolloutPool.collect``)."""
    sample: Callable[..., list[Any]]
    """One response of the current policy per prompt (``RolloutPool.sample``)."""
    demonstrations: Callable[[], list[Trajectory]]
    """BC's expert episodes."""
    log: Callable[[dict[str, Any]], None]
    """Writes a metrics row (``RunLog.log``)."""
    freeze_reference: Callable[[], None]
    """Copies the policy as the KL term's reference (``Updater.freeze_reference``)."""

    def section(self, name: str) -> Any:
        """The run config's section ``name``, which the kind must have declared (``StageKind.sections``)."""
        if name not in self.sections:
            raise KeyError(
                f"run-config section {name!r} is not among the stage kind's ({', '.join(self.sections)})"
            )
        return self.sections[name]


@dataclass(frozen=True)
class StageModels:
    """The models a stage needs in the learner group beside the policy and its critic: trained LoRA adapters (name,
    learning rate) and value models (HISR: the hindsight model's adapter and the SPRM)."""

    adapters: tuple[tuple[str, float], ...] = ()
    critics: tuple[CriticSpec, ...] = ()


def no_models(algo_cfg: Any, model_path: str) -> StageModels:
    return StageModels()


def no_check(cfg: Any, algo: Algorithm, algo_cfg: Any) -> None:
    """A kind without rules of its own."""


def null_stage(inputs: StageInputs) -> DriverStage:
    """An algorithm without driver work: the null stage."""
    return DriverStage()


@dataclass(frozen=True)
class StageKind:
    """A driver stage as it is built: the sections of the run config its builder reads (nothing else of the run
    config reaches it), the learner's extra models (from the algorithm config and the model folder), its checks of
    the run config (``check(cfg, algo, algo_cfg)``: a ``ConfigError`` before Ray starts), and the builder."""

    build: Callable[[StageInputs], DriverStage] = null_stage
    sections: tuple[str, ...] = ()
    models: Callable[[Any, str], StageModels] = no_models
    check: Callable[[Any, Algorithm, Any], None] = no_check

    def sections_of(self, cfg: Any) -> dict[str, Any]:
        """The declared sections of run config ``cfg``."""
        return {name: getattr(cfg, name) for name in self.sections}


def staged_update(
    updater: Updater, stage: DriverStage, trajs: list[Trajectory], plan: UpdatePlan, iteration: int
) -> UpdateResult:
    """``Updater.update`` on iteration ``iteration``'s ``trajs`` under ``plan`` with the stage's part, then the
    stage's bookkeeping: the one update path of the training driver and the update replay."""
    result = updater.update(trajs, stage.update_plan(replace(plan, annotate=stage.annotate), iteration))
    stage.after_update(result.metrics)
    return result
