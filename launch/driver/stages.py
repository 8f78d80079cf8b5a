"""Driver stages: what an algorithm needs from the driver around its updates (HISR's reward models,
``launch/driver/hisr_rewards.py``; STEP-HRL's and Multi2's stored data, ``launch/driver/offline_data.py``) behind one interface, so that
``Trainer`` (``launch/driver/train.py``) and the update replay (``bench/bench_replay.py``) call the same hooks for every
algorithm and check none of its flags.

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

``Algorithm.driver_stage`` names a run's stage in ``launch.driver.stage_builders.STAGES``, which builds it. ``DriverStage`` itself
is the null stage of an algorithm that names none: every hook does nothing, so the loop has no special case for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from actors.trajectory import Trajectory
from launch.driver.sources import IterationSource
from launch.driver.update_plan import Annotate, UpdatePlan, UpdateResult
from launch.driver.updater import Updater

OFFLINE_STEPS = "offline_steps"
"""``driver.pt``'s count of the optimizer steps a stored-data run took (its critic warm-up reads it)."""


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
        """What a checkpoint keeps of the stage (``driver.pt``), read back by ``restore``. Every run's holds the
        stored-data step count (0 here), so the driver state has the same keys whatever the algorithm."""
        return {OFFLINE_STEPS: 0}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Read back ``state()`` from a checkpoint's driver state (a resume, a rebuilt learner group)."""


def staged_update(
    updater: Updater, stage: DriverStage, trajs: list[Trajectory], plan: UpdatePlan, iteration: int
) -> UpdateResult:
    """``Updater.update`` on iteration ``iteration``'s ``trajs`` under ``plan`` with the stage's part, then the
    stage's bookkeeping: the one update path of the training driver and the update replay."""
    result = updater.update(trajs, stage.update_plan(replace(plan, annotate=stage.annotate), iteration))
    stage.after_update(result.metrics)
    return result
