"""What an algorithm hands the learner: token-level advantages, the loss mask, and critic targets (pure).

Every algorithm file (``learners/algos/<name>.py``) turns trajectories + a ``TurnBatch`` (+ critic values) into a
``Targets``; the learner worker then only needs the algorithm's per-token policy loss and its critic loss, both
pure functions of tensors (``PolicyInputs`` / ``CriticInputs``). Value *slots* say where the critic is read:
slot k = head ``head`` at the batch position named ``at`` ("prompt_last", "subgoal_last" or "response_last"), of the
critic or, with ``target``, of its soft-updated target copy (IQL's Q_target / V_target; ``Algorithm.target_critic``).

Critic-loss convention (every algorithm with a critic): the scalar mini-batch loss
Σ_{b,k} w_bk · ½ (V_bk − y_bk)², with w = ``value_weight`` (1 / the number of valid targets in the mini-batch on
valid slots, 0 elsewhere), optionally PPO-clipped around the values the targets were computed with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.advantages import Truncation, gae
from learners.batch import Sequences, TurnBatch
from learners.losses import kl_estimate, ppo_token_loss


@dataclass(frozen=True)
class ValueSlot:
    name: str
    head: int
    at: str  # "prompt_last" | "subgoal_last" | "response_last"
    target: bool = False


@dataclass
class Targets:
    """Shapes: ``token_adv`` float32[B, L], ``loss_mask`` bool[B, L], ``value_target`` float32[B, K],
    ``value_valid`` bool[B, K] (K value slots); ``stats`` scalar diagnostics for the run log."""

    token_adv: np.ndarray
    loss_mask: np.ndarray
    value_target: np.ndarray
    value_valid: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy loss reads besides the new log-probs (torch; one micro-batch): ``old_logprobs``,
    ``token_adv`` float[B, L], ``loss_mask`` bool[B, L], ``ref_logprobs`` float[B, L] or None (no KL term),
    ``behaviour_weight`` float[B, L] or None (decoupled PPO's truncated π_old / π_behav per token,
    ``learners.losses.behaviour_weights``; None: 1)."""

    old_logprobs: torch.Tensor
    token_adv: torch.Tensor
    loss_mask: torch.Tensor
    ref_logprobs: torch.Tensor | None = None
    behaviour_weight: torch.Tensor | None = None


@dataclass(frozen=True)
class CriticInputs:
    """What a critic loss reads besides the new values (torch; one micro-batch): ``value_target``,
    ``old_values``, ``value_weight`` float[B, K] (see the module docstring's convention)."""

    value_target: torch.Tensor
    old_values: torch.Tensor
    value_weight: torch.Tensor


def value_positions(batch: TurnBatch, slots: Sequence[ValueSlot]) -> tuple[np.ndarray, np.ndarray]:
    """(value_pos int64[B, K], value_head int64[K]) for the learner's critic read-out."""
    cols = [getattr(batch, s.at).numpy() for s in slots]
    pos = np.stack(cols, axis=1) if cols else np.zeros((len(batch), 0), np.int64)
    return pos.astype(np.int64), np.array([s.head for s in slots], dtype=np.int64)


def sequences(batch: TurnBatch, slots: Sequence[ValueSlot]) -> Sequences:
    """The forward-pass input of ``batch`` with the critic read at ``slots``."""
    pos, head = value_positions(batch, slots)
    return Sequences(
        input_ids=batch.input_ids.numpy(),
        attention_mask=batch.attention_mask.numpy(),
        response_mask=batch.response_mask.numpy(),
        value_pos=pos,
        value_head=head,
        value_from_target=np.array([s.target for s in slots], dtype=bool)
        if any(s.target for s in slots)
        else None,
        group=np.array(batch.group, dtype=np.int64) if batch.group else None,
    )


