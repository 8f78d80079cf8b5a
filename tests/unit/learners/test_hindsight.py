"""Tests for learners/hindsight.py (HISR Eq. 3, 5–7): hand-computed goldens, loop references, the paper's Table 2.

Everything runs in float64; tolerances are 1e-12 for goldens and 1e-10 for loop references.
"""

from __future__ import annotations

import math

import torch

from learners import hindsight as H
from tests.unit.float64 import REF_TOL, b, close, float64, random_mask, t  # noqa: F401  (float64: autouse fixture)


def test_sprm_loss_golden():
    scores = t([[0.2, 0.3, 9.0], [1.0, -0.5, 0.0]])
    mask = b([[1, 1, 0], [1, 1, 1]])
    outcome = t([1.0, 0.0])
    # (1 - 0.5)^2 = 0.25 ; (0 - 0.5)^2 = 0.25 -> mean 0.25
    close(H.sprm_loss(scores, mask, outcome), 0.25)


def test_hindsight_importance_golden_and_loop():
    hind = t([[-1.0, -1.0], [-2.0, 0.0], [0.0, 0.0]])
    pol = t([[-2.0, -1.5], [-1.0, 0.0], [0.0, 0.0]])
    mask = b([[1, 1], [1, 0], [0, 0]])
    z = H.hindsight_importance(hind, pol, mask, beta=0.3)
    # row 0: (1 + 0.5) / (0.3 * 2) = 2.5 -> e^2.5 ; row 1: -1 / (0.3 * 1) -> e^(-10/3) ; empty row -> 1
    close(z, [math.exp(2.5), math.exp(-1 / 0.3), 1.0])
    g = torch.Generator().manual_seed(10)
    hind, pol = -torch.rand(6, 5, generator=g), -torch.rand(6, 5, generator=g)
    mask = random_mask(g, 6, 5)
    z = H.hindsight_importance(hind, pol, mask, beta=0.3)
    for i in range(6):
        toks = [float(hind[i, j] - pol[i, j]) for j in range(5) if mask[i, j]]
        close(z[i], math.exp(sum(toks) / (0.3 * len(toks))) if toks else 1.0, REF_TOL)


def test_segment_sum_and_turn_placement():
    ids = torch.tensor([[0, 0, 1, 1, 1, -1], [0, 1, 2, -1, -1, -1]])
    z = t([[1.0, 2.0, 3.0, 4.0, 5.0, 99.0], [0.5, 0.25, 2.0, 7.0, 7.0, 7.0]])
    # traj 0: segments (1 + 2, 3 + 4 + 5) = (3, 12); traj 1: (0.5, 0.25, 2)
    close(H.segment_sum(z, ids, 3), [[3.0, 12.0, 0.0], [0.5, 0.25, 2.0]])
    vals = t([[5.0, 7.0, 0.0], [1.0, 2.0, 3.0]])
    # each segment's value lands on its last turn
    close(H.segment_to_turn_rewards(vals, ids), [[0, 5, 0, 0, 7, 0], [1, 2, 3, 0, 0, 0]])
    g = torch.Generator().manual_seed(11)
    zr = torch.randn(2, 6, generator=g)
    out = H.segment_sum(zr, ids, 3)
    for i in range(2):
        for s in range(3):
            close(out[i, s], sum(float(zr[i, k]) for k in range(6) if int(ids[i, k]) == s), REF_TOL)


