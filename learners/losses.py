"""Pure loss functions over torch tensors for every method in the project.

Conventions (shapes are written ``[B, L]`` = batch rows x response tokens):

* One row is one model response (one turn, or one role's call in STEP-HRL / Multi2).  ``mask`` is ``bool[B, L]``,
  True on the response tokens the loss covers; padding and prompt tokens are False.
* Values under masked-out tokens never reach the result, its gradient, or a NaN: every function replaces them
  with a neutral constant *before* any nonlinearity (``torch.where``, not multiplication, so ``inf``/``nan``
  padding is harmless).
* Per-row quantities (advantages, returns of utterance-level critics) are ``[B]`` and broadcast over tokens.
* Losses are returned as 0-dim tensors to *minimise*; metrics are detached 0-dim tensors.

This module is pure: it imports torch only (no ray, vllm, deepspeed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "episode-mean"]
KLKind = Literal["k1", "k2", "k3", "low_var_kl"]

AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "episode-mean")
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl")


# ---------------------------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------------------------


def zero_masked(x: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """``x`` with masked-out entries replaced by ``fill`` (gradient there is exactly zero, never NaN)."""
    return torch.where(mask, x, torch.as_tensor(fill, dtype=x.dtype, device=x.device))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` is True (any shape, same for both); 0 when none is valid."""
    mask = mask.to(torch.bool)
    total = zero_masked(x, mask).sum()
    return total / mask.sum().clamp(min=1).to(x.dtype)


