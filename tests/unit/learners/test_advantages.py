"""Tests for learners/advantages.py: hand-computed goldens, batched-vs-loop references, invariances, signs."""

from __future__ import annotations

import math

import pytest
import torch

from learners.advantages import (
    HAEResult,
    discounted_returns,
    equal_outcome_mask,
    gae,
    gigpo_advantages,
    group_advantages,
    hierarchical_advantages,
    hipif_step_advantages,
)

TOL = dict(rtol=0.0, atol=1e-10)


def t64(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def close(actual: torch.Tensor, expected) -> None:
    """Float64 comparison at the spec's tolerance (1e-10 absolute)."""
    torch.testing.assert_close(
        actual, expected if isinstance(expected, torch.Tensor) else t64(expected), **TOL
    )


# ---------------------------------------------------------------------------------------------------------------
# discounted returns and GAE
# ---------------------------------------------------------------------------------------------------------------


def test_discounted_returns_golden() -> None:
    # gamma = 0.5, r = [1, 0, 2], bootstrap 4:
    # G2 = 2 + 0.5*4 = 4;  G1 = 0 + 0.5*4 = 2;  G0 = 1 + 0.5*2 = 2
    close(discounted_returns(t64([1.0, 0.0, 2.0]), 0.5, bootstrap_value=4.0), [2.0, 2.0, 4.0])
    # without bootstrap: G2 = 2, G1 = 1, G0 = 1.5
    close(discounted_returns(t64([1.0, 0.0, 2.0]), 0.5), [1.5, 1.0, 2.0])


# gamma = 0.9, lam = 0.8 (gamma*lam = 0.72), r = [1, 0, 2], V = [0.5, 1.0, 1.5]
R3, V3 = [1.0, 0.0, 2.0], [0.5, 1.0, 1.5]


def test_gae_golden_terminated() -> None:
    # delta2 = 2 + 0.9*0 - 1.5 = 0.5          A2 = 0.5
    # delta1 = 0 + 0.9*1.5 - 1.0 = 0.35       A1 = 0.35 + 0.72*0.5 = 0.71
    # delta0 = 1 + 0.9*1.0 - 0.5 = 1.4        A0 = 1.4 + 0.72*0.71 = 1.9112
    adv, ret = gae(t64(R3), t64(V3), gamma=0.9, lam=0.8, terminated=True)
    close(adv, [1.9112, 0.71, 0.5])
    close(ret, [1.9112 + 0.5, 0.71 + 1.0, 0.5 + 1.5])  # returns = A + V


def test_gae_golden_truncated_bootstraps() -> None:
    # V(s_3) = 2.0:  delta2 = 2 + 0.9*2 - 1.5 = 2.3        A2 = 2.3
    # A1 = 0.35 + 0.72*2.3 = 2.006;  A0 = 1.4 + 0.72*2.006 = 2.84432
    adv, _ = gae(t64(R3), t64(V3), gamma=0.9, lam=0.8, terminated=False, bootstrap_value=2.0)
    close(adv, [2.84432, 2.006, 2.3])
    # terminated ignores bootstrap_value entirely
    adv_t, _ = gae(t64(R3), t64(V3), gamma=0.9, lam=0.8, terminated=True, bootstrap_value=2.0)
    close(adv_t, [1.9112, 0.71, 0.5])


def test_gae_terminated_vs_truncated_differ_only_by_bootstrap() -> None:
    g = torch.Generator().manual_seed(0)
    r, v = torch.randn(7, generator=g, dtype=torch.float64), torch.randn(7, generator=g, dtype=torch.float64)
    gamma, lam, boot = 0.97, 0.9, 1.7
    a_term, _ = gae(r, v, gamma=gamma, lam=lam, terminated=True)
    a_trunc0, _ = gae(r, v, gamma=gamma, lam=lam, terminated=False, bootstrap_value=0.0)
    a_trunc, _ = gae(r, v, gamma=gamma, lam=lam, terminated=False, bootstrap_value=boot)
    close(a_trunc0, a_term)
    # the bootstrap enters delta_{T-1} as gamma*boot and propagates back with (gamma*lam)^(T-1-t)
    k = torch.arange(6, -1, -1, dtype=torch.float64)
    close(a_trunc - a_term, gamma * boot * (gamma * lam) ** k)


def test_gae_lambda_one_is_monte_carlo() -> None:
    g = torch.Generator().manual_seed(1)
    r, v = torch.randn(9, generator=g, dtype=torch.float64), torch.randn(9, generator=g, dtype=torch.float64)
    adv, ret = gae(r, v, gamma=0.95, lam=1.0, terminated=False, bootstrap_value=0.3)
    mc = discounted_returns(r, 0.95, bootstrap_value=0.3)
    close(adv, mc - v)
    close(ret, mc)


def test_gae_sign_reward_raise_increases_advantage() -> None:
    base, _ = gae(t64(R3), t64(V3), gamma=0.9, lam=0.8, terminated=True)
    raised, _ = gae(t64([1.0, 1.0, 2.0]), t64(V3), gamma=0.9, lam=0.8, terminated=True)
    # +1 at t=1 raises A1 by exactly 1 and A0 by gamma*lam = 0.72; A2 unchanged
    close(raised - base, [0.72, 1.0, 0.0])


def _random_padded(B: int, T: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0] = T  # one full row
    valid = torch.arange(T)[None, :] < lengths[:, None]
    rnd = lambda: torch.randn(B, T, generator=g, dtype=torch.float64)  # noqa: E731
    terminated = torch.rand(B, generator=g) < 0.5
    boot = torch.randn(B, generator=g, dtype=torch.float64)
    return lengths, valid, rnd, terminated, boot


# ---------------------------------------------------------------------------------------------------------------
# HiPER HAE
# ---------------------------------------------------------------------------------------------------------------

# 5 turns, q = [0*, 0, 0, 1, 0] (*turn 0 is a boundary whatever the input says) -> segments [0,3) and [3,5).
# gamma = 0.9, lam_low = 0.5 (gamma*lam_low = 0.45), lam_high = 0.8.
HAE_IN = dict(
    rewards=[0.0, 1.0, 0.0, 0.0, 2.0],
    v_low=[0.5, 1.0, 0.2, 0.4, 1.5],
    v_low_prev=[7.0, 1.0, 0.2, 0.7, 1.5],  # t=0 entry must be ignored
    v_high=[0.6, 0.3, 0.1, 0.8, 0.9],
    switch=[0, 0, 0, 1, 0],
    p_switch=[0.9, 0.2, 0.1, 0.4, 0.3],
)
HAE_HP = dict(gamma=0.9, lam_low=0.5, lam_high=0.8)


def _hae(**kw) -> HAEResult:
    inp = {k: (torch.tensor(v, dtype=torch.bool) if k == "switch" else t64(v)) for k, v in HAE_IN.items()}
    return hierarchical_advantages(**inp, **{**HAE_HP, **kw})


def test_hae_golden_two_segments_terminated() -> None:
    res = _hae(terminated=True)
    assert res.boundary.tolist() == [True, False, False, True, False]
    # Low level (Eq. 6-7, 13-14). Segment 1 = turns 3,4; ends at T=5, terminated -> V_high(s_5) = 0.
    #   t=4: V_next = V_high(s_5) = 0;     y = 2 + 0.9*0 = 2.0;    delta = 2.0 - 1.5 = 0.5;   A = 0.5
    #   t=3: V_next = V_low(s_4) = 1.5;    y = 0 + 0.9*1.5 = 1.35; delta = 1.35 - 0.4 = 0.95; A = 0.95 + 0.45*0.5 = 1.175
    # Segment 0 = turns 0,1,2; its last turn bootstraps to V_high(s_3) = 0.8.
    #   t=2: y = 0 + 0.9*0.8 = 0.72; delta = 0.72 - 0.2 = 0.52; A = 0.52
    #   t=1: y = 1 + 0.9*0.2 = 1.18; delta = 1.18 - 1.0 = 0.18; A = 0.18 + 0.45*0.52 = 0.414
    #   t=0: y = 0 + 0.9*1.0 = 0.9;  delta = 0.9 - 0.5 = 0.4;   A = 0.4 + 0.45*0.414 = 0.5863
    close(res.adv_low, [0.5863, 0.414, 0.52, 1.175, 0.5])
    close(res.target_low, [0.9, 1.18, 0.72, 1.35, 2.0])
    # High level (Eq. 8, 11).
    #   k=1: r~ = 0 + 0.9*2 = 1.8;  gamma~ = 0.9^2 = 0.81;  y = 1.8 + 0.81*0 = 1.8;  delta = 1.8 - 0.8 = 1.0;  A = 1.0
    #   k=0: r~ = 0 + 0.9*1 + 0.81*0 = 0.9;  gamma~ = 0.9^3 = 0.729;  y = 0.9 + 0.729*0.8 = 1.4832
    #        delta = 1.4832 - 0.6 = 0.8832;  A = 0.8832 + 0.729*0.8*1.0 = 1.4664
    close(res.adv_high, [1.4664, 0.0, 0.0, 1.0, 0.0])
    close(res.target_high, [1.4832, 0.0, 0.0, 1.8, 0.0])
    # Switch (Eq. 9-10): (q_t - beta_t)(V_high(s_t) - V_low(s_t, o_{t-1})), 0 at t=0
    #   t=1: (0-0.2)(0.3-1.0) = 0.14;  t=2: (0-0.1)(0.1-0.2) = 0.01
    #   t=3: (1-0.4)(0.8-0.7) = 0.06;  t=4: (0-0.3)(0.9-1.5) = 0.18
    close(res.adv_switch, [0.0, 0.14, 0.01, 0.06, 0.18])


def test_hae_golden_low_bootstrap_lambda() -> None:
    res = _hae(terminated=True, low_bootstrap="lambda")
    # Segment 0's last turn bootstraps to the high level's lambda-return at b_1 = 3:
    #   V_high(s_3) + A_high[3] = 0.8 + 1.0 = 1.8 (A_high from the golden test above, unchanged)
    #   t=2: y = 0 + 0.9*1.8 = 1.62; delta = 1.62 - 0.2 = 1.42; A = 1.42
    #   t=1: y = 1.18; delta = 0.18; A = 0.18 + 0.45*1.42 = 0.819
    #   t=0: y = 0.9;  delta = 0.4;  A = 0.4 + 0.45*0.819 = 0.76855
    # Segment 1 ends at T: its terminal value 0 stays, so turns 3, 4 are unchanged.
    close(res.adv_low, [0.76855, 0.819, 1.42, 1.175, 0.5])
    close(res.target_low, [0.9, 1.18, 1.62, 1.35, 2.0])
    close(res.adv_high, [1.4664, 0.0, 0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="low_bootstrap"):
        _hae(terminated=True, low_bootstrap="mc")


def test_hae_golden_truncated() -> None:
    res = _hae(terminated=False, bootstrap_value=1.0)  # V_high(s_5) = 1.0
    # Segment 1 low: t=4: y = 2 + 0.9*1.0 = 2.9, delta = 1.4, A = 1.4;  t=3: A = 0.95 + 0.45*1.4 = 1.58
    # Segment 0 low is unchanged (it bootstraps to V_high(s_3), not to s_5).
    close(res.adv_low, [0.5863, 0.414, 0.52, 1.58, 1.4])
    close(res.target_low, [0.9, 1.18, 0.72, 1.35, 2.9])
    # High: k=1: y = 1.8 + 0.81*1.0 = 2.61, delta = 2.61 - 0.8 = 1.81, A = 1.81
    #       k=0: A = 0.8832 + 0.5832*1.81 = 1.938792 (y unchanged: 1.4832)
    close(res.adv_high, [1.938792, 0.0, 0.0, 1.81, 0.0])
    close(res.target_high, [1.4832, 0.0, 0.0, 2.61, 0.0])
    close(res.adv_switch, [0.0, 0.14, 0.01, 0.06, 0.18])  # switch never sees the end of the episode


def test_hae_truncated_with_zero_bootstrap_equals_terminated() -> None:
    a, b = _hae(terminated=True), _hae(terminated=False, bootstrap_value=0.0)
    for name in ("adv_low", "adv_high", "adv_switch", "target_low", "target_high"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), **TOL)


def _random_traj(T: int, seed: int, p_switch: float = 0.4):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda: torch.randn(T, generator=g, dtype=torch.float64)  # noqa: E731
    q = torch.rand(T, generator=g) < p_switch
    return dict(
        rewards=rnd(),
        v_low=rnd(),
        v_low_prev=rnd(),
        v_high=rnd(),
        switch=q,
        p_switch=torch.rand(T, generator=g, dtype=torch.float64),
    )


def test_hae_one_segment_reduces_to_gae() -> None:
    T = 8
    inp = _random_traj(T, seed=3)
    inp["switch"] = torch.zeros(T, dtype=torch.bool)  # only turn 0 is a boundary
    inp["v_high"] = inp["v_low"].clone()
    for terminated, boot in ((True, 0.0), (False, 0.7)):
        res = hierarchical_advantages(
            **inp, gamma=0.95, lam_low=0.9, lam_high=0.8, terminated=terminated, bootstrap_value=boot
        )
        adv, _ = gae(
            inp["rewards"], inp["v_low"], gamma=0.95, lam=0.9, terminated=terminated, bootstrap_value=boot
        )
        torch.testing.assert_close(res.adv_low, adv, **TOL)
        # one macro-step: A_high[0] = G_0 + gamma^T V(s_T) - V_high(s_0) = GAE(lam=1) at t=0
        adv_mc, _ = gae(
            inp["rewards"], inp["v_low"], gamma=0.95, lam=1.0, terminated=terminated, bootstrap_value=boot
        )
        assert res.boundary.tolist() == [True] + [False] * (T - 1)
        close(res.adv_high[0], float(adv_mc[0]))
        assert torch.all(res.adv_high[1:] == 0) and torch.all(res.target_high[1:] == 0)


def test_hae_every_turn_a_boundary_gives_high_level_gae() -> None:
    # segments of length 1: r~_k = r_t, gamma~_k = gamma -> Eq. 8 is flat GAE(lam_high) on V_high
    T = 7
    inp = _random_traj(T, seed=4)
    inp["switch"] = torch.ones(T, dtype=torch.bool)
    res = hierarchical_advantages(
        **inp, gamma=0.9, lam_low=0.3, lam_high=0.7, terminated=False, bootstrap_value=0.4
    )
    adv, _ = gae(inp["rewards"], inp["v_high"], gamma=0.9, lam=0.7, terminated=False, bootstrap_value=0.4)
    torch.testing.assert_close(res.adv_high, adv, **TOL)
    # and each low-level step bootstraps straight to V_high(s_{t+1})
    v_high_next = torch.cat([inp["v_high"][1:], t64([0.4])])
    torch.testing.assert_close(res.adv_low, inp["rewards"] + 0.9 * v_high_next - inp["v_low"], **TOL)


def test_hae_lambda_one_is_segment_and_episode_monte_carlo() -> None:
    # Appendix A.2/A.3: lam_low = 1 -> A_low[t] = sum_{l=t}^{e-1} g^{l-t} r_l + g^{e-t} V_high(s_e) - V_low(s_t)
    # lam_high = 1 -> A_high[b_k] = G_{b_k} (incl. g^{T-b_k} V(s_T)) - V_high(s_{b_k})   (Eq. 25)
    T, gamma, boot = 9, 0.9, -0.6
    inp = _random_traj(T, seed=5)
    res = hierarchical_advantages(
        **inp, gamma=gamma, lam_low=1.0, lam_high=1.0, terminated=False, bootstrap_value=boot
    )
    r, vl, vh = inp["rewards"], inp["v_low"], inp["v_high"]
    b = res.boundary
    G = discounted_returns(r, gamma, bootstrap_value=boot)
    for t in range(T):
        e = next((u for u in range(t + 1, T) if b[u]), T)
        v_e = float(vh[e]) if e < T else boot
        seg = sum(gamma ** (u - t) * float(r[u]) for u in range(t, e)) + gamma ** (e - t) * v_e
        close(res.adv_low[t], seg - float(vl[t]))
        if b[t]:
            close(res.adv_high[t], float(G[t] - vh[t]))
        else:
            assert float(res.adv_high[t]) == 0.0


def test_hae_signs() -> None:
    base = _hae(terminated=True)
    HAE_IN_raised = {**HAE_IN, "rewards": [0.0, 1.0, 0.5, 0.0, 2.0]}  # +0.5 at t=2 (segment 0)
    inp = {
        k: (torch.tensor(v, dtype=torch.bool) if k == "switch" else t64(v)) for k, v in HAE_IN_raised.items()
    }
    raised = hierarchical_advantages(**inp, **HAE_HP, terminated=True)
    # low level: A_low[2] rises by exactly 0.5, earlier turns in the segment by (gamma*lam_low)^k * 0.5,
    # later segments unchanged (no low-level credit crosses a boundary)
    close(raised.adv_low - base.adv_low, [0.45**2 * 0.5, 0.45 * 0.5, 0.5, 0.0, 0.0])
    # high level: the segment's boundary gets gamma^2 * 0.5 = 0.405 more (r~_0 grows), segment 1 unchanged
    close(raised.adv_high - base.adv_high, [0.405, 0.0, 0.0, 0.0, 0.0])
    # switch: switching (q=1) where V_high > V_low(prev) is positive; keeping there is negative
    s = hierarchical_advantages(
        rewards=t64([0.0, 0.0]),
        v_low=t64([0.0, 0.0]),
        v_low_prev=t64([0.0, 0.0]),
        v_high=t64([0.0, 1.0]),
        switch=torch.tensor([True, True]),
        p_switch=t64([0.5, 0.5]),
        **HAE_HP,
        terminated=True,
    )
    k = hierarchical_advantages(
        rewards=t64([0.0, 0.0]),
        v_low=t64([0.0, 0.0]),
        v_low_prev=t64([0.0, 0.0]),
        v_high=t64([0.0, 1.0]),
        switch=torch.tensor([True, False]),
        p_switch=t64([0.5, 0.5]),
        **HAE_HP,
        terminated=True,
    )
    assert float(s.adv_switch[1]) == pytest.approx(0.5, abs=1e-12)  # (1 - 0.5) * (1 - 0)
    assert float(k.adv_switch[1]) == pytest.approx(-0.5, abs=1e-12)  # (0 - 0.5) * (1 - 0)


def _pad_stack(rows: list[dict], T: int, valid: torch.Tensor, garbage: float | None) -> dict:
    out = {}
    for name in rows[0]:
        dtype = torch.bool if name == "switch" else torch.float64
        fill = True if name == "switch" else (0.0 if garbage is None else garbage)
        mat = torch.full((len(rows), T), fill, dtype=dtype)
        for b, row in enumerate(rows):
            n = row[name].shape[0]
            mat[b, :n] = row[name]
        out[name] = mat
    return out


# ---------------------------------------------------------------------------------------------------------------
# Group baselines
# ---------------------------------------------------------------------------------------------------------------


def test_group_advantages_golden_grpo_rloo() -> None:
    R = t64([1.0, 0.0, 2.0, 5.0, 3.0])
    ids = ["a", "a", "a", "b", "c"]  # "b", "c" singletons -> 0
    # group a: mean = 1, deviations [0, -1, 1], unbiased var = (0 + 1 + 1)/2 = 1, std = 1
    grpo = group_advantages(R, ids, mode="grpo", eps=1e-6)
    close(grpo, [0.0, -1 / (1 + 1e-6), 1 / (1 + 1e-6), 0.0, 0.0])
    # rloo: R_i - mean(others): 1 - (0+2)/2 = 0;  0 - (1+2)/2 = -1.5;  2 - (1+0)/2 = 1.5
    rloo = group_advantages(R, ids, mode="rloo")
    close(rloo, [0.0, -1.5, 1.5, 0.0, 0.0])
    close(group_advantages(R, ids, mode="mean"), [0.0, -1.0, 1.0, 0.0, 0.0])
    # int tensor ids give the same answer
    close(group_advantages(R, torch.tensor([7, 7, 7, 1, 2]), mode="rloo"), rloo)
    with pytest.raises(ValueError):
        group_advantages(R, ids, mode="ppo")  # type: ignore[arg-type]


def test_equal_outcome_mask_golden() -> None:
    """Groups a (all 0), b (0 and 1), c (one member), d (columns won, env return: won equal, returns 0.5 vs 0)."""
    ids = ["a", "a", "a", "b", "b", "c"]
    mask = equal_outcome_mask(t64([0.0, 0.0, 0.0, 0.0, 1.0, 1.0]), ids)
    assert mask.tolist() == [True, True, True, False, False, True]  # a group of one is all-equal
    two = equal_outcome_mask(t64([[0.0, 0.0], [0.0, 0.5], [1.0, 1.0], [1.0, 1.0]]), ["d", "d", "e", "e"])
    assert two.tolist() == [False, False, True, True]  # d differs in its second column only
    assert equal_outcome_mask(t64([0.3, 0.1 + 0.2]), [0, 0]).tolist() == [True, True]  # within atol
    assert equal_outcome_mask(t64([]), []).numel() == 0
    with pytest.raises(ValueError):
        equal_outcome_mask(t64([0.0, 1.0]), ["a"])


def _group_loop(R: list[float], ids: list, mode: str, eps: float) -> list[float]:
    out = []
    for i, g in enumerate(ids):
        members = [R[j] for j in range(len(R)) if ids[j] == g]
        n = len(members)
        if n == 1:
            out.append(0.0)
            continue
        mean = sum(members) / n
        if mode == "grpo":
            std = math.sqrt(sum((x - mean) ** 2 for x in members) / (n - 1))
            out.append((R[i] - mean) / (std + eps))
        else:
            out.append(R[i] - (sum(members) - R[i]) / (n - 1))
    return out


@pytest.mark.parametrize("mode", ["grpo", "rloo"])
def test_group_advantages_invariances(mode: str) -> None:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 6, (40,), generator=g)
    R = torch.randn(40, generator=g, dtype=torch.float64)
    adv = group_advantages(R, ids, mode=mode)
    close(adv, _group_loop(R.tolist(), ids.tolist(), mode, 1e-6))
    for gid in ids.unique():
        assert abs(float(adv[ids == gid].sum())) < 1e-10  # zero-sum within each group
    perm = torch.randperm(40, generator=g)
    torch.testing.assert_close(group_advantages(R[perm], ids[perm], mode=mode), adv[perm], **TOL)
    # sign: the best member of a group gets a positive advantage, the worst a negative one
    for gid in ids.unique():
        members = (ids == gid).nonzero().flatten()
        if len(members) > 1:
            assert adv[members[R[members].argmax()]] > 0 > adv[members[R[members].argmin()]]