def rows_per_trajectory(batch: TurnBatch, trajectories: Sequence[Trajectory]) -> list[np.ndarray]:
    """Batch rows of each trajectory in turn order; every turn must be in the batch (one row per turn)."""
    rows: list[list[int]] = [[] for _ in trajectories]
    for r, (i, _j) in enumerate(batch.index):
        rows[i].append(r)
    out = []
    for i, (traj, rs) in enumerate(zip(trajectories, rows, strict=True)):
        if len(rs) != len(traj.turns):
            raise ValueError(f"trajectory {i} has {len(traj.turns)} turns but {len(rs)} batch rows")
        out.append(np.array(rs, dtype=np.int64))
    return out


def turn_advantage_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, per_traj: Sequence[np.ndarray]
) -> Targets:
    """Critic-free targets: every response token of turn t of trajectory i gets ``per_traj[i][t]`` (float[T_i], or
    a scalar shared by the trajectory's turns); no value slots. ``stats["adv_abs_mean"]``: mean |A| per row."""
    resp = batch.response_mask.numpy()
    adv_row = np.zeros(len(batch))
    for adv, rows in zip(per_traj, rows_per_trajectory(batch, trajectories), strict=True):
        adv_row[rows] = adv
    return Targets(
        token_adv=broadcast_turn_values(adv_row, resp),
        loss_mask=resp,
        value_target=np.zeros((len(batch), 0), np.float32),
        value_valid=np.zeros((len(batch), 0), bool),
        stats={"adv_abs_mean": float(np.abs(adv_row).mean()) if adv_row.size else 0.0},
    )


def bootstrap_value(traj: Trajectory, last_value: float, truncation: Truncation = "bootstrap") -> float:
    """V(s_T): 0 when terminated, and for a truncated episode with ``truncation="terminal"``
    (``learners.advantages.Truncation``); otherwise we have no forward pass on s_T, so the value of the last state
    the policy acted from stands in (a documented approximation)."""
    if traj.terminated or truncation == "terminal":
        return 0.0
    return float(last_value)


