"""Multi2: a planner trained by SFT and an executor trained by offline-to-online RL, on two LoRA adapters (Multi2
Sec. 4, Alg. 1).

System 1 (the ``planner`` role) maps {task, observation} to a sub-goal g; System 2 (the ``executor`` role) maps
{g, observation} to an action and a completion flag (``actors.agents.multi2``). With ``model.role_adapters`` each
system has its own adapter on one base (Sec. 5, "separate LoRA adapters"; one shared adapter is the paper's
"Shared adapter" ablation, Fig. 6c). The critic (the base with its own LoRA, Q and V heads) scores the executor's
sub-goal-conditioned transitions (``learners.transitions.multi2_transitions``); V read at the last prompt token,
Q at the last response token.

    planner   L_SFT = −E_{D_H}[log π_H(g | task, o)]                                      (Eq. 3)
    critic    L_Q = E[(r + γ (1 − done) V_target(o', g) − Q(o, g, a))²]                  (Eq. 4)
              L_V = E[L₂^τ(Q_target(o, g, a) − V(o, g))]                                  (Eq. 5)
    executor  offline: −E_D[w(A) log π(a | o, g)] − λ E_{a'~π}[A'(o, g, a') log π(a' | o, g)]   (Eq. 6)
              online:  −E_B[w(A) log π_on(a | o, g)] + c KL(π_on ‖ π_off)                 (Eq. 7)

with A = Q − V, w(A) = min(exp(A/β), max_weight), B the offline data plus the online episodes so far, π_off the
executor at the end of the offline phase (a frozen copy on the learner, ``offline_<adapter>``).

Our copy of the paper lost Eq. 3–7 in extraction; the forms above are reconstructed from its prose, labelled:
* **Policy-anchored term** (Sec. 4.2: "anchoring learning to actions preferred by the critic when sampling from the
  current policy"). The authors' public code (park-sangeun/Multi-2-LLM-Agent, ``alg/Multi_RL.py``,
  ``get_policy_q``) evaluates the target critic's Q on the policy's own sampled action; we take
  A' = Q_target(o, g, a') − V(o, g) for one a' sampled from the current executor per dataset state (a share
  ``anchor_fraction`` of the states each offline iteration, ``launch.driver.offline_data``) and train −λ A' log π(a'), a
  policy gradient with the critic's advantage. ``anchor_coef`` λ = 1 is ours (the paper's value is illegible);
  ``anchor_fraction=0`` is the paper's "Vanilla-IQL" ablation (Fig. 7a).
* **Constants**: the hyperparameter table (App. C.2) lost its values; the authors' ``config/Multi_rl.json`` gives
  γ 0.99, τ (Polyak) 0.2, expectile 0.95, actor lr 1e-6, critic lr 1e-6, planner lr 1e-5, 10 epochs, and trains
  the actor with A · log π (``use_adv``), offered here as ``actor_loss="advantage"``. β = 1 and c = 0.1 are ours.
* **Expectile direction.** Eq. 5 is IQL's expectile regression (an "expectile loss" with "the indicator
  function"): L₂^τ(d) = |τ − 1(d < 0)| d², d = Q_target − V, so τ = 0.95 makes V track the upper 0.95 expectile of
  Q_target (the default, ``expectile_direction="iql"``). The authors' code (``alg/Multi_RL.py``,
  ``weight_tau`` 0.95) weighs V − Q_target < 0 by 1 − τ and > 0 by τ: IQL at 1 − τ, a V that tracks the lower 0.05
  expectile. ``expectile_direction="authors"`` gives the code's weights.
* **Target critic.** Q's TD target and V's regression target read the soft-updated copy (V_target(s'),
  Q_target(s, a): IQL, as STEP-HRL Eq. 11–12); the authors' code reads both from the current critic without a
  gradient and uses its target copy only for the policy-anchored actions (``get_policy_q``).
* **KL in the online phase** reaches every trained row (``loss_mask``), the planner's SFT rows included, where
  Eq. 7 regularises the executor alone: a policy loss sees no role, and a per-role KL mask would need a field in
  ``learners.targets.PolicyInputs`` (shared by every algorithm). With ``model.role_adapters`` (the presets) the
  planner's term pulls it towards its own frozen copy π_off^H on the expert sub-goals it is cloned on in every
  iteration, so it only slows that SFT; with one shared adapter it regularises the shared policy on planner turns
  as well.
* **Executor reward**: App. B's internal reward (1 when the active sub-goal is completed) plus the env reward.
* **KL** per response token with ``kl_kind`` at the buffer's tokens (k3 "low_var_kl" by default), not the exact
  KL over the vocabulary: buffer actions come from older policies, so the estimate is approximate.
* **Planner**: SFT on the expert trajectories' planner turns in every iteration (the authors' RL loop keeps the
  high-level BC step beside the low-level RL step); collected and online episodes never train it.
* ``low_update_repeat`` (5 executor steps per planner step in the authors' loop) is not reproduced: both adapters
  take ``learner.ppo_epochs`` passes per iteration, each with its own optimizer and lr (``learner.adapter_lr``).
* The first ``warmup_steps`` optimizer steps train the critic alone, rounded up to whole passes (as for
  STEP-HRL); the authors' loop has none (default 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.algo_config import (
    NON_NEGATIVE,
    OfflineRLConfig,
    check,
    check_choice,
    check_fractions,
    value_expectile,
)
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.losses import KL_KINDS, awr_weights, iql_slot_loss, kl_estimate
from learners.targets import (
    CriticInputs,
    PolicyInputs,
    Targets,
    ValueSlot,
    advantage_stats,
    broadcast_turn_values,
    whiten_groups,
)
from learners.transitions import multi2_transitions, with_truncation


@dataclass(frozen=True)
class Config(OfflineRLConfig):
    """The authors' config (``config/Multi_rl.json``) where it has a value, over the shared offline fields
    (``learners.algo_config.OfflineRLConfig``); the rest labelled in the docstring. AWR temperature β 1.0 (the
    paper's value is illegible), 3 offline iterations (Eq. 6) before an online phase (Eq. 7) when
    ``online_groups`` > 0."""

    offline_iterations: int = 3
    anchor_coef: float = 1.0
    """λ of the policy-anchored term (reconstructed, docstring)."""
    anchor_fraction: float = 1.0
    """Share of the dataset's executor states that get one sample of the current executor per offline iteration
    (0: no policy-anchored term, the paper's Vanilla-IQL ablation)."""
    kl_coef: float = 0.1
    """c of Eq. 7: KL(π_on ‖ π_off) in the online iterations."""
    kl_kind: str = "low_var_kl"

    def __post_init__(self) -> None:
        super().__post_init__()
        check("anchor_coef", self.anchor_coef >= 0, self.anchor_coef, NON_NEGATIVE)
        check_fractions(self, "anchor_fraction")
        check("kl_coef", self.kl_coef >= 0, self.kl_coef, NON_NEGATIVE)
        check_choice("kl_kind", self.kl_kind, KL_KINDS)


VALUE_SLOTS = (
    ValueSlot("q", 0, "response_last"),
    ValueSlot("v", 1, "prompt_last"),
    ValueSlot("q_target", 0, "response_last", target=True),
    ValueSlot("v_target", 1, "prompt_last", target=True),
)
Q, V, Q_TARGET, V_TARGET = range(4)
IS_V_SLOT = (False, True, False, True)


def is_anchor(trajectory: Trajectory) -> bool:
    """A one-turn trajectory holding a response sampled from the current executor at a dataset state."""
    return bool(trajectory.info.get("anchor", False))


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    """Per row, the weight of −log π on its response tokens (``token_adv``) and the critic targets
    (``values`` float[B, 4] in ``VALUE_SLOTS`` order):

    * planner turn of an expert trajectory: weight 1 (SFT); any other planner turn: no loss;
    * executor turn of the data: Q target r + γ(1 − done) V_target(s'), V target Q_target(s, a); weight w(A) with
      A = Q(s, a) − V(s) (``advantage_q="target"``: Q_target(s, a) − V(s));
    * anchor row (``is_anchor``): no critic target; weight λ · (Q_target(s, a') − V(s)).
    """
    assert values is not None, "Multi2 needs critic values"
    b = len(batch)
    row_of = {ij: r for r, ij in enumerate(batch.index)}
    trans = [
        with_truncation(multi2_transitions(t, cfg.env_reward_scale), cfg.truncation) for t in trajectories
    ]
    target = np.zeros((b, len(VALUE_SLOTS)), np.float32)
    valid = np.zeros((b, len(VALUE_SLOTS)), bool)
    weight = np.zeros(b)
    trains = np.zeros(b, bool)
    kind = np.zeros(b, np.int8)  # 0 planner, 1 executor data, 2 anchor
    adv = np.zeros(b)
    for r, (i, j) in enumerate(batch.index):
        traj = trajectories[i]
        if traj.turns[j].role == "planner":
            trains[r] = traj.info.get("source") == "expert"
            weight[r] = 1.0
            continue
        trains[r] = True
        if is_anchor(traj):
            kind[r] = 2
            adv[r] = values[r, Q_TARGET] - values[r, V]
            continue
        kind[r] = 1
        tr = trans[i]
        nxt = row_of.get((i, int(tr.next_turn[j])), r) if tr.next_turn[j] >= 0 else r
        v_next = 0.0 if tr.done[j] else float(values[nxt, V_TARGET])
        target[r, Q] = tr.reward[j] + cfg.gamma * v_next
        target[r, V] = values[r, Q_TARGET]
        valid[r, [Q, V]] = True
        adv[r] = values[r, Q if cfg.advantage_q == "online" else Q_TARGET] - values[r, V]
    data, anchor = kind == 1, kind == 2
    raw = adv
    if cfg.adv_norm == "whiten":
        adv = whiten_groups(adv, [data, anchor])
    if cfg.actor_loss == "awr":
        weight[data] = awr_weights(torch.from_numpy(adv[data]), cfg.beta, cfg.max_weight).numpy()
    else:
        weight[data] = adv[data]
    weight[anchor] = cfg.anchor_coef * adv[anchor]
    resp = batch.response_mask.numpy() & trains[:, None]
    return Targets(
        token_adv=broadcast_turn_values(weight, resp),
        loss_mask=resp,
        value_target=target,
        value_valid=valid,
        stats={  # the critic's A, before any whitening
            **advantage_stats(raw[data]),
            "awr_weight": float(weight[data].mean()) if data.any() else 0.0,
            "anchor_adv_mean": float(raw[anchor].mean()) if anchor.any() else 0.0,
            "anchor_rows": float(anchor.sum()),
            "sft_rows": float((trains & (kind == 0)).sum()),
        },
    )


def policy_loss(new_lp: torch.Tensor, inputs: PolicyInputs, cfg: Config):
    """Per-token −w · log π with w = ``inputs.token_adv`` (``compute_targets``' per-row weight), plus
    c · KL(π ‖ π_off) per token when ``inputs.ref_logprobs`` holds π_off's log-probs (online iterations)."""
    mask = inputs.loss_mask.bool()
    zero = torch.zeros_like(new_lp)
    loss = torch.where(mask, -inputs.token_adv.float() * new_lp, zero)
    n = mask.sum().clamp(min=1)
    metrics = {"nll": float(torch.where(mask, -new_lp, zero).detach().sum() / n)}
    if inputs.ref_logprobs is not None:
        # masked positions are set equal *before* the estimator (as ``learners.targets.clipped_policy_loss``): a
        # far-off padding log-prob makes k3's exp(−log r) inf there, and torch.where's zero gradient times inf is NaN
        kl = kl_estimate(
            torch.where(mask, new_lp, zero), torch.where(mask, inputs.ref_logprobs.float(), zero), cfg.kl_kind
        )
        kl = torch.where(mask, kl, zero)
        loss = loss + cfg.kl_coef * kl
        metrics["kl"] = float(kl.detach().sum() / n)
    return loss, metrics


def value_loss(values: torch.Tensor, inputs: CriticInputs, cfg: Config):
    """Σ w · ℓ over float[B, 4]: (y − Q)² on the Q slot (Eq. 4), L₂^τ(y − V) on the V slot (Eq. 5)."""
    tau = value_expectile(cfg.expectile, cfg.expectile_direction)
    return iql_slot_loss(values, inputs.value_target, inputs.value_weight, IS_V_SLOT, tau)


ALGORITHM = Algorithm(
    name="multi2",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=policy_loss,
    value_slots=VALUE_SLOTS,
    value_loss=value_loss,
    uses_reference=lambda cfg: cfg.kl_coef > 0 and cfg.online_groups > 0,
    uses_old_logprobs=False,  # AWR reads no π_old; expert demonstrations carry no sampling log-probs
    agents=("multi2",),
    target_critic=True,
    anchor_role="executor",
    offline=True,
    driver_stage="offline_data",
)
