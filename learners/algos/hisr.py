"""HISR: hindsight-information-modulated segmental process rewards, PPO with GAE (HISR Sec. 3, App. B).

The pipeline (``launch.driver.hisr_rewards`` runs the stages before RL, each cached in the run folder):

1. behaviour cloning on expert trajectories in the ReAct format → π_ref (Eq. 1; the run's ``bc`` phase);
2. N rollouts per training task with π_ref at temperature 0.7, wrong-format and repetitive ones dropped (App. B);
3. segmentation (``reward.segments``; the paper's GPT-4o step, replaced offline);
4. the SPRM: the base with its own LoRA and the Eq. 2 head W₂·SiLU(W₁h), trained with Eq. 3 (``sprm_value_loss``);
5. the hindsight model: π_ref continued on the Table 9–10 cloze of every collected turn (Eq. 4 = the SFT loss);
6. RL: every iteration's trajectories are segmented, the SPRM scores each segment (R̂), the hindsight model and the
   policy score each action (Eq. 5–6), and r_fuse = (1 − α) r_him + α r_g (Eq. 7–8;
   ``learners.reward_models.segment_turn_rewards`` writes the first summand into ``turn.shaped["segment"]``, the
   ``action_grounding`` shaping term is the second) is the reward of PPO with GAE (Eq. 9).

The SPRM (its own LoRA adapter and head, a value model beside the PPO critic) and the hindsight model (its own LoRA
adapter) sit on the policy's base in the policy's learner group (``launch.driver.hisr_rewards.reward_model_learners``).

This file: the config (App. B constants), the targets (GAE over r_fuse), the PPO losses and the SPRM's loss.

Deviations, each labelled where it is made:

* segmentation: protocol subgoals, entropy change points or single turns instead of GPT-4o (``segmentation``);
* Eq. 7's norm is L1 (the case studies' numbers), and ``keep_sprm_scale`` multiplies R_him by ‖R̂‖₁;
* the SPRM loss over a mini-batch is Σ_b (R_b − Σ_i r_bi)² / (segments in the mini-batch): every trajectory
  weighs the same; the scale is Eq. 3's mean divided by the mean segment count;
* the value of a truncated episode's final state is approximated by V(s_{T−1}) (``truncation="terminal"``: 0; the
  paper does not say), advantages are whitened (as PPO);
* beyond the paper, off by default: ``outcome_coef`` c adds c · R (the outcome the SPRM regresses on) to the last
  turn's r_fuse, for the case where the SPRM's segment rewards alone do not steer the policy to success;
* **the SPRM starts from a fresh LoRA** on the base model (its adapter ``sprm`` and the Eq. 2 head), where App. B
  "continue[s] training the π_policy" (π_ref after behaviour cloning) into the SPRM. The hindsight model does start
  from π_ref (``launch.driver.hisr_rewards``); the SPRM cannot yet: the learner copies LoRA tensors into policy and frozen adapters
  only, not into a value model's (``learners.worker.LearnerWorker.load_adapter_weights``), so π_ref's weights would
  need that copy (and the value model's optimizer state rebuilt) first;
* **the clip is per token**: Eq. 9's ratio is π(a_t | s_t) / π_old(a_t | s_t) of the whole action a_t (a turn);
  ours is the shared ``learners.targets.clipped_policy_loss``, a ratio and clip per response token as in verl's PPO
  loss (the paper names no code; its PPO and GAE are the standard ones). The turn-level ratio is the product of
  its tokens' ratios and leaves [1 − ε, 1 + ε] sooner on long actions; no turn-level variant is offered yet;
* **value clipping** off by default (``value_clip`` null): the paper's critic is plain regression on the return (it
  names no clip). ``value_clip=0.2`` is PPO's clipped value loss (PPO's default here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.algo_config import (
    AT_LEAST_ONE,
    NON_NEGATIVE,
    POSITIVE,
    ActorCriticConfig,
    check,
    check_choice,
    check_fractions,
)
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.hindsight import sprm_loss
from learners.reward_models import SEGMENT_TERM, outcome
from learners.targets import (
    CriticInputs,
    Targets,
    ValueSlot,
    clipped_policy_loss,
    has_kl_term,
    squared_value_loss,
    turn_gae_targets,
)
from reward.segments import SEGMENTATIONS
from reward.shaping import HISR_TERMS


@dataclass(frozen=True)
class Config(ActorCriticConfig):
    """HISR App. B beside the shared fields (``learners.algo_config.ActorCriticConfig``: its KL coefficient 1e-2 is
    the shared default); ``reward_terms`` is α · r^g (Eq. 8), α = ``shaping.grounding_alpha`` (0.3)."""

    reward_terms: tuple[str, ...] = HISR_TERMS
    no_outcome_batch: str = "train"
    """A batch whose episodes all ended alike still trains: its learned segment rewards tell lost episodes apart."""
    gamma: float = 0.99
    lam: float = 0.95
    """HISR App. B: γ 0.99, λ 0.95."""
    value_clip: float | None = None
    """None: ½ (V − return)², as the paper (no value clip); a number: PPO's clipped value loss (docstring)."""
    normalize_advantages: bool = True
    beta: float = 0.3
    """Eq. 6's temperature (App. B: 0.3)."""
    segmentation: str = "auto"
    """``reward.segments``: subgoal | entropy | turn; auto: the protocol's subgoals where it has them (measured
    agreement 1.0 with the expert's subgoal boundaries by construction), else entropy change points."""
    entropy_jump: float = 1.5
    """Entropy segmentation: a boundary where a turn's mean entropy rises by more than this many std. 1.5 agreed
    best with the expert's subgoal boundaries on 12 ALFWorld games (F1 0.70 vs 0.49 at 0.5 and 0.17 for single
    turns; ``bench/bench_segmentation.py``, docs/results/hisr_segmentation.md)."""
    keep_sprm_scale: bool = True
    """R_him × ‖R̂‖₁ (see ``learners.reward_models.segment_turn_rewards``); false: Eq. 7 as printed."""
    collect_per_task: int = 10
    """N rollouts per task with π_ref (App. B: 10)."""
    collect_tasks: int = 0
    """Training tasks to collect on (0: every one; the paper uses every task of D_bc)."""
    collect_temperature: float = 0.7
    collect_filter: bool = True
    """App. B's filter of wrong-format and repetitive trajectories; false keeps every one (a smoke test's model
    that cannot keep the format yet)."""
    sprm_epochs: int = 1
    sprm_lr: float = 2e-6
    sprm_batch: int = 16
    """App. B, ALFWorld: 1 epoch at (2e-6, 16)."""
    hindsight_epochs: int = 1
    hindsight_lr: float = 1e-6
    hindsight_batch: int = 192
    """App. B, ALFWorld: 1 epoch at (1e-6, 192)."""
    online_hindsight: bool = False
    """Beyond the paper (its Limitation 2): one epoch of hindsight-model SFT (Eq. 4) on every iteration's rollouts,
    after they are scored."""
    outcome_coef: float = 0.0
    """Beyond the paper: c · R added to the last turn's reward (0: the paper, where the outcome reaches the
    policy only through the SPRM; Sec. 3.3)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fractions(self, "gamma", "lam")
        vc = self.value_clip
        check("value_clip", vc is None or vc >= 0, vc, "a number >= 0 (null: no clipping)")
        check("beta", self.beta > 0, self.beta, POSITIVE)
        check_choice("segmentation", self.segmentation, ["auto", *SEGMENTATIONS])
        for name, ok, allowed in (
            ("entropy_jump", self.entropy_jump >= 0, NON_NEGATIVE),
            ("collect_per_task", self.collect_per_task >= 1, AT_LEAST_ONE),
            ("collect_tasks", self.collect_tasks >= 0, "an integer >= 0 (0: every training task)"),
            ("collect_temperature", self.collect_temperature >= 0, NON_NEGATIVE),
            ("sprm_epochs", self.sprm_epochs >= 1, AT_LEAST_ONE),
            ("sprm_lr", self.sprm_lr > 0, POSITIVE),
            ("sprm_batch", self.sprm_batch >= 1, AT_LEAST_ONE),
            ("hindsight_epochs", self.hindsight_epochs >= 1, AT_LEAST_ONE),
            ("hindsight_lr", self.hindsight_lr > 0, POSITIVE),
            ("hindsight_batch", self.hindsight_batch >= 1, AT_LEAST_ONE),
            ("outcome_coef", self.outcome_coef >= 0, NON_NEGATIVE),
        ):
            check(name, ok, getattr(self, name), allowed)


VALUE_SLOTS = (ValueSlot("v", 0, "prompt_last"),)


def fused_rewards(traj: Trajectory, outcome_coef: float = 0.0) -> np.ndarray:
    """float64[T]: r_fuse of Eq. 8 = the shaped terms only; the outcome reaches the policy through the SPRM, never
    as an env reward (HISR Sec. 3.3), unless ``outcome_coef`` > 0 adds that multiple of the outcome R to the last
    turn (a labelled deviation). Refuses a trajectory the reward models did not annotate."""
    missing = [k for k, t in enumerate(traj.turns) if SEGMENT_TERM not in t.shaped]
    if missing:
        raise ValueError(
            f"{traj.traj_id}: turns {missing[:5]} carry no {SEGMENT_TERM!r} reward (the HISR reward models must "
            "annotate every trajectory before its targets)"
        )
    r = np.array([sum(t.shaped.values()) for t in traj.turns], dtype=np.float64)
    if outcome_coef and r.size:
        r[-1] += outcome_coef * outcome(traj)
    return r


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    assert values is not None, "HISR's PPO needs critic values"
    return turn_gae_targets(
        trajectories,
        batch,
        values,
        [fused_rewards(t, cfg.outcome_coef) for t in trajectories],
        gamma=cfg.gamma,
        lam=cfg.lam,
        normalize=cfg.normalize_advantages,
        truncation=cfg.truncation,
    )


def value_loss(values: torch.Tensor, inputs: CriticInputs, cfg: Config):
    """0.5 · (V − return)², PPO-clipped around the old values when ``value_clip`` is set."""
    return squared_value_loss(values, inputs, clip=cfg.value_clip)


def sprm_value_loss(values: torch.Tensor, inputs: CriticInputs, cfg: Config):
    """Eq. 3 on the SPRM's segment scores ``values`` float[B, S] (``learners.reward_models.SprmBatch``): the
    outcome R_b is the target of each of row b's valid slots, ``value_weight`` = valid / (valid slots in the
    mini-batch), so Σ_k w_bk / n_b = 1 / (segments in the mini-batch) for every row with a segment."""
    valid = inputs.value_weight > 0
    n = valid.sum(-1)
    row_weight = inputs.value_weight.sum(-1) / n.clamp(min=1)
    target = torch.where(valid, inputs.value_target, 0.0).sum(-1) / n.clamp(min=1)
    loss = sprm_loss(values, valid, target, row_weight=row_weight)
    return loss, {"sprm_loss": float(loss.detach())}


ALGORITHM = Algorithm(
    name="hisr",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # Eq. 9 + kl_coef · KL to π_ref
    value_slots=VALUE_SLOTS,
    value_loss=value_loss,
    uses_reference=has_kl_term,
    driver_stage="reward_models",
)
