"""HiPER (seed 001): Plan–Execute agent trained with Hierarchical Advantage Estimation and PPO.

Per turn the agent writes ``<switch>KEEP|SWITCH</switch><subgoal>o_t</subgoal><action>a_t</action>``. Rewards
r_t = env reward + format penalty (−0.1 per malformed turn) + KEEP penalty c_t = −c_KEEP (1 − q_t) (App. C,
c_KEEP = 0.3) + KEEP-consistency penalty (ours: a KEEP that rewrites the subgoal, −0.1).

Advantages (``learners.advantages.hierarchical_advantages``): low-level GAE inside segments bootstrapping to V_high at
the next boundary (Eq. 6–7), high-level GAE over segments (Eq. 8), switching advantage (q_t − β_t)(V_high(s_t) −
V_low(s_t, o_{t−1})) (Eq. 9–10), critic targets Eq. 11 and 13–14. Actor loss Eq. 28: switch tokens get A^switch,
subgoal tokens A^high on boundary turns only, action tokens A^low (``learners.losses.decision_token_advantages``);
+ KL to the reference policy with β = 0.01 (Eq. 30, App. C.1). Critic loss Eq. 12/29: squared error of both heads.

Where the two-head critic is read (one shared backbone, two heads, App. C.2):
* V_high(s_t): head 0 at the last prompt token (state before the turn's output);
* V_low(s_t, o_{t−1}): head 1 at the last prompt token (the prompt states the current subgoal o_{t−1});
* V_low(s_t, o_t): head 1 at the last token of the new ``<subgoal>`` block in the response.

Deviations, all documented: β_t = π(SWITCH | s_t, o_{t−1}) is taken from the sampled switch span's probability
(P(span) if SWITCH was sampled, 1 − P(span) if KEEP was), not from a separate forward pass over both words;
response tokens outside the three blocks (whitespace, EOS) get A^low so the model also learns to stop; the value of
a truncated episode's final state is approximated by V_high(s_{T−1}).

Advantage normalisation (``adv_norm``, on when ``normalize_advantages``): the paper does not specify one. The
default ``"per_type"`` whitens switch, subgoal and action tokens separately, each over its own tokens (as issue 10
reports the HiPER authors' code normalises low, high and switch advantages separately). ``"joint"`` (one mean/std
over all loss tokens, verl practice) is kept as an option but is wrong here: action tokens dominate the pooled mean,
and the small, zero-mean switch advantages (q_t − β_t)(V_high − V_low) then all move by −mean/std, so a positive
A^switch can come out negative (a good SWITCH is trained down). Turn 0's switch tokens (no switch decision: b_0 = 0
is forced, A^switch = 0) stay 0 and are left out of the switch statistics under ``"per_type"``.
Hyperparameters (App. C.1): actor lr 1e-6, critic lr 1e-5, λ_high = λ_low = 0.95, KL 0.01, rollout temperature 1.0,
validation temperature 0.4, mini-batch 256 — the learning rates and batch sizes live in the run config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.advantages import hierarchical_advantages
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.losses import decision_token_advantages
from learners.targets import (
    CriticInputs,
    Targets,
    ValueSlot,
    bootstrap_value,
    clipped_policy_loss,
    has_kl_term,
    rows_per_trajectory,
    squared_value_loss,
    whiten,
    whiten_groups,
)
from reward.shaping import HIPER_TERMS, ShapingConstants


@dataclass(frozen=True)
class Config:
    """``shaping`` holds every shaping constant (``reward.shaping.ShapingConstants``: c_keep 0.3, format_penalty
    0.1, keep_consistency_penalty, ...), so ``algo.shaping.<name>=v`` sets it; ``reward_terms`` picks the terms
    applied."""

    gamma: float = 0.99
    lam_low: float = 0.95
    lam_high: float = 0.95
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.01
    kl_kind: str = "low_var_kl"
    normalize_advantages: bool = True
    adv_norm: str = "per_type"
    """"per_type": whiten switch / subgoal / action advantages separately (default); "joint": over all loss
    tokens at once, which lets the action tokens' mean flip switch-token signs (see the module docstring)."""
    agg: str = "token-mean"
    reward_terms: tuple[str, ...] = HIPER_TERMS
    shaping: ShapingConstants = field(default_factory=ShapingConstants)
    """The shaping constants (``algo.shaping.<name>``); the papers' defaults."""

    def __post_init__(self) -> None:
        if self.adv_norm not in ADV_NORMS:
            raise ValueError(
                f"algo.adv_norm: unknown value {self.adv_norm!r}; allowed: {', '.join(ADV_NORMS)}"
            )


