"""The records of one update (pure): what varies from one update to the next (``UpdatePlan``), what an ``Updater``
keeps for the run (``UpdaterSettings``), what it returns (``UpdateResult``) and what its phases hand on
(``UpdateInputs``, ``ForwardPasses``), and the learner group's arguments they make.

One record per update, not keyword arguments threaded through the loop, the driver stage and the updater: the loop
makes the plan (seed, the critic's warm-up, the kept episodes' observer), the driver stage adds its part
(``DriverStage.update_plan``: HISR's annotation, the stored data's KL reference and critic steps owed), behaviour
cloning makes its own (learning rate, mini-batch, one pass), and ``Updater.update(trajs, plan)`` runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from actors.trajectory import Trajectory
from learners.algorithm import Algorithm
from learners.batch import LearnerBatch, Sequences, TurnBatch

Annotate = Callable[[list[Trajectory], TurnBatch, np.ndarray], dict[str, float]]
"""A stage that writes model rewards into the turns before the targets (HISR's reward models), returning stats."""
Observe = Callable[[list[Trajectory], TurnBatch, LearnerBatch], None]
"""Called with the shaped turns and the batch before the policy steps (the run's kept episodes)."""

ALL_STEPS = 1 << 62
"""``critic_only_steps`` that covers every optimizer step of an update."""


@dataclass(frozen=True)
class UpdatePlan:
    """Everything one update does differently from the last; the defaults are an RL update of the null stage."""

    seed: int
    """Seeds the mini-batch order (and the measured rows, ``measure_sample``)."""
    reference: bool = True
    """Read the KL term's reference where the algorithm has one (a stored-data run's offline phase has none)."""
    warmup_left: int = 0
    """Critic steps still owed to a target-critic algorithm's warm-up: > 0, the update trains the critic alone."""
    critic_warmup: int = 0
    """Critic-only passes before the update (``Updater.warm_up_critic``; RL iteration 1)."""
    annotate: Annotate | None = None
    """The driver stage's model rewards, written into the turns before the targets (HISR)."""
    measure: bool = True
    """Log the update's KL per token group (with ``learner.measure_update``)."""
    observe: Observe | None = None
    """Sees the shaped turns and the batch before the policy steps (the kept episodes of ``hierarl view``)."""
    lr: float | None = None
    """This update's policy learning rate (BC), restored after; None: the run's."""
    mini_batch_size: int | None = None
    """None: ``learner.mini_batch_size``."""
    epochs: int | None = None
    """Passes over the batch; None: ``learner.ppo_epochs`` (BC: 1, its epochs counted by ``bc.epochs``)."""


@dataclass(frozen=True)
class UpdaterSettings:
    """What an ``Updater`` keeps for the whole run: the learner section (``LearnerConfig``), the pad token, the env's
    success reward R (the unit of every shaping amount), role → policy adapter (empty: one adapter for every role),
    the frozen reference copies the KL term reads (empty: the base model), decoupled PPO's cap (0: off), and whether
    π_old is the engine's reported log-probs rather than a learner pass."""

    learner: Any
    pad_id: int
    success_reward: float
    role_adapters: Mapping[str, str] = field(default_factory=dict)
    ref_adapters: tuple[str, ...] = ()
    behaviour_is_cap: float = 0.0
    engine_old_logprobs: bool = False


class UpdateResult(NamedTuple):
    """An update's metrics row fields and its phase times (``time_<phase>`` in the row)."""

    metrics: dict[str, Any]
    timings: dict[str, float]


@dataclass(frozen=True)
class UpdateInputs:
    """The update's first phase: the trajectories, their shaped and padded turns, the sequences the learner reads,
    and each policy adapter's rows ({None: every row} with one adapter)."""

    trajs: list[Trajectory]
    turns: TurnBatch
    seqs: Sequences
    rows_of: dict[str | None, np.ndarray]


@dataclass(frozen=True)
class ForwardPasses:
    """The update's forward passes: π_old and π_ref log-probs, the critic's values, the stage's and the critic
    warm-up's statistics, and the measured rows (None: no measurement) with their log-probs before the steps."""

    logprobs: np.ndarray
    ref: np.ndarray | None
    values: np.ndarray | None
    stats: dict[str, float]
    sample: np.ndarray | None
    before: np.ndarray


def update_arguments(algo: Algorithm, algo_cfg: Any, learner_cfg: Any, plan: UpdatePlan) -> dict[str, Any]:
    """The keyword arguments of the learner group's ``update`` calls of one update: the plan's mini-batch size and
    epochs over the learner's ``mini_batch_size`` and ``ppo_epochs``.

    ``warmup_left`` > 0 (critic steps still owed to the warm-up of a ``target_critic`` algorithm): the whole update
    trains the critic alone. STEP-HRL's warm-up runs in whole passes: A is computed at the start of a pass, so the
    actor joins at the first pass that starts with a warmed-up critic (else it trains on A from an untrained one).
    ``target_tau``: the algorithm's Polyak rate for a ``target_critic`` algorithm, else 0 (no target copy)."""
    return {
        "loss_cfg": algo_cfg,
        "agg": algo_cfg.agg,
        "mini_batch_size": plan.mini_batch_size or learner_cfg.mini_batch_size,
        "epochs": plan.epochs or learner_cfg.ppo_epochs,
        "seed": plan.seed,
        "critic_only_steps": ALL_STEPS if plan.warmup_left > 0 else 0,
        "target_tau": algo_cfg.target_tau if algo.target_critic else 0.0,
    }


def warmup_arguments(algo: Algorithm, algo_cfg: Any, learner_cfg: Any, *, seed: int) -> dict[str, Any]:
    """The learner group's ``update`` arguments of one critic-only warm-up pass (``Updater.warm_up_critic``): one
    epoch, with an update's Polyak rate. Without ``target_tau`` STEP-HRL's and Multi2's target copy would stay at its
    zero start through the warm-up: V's targets (Q_target) all 0, so V is never fitted, and Q's TD targets read
    V_target = 0."""
    return update_arguments(algo, algo_cfg, learner_cfg, UpdatePlan(seed=seed, epochs=1))


def measure_sample(n: int, rows: int, seed: int) -> np.ndarray:
    """The sorted rows of an n-row batch the update's KL is measured on: ``rows`` of them drawn from ``seed``, or
    all (``rows`` 0 or >= n)."""
    if rows <= 0 or rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed + 4099).choice(n, rows, replace=False))


def restrict_rows(rows_of: dict[str | None, np.ndarray], sample: np.ndarray) -> dict[str | None, np.ndarray]:
    """``rows_of`` (batch rows per adapter) for the batch cut to ``sample``: positions within the sample."""
    where = {int(r): i for i, r in enumerate(sample)}
    out = {k: np.array([where[int(r)] for r in v if int(r) in where], np.int64) for k, v in rows_of.items()}
    return {k: v for k, v in out.items() if v.size}
