"""A run's parts as one record, built by ``launch/driver/build.py``'s ``build_run`` and run by
``launch/driver/train.py``'s ``Trainer``, which reads these and never the run config (so a unit test drives the loop
with plain fakes: ``tests/unit/loop_fakes.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.trajectory import Trajectory
from common.lora import LoraSpec
from launch.config import BCConfig, LearnerConfig
from launch.driver.checkpoints import Checkpointer
from launch.driver.evaluator import PanelEvaluator
from launch.driver.kept_episodes import EpisodeKeeper
from launch.driver.rollout_pool import RolloutPool
from launch.driver.run_log import RunLog
from launch.driver.sources import EmptyIterations, IterationSource
from launch.driver.stages import DriverStage
from launch.driver.updater import Updater
from launch.evaluation.panel_tasks import Panel


@dataclass(frozen=True)
class Schedule:
    """The run config's settings that the loop reads, and nothing more of it."""

    run_dir: Path
    iterations: int
    seed: int
    eval_every: int
    """Evaluate after every ``eval_every``-th RL iteration (0: never)."""
    checkpoint_every: int
    """Checkpoint after every ``checkpoint_every``-th RL iteration (0: never); iteration 0 always."""
    eval_episodes: int
    train_tasks: int
    """``env.train_tasks``: how many RL tasks each evaluation also scores (0: none)."""
    eval_zero_shot: bool
    save_trajectories: bool
    one_step_off: bool
    resume: bool
    adapters: tuple[str, ...]
    """The policy adapters of ``model.role_adapters`` (empty: one adapter for every role)."""
    init_adapter: str
    """``model.init_adapter``: a saved PEFT adapter the policy starts from ("": none)."""
    lora: LoraSpec
    bc: BCConfig | None
    """The run's BC section where BC is on (``bc.enabled``), else None."""
    bc_source: Path | None
    """``bc.from_run``'s BC checkpoint (checked before Ray starts), else None: BC runs here."""
    bc_eval_reused: bool
    """Whether the evaluation after BC is ``bc.from_run``'s (``launch.config.bc_eval_reusable``), not played here."""
    learner: LearnerConfig
    """The learner section: ``critic_warmup_passes``, ``max_restarts`` and how RL starts its optimizer."""


@dataclass(frozen=True)
class RunParts:
    """Everything a run is made of, built; ``Trainer`` reads these and no run config. What the loop needs only
    later (the iteration source, BC's demonstrations) is a factory."""

    schedule: Schedule
    pool: RolloutPool
    updater: Updater
    """The run's algorithm's updates (``updater.algo``); ``updater.learner`` is the run's learner group
    (``LearnerGroup.rebuild``)."""
    worker_lost: tuple[type[BaseException], ...]
    """The errors that mean a learner worker died (the group is rebuilt, not the run ended)."""
    checkpoints: Checkpointer
    keeper: EpisodeKeeper
    log: RunLog
    evaluator: PanelEvaluator
    rl_evaluator: PanelEvaluator | None
    """The RL tasks' evaluator (``env.train_tasks`` > 0), else None."""
    empty: EmptyIterations
    stage: DriverStage
    """The algorithm's driver stage (``Algorithm.driver_stage``; the null stage where it names none)."""
    source: Callable[[int, Path | None], IterationSource]
    """The run's rollouts as an iteration source, from the first iteration to run and the checkpoint a resume started
    from (the driver stage may replace them with data of its own: ``DriverStage.iteration_source``)."""
    demonstrations: Callable[[], list[Trajectory]]
    tokenizer: Any
    model_path: str
    train_ids: list[str]
    """The tasks RL plays."""
    bc_ids: list[str]
    """The tasks behaviour cloning may demonstrate."""
    rl_panel: Panel | None
    """``env.train_tasks`` > 0: the fixed tasks RL plays, evaluated beside the held-out panel; else None."""
