"""Advantage estimators: GAE, HiPER's hierarchical advantages (HAE), group baselines (GRPO/RLOO), GiGPO, HIPIF.

Pure math over float64 torch tensors (inputs are converted, outputs are float64 on the input's device). Each
estimator has a per-trajectory form written as a plain loop (the readable reference the tests trust) and, where
the learner needs speed, a batched form over right-padded ``[B, T]`` batches with a bool ``valid_mask``.

Terminated vs truncated (kept apart on purpose): an episode that *terminated* has V(s_T) = 0; one that was
*truncated* (step limit) bootstraps V(s_T) = ``bootstrap_value`` — the critic's estimate at the cut — unless the
algorithm's ``truncation`` is ``"terminal"`` (``Truncation``), where the caller passes 0.

Papers: GAE (Schulman et al. 2015); HiPER (seed 001, Sec. 4.3 Eq. 6-14, Alg. 1); GRPO / RLOO group baselines;
GiGPO (Feng et al. 2025, cited by seeds 001/002); HIPIF (seed 002, Sec. 3.3 Eq. 8-9, Alg. 1 lines 27-32).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

ArrayLike = Tensor | np.ndarray | Sequence[float]
GroupMode = Literal["grpo", "rloo", "mean"]
Truncation = Literal["bootstrap", "terminal"]
"""What a step-limit (or context) cut means to a critic: ``bootstrap``, V(s_T) is the critic's estimate (the episode
would have gone on; Pardo et al. 2018's time-limit bootstrap); ``terminal``, V(s_T) = 0 as after a real end (the
limit is part of the task: an episode not won by then has failed)."""


def _f64(x: ArrayLike) -> Tensor:
    return torch.as_tensor(x, dtype=torch.float64)


def _terminal_value(terminated: bool, bootstrap_value: float) -> float:
    """V(s_T): 0 after a real end of the MDP, the critic's bootstrap after a cut."""
    return 0.0 if terminated else float(bootstrap_value)


# ---------------------------------------------------------------------------------------------------------------
# Returns and flat GAE
# ---------------------------------------------------------------------------------------------------------------


def discounted_returns(rewards: ArrayLike, gamma: float, bootstrap_value: float = 0.0) -> Tensor:
    """G_t = sum_{l>=t} gamma^{l-t} r_l + gamma^{T-t} * bootstrap_value (HiPER Eq. 1's return-to-go), float64[T]."""
    r = _f64(rewards)
    out = torch.zeros_like(r)
    running = float(bootstrap_value)
    for t in reversed(range(r.shape[0])):
        running = float(r[t]) + gamma * running
        out[t] = running
    return out