def test_hindsight_modulated_rewards_hisr_table2():
    # HISR Table 2 (ALFWorld, "clean and put bowl -> fridge"), tuples (R_hat, z, R_him) per segment:
    #   seg1 (0.069, 0.127, 0.039)  seg2 (0.118, 0.392, 0.205)  seg3 (0.132, 0.286, 0.167)  seg4 (0.681, 0.195, 0.589)
    # R_hat * z = 0.069 * 0.127 = 0.008763 ; 0.118 * 0.392 = 0.046256 ; 0.132 * 0.286 = 0.037752 ; 0.681 * 0.195 = 0.132795
    # L1: sum = 0.225566 -> 0.008763 / 0.225566 = 0.0388, 0.046256 / 0.225566 = 0.2051, 0.037752 / 0.225566 = 0.1674,
    #     0.132795 / 0.225566 = 0.5887 -> to 3 decimals (0.039, 0.205, 0.167, 0.589) = the paper's R_him column.
    # Row 2 is the same trajectory with one padding segment holding nan/inf (it must not change anything).
    r_hat = t([[0.069, 0.118, 0.132, 0.681, 0.0], [0.069, 0.118, 0.132, 0.681, math.nan]])
    z_s = t([[0.127, 0.392, 0.286, 0.195, 0.0], [0.127, 0.392, 0.286, 0.195, math.inf]])
    mask = b([[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]])
    r_him = H.hindsight_modulated_rewards(r_hat, z_s, mask)
    paper = t([0.039, 0.205, 0.167, 0.589, 0.0])
    for row in r_him:
        close(row, paper, dict(rtol=0.0, atol=5e-4))  # the paper prints 3 decimals
    close(r_him[0], r_him[1])
    # every segment is scaled by the same factor 1 / 0.225566 = 4.433 (the ratio R_him / (R_hat * z) in the table)
    close(r_him[0, :4] / (r_hat[0, :4] * z_s[0, :4]), [1 / 0.225566] * 4, dict(rtol=1e-12, atol=0.0))
    close(r_him.sum(dim=-1), [1.0, 1.0])


def test_hindsight_modulated_rewards_is_l1_not_l2():
    # Fails if Eq. 7 goes back to the L2 norm.  Products (3, 4): L1 -> (3/7, 4/7); L2 (norm 5) -> (0.6, 0.8).
    r_hat = t([[3.0, 2.0]])
    z_s = t([[1.0, 2.0]])
    out = H.hindsight_modulated_rewards(r_hat, z_s, b([[1, 1]]))
    close(out, [[3 / 7, 4 / 7]])
    assert not torch.allclose(out, t([[0.6, 0.8]]), atol=1e-3)
    # Table 2 under L2 would print (0.060, 0.317, 0.259, 0.910): norm sqrt(0.008763^2 + 0.046256^2 + 0.037752^2
    # + 0.132795^2) = 0.145866, 0.132795 / 0.145866 = 0.910, not the paper's 0.589.
    t2 = H.hindsight_modulated_rewards(
        t([[0.069, 0.118, 0.132, 0.681]]), t([[0.127, 0.392, 0.286, 0.195]]), b([[1] * 4])
    )
    assert abs(float(t2[0, 3]) - 0.589) < 5e-4


def test_hindsight_modulated_rewards_edge_cases():
    # masked segment 2 ignored; traj 1: all-zero products -> zeros (no 0/0); traj 2: no valid segment -> zeros
    r_hat = t([[3.0, 2.0, 5.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    z_s = t([[1.0, 2.0, 9.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    mask = b([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    close(H.hindsight_modulated_rewards(r_hat, z_s, mask), [[3 / 7, 4 / 7, 0.0], [0.0] * 3, [0.0] * 3])
    # a negative SPRM prediction: products (-1, 3); the L1 norm is |-1| + |3| = 4 -> (-0.25, 0.75): each segment keeps
    # its sign (a signed sum 2 would give (-0.5, 1.5); products (-1, 1) would divide by 0)
    close(H.hindsight_modulated_rewards(t([[-1.0, 1.5]]), t([[1.0, 2.0]]), b([[1, 1]])), [[-0.25, 0.75]])
    close(H.hindsight_modulated_rewards(t([[-1.0, 1.0]]), t([[1.0, 1.0]]), b([[1, 1]])), [[-0.5, 0.5]])
    # scale invariance in each factor (the normalisation removes any per-trajectory scale)
    out = H.hindsight_modulated_rewards(t([[0.2, 0.5, 0.3]]), t([[1.5, 0.5, 2.0]]), b([[1, 1, 1]]))
    close(H.hindsight_modulated_rewards(t([[2.0, 5.0, 3.0]]), t([[3.0, 1.0, 4.0]]), b([[1, 1, 1]])), out)
    # gradients: finite everywhere, exactly zero on padding (even where the padding holds nan / inf)
    r = t([[0.5, 0.25, math.nan]], requires_grad=True)
    z = t([[1.0, 3.0, math.inf]], requires_grad=True)
    (H.hindsight_modulated_rewards(r, z, b([[1, 1, 0]])) * t([[1.0, 2.0, 3.0]])).sum().backward()
    assert torch.isfinite(r.grad).all() and torch.isfinite(z.grad).all()
    assert float(r.grad[0, 2]) == 0.0 and float(z.grad[0, 2]) == 0.0