def test_gigpo_golden() -> None:
    # group "g": three trajectories; group "h": one trajectory that shares anchor "s0" (must not pool with "g")
    rewards = [t64([0.0, 0.0, 1.0]), t64([0.0, 0.0]), t64([0.0, 1.0]), t64([5.0])]
    anchors = [["s0", "s1", "s2"], ["s0", "s3"], ["s0", "s2"], ["s0"]]
    groups = ["g", "g", "g", "h"]
    out = gigpo_advantages(rewards, anchors, groups, gamma=0.5, step_weight=1.0, mode="grpo", eps=1e-6)
    # episode level, group g: R = [1, 0, 1], mean 2/3, deviations [1/3, -2/3, 1/3],
    #   unbiased var = (1/9 + 4/9 + 1/9)/2 = 1/3, std = 1/sqrt(3); group h is a singleton -> 0
    s_e = 1 / math.sqrt(3) + 1e-6
    e_a, e_b, e_c = (1 / 3) / s_e, (-2 / 3) / s_e, (1 / 3) / s_e
    # step level (gamma = 0.5): A: G = [0.25, 0.5, 1];  B: G = [0, 0];  C: G = [0.5, 1]
    #   anchor (g,s0) = {0.25, 0, 0.5}: mean 0.25, deviations [0, -0.25, 0.25], var = 0.125/2 = 0.0625, std 0.25
    #   (g,s2) = {1, 1}: deviations 0 -> 0;  (g,s1), (g,s3), (h,s0): singletons -> 0
    s_s = 0.25 + 1e-6
    close(out[0], [e_a + 0.0, e_a, e_a])
    close(out[1], [e_b - 0.25 / s_s, e_b])
    close(out[2], [e_c + 0.25 / s_s, e_c])
    close(out[3], [0.0])
    # step_weight scales only the step term
    out2 = gigpo_advantages(rewards, anchors, groups, gamma=0.5, step_weight=0.5)
    close(out2[1], [e_b - 0.5 * 0.25 / s_s, e_b])
    # episode_off zeroes the episode term of the flagged trajectories only; their step term stays
    off = gigpo_advantages(rewards, anchors, groups, gamma=0.5, episode_off=[False, True, False, False])
    close(off[1], [-0.25 / s_s, 0.0])
    close(off[0], out[0])


