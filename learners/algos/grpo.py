"""GRPO (Shao et al. 2024) for multi-turn agents, the critic-free baseline of HiPER Table 1 (App. C.1: group size
8, KL coefficient 0.01).

Each trajectory's return R (env reward + format penalty, summed over turns) is normalised within its group of
trajectories from the same task and initial state: A = (R − mean) / (std + ε) with the unbiased std
(``learners.advantages.group_advantages``, mode "grpo"); every response token of every turn of the trajectory gets A.
Loss: per-token clipped surrogate + kl_coef · KL(π‖π_ref).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory
from learners.advantages import group_advantages
from learners.algo_config import NON_NEGATIVE, PolicyLossConfig, check
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.targets import Targets, clipped_policy_loss, has_kl_term, turn_advantage_targets


@dataclass(frozen=True)
class Config(PolicyLossConfig):
    """GRPO's own field beside the shared ones (``learners.algo_config.PolicyLossConfig``)."""

    eps: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        check("eps", self.eps >= 0, self.eps, NON_NEGATIVE)


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    returns = np.array([t.episode_return for t in trajectories], dtype=np.float64)
    adv = group_advantages(returns, [t.group_id for t in trajectories], mode="grpo", eps=cfg.eps).numpy()
    return turn_advantage_targets(trajectories, batch, list(adv))


ALGORITHM = Algorithm(
    name="grpo",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # per-token clipped surrogate + kl_coef · KL to the reference
    uses_reference=has_kl_term,
    min_group_size=2,  # group-relative: a group of one trajectory has no baseline and gets 0 (checked at start)
)
