"""The driver stages' builders, by ``Algorithm.driver_stage`` (``STAGES``; ``launch/driver/stages.py`` holds the
stage interface): each turns a ``StageInputs`` (the run config, the algorithm, and the few calls a stage makes of
the run's parts) into the run's stage. ``register_stage`` adds one from outside the tree
(``docs/adding_an_algorithm.md``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.trajectory import Trajectory
from launch.config import TrainConfig
from launch.driver.hisr_rewards import Collect, RewardModels
from launch.driver.offline_data import OfflineData
from launch.driver.stages import DriverStage
from learners.algorithm import Algorithm
from learners.group import LearnerGroup


@dataclass(frozen=True)
class StageInputs:
    """What a driver stage is built from (``STAGES``' builders): the run config, the algorithm, and the run's parts as
    the few calls a stage makes of them."""

    cfg: TrainConfig
    algo: Algorithm
    algo_cfg: Any
    tokenizer: Any
    pad_id: int
    train_ids: Sequence[str]
    """The tasks RL plays."""
    learner: LearnerGroup
    """The run's learner group (it rebuilds itself when a worker dies)."""
    collect: Collect
    """Rollouts of the current policy (``RolloutPool.collect``)."""
    sample: Callable[..., list[Any]]
    """One response of the current policy per prompt (``RolloutPool.sample``)."""
    demonstrations: Callable[[], list[Trajectory]]
    """BC's expert episodes."""
    log: Callable[[dict[str, Any]], None]
    """Writes a metrics row (``RunLog.log``)."""
    freeze_reference: Callable[[], None]
    """Copies the policy as the KL term's reference (``Updater.freeze_reference``)."""


StageBuilder = Callable[[StageInputs], DriverStage]


def no_stage(inputs: StageInputs) -> DriverStage:
    """An algorithm without driver work: the null stage."""
    return DriverStage()


def reward_models(inputs: StageInputs) -> RewardModels:
    """HISR's reward models on the run's learner group, playing π_ref through ``collect``."""
    cfg = inputs.cfg
    return RewardModels(
        inputs.algo_cfg,
        Path(cfg.run_dir) / "hisr",
        inputs.tokenizer,
        agent=cfg.rollout.agent,
        env_name=cfg.env.name,
        max_seq_len=cfg.learner.max_seq_len,
        pad_id=inputs.pad_id,
        seed=cfg.seed,
        learner=inputs.learner,
        collect=inputs.collect,
        train_ids=inputs.train_ids,
        log=inputs.log,
    )


def offline_data(inputs: StageInputs) -> OfflineData:
    """The stored data of an offline algorithm: BC's demonstrations and the pool's rollouts; the online phase's KL
    reference frozen where the algorithm has a KL term."""
    cfg, algo, algo_cfg = inputs.cfg, inputs.algo, inputs.algo_cfg
    return OfflineData(
        algo_cfg,
        Path(cfg.run_dir) / "offline",
        anchor_role=algo.anchor_role,
        seed=cfg.seed,
        env_name=cfg.env.name,
        train_split=cfg.env.train_split,
        group_size=cfg.rollout.group_size,
        temperature=cfg.rollout.temperature,
        train_ids=inputs.train_ids,
        demonstrations=inputs.demonstrations,
        collect=inputs.collect,
        sample=inputs.sample,
        log=inputs.log,
        freeze_reference=inputs.freeze_reference if algo.uses_reference(algo_cfg) else None,
    )


STAGES: dict[str, StageBuilder] = {"": no_stage, "reward_models": reward_models, "offline_data": offline_data}
"""``Algorithm.driver_stage`` → the builder of that stage; ``register_stage`` adds one from elsewhere."""


def register_stage(name: str, builder: StageBuilder) -> StageBuilder:
    """Add ``builder`` under ``name`` to this process's table, for records whose ``driver_stage`` is ``name``
    (registered with ``learners.algos.registry.register_algo``). A taken name is refused; returns the builder."""
    if name in STAGES:
        raise ValueError(f"driver stage {name!r} is already registered")
    STAGES[name] = builder
    return builder


def stage_builder(algo: Algorithm) -> StageBuilder:
    """The builder of ``algo``'s driver stage; an unregistered name fails here, before anything starts."""
    if algo.driver_stage not in STAGES:
        known = ", ".join(repr(k) for k in sorted(STAGES))
        raise ValueError(
            f"algorithm {algo.name!r}: unknown driver_stage {algo.driver_stage!r}; known: {known}"
        )
    return STAGES[algo.driver_stage]