def broadcast_turn_values(per_row: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """float[B] per turn → float32[B, L] on ``mask`` tokens."""
    return (per_row[:, None] * mask).astype(np.float32)


def whiten(token_adv: np.ndarray, mask: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """(A − mean) / std over the masked tokens (verl's advantage whitening); masked-out entries stay 0."""
    vals = token_adv[mask]
    if vals.size < 2:
        return token_adv
    out = (token_adv - vals.mean()) / (vals.std() + eps)
    return np.where(mask, out, 0.0).astype(np.float32)


def whiten_groups(adv: np.ndarray, groups: Sequence[np.ndarray]) -> np.ndarray:
    """float[B] per-row advantages with each group of rows (bool[B] each) whitened on its own (``whiten``); rows in
    no group as given."""
    out = adv.astype(np.float64)
    for rows in groups:
        out[rows] = whiten(adv, rows)[rows]
    return out


def advantage_stats(adv: np.ndarray) -> dict[str, float]:
    """Mean, mean |A|, sd and share > 0 of per-row advantages (all 0 for none): whether A ranks rows or only carries
    an offset shows in the sign share and the spread."""
    if not adv.size:
        return {"adv_mean": 0.0, "adv_abs_mean": 0.0, "adv_std": 0.0, "adv_pos_share": 0.0}
    return {
        "adv_mean": float(adv.mean()),
        "adv_abs_mean": float(np.abs(adv).mean()),
        "adv_std": float(adv.std()),
        "adv_pos_share": float((adv > 0).mean()),
    }


def has_kl_term(cfg: Any) -> bool:
    """Whether an algorithm config with a ``kl_coef`` needs the reference policy's log-probs."""
    return cfg.kl_coef > 0


def clipped_policy_loss(
    new_lp: torch.Tensor, inputs: PolicyInputs, cfg: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token PPO clipped surrogate + ``cfg.kl_coef`` · KL(π‖π_ref) estimate (HiPER Eq. 28 + the β term of
    Eq. 30; GRPO's KL term). ``cfg`` supplies ``clip_low``, ``clip_high``, ``kl_coef``, ``kl_kind``;
    ``inputs.ref_logprobs`` must be set when ``kl_coef`` > 0. With ``inputs.behaviour_weight`` the surrogate of
    each token is multiplied by it (decoupled PPO; the KL term is not: it regularises π_θ itself)."""
    mask = inputs.loss_mask.bool()
    loss, m = ppo_token_loss(
        new_lp,
        inputs.old_logprobs,
        inputs.token_adv,
        mask,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
    )
    if inputs.behaviour_weight is not None:
        loss = loss * inputs.behaviour_weight.detach()
    metrics = {k: float(v) for k, v in m.items()}
    if has_kl_term(cfg):
        if inputs.ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs the reference policy's log-probs (PolicyInputs.ref_logprobs)")
        # Masked positions (prompt, padding) are set equal *before* the estimator: exp(−log r) of a far-off padding
        # logprob would be inf there, and torch.where's zero gradient times inf is NaN.
        zero = torch.zeros_like(new_lp)
        kl = kl_estimate(
            torch.where(mask, new_lp, zero), torch.where(mask, inputs.ref_logprobs, zero), cfg.kl_kind
        )
        kl = torch.where(mask, kl, zero)
        loss = loss + cfg.kl_coef * kl
        metrics["kl"] = float(kl.detach().sum() / mask.sum().clamp(min=1))
    return loss, metrics


def squared_value_loss(
    values: torch.Tensor, inputs: CriticInputs, *, clip: float | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The critic-loss convention of the module docstring: Σ w · ½ (V − y)² over float[B, K]; with ``clip``, the
    PPO-clipped variant max((V − y)², (V_clip − y)²), V_clip = V_old + clamp(V − V_old, ±clip)."""
    target = inputs.value_target.float()
    err = (values - target) ** 2
    if clip is not None:
        old = inputs.old_values.float()
        v_clip = old + (values - old).clamp(-clip, clip)
        err = torch.maximum(err, (v_clip - target) ** 2)
    weight = inputs.value_weight.float()
    # where, not multiply: a NaN/inf placeholder target at an invalid slot must not poison the loss
    loss = 0.5 * torch.where(weight > 0, err * weight, torch.zeros_like(err)).sum()
    return loss, {"value_loss": float(loss.detach())}


def turn_gae_targets(
    trajectories: Sequence[Trajectory],
    batch: TurnBatch,
    values: np.ndarray,
    rewards: Sequence[np.ndarray],
    *,
    gamma: float,
    lam: float,
    normalize: bool,
    truncation: Truncation = "bootstrap",
) -> Targets:
    """Turn-level GAE (PPO, HISR): ``rewards`` float[T] per trajectory, V(s_t) = ``values[:, 0]``, a truncated
    episode's V(s_T) by ``bootstrap_value`` under ``truncation``; every response token of a turn gets its advantage
    (whitened over the batch's response tokens when ``normalize``), the critic regresses on the λ-return."""
    resp = batch.response_mask.numpy()
    adv_row = np.zeros(len(batch))
    ret_row = np.zeros(len(batch))
    for traj, r, rows in zip(trajectories, rewards, rows_per_trajectory(batch, trajectories), strict=True):
        v = values[rows, 0].astype(np.float64)
        adv, ret = gae(
            r,
            v,
            gamma=gamma,
            lam=lam,
            terminated=traj.terminated,
            bootstrap_value=bootstrap_value(traj, v[-1], truncation),
        )
        adv_row[rows], ret_row[rows] = adv.numpy(), ret.numpy()
    token_adv = broadcast_turn_values(adv_row, resp)
    if normalize:
        token_adv = whiten(token_adv, resp)
    return Targets(
        token_adv=token_adv,
        loss_mask=resp,
        value_target=ret_row[:, None].astype(np.float32),
        value_valid=np.ones((len(batch), 1), bool),
        stats={"adv_mean": float(adv_row.mean()) if adv_row.size else 0.0},
    )
