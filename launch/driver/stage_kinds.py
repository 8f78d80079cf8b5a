"""The driver stages' kinds, by ``Algorithm.driver_stage`` (``STAGE_KINDS``; ``launch/driver/stages.py`` holds the
stage interface and ``StageKind``): each kind is declared beside its stage (``KIND`` of ``hisr_rewards`` and
``offline_data``), with the config sections it reads, the learner's extra models and its own checks, so the generic
wiring (``launch/driver/wiring.py``) and validation (``launch/config/validate.py``) name no algorithm.
``register_stage`` adds one from outside the tree (``docs/adding_an_algorithm.md``)."""

from __future__ import annotations

from typing import Any

from launch.config import TrainConfig, validate
from launch.driver import hisr_rewards, offline_data
from launch.driver.stages import StageKind
from learners.algorithm import Algorithm
from learners.algos.registry import get_algo

STAGE_KINDS: dict[str, StageKind] = {
    "": StageKind(),
    "reward_models": hisr_rewards.KIND,
    "offline_data": offline_data.KIND,
}
"""``Algorithm.driver_stage`` → its stage's kind; ``register_stage`` adds one from elsewhere."""


def register_stage(name: str, kind: StageKind) -> StageKind:
    """Add ``kind`` under ``name`` to this process's table, for records whose ``driver_stage`` is ``name``
    (registered with ``learners.algos.registry.register_algo``). A taken name is refused; returns the kind."""
    if name in STAGE_KINDS:
        raise ValueError(f"driver stage {name!r} is already registered")
    if not isinstance(kind, StageKind):
        raise TypeError(f"register_stage: expected a StageKind, got {type(kind).__name__}")
    STAGE_KINDS[name] = kind
    return kind


def stage_kind(algo: Algorithm) -> StageKind:
    """The kind of ``algo``'s driver stage; an unregistered name fails here, before anything starts."""
    if algo.driver_stage not in STAGE_KINDS:
        known = ", ".join(repr(k) for k in sorted(STAGE_KINDS))
        raise ValueError(
            f"algorithm {algo.name!r}: unknown driver_stage {algo.driver_stage!r}; known: {known}"
        )
    return STAGE_KINDS[algo.driver_stage]


def check_run(cfg: TrainConfig) -> Any:
    """Everything ``hierarl train`` checks of a resolved config before anything heavy starts: ``validate`` (the
    sections, the algorithm and its config), then the rules of the algorithm's stage kind. Returns the resolved
    algorithm config; raises a one-line ``ConfigError`` (or ``ValueError``: an unregistered stage)."""
    algo_cfg = validate(cfg)
    algo = get_algo(cfg.algo)
    stage_kind(algo).check(cfg, algo, algo_cfg)
    return algo_cfg