def aggregate(
    loss_mat: Tensor, mask: Tensor, mode: AggMode = "token-mean", row_weight: Tensor | None = None
) -> Tensor:
    """Reduce a per-token loss ``[B, L]`` under ``mask`` ``bool[B, L]`` to a scalar.

    * ``token-mean``: sum over all valid tokens / number of valid tokens (long responses weigh more).
    * ``seq-mean-token-mean``: mean over rows of each row's mean over its valid tokens (every row weighs 1).
    * ``seq-mean-token-sum``: mean over rows of each row's sum over its valid tokens — the literal
      ``E[sum_t ...]`` of HiPER Eq. 28–29 and ``log pi(u|s) = sum_l log pi(u_l|...)`` of STEP-HRL Eq. 9–10.
    * ``episode-mean``: every token weighted by its row's ``row_weight`` (float[B]; 1 / the loss tokens of the
      row's episode in the whole batch, ``episode_row_weights``), normalised to sum 1: each episode weighs the same
      however many turns and tokens it has. Under a token mean a lost episode that runs to the step limit weighs
      2–3x a won one, so the tokens every episode writes get a net push down from the outcome advantages alone.

    Rows with no valid token are left out of the row count (they are padding), and an all-empty batch gives 0
    (still connected to the graph) rather than NaN.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {AGG_MODES}")
    mask = mask.to(torch.bool)
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    if mode == "episode-mean":
        w = aggregation_weights(mask, mode, row_weight).to(loss_mat.dtype)
        return (zero_masked(loss_mat, mask) * w).sum()
    if loss_mat.dim() != 2:
        raise ValueError(f"{mode} needs a [B, L] loss matrix, got shape {tuple(loss_mat.shape)}")
    row_sum = zero_masked(loss_mat, mask).sum(dim=-1)  # [B]
    row_len = mask.sum(dim=-1)  # [B]
    row_valid = row_len > 0
    if mode == "seq-mean-token-mean":
        row_sum = row_sum / row_len.clamp(min=1).to(loss_mat.dtype)
    return masked_mean(row_sum, row_valid)


# ---------------------------------------------------------------------------------------------------------------
# Policy-gradient losses (PPO / HiPER)
# ---------------------------------------------------------------------------------------------------------------


def ppo_token_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token PPO clipped surrogate, negated (Schulman et al. 2017, Eq. 7; HISR Eq. 9), before aggregation.

    Per token ``r = exp(logprobs - old_logprobs)`` and ``loss = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))``
    (= ``-min(rA, clip(r)A)``). Shapes: ``logprobs``, ``old_logprobs`` ``[B, L]``; ``advantages`` ``[B, L]`` or
    ``[B]`` (broadcast to every token of its row); ``mask`` ``bool[B, L]``. Returns ``(loss_mat [B, L], metrics)``
    with ``clipfrac`` (share of valid tokens where the clipped branch is active), ``approx_kl`` (``(r - 1) - log r``,
    a non-negative estimate of KL(pi_old || pi_theta) on samples from pi_old) and ``ratio_mean``. Masked positions
    are 0 in ``loss_mat``.
    """
    mask = mask.to(torch.bool)
    if advantages.dim() == logprobs.dim() - 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.expand_as(logprobs).detach()
    log_ratio = zero_masked(logprobs - old_logprobs.detach(), mask)
    adv = zero_masked(advantages, mask)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss_mat = zero_masked(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        metrics = {
            "clipfrac": masked_mean((clipped > unclipped).to(logprobs.dtype), mask),
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss_mat, metrics


def behaviour_weights(
    old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, dict[str, float]]:
    """Decoupled PPO's behaviour weight, truncated: ``w = min(π_old / π_behav, cap)`` per token (1 outside
    ``mask``; no gradient).

    Decoupled PPO (Hilton et al. 2022; AReaL, Fu et al. 2025, Eq. 5) clips the ratio against a proximal policy
    π_old, here the learner's own recomputation at the start of the update. It weights each token's surrogate by
    π_old / π_behav, with π_behav the policy that sampled the token: its log-probs as the rollout engine reported
    them, an older adapter version under one-step-off, or another numeric path (bf16, vLLM). Truncating the weight
    at ``cap`` is truncated importance sampling (TIS, Yao et al. 2025, C = 2). Shapes: float[B, L] log-probs,
    bool[B, L] mask. Metrics: ``is_weight_mean`` over the mask (before the cap) and ``is_weight_capped`` (the
    share of masked tokens that were capped)."""
    mask = mask.to(torch.bool)
    raw = torch.exp(zero_masked(old_logprobs - behaviour_logprobs, mask)).detach()
    w = zero_masked(torch.clamp(raw, max=cap), mask, fill=1.0)
    metrics = {
        "is_weight_mean": float(masked_mean(raw, mask)),
        "is_weight_capped": float(masked_mean((raw > cap).to(raw.dtype), mask)),
    }
    return w, metrics


def aggregation_weights(
    mask: Tensor, mode: AggMode = "token-mean", row_weight: Tensor | None = None
) -> Tensor:
    """float[B, L] weights w with ``sum(w * x) == aggregate(x, mask, mode, row_weight)`` for every x.

    The learner splits a mini-batch into micro-batches for gradient accumulation; weights computed once over the
    whole mini-batch keep the accumulated gradient equal to the gradient of the mini-batch loss.
    """
    m = mask.to(torch.float64)
    if mode == "token-mean":
        return m / m.sum().clamp(min=1.0)
    if mode == "episode-mean":
        if row_weight is None:
            raise ValueError("episode-mean aggregation needs each row's episode weight (row_weight)")
        w = m * torch.as_tensor(row_weight, dtype=torch.float64).reshape(-1, 1)
        total = w.sum()
        return w / total if total > 0 else w
    per_row = m.sum(dim=-1, keepdim=True)
    n_rows = (per_row > 0).sum().clamp(min=1).to(torch.float64)
    if mode == "seq-mean-token-mean":
        return m / per_row.clamp(min=1.0) / n_rows
    if mode == "seq-mean-token-sum":
        return m / n_rows
    raise ValueError(f"unknown aggregation mode {mode!r}; known: {AGG_MODES}")


def episode_row_weights(episode: Sequence[int], loss_mask: Tensor) -> Tensor:
    """float64[B]: 1 / (loss tokens of the row's episode over the whole batch) for each row (``episode[b]``: the
    row's episode), 0 for an episode without any: the ``row_weight`` of ``episode-mean`` aggregation. Computed
    once over the batch, before it is cut into mini-batches, so an episode's turns keep their share wherever the
    shuffle puts them. Episode 0 with 10 loss tokens over two rows, episode 1 with 30: [0.1, 0.1, 1/30]."""
    ep = torch.as_tensor(list(episode), dtype=torch.long)
    per_row = loss_mask.to(torch.float64).reshape(len(ep), -1).sum(dim=-1)
    if not len(ep):
        return per_row
    totals = torch.zeros(int(ep.max()) + 1, dtype=torch.float64).index_add_(0, ep, per_row)
    t = totals[ep]
    return torch.where(t > 0, 1.0 / t.clamp(min=1.0), torch.zeros_like(t))


def decision_token_advantages(
    mask_switch: Tensor,
    mask_subgoal: Tensor,
    mask_action: Tensor,
    adv_switch: Tensor,
    adv_high: Tensor,
    adv_low: Tensor,
    boundary: Tensor,
) -> tuple[Tensor, Tensor]:
    """Spread HiPER's per-turn advantages over each decision's own tokens (HiPER App. B, Eq. 28).

    Rows are turns.  ``mask_*`` ``bool[B, L]`` cover the ``<switch>``, ``<subgoal>`` and ``<action>`` blocks;
    ``adv_*`` ``[B]``; ``boundary`` ``bool[B]`` is q_t (True where the subgoal was (re)generated; turn 0 of an
    episode counts, see ``Trajectory.switches``).  Returns ``(token_adv [B, L], token_mask bool[B, L])``:
    switch tokens carry A^switch, subgoal tokens A^high only on boundary turns (the q_t factor of
    L^high_clip: a KEEP turn's copied subgoal is not a decision, so its tokens leave the mask entirely), action
    tokens A^low.  Overlapping masks are rejected: a token would receive two advantages.
    """
    mask_switch, mask_subgoal, mask_action = (
        m.to(torch.bool) for m in (mask_switch, mask_subgoal, mask_action)
    )
    overlap = (mask_switch & mask_subgoal) | (mask_switch & mask_action) | (mask_subgoal & mask_action)
    if bool(overlap.any()):
        raise ValueError("switch/subgoal/action masks overlap; each token belongs to one decision")
    mask_high = mask_subgoal & boundary.to(torch.bool).unsqueeze(-1)
    dtype = adv_low.dtype
    token_adv = (
        mask_switch.to(dtype) * adv_switch.unsqueeze(-1)
        + mask_high.to(dtype) * adv_high.unsqueeze(-1)
        + mask_action.to(dtype) * adv_low.unsqueeze(-1)
    )
    return token_adv, mask_switch | mask_high | mask_action


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip_range: float | None = None,
    agg: AggMode = "token-mean",
) -> Tensor:
    """PPO value loss ``0.5 max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)`` (clipped when ``clip_range``).

    Shapes: ``values``, ``old_values``, ``returns``, ``mask`` ``[B, L]`` (token-level critic) or ``[B, 1]``
    (one value per turn).  Without ``clip_range`` it is plain ``0.5 (V - R)^2``.
    """
    mask = mask.to(torch.bool)
    err = zero_masked(values - returns.detach(), mask)
    loss_mat = err**2
    if clip_range is not None:
        old = old_values.detach()
        v_clip = old + torch.clamp(values - old, -clip_range, clip_range)
        err_clip = zero_masked(v_clip - returns.detach(), mask)
        loss_mat = torch.maximum(loss_mat, err_clip**2)
    return 0.5 * aggregate(loss_mat, mask, agg)


# ---------------------------------------------------------------------------------------------------------------
# KL to a reference policy, entropy, behaviour cloning
# ---------------------------------------------------------------------------------------------------------------


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: KLKind = "low_var_kl") -> Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from tokens sampled from pi_theta (Schulman 2020, "Approximating
    KL divergence").  With ``log r = logprobs - ref_logprobs`` (any equal shapes):

    * ``k1 = log r`` — unbiased, high variance, can be negative;
    * ``k2 = 0.5 (log r)^2`` — biased, low variance, >= 0;
    * ``k3`` ``= exp(-log r) + log r - 1`` — unbiased, low variance, >= 0 and 0 iff equal;
    * ``low_var_kl``: k3 as verl computes it (HiPER builds on verl-agent): log r clamped to ±20 before the exponential
      and the estimate clamped to <= 10 per token (no gradient where clamped). Unclamped, one sampled token the
      policy finds far less likely than the reference (log r = -15: k3 = e^15 ≈ 3.3e6) swamps the whole loss. The
      unclamped form is ``k3``.

    Gradients flow into ``logprobs`` only.
    """
    log_r = logprobs - ref_logprobs.detach()
    if kind == "k1":
        return log_r
    if kind == "k2":
        return 0.5 * log_r**2
    if kind == "k3":
        return torch.expm1(-log_r) + log_r
    if kind == "low_var_kl":
        log_r = log_r.clamp(-20.0, 20.0)
        return (torch.expm1(-log_r) + log_r).clamp(max=10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; expected one of {KL_KINDS}")


def entropy_from_logprobs(logp: Tensor) -> Tensor:
    """Token entropy ``H = -sum p log p`` from normalised log-probs ``[..., V]`` -> ``[...]``."""
    return -(logp.exp() * logp).sum(dim=-1)


# ---------------------------------------------------------------------------------------------------------------
# IQL critics and advantage-weighted regression (STEP-HRL Sec. 3.3, Multi2 Sec. 4.2–4.3)
# ---------------------------------------------------------------------------------------------------------------


def expectile_loss(diff: Tensor, tau: float) -> Tensor:
    """Asymmetric squared loss ``L2^tau(d) = |tau - 1(d < 0)| d^2``, elementwise (STEP-HRL Eq. 12; Multi2 Eq. 5).

    With ``tau > 0.5`` positive errors (Q above V) weigh more, so V tracks an upper expectile of Q.
    """
    return (tau - (diff < 0).to(diff.dtype)).abs() * diff**2


def _mean(x: Tensor, mask: Tensor | None) -> Tensor:
    return x.mean() if mask is None else masked_mean(x, mask)


def iql_slot_loss(
    values: Tensor, target: Tensor, weight: Tensor, is_v_slot: Sequence[bool], expectile: float
) -> tuple[Tensor, dict[str, float]]:
    """An IQL critic's loss over value slots ``[B, K]``: ``sum w (y - Q)^2`` on Q slots (STEP-HRL Eq. 11, Multi2
    Eq. 4) and ``sum w L2^tau(y - V)`` on V slots (STEP-HRL Eq. 12, Multi2 Eq. 5); ``weight`` ``[B, K]`` is 0 where
    a slot has no target (target-network slots, other roles' slots), so only weighted terms count. No 1/2 factor,
    as in both papers. Returns the loss and its Q / V parts."""
    err = target.float() - values
    is_v = torch.tensor(list(is_v_slot), dtype=torch.bool, device=values.device)
    per = torch.where(is_v[None, :], expectile_loss(err, expectile), err**2)
    w = weight.float()
    contrib = torch.where(w > 0, per * w, torch.zeros_like(per))
    loss = contrib.sum()
    return loss, {
        "value_loss": float(loss.detach()),
        "q_loss": float(contrib[:, ~is_v].sum().detach()),
        "v_loss": float(contrib[:, is_v].sum().detach()),
    }


def awr_weights(advantages: Tensor, beta: float, max_weight: float = 100.0) -> Tensor:
    """``min(exp(A / beta), max_weight)``, detached (STEP-HRL Eq. 13; Multi2 Eq. 6–7).

    Computed as ``exp(min(A / beta, log max_weight))``: identical values, but never overflows to inf.
    STEP-HRL uses beta = 0.95; the cap is not reported there, 100 is IQL's (Kostrikov et al. 2021).
    """
    a = advantages.detach() / beta
    return torch.exp(torch.clamp(a, max=math.log(max_weight)))
