"""HIPIF (seed 002, "hierarchical planning with information folding"): the folded-history agent of Sec. 3.1–3.2
(``rollout.agent=hipif``), trained with the rule-based subgoal process rewards of Sec. 3.3 and a step-level group
advantage under the clipped GRPO objective (Eq. 4, Alg. 1).

Per stored step t of trajectory m (Alg. 1 lines 27–32):

    r^proc_t = r^gr_t + r^term_t + r^exec_t + r^fmt_t        (Eq. 7: ``reward_terms``, App. B constants, −0.1 each)
    S_t      = R_env^(m) + r^proc_t                           (Eq. 8)
    Â_t      = (S_t − mean(S)) / (std(S) + ε)                 (Eq. 9, over all steps of all M trajectories of the
                                                               same instruction: ``learners.advantages``
                                                               ``hipif_step_advantages``)

and every response token of step t (reflection, subgoal and action alike: "all generated response tokens in ζ_t are
optimized jointly", Sec. 3.1) gets Â_t. Loss: per-token clipped surrogate (ε_clip 0.2) + kl_coef · KL(π‖π_ref),
kl_coef 0.01 (App. B).

Reading and deviations:
* R_env^(m) = ``success_reward`` · 1[won]: App. A scores every benchmark by binary success and App. B pays "10 for
  task success and 0 for failure", whatever the env's own scale (ALFWorld 10, VirtualHome and the synthetic env 1,
  ScienceWorld a dense 0–100 score); the env's rewards are not read, so the 0.1 penalties keep the paper's scale.
* r^proc_t is the sum of the turn's shaping components, i.e. exactly the configured ``reward_terms`` (default: the
  four of Eq. 7). Adding a term (e.g. ``invalid_action``) adds it to r^proc.
* σ_S is the unbiased standard deviation (GRPO's); a group whose steps all score the same gets 0.
* **The clip is per token.** Eq. 4's ratio is π_θ(ζ_t | C_t) / π_old(ζ_t | C_t) of the whole step output ζ_t;
  ours is the shared ``learners.targets.clipped_policy_loss``, ratio and clip per response token, as in verl's
  PPO loss that verl-agent (which HIPIF follows for its step-level advantages, Sec. 3.1) trains with. No authors'
  code is public. A step-level ratio is the product of its tokens' ratios (it leaves [1 − ε, 1 + ε] sooner on
  long steps); no step-level variant is offered yet.
* The paper has no warm start (Qwen2.5 3B/7B-Instruct learn the format zero-shot); our CPU preset on the 135M model
  starts from a behaviour-cloning warm start on expert demonstrations in HIPIF's format (``bc``), as every CPU
  preset does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory
from learners.advantages import hipif_step_advantages
from learners.algo_config import NON_NEGATIVE, POSITIVE, PolicyLossConfig, check
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.targets import Targets, clipped_policy_loss, has_kl_term, turn_advantage_targets
from reward.shaping import HIPIF_TERMS


@dataclass(frozen=True)
class Config(PolicyLossConfig):
    """HIPIF App. B settings. ``reward_terms`` are the process rewards of Eq. 7; ``shaping`` their constants
    (``algo.shaping.process_penalty`` 0.01 and ``format_penalty`` 0.01 of the outcome, ``repeat_threshold`` 3); the
    KL coefficient is App. B's 0.01 ("the KL-divergence loss coefficient is set to 0.01")."""

    reward_terms: tuple[str, ...] = HIPIF_TERMS
    no_outcome_batch: str = "train"
    """A batch whose episodes all ended alike still trains: its rule-based subgoal rewards (Eq. 7) tell lost episodes apart."""
    success_reward: float = 10.0
    """R_env of a won episode (App. B: 10 for success, 0 for failure)."""
    eps: float = 1e-6

    def __post_init__(self) -> None:
        super().__post_init__()
        check("success_reward", self.success_reward > 0, self.success_reward, POSITIVE)
        check("eps", self.eps >= 0, self.eps, NON_NEGATIVE)


def step_scores(traj: Trajectory, success_reward: float) -> tuple[float, np.ndarray]:
    """(R_env, r^proc float64[T]) of one trajectory: the binary outcome (``success_reward`` if won, else 0) and each
    step's process reward (the sum of its shaping components, Eq. 7)."""
    r_env = success_reward if traj.won else 0.0
    proc = np.array([sum(t.shaped.values()) for t in traj.turns], dtype=np.float64)
    return r_env, proc


def step_rewards(traj: Trajectory, success_reward: float) -> np.ndarray:
    """float64[T]: r_t = r^proc_t plus the outcome R_env on the last step (the per-step rewards whose sum is the
    episode's HIPIF return)."""
    r_env, proc = step_scores(traj, success_reward)
    if proc.size:
        proc[-1] += r_env
    return proc


def turn_advantages(
    trajectories: Sequence[Trajectory], success_reward: float, eps: float
) -> list[np.ndarray]:
    """Â_t of Eq. 9 per trajectory (float64[T_i]), grouped by ``group_id`` (same instruction and initial state)."""
    scores = [step_scores(t, success_reward) for t in trajectories]
    adv = hipif_step_advantages(
        [r for r, _ in scores], [p for _, p in scores], [t.group_id for t in trajectories], eps=eps
    )
    return [a.numpy() for a in adv]


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    return turn_advantage_targets(
        trajectories, batch, turn_advantages(trajectories, cfg.success_reward, cfg.eps)
    )


ALGORITHM = Algorithm(
    name="hipif",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # Eq. 4: clipped GRPO surrogate + kl_coef · KL to the reference
    uses_reference=has_kl_term,
    min_group_size=2,  # Eq. 9 normalises within the group of M trajectories of one instruction
    agents=("hipif",),
)