def gae(
    rewards: ArrayLike,
    values: ArrayLike,
    *,
    gamma: float,
    lam: float,
    terminated: bool,
    bootstrap_value: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """GAE(gamma, lam) for one trajectory of T turns: ``(advantages, returns)``, each float64[T].

    delta_t = r_t + gamma V(s_{t+1}) - V(s_t),  A_t = delta_t + gamma lam A_{t+1};  V(s_T) = 0 if ``terminated``
    else ``bootstrap_value``.  ``returns = advantages + values`` (the critic's lambda-return target).
    """
    r, v = _f64(rewards), _f64(values)
    T = r.shape[0]
    adv = torch.zeros_like(r)
    running = 0.0
    for t in reversed(range(T)):
        v_next = _terminal_value(terminated, bootstrap_value) if t == T - 1 else float(v[t + 1])
        delta = float(r[t]) + gamma * v_next - float(v[t])
        running = delta + gamma * lam * running
        adv[t] = running
    return adv, adv + v


# ---------------------------------------------------------------------------------------------------------------
# HiPER hierarchical advantage estimation (HAE)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HAEResult:
    """Per-turn outputs of HAE, each float64[T] (or [B, T] from the batched form; 0 on padding).

    ``adv_low``: Eq. 6 (action tokens).  ``adv_high``: Eq. 8, non-zero only at boundaries b_k (subgoal tokens;
    the loss multiplies by q_t).  ``adv_switch``: Eq. 10 (switch tokens), 0 at turn 0.  ``target_low``: Eq. 13-14
    (regress V_low(s_t, o_t)).  ``target_high``: Eq. 11 at boundaries, 0 elsewhere (regress V_high(s_{b_k})).
    ``boundary``: bool, True at b_0 = 0 and every turn with q_t = 1.  ``switch_return``: G-bar_t, the discounted
    reward from turn t to the end of its segment plus the discounted V_high at the next boundary (the return the
    switch decision at t leads to; the HiPER authors' switch target, ``switch_adv="return"`` in ``algos.hiper``).
    """

    adv_low: Tensor
    adv_high: Tensor
    adv_switch: Tensor
    target_low: Tensor
    target_high: Tensor
    boundary: Tensor
    switch_return: Tensor


def hierarchical_advantages(
    rewards: ArrayLike,
    v_low: ArrayLike,
    v_low_prev: ArrayLike,
    v_high: ArrayLike,
    switch: ArrayLike,
    p_switch: ArrayLike,
    *,
    gamma: float,
    lam_low: float,
    lam_high: float,
    terminated: bool,
    bootstrap_value: float = 0.0,
    low_bootstrap: str = "v_high",
) -> HAEResult:
    """HiPER's HAE (seed 001, Sec. 4.3, Eq. 6-14) for one trajectory of T turns; plain loops, the reference.

    Inputs (float64[T] unless noted): ``v_low[t]`` = V_low(s_t, o_t); ``v_low_prev[t]`` = V_low(s_t, o_{t-1})
    (unused at t = 0); ``v_high[t]`` = V_high(s_t); ``switch[t]`` = q_t (bool/0-1; turn 0 is always a boundary);
    ``p_switch[t]`` = beta_t = pi(q_t = 1 | s_t, o_{t-1}).  V_high(s_T) = 0 if ``terminated`` else
    ``bootstrap_value``.

    Segments (example T = 5, q = [1, 0, 0, 1, 0], so b_0 = 0, b_1 = 3, b_2 = T = 5)::

        turn t        0         1         2    |    3         4    |  T = 5
        q_t           1         0         0    |    1         0    |
                   [------ segment k=0 -------] [--- segment k=1 --]
        low  (Eq. 6-7)  V_next:  V_low(s1,o0)  V_low(s2,o0)  V_high(s3) | V_low(s4,o1)  V_high(s5)
                  GAE(lam_low) runs inside a segment only; its last step bootstraps to V_high at the next
                  boundary, so no low-level credit crosses a boundary.
        high (Eq. 8)  one macro-step per segment, at t = b_k only:
                  r~_k = sum_{t=b_k}^{b_{k+1}-1} gamma^{t-b_k} r_t,   gamma~_k = gamma^{b_{k+1}-b_k}
                  delta_k = r~_k + gamma~_k V_high(s_{b_{k+1}}) - V_high(s_{b_k})
                  A_high[b_k] = delta_k + gamma~_k lam_high A_high[b_{k+1}]   (A_high[b_K] = 0)
        switch (Eq. 9-10)  A_switch[t] = (q_t - beta_t)(V_high(s_t) - V_low(s_t, o_{t-1})),  t >= 1; 0 at t = 0.

    ``low_bootstrap="lambda"`` replaces V_high(s_{b_{k+1}}) in the low level's last step (and its target) by the high
    level's lambda-return there, V_high(s_{b_{k+1}}) + A_high[b_{k+1}]: equal in expectation once V_high is fitted,
    but it carries the outcome back into earlier segments while V_high is still cold (the episode's end, b_K = T,
    keeps its terminal or bootstrap value).

    Critic targets: y_low[t] = r_t + gamma V_next[t] (Eq. 13-14, the same V_next as Eq. 7);
    y_high[b_k] = r~_k + gamma~_k V_high(s_{b_{k+1}}) (Eq. 11).  Values are treated as constants (sg).
    Switch return (every t, b_k <= t < b_{k+1}): G-bar_t = sum_{l=t}^{b_{k+1}-1} gamma^{l-t} r_l
    + gamma^{b_{k+1}-t} V_high(s_{b_{k+1}}); at a boundary it equals y_high.
    """
    if low_bootstrap not in ("v_high", "lambda"):
        raise ValueError(f"low_bootstrap must be 'v_high' or 'lambda', got {low_bootstrap!r}")
    r = _f64(rewards).tolist()
    vl, vlp, vh = _f64(v_low).tolist(), _f64(v_low_prev).tolist(), _f64(v_high).tolist()
    beta = _f64(p_switch).tolist()
    T = len(r)
    boundary = torch.as_tensor(switch).to(torch.bool).reshape(-1).clone()
    if T:
        boundary[0] = True  # b_0 = 0
    starts = [t for t in range(T) if bool(boundary[t])]
    ends = [*starts[1:], T]  # b_{k+1}; b_K = T
    v_high_T = _terminal_value(terminated, bootstrap_value)

    def v_high_at(t: int) -> float:
        return vh[t] if t < T else v_high_T

    adv_high, target_high, switch_return = [0.0] * T, [0.0] * T, [0.0] * T
    running = 0.0
    for b, e in reversed(list(zip(starts, ends, strict=True))):
        ret = v_high_at(e)
        for t in reversed(range(b, e)):
            ret = r[t] + gamma * ret
            switch_return[t] = ret  # G-bar_t
        seg_reward = sum(gamma ** (t - b) * r[t] for t in range(b, e))  # r~_k
        seg_discount = gamma ** (e - b)  # gamma~_k
        target_high[b] = seg_reward + seg_discount * v_high_at(e)  # Eq. 11
        delta = target_high[b] - vh[b]  # Eq. 8 (segment TD residual)
        running = delta + seg_discount * lam_high * running  # Eq. 8 (GAE over segments)
        adv_high[b] = running

    def segment_end_value(e: int) -> float:
        if low_bootstrap == "lambda" and e < T:
            return vh[e] + adv_high[e]  # the high level's lambda-return at b_{k+1}
        return v_high_at(e)

    adv_low, target_low = [0.0] * T, [0.0] * T
    for b, e in zip(starts, ends, strict=True):
        running = 0.0
        for t in reversed(range(b, e)):
            v_next = segment_end_value(e) if t == e - 1 else vl[t + 1]  # Eq. 7
            target_low[t] = r[t] + gamma * v_next  # Eq. 13-14
            delta = target_low[t] - vl[t]  # Eq. 6 (TD residual)
            running = delta + gamma * lam_low * running  # Eq. 6 (GAE sum within the segment)
            adv_low[t] = running

    adv_switch = [0.0] * T  # 0 at t = 0: there is no o_{-1} to keep
    for t in range(1, T):
        q_t = 1.0 if bool(boundary[t]) else 0.0
        adv_switch[t] = (q_t - beta[t]) * (vh[t] - vlp[t])  # Eq. 9-10

    def out(x: list[float]) -> Tensor:
        return torch.tensor(x, dtype=torch.float64, device=boundary.device)

    return HAEResult(
        adv_low=out(adv_low),
        adv_high=out(adv_high),
        adv_switch=out(adv_switch),
        target_low=out(target_low),
        target_high=out(target_high),
        boundary=boundary,
        switch_return=out(switch_return),
    )


# ---------------------------------------------------------------------------------------------------------------
# Group baselines: GRPO, RLOO, GiGPO, HIPIF
# ---------------------------------------------------------------------------------------------------------------


def _group_index(group_ids: Tensor | np.ndarray | Sequence[Hashable]) -> Tensor:
    """Dense int64 index 0..G-1 per element, in order of first appearance."""
    ids = group_ids.tolist() if isinstance(group_ids, Tensor | np.ndarray) else list(group_ids)
    first_seen: dict[Hashable, int] = {}
    return torch.tensor([first_seen.setdefault(g, len(first_seen)) for g in ids], dtype=torch.int64)


def group_advantages(
    returns: ArrayLike,
    group_ids: Tensor | np.ndarray | Sequence[Hashable],
    *,
    mode: GroupMode,
    eps: float = 1e-6,
) -> Tensor:
    """Critic-free group baselines over a flat float64[N] of returns; ``group_ids`` says who shares a baseline.

    ``"grpo"``: (R_i - mean_g) / (std_g + eps), std unbiased (n - 1).  ``"rloo"``: R_i - mean of the other n - 1
    members = n/(n-1) (R_i - mean_g).  ``"mean"``: R_i - mean_g (GiGPO's F_norm = 1 option; Dr.GRPO, Liu et
    al. 2025, which drops the std division).  A group of one has no baseline and gets 0.
    """
    if mode not in ("grpo", "rloo", "mean"):
        raise ValueError(f"unknown group advantage mode {mode!r}")
    R = _f64(returns).reshape(-1)
    idx = _group_index(group_ids).to(R.device)
    if idx.numel() != R.numel():
        raise ValueError(f"{R.numel()} returns but {idx.numel()} group ids")
    if R.numel() == 0:
        return R.clone()
    G = int(idx.max()) + 1
    count = R.new_zeros(G).index_add_(0, idx, torch.ones_like(R))
    mean = R.new_zeros(G).index_add_(0, idx, R) / count
    dev = R - mean[idx]
    n = count[idx]
    if mode == "grpo":
        var = R.new_zeros(G).index_add_(0, idx, dev**2) / (count - 1).clamp(min=1)
        adv = dev / (var.sqrt()[idx] + eps)
    elif mode == "rloo":
        adv = dev * n / (n - 1).clamp(min=1)
    else:
        adv = dev
    return torch.where(n > 1, adv, torch.zeros_like(adv))


def equal_outcome_mask(
    outcomes: ArrayLike,
    group_ids: Tensor | np.ndarray | Sequence[Hashable],
    *,
    atol: float = 1e-9,
) -> Tensor:
    """bool[N]: True for every member of a group whose outcomes are all equal (max − min <= ``atol`` in every
    column). ``outcomes``: float[N] or float[N, K] (K outcome measures per member, e.g. won and the env return).

    Such a group carries no signal about the task: its returns differ only by shaping terms (format penalties), which
    a std normalisation would blow up to full-strength advantages. DAPO (Yu et al. 2025) drops these groups by
    dynamic sampling; ``algos.grpo`` gives them 0 (``equal_outcome_groups="skip"``). A group of one is all-equal.
    """
    X = _f64(outcomes)
    X = X[:, None] if X.dim() == 1 else X
    idx = _group_index(group_ids).to(X.device)
    if idx.numel() != X.shape[0]:
        raise ValueError(f"{X.shape[0]} outcomes but {idx.numel()} group ids")
    if X.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool, device=X.device)
    G, K = int(idx.max()) + 1, X.shape[1]
    scatter = idx[:, None].expand(-1, K)
    hi = X.new_full((G, K), -torch.inf).scatter_reduce_(0, scatter, X, reduce="amax")
    lo = X.new_full((G, K), torch.inf).scatter_reduce_(0, scatter, X, reduce="amin")
    return ((hi - lo) <= atol).all(dim=1)[idx]


