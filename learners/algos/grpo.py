"""GRPO (Shao et al. 2024) for multi-turn agents, the critic-free baseline of HiPER Table 1 (App. C.1: group size
8, KL coefficient 0.01).

Each trajectory's return R (env reward + format penalty, summed over turns) is normalised within its group of
trajectories from the same task and initial state: A = (R − mean) / (std + ε) with the unbiased std
(``learners.advantages.group_advantages``, mode "grpo"); every response token of every turn of the trajectory gets A.
Loss: per-token clipped surrogate + kl_coef · KL(π‖π_ref).

Two options beside the paper's form:

* ``equal_outcome_groups``: "skip" (default) gives A = 0 to every trajectory of a group whose outcomes are all equal
  (every member won, or every member lost, with the same env return; ``learners.advantages.equal_outcome_mask``).
  Their returns then differ only by shaping terms, and dividing by a std of ~0.01 turns that format noise into
  full-strength advantages. DAPO (Yu et al. 2025) filters such groups out by dynamic sampling; here they stay in the
  batch with no policy-gradient signal (the KL term still reaches them). "keep": the plain GRPO advantage.
* ``scale``: "std" (default) divides by the group std; "none" is Dr.GRPO (Liu et al. 2025, "Understanding
  R1-Zero-Like Training"): A = R − mean (``group_advantages`` mode "mean").

``Targets.stats["groups_equal_outcome"]``: the share of the batch's groups whose outcomes were all equal (skipped
with "skip", reported with either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory
from learners.advantages import equal_outcome_mask, group_advantages
from learners.algo_config import NON_NEGATIVE, PolicyLossConfig, check, check_choice
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.outcomes import equal_outcome_share, outcomes
from learners.targets import Targets, clipped_policy_loss, has_kl_term, turn_advantage_targets

EQUAL_OUTCOME_GROUPS = ("skip", "keep")
SCALES = ("std", "none")


@dataclass(frozen=True)
class Config(PolicyLossConfig):
    """GRPO's own fields beside the shared ones (``learners.algo_config.PolicyLossConfig``)."""

    eps: float = 1e-6
    equal_outcome_groups: str = "skip"
    """skip: A = 0 for every member of a group whose outcomes (won, env return) are all equal, whose returns differ
    only by shaping (DAPO's dynamic sampling drops such groups); keep: GRPO's advantage for them too."""
    scale: str = "std"
    """std: A = (R − mean) / (std + eps), GRPO; none: A = R − mean, Dr.GRPO (Liu et al. 2025)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check("eps", self.eps >= 0, self.eps, NON_NEGATIVE)
        check_choice("equal_outcome_groups", self.equal_outcome_groups, EQUAL_OUTCOME_GROUPS)
        check_choice("scale", self.scale, SCALES)


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    returns = np.array([t.episode_return for t in trajectories], dtype=np.float64)
    groups = [t.group_id for t in trajectories]
    mode = "grpo" if cfg.scale == "std" else "mean"
    adv = group_advantages(returns, groups, mode=mode, eps=cfg.eps).numpy()
    equal = equal_outcome_mask(outcomes(trajectories), groups).numpy()
    if cfg.equal_outcome_groups == "skip":
        adv = np.where(equal, 0.0, adv)
    targets = turn_advantage_targets(trajectories, batch, list(adv))
    targets.stats["groups_equal_outcome"] = equal_outcome_share(groups, equal)
    return targets


ALGORITHM = Algorithm(
    name="grpo",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # per-token clipped surrogate + kl_coef · KL to the reference
    uses_reference=has_kl_term,
    min_group_size=2,  # group-relative: a group of one trajectory has no baseline and gets 0 (checked at start)
)
