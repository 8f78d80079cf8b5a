"""Flat PPO with turn-level GAE (Schulman et al. 2017; the PPO baseline of HiPER Table 1, App. C.1).

Each turn is one action; its reward r_t = env reward + shaping (format penalty, HiPER App. C). Advantages by GAE
over turns (``learners.advantages.gae``), critic V(s_t) read at the last prompt token, all response tokens of a turn
share its advantage. Loss: per-token clipped surrogate + kl_coef · KL(π‖π_ref) (low-variance estimator), critic
0.5 · (V − return)².

Deviations: the value of a truncated episode's final state s_T is approximated by V(s_{T−1})
(``learners.targets.bootstrap_value``; ``truncation="terminal"``: 0); advantages are whitened over the batch's
response tokens (verl practice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.algo_config import NON_NEGATIVE, ActorCriticConfig, check, check_fractions
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.targets import (
    CriticInputs,
    Targets,
    ValueSlot,
    clipped_policy_loss,
    has_kl_term,
    squared_value_loss,
    turn_gae_targets,
)


@dataclass(frozen=True)
class Config(ActorCriticConfig):
    """PPO's own fields beside the shared ones (``learners.algo_config.ActorCriticConfig``: reward terms, shaping,
    clip, KL, truncation)."""

    gamma: float = 0.99
    lam: float = 0.95
    value_clip: float = 0.2
    normalize_advantages: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fractions(self, "gamma", "lam")
        check("value_clip", self.value_clip >= 0, self.value_clip, NON_NEGATIVE)


VALUE_SLOTS = (ValueSlot("v", 0, "prompt_last"),)


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    assert values is not None, "PPO needs critic values"
    return turn_gae_targets(
        trajectories,
        batch,
        values,
        [t.rewards() for t in trajectories],
        gamma=cfg.gamma,
        lam=cfg.lam,
        normalize=cfg.normalize_advantages,
        truncation=cfg.truncation,
    )


def value_loss(values: torch.Tensor, inputs: CriticInputs, cfg: Config):
    """0.5 · (V − return)², PPO-clipped around the old values by ``value_clip``."""
    return squared_value_loss(values, inputs, clip=cfg.value_clip)


ALGORITHM = Algorithm(
    name="ppo",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # per-token clipped surrogate + kl_coef · KL to the reference
    value_slots=VALUE_SLOTS,
    value_loss=value_loss,
    uses_reference=has_kl_term,
)