def gigpo_advantages(
    step_rewards: Sequence[ArrayLike],
    anchor_keys: Sequence[Sequence[Hashable]],
    group_ids: Sequence[Hashable],
    *,
    gamma: float,
    step_weight: float = 1.0,
    mode: GroupMode = "grpo",
    eps: float = 1e-6,
    episode_off: ArrayLike | None = None,
) -> list[Tensor]:
    """GiGPO (Feng et al. 2025): A_t = A^E(tau) + ``step_weight`` * A^S(t) per step, one float64[T_i] per trajectory.

    ``step_rewards[i]``: r_t of trajectory i; ``anchor_keys[i][t]``: the (normalised) observation step t acted
    from; ``group_ids[i]``: its episode group (same task and initial state).
    Episode level: R(tau_i) = sum_t r_t, group-normalised across the episode group (``mode``, as in
    :func:`group_advantages`).  Step level: discounted return R_t = sum_{l>=t} gamma^{l-t} r_l, normalised within
    the anchor-state group = every step, from any trajectory of the same episode group (repeat visits included),
    whose anchor key is equal.  Anchor groups of one step get A^S = 0.  ``episode_off``: bool[N], trajectories whose
    A^E is set to 0 (``algos.gigpo``'s groups whose outcomes are all equal).
    """
    if not len(step_rewards) == len(anchor_keys) == len(group_ids):
        raise ValueError("step_rewards, anchor_keys and group_ids need one entry per trajectory")
    rewards = [_f64(r) for r in step_rewards]
    for r, keys in zip(rewards, anchor_keys, strict=True):
        if r.numel() != len(keys):
            raise ValueError(f"{r.numel()} rewards but {len(keys)} anchor keys")
    episode_adv = group_advantages(
        torch.stack([r.sum() for r in rewards]) if rewards else torch.zeros(0, dtype=torch.float64),
        list(group_ids),
        mode=mode,
        eps=eps,
    )
    if episode_off is not None:
        episode_adv = torch.where(torch.as_tensor(episode_off, dtype=torch.bool), 0.0, episode_adv)
    step_adv = anchor_step_advantages(rewards, anchor_keys, group_ids, gamma=gamma, mode=mode, eps=eps)
    return [episode_adv[i] + step_weight * a for i, a in enumerate(step_adv)]