ADV_NORMS = ("per_type", "joint")


VALUE_SLOTS = (
    ValueSlot("v_high", 0, "prompt_last"),
    ValueSlot("v_low_prev", 1, "prompt_last"),
    ValueSlot("v_low", 1, "subgoal_last"),
)


def switch_probability(logprobs: np.ndarray, switch_mask: np.ndarray, switched: bool) -> float:
    """β_t from the sampled switch span: P(span) when SWITCH was sampled, else 1 − P(span)."""
    p = float(np.exp(logprobs[switch_mask].sum())) if switch_mask.any() else 0.5
    return p if switched else 1.0 - p


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    assert values is not None, "HiPER needs the two-head critic"
    n = len(batch)
    adv = {k: np.zeros(n) for k in ("switch", "high", "low")}
    boundary = np.zeros(n, bool)
    target = np.zeros((n, 3), np.float32)
    valid = np.zeros((n, 3), bool)
    old_lp = batch.old_logprobs.numpy()
    sw_mask = batch.masks.get("switch_mask", torch.zeros_like(batch.response_mask)).numpy()
    for traj, rows in zip(trajectories, rows_per_trajectory(batch, trajectories), strict=True):
        q = traj.switches()
        beta = np.array([switch_probability(old_lp[r], sw_mask[r], bool(q[i])) for i, r in enumerate(rows)])
        v_high, v_low_prev, v_low = (values[rows, k].astype(np.float64) for k in range(3))
        res = hierarchical_advantages(
            traj.rewards(),
            v_low,
            v_low_prev,
            v_high,
            q,
            beta,
            gamma=cfg.gamma,
            lam_low=cfg.lam_low,
            lam_high=cfg.lam_high,
            terminated=traj.terminated,
            bootstrap_value=bootstrap_value(traj, v_high[-1]),
        )
        adv["switch"][rows] = res.adv_switch.numpy()
        adv["high"][rows] = res.adv_high.numpy()
        adv["low"][rows] = res.adv_low.numpy()
        boundary[rows] = res.boundary.numpy()
        target[rows, 0] = res.target_high.numpy()
        valid[rows, 0] = res.boundary.numpy()
        target[rows, 2] = res.target_low.numpy()
        valid[rows, 2] = True
    resp = batch.response_mask
    m_switch = batch.masks.get("switch_mask", torch.zeros_like(resp)) & resp
    m_sub = batch.masks.get("subgoal_mask", torch.zeros_like(resp)) & resp & ~m_switch
    m_act = resp & ~m_switch & ~m_sub
    token_adv, loss_mask = decision_token_advantages(
        m_switch,
        m_sub,
        m_act,
        torch.from_numpy(adv["switch"]),
        torch.from_numpy(adv["high"]),
        torch.from_numpy(adv["low"]),
        torch.from_numpy(boundary),
    )
    token_adv_np, mask_np = token_adv.numpy().astype(np.float32), loss_mask.numpy()
    if cfg.normalize_advantages and cfg.adv_norm == "joint":
        token_adv_np = whiten(token_adv_np, mask_np)
    elif cfg.normalize_advantages:
        # turn 0 has no switch decision (b_0 = 0 is forced): its switch tokens stay 0 and out of the statistics
        decided = torch.tensor([j > 0 for _i, j in batch.index], dtype=torch.bool)
        token_adv_np = whiten_groups(
            token_adv_np,
            [
                (m_switch & decided[:, None]).numpy(),
                (m_sub & torch.from_numpy(boundary)[:, None]).numpy(),
                m_act.numpy(),
            ],
        )
    return Targets(
        token_adv=token_adv_np,
        loss_mask=mask_np,
        value_target=target,
        value_valid=valid,
        stats={
            "switch_rate": float(boundary.mean()) if n else 0.0,
            "adv_low_mean": float(adv["low"].mean()) if n else 0.0,
            "adv_high_abs": float(np.abs(adv["high"][boundary]).mean()) if boundary.any() else 0.0,
            "adv_switch_abs": float(np.abs(adv["switch"]).mean()) if n else 0.0,
        },
    )


def value_loss(values: torch.Tensor, inputs: CriticInputs, cfg: Config):
    """HiPER Eq. 12 + its low-level analogue (App. B Eq. 29): 0.5 · squared error of each valid slot, unclipped."""
    return squared_value_loss(values, inputs)


ALGORITHM = Algorithm(
    name="hiper",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # per-token clipped surrogate + kl_coef · KL to the reference
    value_slots=VALUE_SLOTS,
    value_loss=value_loss,
    uses_reference=has_kl_term,
)
