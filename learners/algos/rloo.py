"""RLOO (Ahmadian et al. 2024), a critic-free baseline of HiPER Table 1: each trajectory's return minus the mean
return of the *other* members of its group (``group_advantages`` mode "rloo"); every response token of the
trajectory gets it. Loss: per-token clipped surrogate + kl_coef · KL(π‖π_ref), as for GRPO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory
from learners.advantages import group_advantages
from learners.algo_config import PolicyLossConfig
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.targets import Targets, clipped_policy_loss, has_kl_term, turn_advantage_targets


@dataclass(frozen=True)
class Config(PolicyLossConfig):
    """RLOO has no fields of its own beside the shared ones (``learners.algo_config.PolicyLossConfig``)."""


"""Group-relative advantages: a group of one trajectory has no baseline and gets 0 (checked at start)."""


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    returns = np.array([t.episode_return for t in trajectories], dtype=np.float64)
    adv = group_advantages(returns, [t.group_id for t in trajectories], mode="rloo").numpy()
    return turn_advantage_targets(trajectories, batch, list(adv))


ALGORITHM = Algorithm(
    name="rloo",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # per-token clipped surrogate + kl_coef · KL to the reference
    uses_reference=has_kl_term,
    min_group_size=2,  # leave-one-out needs another trajectory of the same group (checked at start)
)
