"""GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization"), the strongest flat baseline in HiPER Table 1
and the step-level estimator HIPIF builds on (HIPIF Sec. 3.3).

A_t = A_episode + step_weight · A_step: the episode-level group advantage of the trajectory's return, plus a
step-level advantage that normalises discounted step returns among the steps of the same episode group that were
taken from the same anchor state (same normalised observation, ``Turn.anchor_key``); singleton anchor groups give 0
(``learners.advantages.gigpo_advantages``). Every response token of turn t gets A_t. Loss: per-token clipped
surrogate + kl_coef · KL(π‖π_ref).

``equal_outcome_groups``: "skip" (default) gives A_episode = 0 to every trajectory of a group whose outcomes are all
equal (``algos.grpo``'s rule for the same term: their returns differ only by shaping, which the group std would
blow up to full strength); the step level is kept (in an all-won group it still tells a shorter path from a
longer one through γ). "keep": the plain GiGPO advantage. Measured on TextCraft depth 2 from one BC batch
(docs/results/hierarchy_textcraft_d2.md): with "keep", the lost episodes' later segments got positive credit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory
from learners.advantages import equal_outcome_mask, gigpo_advantages
from learners.algo_config import PolicyLossConfig, check_choice, check_group_fields
from learners.algorithm import Algorithm
from learners.algos.grpo import EQUAL_OUTCOME_GROUPS
from learners.batch import TurnBatch
from learners.outcomes import equal_outcome_share, outcomes
from learners.targets import Targets, clipped_policy_loss, has_kl_term, turn_advantage_targets


@dataclass(frozen=True)
class Config(PolicyLossConfig):
    """GiGPO's own fields beside the shared ones (``learners.algo_config.PolicyLossConfig``)."""

    gamma: float = 0.95
    step_weight: float = 1.0
    mode: str = "grpo"
    """"grpo" divides by the group std; "mean" only subtracts the mean (GiGPO's two normalisers)."""
    eps: float = 1e-6
    equal_outcome_groups: str = "skip"
    """skip: A_episode = 0 for every member of a group whose outcomes (won, env return) are all equal; keep: the
    plain GiGPO advantage (see the module docstring)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_group_fields(self)
        check_choice("equal_outcome_groups", self.equal_outcome_groups, EQUAL_OUTCOME_GROUPS)


"""Group-relative advantages: a group of one trajectory has no baseline and gets 0 (checked at start)."""


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    groups = [t.group_id for t in trajectories]
    equal = equal_outcome_mask(outcomes(trajectories), groups).numpy()
    per_traj = gigpo_advantages(
        [t.rewards() for t in trajectories],
        [[turn.anchor_key for turn in t.turns] for t in trajectories],
        groups,
        gamma=cfg.gamma,
        step_weight=cfg.step_weight,
        mode=cfg.mode,
        eps=cfg.eps,
        episode_off=equal if cfg.equal_outcome_groups == "skip" else None,
    )
    targets = turn_advantage_targets(trajectories, batch, [a.numpy() for a in per_traj])
    targets.stats["groups_equal_outcome"] = equal_outcome_share(groups, equal)
    return targets


ALGORITHM = Algorithm(
    name="gigpo",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # per-token clipped surrogate + kl_coef · KL to the reference
    uses_reference=has_kl_term,
    min_group_size=2,  # group-relative: a group of one trajectory has no baseline (checked at start)
)