def test_gigpo_invariances_and_signs() -> None:
    g = torch.Generator().manual_seed(8)
    n_traj = 8
    rewards = [
        torch.randn(int(torch.randint(1, 6, (1,), generator=g)), generator=g, dtype=torch.float64)
        for _ in range(n_traj)
    ]
    anchors = [[f"s{int(torch.randint(0, 3, (1,), generator=g))}" for _ in range(len(r))] for r in rewards]
    groups = [i % 2 for i in range(n_traj)]
    out = gigpo_advantages(rewards, anchors, groups, gamma=0.9, step_weight=0.0, mode="rloo")
    # with step_weight 0 each trajectory carries its episode advantage, which sums to zero per group
    for grp in (0, 1):
        assert abs(sum(float(out[i][0]) for i in range(n_traj) if groups[i] == grp)) < 1e-10
    # permuting trajectories permutes the outputs
    perm = [3, 0, 7, 5, 1, 2, 6, 4]
    out_p = gigpo_advantages(
        [rewards[i] for i in perm],
        [anchors[i] for i in perm],
        [groups[i] for i in perm],
        gamma=0.9,
        step_weight=1.0,
        mode="grpo",
    )
    out_full = gigpo_advantages(rewards, anchors, groups, gamma=0.9, step_weight=1.0, mode="grpo")
    for j, i in enumerate(perm):
        torch.testing.assert_close(out_p[j], out_full[i], **TOL)
    # sign: from the same anchor, the step with the larger discounted return gets the larger step advantage
    sa = gigpo_advantages(
        [t64([0.0, 1.0]), t64([0.0, 0.0])],
        [["x", "y"], ["x", "z"]],
        ["g", "g"],
        gamma=0.9,
        step_weight=1.0,
        mode="mean",
    )
    assert float(sa[0][0]) > 0 > float(sa[1][0])


