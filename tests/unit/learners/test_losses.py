"""Tests for learners/losses.py: hand-computed goldens, vectorised-vs-loop references, invariances, gradients.

Everything runs in float64; tolerances are 1e-12 for goldens and 1e-10 for loop references.
"""

from __future__ import annotations

import math

import pytest
import torch

from learners import losses as L
from tests.unit.float64 import REF_TOL, TOL, b, close, float64, random_mask, t  # noqa: F401  (float64: autouse fixture)

E = math.e


def ppo_clip_loss(lp, old, adv, mask, *, clip_low=0.2, clip_high=0.2, agg="token-mean"):
    """The learner's PPO objective: the per-token clipped surrogate, aggregated over the mask."""
    loss_mat, metrics = L.ppo_token_loss(lp, old, adv, mask, clip_low=clip_low, clip_high=clip_high)
    return L.aggregate(loss_mat, mask, agg), metrics


# ---------------------------------------------------------------------------------------------------------------
# aggregation
# ---------------------------------------------------------------------------------------------------------------


def test_aggregate_golden():
    loss = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = b([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # row 2 is empty padding
    # token-mean: (1 + 2 + 3 + 4) / 4 = 2.5
    close(L.aggregate(loss, mask, "token-mean"), 2.5)
    # seq-mean-token-mean: (mean(1,2,3) = 2, mean(4) = 4) -> (2 + 4) / 2 = 3  (empty row not counted)
    close(L.aggregate(loss, mask, "seq-mean-token-mean"), 3.0)
    # seq-mean-token-sum: (6 + 4) / 2 = 5
    close(L.aggregate(loss, mask, "seq-mean-token-sum"), 5.0)
    # masked_mean over any shape: same as token-mean
    close(L.masked_mean(loss, mask), 2.5)


ROW_MODES = [m for m in L.AGG_MODES if m != "episode-mean"]
"""The modes that need nothing beyond the mask (episode-mean also reads each row's episode weight)."""


def test_episode_mean_weighs_every_episode_the_same():
    """Episode 0: rows 0-1 with 3 + 1 loss tokens; episode 1: row 2 with 2 tokens. row weights 1/4, 1/4, 1/2
    (``episode_row_weights``); token weights w = mask · row weight / Σ = [1/4 ×3, 1/4, 1/2 ×2] / 2:
    episode 0's tokens sum to 1/2, episode 1's to 1/2. Loss rows 1, 2, 3 (per token): (3·1 + 1·2)/8 + 2·3/4 =
    5/8 + 3/2 = 2.125; the token mean would be (3 + 2 + 6) / 6 = 1.8333."""
    mask = b([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    loss = t([[1.0, 1.0, 1.0], [2.0, 9.0, 9.0], [3.0, 3.0, 9.0]])
    rw = L.episode_row_weights([0, 0, 1], mask)
    close(rw, [0.25, 0.25, 0.5])
    w = L.aggregation_weights(mask, "episode-mean", rw)
    close(w[:2].sum(), 0.5)
    close(w[2].sum(), 0.5)
    close(L.aggregate(loss, mask, "episode-mean", rw), 2.125)
    close(L.aggregate(loss, mask, "token-mean"), 11 / 6)
    with pytest.raises(ValueError, match="episode weight"):
        L.aggregation_weights(mask, "episode-mean")


def test_episode_row_weights_skip_episodes_without_loss_tokens():
    """An episode with no loss token (every row masked) gets weight 0, not a division by zero."""
    mask = b([[0, 0], [1, 1]])
    close(L.episode_row_weights([0, 1], mask), [0.0, 0.5])


def test_aggregate_unequal_lengths_differ_as_expected():
    # row 0: one token of loss 1; row 1: three tokens of loss 0.
    loss = t([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = b([[1, 0, 0], [1, 1, 1]])
    close(L.aggregate(loss, mask, "token-mean"), 1.0 / 4)  # 1 / (1 + 3) tokens
    close(L.aggregate(loss, mask, "seq-mean-token-mean"), 0.5)  # (1/1 + 0/3) / 2 rows
    # equal lengths -> the two means coincide
    full = b([[1, 1, 1], [1, 1, 1]])
    close(L.aggregate(loss, full, "token-mean"), L.aggregate(loss, full, "seq-mean-token-mean"))


@pytest.mark.parametrize("mode", ROW_MODES)
def test_aggregate_all_empty_is_zero_not_nan(mode):
    loss = t([[1.0, float("nan")], [float("inf"), 2.0]], requires_grad=True)
    mask = b([[0, 0], [0, 0]])
    out = L.aggregate(loss, mask, mode)
    close(out, 0.0)
    out.backward()
    close(loss.grad, [[0.0, 0.0], [0.0, 0.0]])


def test_aggregate_unknown_mode_raises():
    with pytest.raises(ValueError):
        L.aggregate(t([[1.0]]), b([[1]]), "mean")  # type: ignore[arg-type]


def _loop_aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str) -> float:
    rows = []
    for i in range(loss.shape[0]):
        vals = [float(loss[i, j]) for j in range(loss.shape[1]) if bool(mask[i, j])]
        if vals:
            rows.append(vals)
    if not rows:
        return 0.0
    if mode == "token-mean":
        flat = [v for r in rows for v in r]
        return sum(flat) / len(flat)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    return sum(sum(r) for r in rows) / len(rows)


@pytest.mark.parametrize("mode", ROW_MODES)
def test_aggregate_matches_loop(mode):
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        loss = torch.randn(6, 9, generator=g)
        mask = random_mask(g, 6, 9)
        close(L.aggregate(loss, mask, mode), _loop_aggregate(loss, mask, mode), REF_TOL)


# ---------------------------------------------------------------------------------------------------------------
# PPO
# ---------------------------------------------------------------------------------------------------------------


def _ppo_case():
    # Row 0: A = +1, ratios (1, 1.5, 0.9).  Row 1: A = -2, ratios (0.9, 1), third token is padding holding garbage.
    lp = t([[0.0, math.log(1.5), math.log(0.9)], [math.log(0.9), 0.0, float("inf")]], requires_grad=True)
    old = t([[0.0, 0.0, 0.0], [0.0, 0.0, float("nan")]])
    adv = t([1.0, -2.0])
    mask = b([[1, 1, 1], [1, 1, 0]])
    return lp, old, adv, mask


def test_ppo_golden_2x3_one_clipped_token():
    lp, old, adv, mask = _ppo_case()
    loss, m = ppo_clip_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    # per-token loss = max(-A r, -A clip(r, 0.8, 1.2)):
    #   row 0: r=1   -> max(-1, -1)       = -1
    #          r=1.5 -> max(-1.5, -1.2)   = -1.2   (clipped branch active)
    #          r=0.9 -> max(-0.9, -0.9)   = -0.9
    #   row 1: r=0.9 -> max(1.8, 1.8)     =  1.8
    #          r=1   -> max(2, 2)         =  2
    # token-mean = (-1 - 1.2 - 0.9 + 1.8 + 2) / 5 = 0.7 / 5 = 0.14
    close(loss, 0.14)
    close(m["clipfrac"], 1 / 5)
    # ratio_mean = (1 + 1.5 + 0.9 + 0.9 + 1) / 5 = 1.06
    close(m["ratio_mean"], 1.06)
    # approx_kl = mean((r - 1) - log r) = (0 + (0.5 - log 1.5) + 2 (-0.1 - log 0.9) + 0) / 5
    #           = (0.0945348919 + 2 * 0.0053605157) / 5 = 0.0210511846
    close(m["approx_kl"], ((0.5 - math.log(1.5)) + 2 * (-0.1 - math.log(0.9))) / 5)
    # seq-mean-token-sum: rows sum to -3.1 and 3.8 -> (-3.1 + 3.8) / 2 = 0.35
    loss_s, _ = ppo_clip_loss(lp, old, adv, mask, agg="seq-mean-token-sum")
    close(loss_s, 0.35)
    # gradient (token-mean): d/dlp of -A r / 5 = -A r / 5 where the unclipped branch is active, 0 where clipped
    loss.backward()
    close(lp.grad, [[-1 / 5, 0.0, -0.9 / 5], [2 * 0.9 / 5, 2 / 5, 0.0]])


def test_ppo_decoupled_clip_range():
    # r = 1.25 with A = +1: clip_high = 0.28 leaves it unclipped (loss -1.25), clip_high = 0.2 clips it (-1.2).
    lp, old, adv, mask = t([[math.log(1.25)]]), t([[0.0]]), t([1.0]), b([[1]])
    close(ppo_clip_loss(lp, old, adv, mask, clip_high=0.28)[0], -1.25)
    close(ppo_clip_loss(lp, old, adv, mask, clip_high=0.2)[0], -1.2)
    # r = 0.75 with A = -1: clip_low = 0.2 clips to 0.8 -> max(0.75, 0.8) = 0.8; clip_low = 0.3 -> 0.75
    lp = t([[math.log(0.75)]])
    close(ppo_clip_loss(lp, old, -adv, mask, clip_low=0.2)[0], 0.8)
    close(ppo_clip_loss(lp, old, -adv, mask, clip_low=0.3)[0], 0.75)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_ppo_gradient_sign_follows_advantage(sign):
    """One descent step must raise the log-prob of a token with positive advantage and lower it for negative.

    This test fails if the advantage sign is flipped anywhere in the loss.
    """
    lp = t([[-1.0, -2.0]], requires_grad=True)
    old = lp.detach().clone()
    adv = t([[sign * 0.7, 0.0]])
    loss, _ = ppo_clip_loss(lp, old, adv, b([[1, 1]]))
    loss.backward()
    new_lp = lp.detach() - 0.1 * lp.grad
    assert sign * (new_lp[0, 0] - lp[0, 0]).item() > 0
    # exact value at ratio 1: d loss / d lp = -A / n_tokens
    close(lp.grad[0, 0], -sign * 0.7 / 2)
    close(lp.grad[0, 1], 0.0)


def _loop_ppo(lp, old, adv, mask, cl, ch, mode):
    mat = torch.zeros_like(lp)
    for i in range(lp.shape[0]):
        for j in range(lp.shape[1]):
            if bool(mask[i, j]):
                r = math.exp(float(lp[i, j]) - float(old[i, j]))
                a = float(adv[i])
                mat[i, j] = max(-a * r, -a * min(max(r, 1 - cl), 1 + ch))
    return _loop_aggregate(mat, mask, mode)


@pytest.mark.parametrize("mode", ROW_MODES)
def test_ppo_matches_loop(mode):
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        B, Lt = 5, 8
        lp = -torch.rand(B, Lt, generator=g) * 3
        old = lp + 0.4 * torch.randn(B, Lt, generator=g)
        adv = torch.randn(B, generator=g)
        mask = random_mask(g, B, Lt)
        loss, _ = ppo_clip_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28, agg=mode)
        close(loss, _loop_ppo(lp, old, adv, mask, 0.2, 0.28, mode), REF_TOL)


@pytest.mark.parametrize("mode", ROW_MODES)
def test_ppo_masked_values_do_not_matter(mode):
    """Garbage (large, inf, nan) under masked tokens changes neither the loss, the metrics nor the gradient."""
    g = torch.Generator().manual_seed(2)
    B, Lt = 4, 6
    lp0 = -torch.rand(B, Lt, generator=g)
    old = lp0 + 0.3 * torch.randn(B, Lt, generator=g)
    adv = torch.randn(B, Lt, generator=g)
    mask = random_mask(g, B, Lt)
    outs = []
    for fill in (None, 1e6, float("inf"), float("nan")):
        lp, o, a = lp0.clone(), old.clone(), adv.clone()
        if fill is not None:
            lp[~mask], o[~mask], a[~mask] = fill, -fill, fill
        lp.requires_grad_(True)
        loss, m = ppo_clip_loss(lp, o, a, mask, agg=mode)
        loss.backward()
        assert torch.isfinite(lp.grad).all()
        assert (lp.grad[~mask] == 0).all()
        outs.append((loss.detach(), lp.grad, m))
    for loss, grad, m in outs[1:]:
        close(loss, outs[0][0])
        torch.testing.assert_close(grad, outs[0][1], **TOL)
        for k in m:
            close(m[k], outs[0][2][k])


# ---------------------------------------------------------------------------------------------------------------
# HiPER (App. B, Eq. 28–30)
# ---------------------------------------------------------------------------------------------------------------


def _hiper_masks():
    # two turns, 6 tokens each: [switch | subgoal subgoal | action action | pad]
    sw = b([[1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    sg = b([[0, 1, 1, 0, 0, 0], [0, 1, 1, 0, 0, 0]])
    ac = b([[0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 0]])
    return sw, sg, ac


def test_decision_token_advantages_golden():
    sw, sg, ac = _hiper_masks()
    adv, mask = L.decision_token_advantages(
        sw, sg, ac, t([1.0, 2.0]), t([3.0, 4.0]), t([5.0, 6.0]), b([True, False])
    )
    # turn 0 is a boundary: subgoal tokens carry A_high = 3; turn 1 KEEPs: its subgoal tokens leave the mask
    close(adv, [[1, 3, 3, 5, 5, 0], [2, 0, 0, 6, 6, 0]])
    assert mask.tolist() == [[True] * 5 + [False], [True, False, False, True, True, False]]


def test_hiper_overlapping_masks_rejected():
    sw, sg, ac = _hiper_masks()
    with pytest.raises(ValueError):
        L.decision_token_advantages(sw, sg | sw, ac, t([0, 0.0]), t([0, 0.0]), t([0, 0.0]), b([1, 1]))


# ---------------------------------------------------------------------------------------------------------------
# value loss
# ---------------------------------------------------------------------------------------------------------------


def test_value_loss_golden():
    v, old, ret, mask = t([[1.0, 2.0, 7.0]]), t([[0.0, 2.5, 0.0]]), t([[0.5, 0.0, 0.0]]), b([[1, 1, 0]])
    # unclipped: 0.5 * mean((1 - 0.5)^2, (2 - 0)^2) = 0.5 * (0.25 + 4) / 2 = 1.0625
    close(L.value_loss(v, old, ret, mask), 1.0625)
    # clip 0.2: token 0: V_clip = 0 + 0.2 = 0.2 -> (0.2 - 0.5)^2 = 0.09, max(0.25, 0.09) = 0.25
    #           token 1: V_clip = 2.5 - 0.2 = 2.3 -> 2.3^2 = 5.29, max(4, 5.29) = 5.29
    # 0.5 * (0.25 + 5.29) / 2 = 1.385
    close(L.value_loss(v, old, ret, mask, clip_range=0.2), 1.385)


def test_value_loss_matches_loop():
    g = torch.Generator().manual_seed(4)
    v, old, ret = (torch.randn(5, 7, generator=g) for _ in range(3))
    mask = random_mask(g, 5, 7)
    for clip in (None, 0.3):
        mat = torch.zeros(5, 7)
        for i in range(5):
            for j in range(7):
                e1 = (float(v[i, j]) - float(ret[i, j])) ** 2
                if clip is not None:
                    vc = float(old[i, j]) + min(max(float(v[i, j] - old[i, j]), -clip), clip)
                    e1 = max(e1, (vc - float(ret[i, j])) ** 2)
                mat[i, j] = 0.5 * e1
        close(
            L.value_loss(v, old, ret, mask, clip_range=clip),
            _loop_aggregate(mat, mask, "token-mean"),
            REF_TOL,
        )


# ---------------------------------------------------------------------------------------------------------------
# KL, entropy, BC
# ---------------------------------------------------------------------------------------------------------------


def test_kl_estimators_golden():
    lp, ref = t([math.log(0.5)]), t([math.log(0.25)])
    # log r = log 2 = 0.6931471806
    close(L.kl_estimate(lp, ref, "k1"), [math.log(2)])
    # k2 = 0.5 * 0.6931471806^2 = 0.2402265070
    close(L.kl_estimate(lp, ref, "k2"), [0.5 * math.log(2) ** 2])
    # k3 = exp(-log 2) + log 2 - 1 = 0.5 + 0.6931471806 - 1 = 0.1931471806
    close(L.kl_estimate(lp, ref, "k3"), [0.5 + math.log(2) - 1])
    close(L.kl_estimate(lp, ref, "low_var_kl"), L.kl_estimate(lp, ref, "k3"))
    with pytest.raises(ValueError):
        L.kl_estimate(lp, ref, "k4")  # type: ignore[arg-type]


def test_low_var_kl_is_verls_clamped_k3():
    """log r = -15 (the policy finds the sampled token e^15 times less likely than the reference):
    k3 = e^15 - 15 - 1 = 3269001.37, low_var_kl clamps it to 10 with no gradient; log r = -30 is clamped to -20
    first (k3 = e^20 - 21 stays finite), and a small log r is untouched (both 0.1931471806 at log 2)."""
    lp = torch.tensor([-15.0, -30.0, math.log(2)], dtype=torch.float64, requires_grad=True)
    ref = torch.zeros(3, dtype=torch.float64)
    assert float(L.kl_estimate(lp, ref, "k3")[0].detach()) == pytest.approx(math.exp(15) - 16)
    low = L.kl_estimate(lp, ref, "low_var_kl")
    close(low.detach(), [10.0, 10.0, 0.5 + math.log(2) - 1])
    low.sum().backward()
    close(lp.grad[:2], [0.0, 0.0])  # clamped: no gradient
    close(lp.grad[2], 1 - 0.5)  # d/dlog r (e^-log r + log r - 1) = 1 - e^-log r


def test_k3_nonnegative_and_zero_when_equal():
    g = torch.Generator().manual_seed(5)
    lp, ref = torch.randn(1000, generator=g) * 5, torch.randn(1000, generator=g) * 5
    assert (L.kl_estimate(lp, ref, "k3") >= 0).all()
    close(L.kl_estimate(lp, lp.clone(), "k3"), [0.0] * 1000)


def test_k1_k3_are_unbiased_exactly():
    """E_{x~p}[k1] = E_{x~p}[k3] = KL(p || q): check by exact summation over a small vocabulary."""
    g = torch.Generator().manual_seed(6)
    logits, ref_logits = torch.randn(7, generator=g), torch.randn(7, generator=g)
    logp, logq = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
    kl_exact = float(sum(math.exp(logp[i]) * (logp[i] - logq[i]) for i in range(7)))
    for kind in ("k1", "k3"):
        close((logp.exp() * L.kl_estimate(logp, logq, kind)).sum(), kl_exact, REF_TOL)


def test_k3_masks_and_aggregates():
    lp = t([[math.log(0.5), 3.0], [0.0, float("nan")]])
    ref = t([[math.log(0.25), -3.0], [0.0, 1.0]])
    mask = b([[1, 0], [1, 0]])
    # k3 per valid token: 0.1931471806 and 0 -> token-mean 0.0965735903
    close(L.aggregate(L.kl_estimate(lp, ref, "k3"), mask), (0.5 + math.log(2) - 1) / 2)


# ---------------------------------------------------------------------------------------------------------------
# IQL / AWR / Multi2
# ---------------------------------------------------------------------------------------------------------------


def test_expectile_golden_and_half_mse():
    d = t([-2.0, 3.0, 0.0])
    # tau = 0.9: |0.9 - 1| 4 = 0.4 ; 0.9 * 9 = 8.1 ; 0
    close(L.expectile_loss(d, 0.9), [0.4, 8.1, 0.0])
    g = torch.Generator().manual_seed(8)
    x = torch.randn(50, generator=g)
    close(L.expectile_loss(x, 0.5), 0.5 * x**2)
    for i in range(50):
        xi = float(x[i])
        close(L.expectile_loss(x[i], 0.7), (0.3 if xi < 0 else 0.7) * xi * xi, REF_TOL)


def test_awr_weights_golden_and_clip():
    w = L.awr_weights(t([0.0, 0.95, 100.0, 1e6, -1e6]), beta=0.95, max_weight=20.0)
    # exp(0) = 1, exp(1) = e, exp(105.3) -> capped at 20, 1e6 -> capped (no inf), exp(-1e6/0.95) -> 0
    close(w, [1.0, E, 20.0, 20.0, 0.0])
    assert not w.requires_grad
    g = torch.Generator().manual_seed(9)
    a = torch.randn(100, generator=g) * 5
    w = L.awr_weights(a, beta=0.5, max_weight=7.0)
    assert (w <= 7.0).all()
    for i in range(100):
        close(w[i], min(math.exp(float(a[i]) / 0.5), 7.0), REF_TOL)


# --- aggregation weights (exact gradient accumulation) ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_aggregation_weights_reproduce_aggregate(mode):
    from learners.losses import aggregate, aggregation_weights

    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 7, generator=g) < 0.6
    mask[2] = False  # an empty row contributes nothing
    w = aggregation_weights(mask, mode)
    assert torch.allclose((w * x).sum(), aggregate(x, mask, mode), atol=1e-12, rtol=0)
    assert (w[~mask] == 0).all()


def test_aggregation_weights_golden():
    from learners.losses import aggregation_weights

    mask = torch.tensor([[True, True, False], [True, False, False]])
    # token-mean: 3 valid tokens -> 1/3 each
    assert torch.allclose(aggregation_weights(mask, "token-mean"), torch.tensor([[1, 1, 0], [1, 0, 0]]) / 3.0)
    # seq-mean-token-mean: row 0 has 2 tokens (1/2 each), row 1 has 1; then / 2 rows -> 1/4, 1/4, 1/2
    want = torch.tensor([[0.25, 0.25, 0.0], [0.5, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(aggregation_weights(mask, "seq-mean-token-mean"), want)
