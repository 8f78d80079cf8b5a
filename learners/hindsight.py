"""HISR's segmental process rewards modulated by hindsight importance (HISR Sec. 3.2–3.3), over torch tensors.

Same conventions as ``learners.losses`` (rows are turns or trajectories, masks are bool, padding never reaches a
result or a gradient). Pure: imports torch only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from learners.losses import zero_masked


def sprm_loss(
    segment_scores: Tensor, segment_mask: Tensor, outcome: Tensor, row_weight: Tensor | None = None
) -> Tensor:
    """Segmental process reward model loss ``(R - sum_i r_i)^2``, mean over trajectories (HISR Eq. 3).

    ``segment_scores`` ``[B, S]`` (the MLP head's r_i at the last token of each segment, Eq. 2),
    ``segment_mask`` ``bool[B, S]``, ``outcome`` ``[B]`` (trajectory outcome R). ``row_weight`` ``[B]``: a
    weighted sum instead of the mean (a micro-batch's share of its mini-batch).
    """
    total = zero_masked(segment_scores, segment_mask.to(torch.bool)).sum(dim=-1)
    sq = (outcome.detach() - total) ** 2
    return sq.mean() if row_weight is None else (row_weight * sq).sum()


def hindsight_importance(
    hind_logprobs: Tensor, policy_logprobs: Tensor, mask: Tensor, beta: float = 0.3
) -> Tensor:
    """Turn-level action importance ``z(a_k) = exp(sum_j log r(a_k^j) / (beta |a_k|))`` (HISR Eq. 5–6).

    ``log r = log pi_hind - log pi_policy`` per token (Eq. 5); rows are turns: ``[B, L]`` log-probs and
    ``mask`` -> ``z`` ``[B]``.  z > 1: the action is more likely once the outcome is known, i.e. it mattered.
    beta = 0.3 in HISR (App. "beta and alpha ... set to 0.3").  A row with no token gets z = 1 (neutral).
    Both models are frozen during RL, so the result is detached.
    """
    mask = mask.to(torch.bool)
    log_r = zero_masked(hind_logprobs.detach() - policy_logprobs.detach(), mask)
    n_tok = mask.sum(dim=-1).clamp(min=1).to(log_r.dtype)
    return torch.exp(log_r.sum(dim=-1) / (beta * n_tok))


def segment_sum(turn_values: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """Sum turn values into their segments: ``[B, T]`` values, ``int[B, T]`` ids (-1 = padding) -> ``[B, S]``.

    HISR aggregates segment importance z_s "by adding up turn ratios belonging to the same segment" (Sec. 3.2).
    """
    valid = segment_ids >= 0
    idx = torch.where(valid, segment_ids, 0).long()
    out = torch.zeros(turn_values.shape[0], num_segments, dtype=turn_values.dtype, device=turn_values.device)
    return out.scatter_add(1, idx, zero_masked(turn_values, valid))


def hindsight_modulated_rewards(
    segment_rewards: Tensor, segment_importance: Tensor, segment_mask: Tensor
) -> Tensor:
    """``R_him = (R_hat * z_s) / ||R_hat * z_s||_1`` per trajectory (HISR Eq. 7); the repo's one implementation.

    ``segment_rewards`` (R_hat, the SPRM predictions), ``segment_importance`` (z_s: HISR Eq. 6 summed over each
    segment's turns) and ``segment_mask`` ``bool[B, S]`` -> ``[B, S]``.

    Why L1: Eq. 7 writes only ``||.||``, but HISR's Table 2 case study (bowl -> fridge; tuples (R_hat, z, R_him))
    is reproduced by the L1 norm and not by L2.  R_hat * z = (0.069 * 0.127, 0.118 * 0.392, 0.132 * 0.286,
    0.681 * 0.195) = (0.00876, 0.04626, 0.03775, 0.13280), sum 0.22557, so R_him = (0.039, 0.205, 0.167, 0.589)
    as printed (every segment scaled by the same 1 / 0.22557 = 4.43); the L2 norm 0.14587 would give
    (0.060, 0.317, 0.259, 0.910), up to 0.32 off.  The four cases of Tables 4-5 agree the same way (L1 within
    0.002, the rounding of the printed inputs; L2 off by 0.24-0.34).  Each row's ``|R_him|`` sums to 1 (its R_him too, when no product is negative).

    Edge cases:

    * Masked-out segments (padding) add nothing to the norm and get 0; their input values (even inf/nan) never
      reach the result or its gradient.
    * The norm is the true L1 norm ``sum_i |R_hat_i z_i|`` over valid segments.  With non-negative products (every
      case in the paper; z > 0 always) it equals the paper's ``sum_i R_hat_i z_i``.  If the SPRM predicts a
      negative R_hat, a signed sum could be near zero (rewards blow up) or negative (every segment's sign flips);
      the L1 norm keeps each segment's sign and bounds ``|R_him_i| <= 1``.
    * A zero denominator (all products zero, or no valid segment) gives an all-zero row, not 0/0.
    """
    segment_mask = segment_mask.to(torch.bool)
    # mask both factors before multiplying, so that inf/nan padding cannot give 0 * inf = nan in the gradient
    prod = zero_masked(segment_rewards, segment_mask) * zero_masked(segment_importance, segment_mask)
    norm = prod.abs().sum(dim=-1, keepdim=True)
    return prod / torch.where(norm > 0, norm, torch.ones_like(norm))


def segment_to_turn_rewards(segment_values: Tensor, segment_ids: Tensor) -> Tensor:
    """Place each segment's reward on its last turn: ``[B, S]`` values, ``int[B, T]`` ids (-1 padding) -> ``[B, T]``.

    The SPRM scores a segment at its last token (HISR Eq. 2), so its reward is paid when the segment ends;
    every other turn gets 0.  Segment ids must be non-decreasing along a trajectory (segments are contiguous).
    """
    valid = segment_ids >= 0
    nxt = torch.full_like(segment_ids, -1)
    nxt[:, :-1] = segment_ids[:, 1:]
    is_last = valid & (nxt != segment_ids)
    gathered = segment_values.gather(1, torch.where(valid, segment_ids, 0).long())
    return zero_masked(gathered, is_last)