def test_hipif_golden_and_group_scope() -> None:
    # group "q1": R_env = 10 and 0; process penalties per step
    # S = [10+0, 10-0.1] and [0-0.1, 0+0, 0+0] = [10, 9.9, -0.1, 0, 0]   (Eq. 8)
    # pooled over all 5 steps of the group (Alg. 1 line 32): mean = 19.8/5 = 3.96
    # deviations [6.04, 5.94, -4.06, -3.96, -3.96]; squares sum = 36.4816+35.2836+16.4836+15.6816+15.6816
    #   = 119.612; unbiased var = 119.612/4 = 29.903
    out = hipif_step_advantages(
        t64([10.0, 0.0, 3.0]),
        [t64([0.0, -0.1]), t64([-0.1, 0.0, 0.0]), t64([0.0])],
        ["q1", "q1", "q2"],
        eps=1e-6,
    )
    s = math.sqrt(29.903) + 1e-6
    close(out[0], [6.04 / s, 5.94 / s])
    close(out[1], [-4.06 / s, -3.96 / s, -3.96 / s])
    close(out[2], [0.0])  # a group with a single step has no baseline
    # sign: success beats failure, and within a trajectory a penalised step scores below an unpenalised one
    assert float(out[0].min()) > 0 > float(out[1].max())
    assert out[0][1] < out[0][0]
