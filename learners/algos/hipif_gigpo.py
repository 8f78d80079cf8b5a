"""HIPIF + GiGPO (seed 002, App. G, Fig. 14 and Table 5: "HIPIF+GiGPO performs best"): HIPIF's agent and process
rewards with GiGPO's anchor-state step term added to HIPIF's step advantage.

    Â_t = Â^HIPIF_t + step_weight · A^S_t

* Â^HIPIF_t: HIPIF Eq. 9 over S_t = R_env + r^proc_t (Eq. 8), normalised over every step of the instruction's group
  (``learners.algos.hipif.turn_advantages``, which this file calls).
* A^S_t: GiGPO's step-level advantage (Feng et al. 2025): the discounted return of r_t = r^proc_t plus the binary
  outcome R_env on the last step (``hipif.step_rewards``; γ = 0.95, GiGPO's), normalised among the steps of the same episode group taken from an equal anchor state
  (``Turn.anchor_key``, the normalised env observation; ``learners.advantages.anchor_step_advantages``).

Deviation (a reading, labelled): the paper names the combination but gives no formula. HIPIF's Eq. 9 already plays
the part of GiGPO's episode-level term A^E (the outcome broadcast to every step, normalised in the group), so we keep
Eq. 9 in its place and add GiGPO's anchor term, rather than adding both A^E and Eq. 9. Everything else (agent,
reward terms, clipped GRPO objective, KL 0.01) is HIPIF's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory
from learners.advantages import anchor_step_advantages
from learners.algo_config import POSITIVE, PolicyLossConfig, check, check_group_fields
from learners.algorithm import Algorithm
from learners.algos import hipif
from learners.batch import TurnBatch
from learners.targets import Targets, clipped_policy_loss, has_kl_term, turn_advantage_targets
from reward.shaping import HIPIF_TERMS


@dataclass(frozen=True)
class Config(PolicyLossConfig):
    """HIPIF's settings (App. B) plus GiGPO's step term (``gamma``, ``step_weight``, ``mode``)."""

    reward_terms: tuple[str, ...] = HIPIF_TERMS
    no_outcome_batch: str = "train"
    """A batch whose episodes all ended alike still trains: its rule-based subgoal rewards (Eq. 7) tell lost episodes apart."""
    gamma: float = 0.95
    """Discount of GiGPO's step returns (GiGPO's default)."""
    step_weight: float = 1.0
    """Weight of GiGPO's anchor-state term (0: plain HIPIF)."""
    mode: str = "grpo"
    """Normaliser of the anchor-state term: "grpo" divides by the group std, "mean" only subtracts the mean."""
    success_reward: float = 10.0
    """R_env of a won episode (HIPIF App. B: 10 for success, 0 for failure)."""
    eps: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        check_group_fields(self)
        check("success_reward", self.success_reward > 0, self.success_reward, POSITIVE)


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    hipif_adv = hipif.turn_advantages(trajectories, cfg.success_reward, cfg.eps)
    anchor_adv = anchor_step_advantages(
        [hipif.step_rewards(t, cfg.success_reward) for t in trajectories],
        [[turn.anchor_key for turn in t.turns] for t in trajectories],
        [t.group_id for t in trajectories],
        gamma=cfg.gamma,
        mode=cfg.mode,
        eps=cfg.eps,
    )
    per_traj = [h + cfg.step_weight * a.numpy() for h, a in zip(hipif_adv, anchor_adv, strict=True)]
    return turn_advantage_targets(trajectories, batch, per_traj)


ALGORITHM = Algorithm(
    name="hipif_gigpo",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # HIPIF Eq. 4: clipped GRPO surrogate + kl_coef · KL to the reference
    uses_reference=has_kl_term,
    min_group_size=2,
    agents=("hipif",),
)