def anchor_step_advantages(
    step_rewards: Sequence[ArrayLike],
    anchor_keys: Sequence[Sequence[Hashable]],
    group_ids: Sequence[Hashable],
    *,
    gamma: float,
    mode: GroupMode = "grpo",
    eps: float = 1e-6,
) -> list[Tensor]:
    """GiGPO's step-level term A^S alone, one float64[T_i] per trajectory: the discounted return
    R_t = sum_{l>=t} gamma^{l-t} r_l normalised (``mode``) among every step of the same episode group taken from an
    equal anchor key (repeat visits included); anchor groups of one step get 0."""
    rewards = [_f64(r) for r in step_rewards]
    step_returns = torch.cat(
        [discounted_returns(r, gamma) for r in rewards] or [torch.zeros(0, dtype=torch.float64)]
    )
    step_groups = [(g, key) for g, keys in zip(group_ids, anchor_keys, strict=True) for key in keys]
    step_adv = group_advantages(step_returns, step_groups, mode=mode, eps=eps)
    return list(torch.split(step_adv, [r.numel() for r in rewards]))


def hipif_step_advantages(
    env_returns: ArrayLike,
    process_rewards: Sequence[ArrayLike],
    group_ids: Sequence[Hashable],
    *,
    eps: float = 1e-6,
) -> list[Tensor]:
    """HIPIF step advantages (seed 002, Eq. 8-9; Alg. 1 lines 27-32), one float64[T_i] per trajectory.

    S_t^(m) = R_env^(m) + r_t^proc,(m) (Eq. 8: the terminal outcome broadcast to every step plus that step's
    process penalties), then A_t = (S_t - mu_S) / (sigma_S + eps) (Eq. 9) where mu_S, sigma_S run over *all
    stored steps of all trajectories* sampled for the same instruction (the group; Alg. 1 line 32).  sigma_S is
    the unbiased std, as in :func:`group_advantages` "grpo"; a group holding a single step gets 0.
    """
    R_env = _f64(env_returns).reshape(-1)
    proc = [_f64(p) for p in process_rewards]
    if not R_env.numel() == len(proc) == len(group_ids):
        raise ValueError("env_returns, process_rewards and group_ids need one entry per trajectory")
    scores = torch.cat(
        [R_env[m] + p for m, p in enumerate(proc)] or [torch.zeros(0, dtype=torch.float64)]
    )  # Eq. 8
    step_groups = [g for g, p in zip(group_ids, proc, strict=True) for _ in range(p.numel())]
    adv = group_advantages(scores, step_groups, mode="grpo", eps=eps)  # Eq. 9
    return list(torch.split(adv, [p.numel() for p in proc]))
