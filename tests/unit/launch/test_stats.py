"""The intervals and paired tests every success rate is printed with (launch/evaluation/intervals.py): golden values with the
arithmetic in comments (z = 1.959964, z² = 3.841459)."""

from __future__ import annotations

import math

import pytest

from launch.evaluation.intervals import Z95, paired, paired_gain, rate_text, seed_mean, sign_test, t95, wilson


def test_wilson_at_zero_wins_is_not_a_point():
    # 0 of 10: centre = z²/2n = 0.1920729, half = z·sqrt(z²/4n²) = z²/2n (the same), scale = 1 + z²/n = 1.3841459
    # -> [0, 2 · 0.1920729 / 1.3841459] = [0, 0.2775328] (the normal interval would be [0, 0])
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775328, abs=1e-6)


def test_wilson_golden_a_third():
    # 8 of 24, p = 1/3: z²/n = 0.1600608; centre = 0.3333333 + 0.0800304 = 0.4133637;
    # p(1-p)/n = 0.2222222/24 = 0.0092593, z²/4n² = 3.841459/2304 = 0.0016673, sqrt(0.0109266) = 0.1045302;
    # half = 1.959964 · 0.1045302 = 0.2048763; scale = 1.1600608
    # -> lo = 0.2084874 / 1.1600608 = 0.1797219, hi = 0.6182400 / 1.1600608 = 0.5329368
    lo, hi = wilson(8, 24)
    assert lo == pytest.approx(0.1797219, abs=1e-6) and hi == pytest.approx(0.5329368, abs=1e-6)
    assert rate_text(8, 24) == "0.333 [0.180, 0.533]"


def test_wilson_is_symmetric_and_inside_the_unit_interval():
    for n in (1, 5, 24, 134):
        for k in range(n + 1):
            lo, hi = wilson(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0
            lo2, hi2 = wilson(n - k, n)  # k wins mirrors n - k wins
            assert lo == pytest.approx(1 - hi2, abs=1e-12) and hi == pytest.approx(1 - lo2, abs=1e-12)
    assert all(math.isnan(x) for x in wilson(0, 0))
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_t_quantiles_table_and_expansion():
    assert t95(1) == 12.706205 and t95(2) == 4.302653 and t95(30) == 2.042272
    # beyond the table, the Cornish-Fisher expansion: t_{0.975,31} = 2.0395134, t_{0.975,120} = 1.9799304
    assert t95(31) == pytest.approx(2.0395134, abs=1e-6) and t95(120) == pytest.approx(1.9799304, abs=1e-6)
    assert t95(10**6) == pytest.approx(Z95, abs=1e-5)
    with pytest.raises(ValueError):
        t95(0)


def test_seed_mean_golden():
    # 0.25, 0.5, 0.75: mean 0.5, s = 0.25, half = t_{0.975,2} · s / sqrt(3) = 4.302653 · 0.1443376 = 0.6210345
    m = seed_mean([0.25, 0.5, 0.75])
    assert (m.mean, m.n) == (0.5, 3) and m.half == pytest.approx(0.6210345, abs=1e-6)
    assert m.text() == "0.500 ± 0.621 (3 runs, t)"
    one = seed_mean([0.4, float("nan")])  # nan (no eval) dropped; a single run has no seed interval
    assert one.mean == 0.4 and math.isnan(one.half) and one.text() == "0.400 (1 run)"


def test_sign_test_golden():
    # 1 : 8 of 9 differing tasks: 2 · (C(9,0) + C(9,1)) / 2^9 = 2 · 10 / 512 = 0.0390625
    assert sign_test(1, 8) == pytest.approx(0.0390625) and sign_test(8, 1) == sign_test(1, 8)
    # 0 : 5: 2 · 1 / 32 = 0.0625 (five tasks can never reach p < 0.05)
    assert sign_test(0, 5) == pytest.approx(0.0625)
    # 3 : 3: 2 · (1 + 6 + 15 + 20) / 64 = 1.3125 -> capped at 1
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0


def test_paired_counts_on_shared_tasks_only():
    a = {"t1": True, "t2": True, "t3": False, "t4": False, "t5": True}
    b = {"t1": True, "t2": False, "t3": True, "t4": False, "t6": True}
    # shared t1..t4: both t1, A only t2, B only t3, neither t4; t5 and t6 are not shared
    p = paired(a, b)
    assert (p.n, p.a_only, p.b_only, p.both, p.neither) == (4, 1, 1, 1, 1)
    assert (p.a_rate, p.b_rate, p.p) == (0.5, 0.5, 1.0)
    swapped = paired(b, a)
    assert (swapped.a_only, swapped.b_only) == (1, 1)
    # A wins 8 tasks B loses, B wins 1 that A loses: p = sign_test(8, 1)
    a = {i: i < 9 for i in range(12)}
    b = {i: i in (8, 9) for i in range(12)}
    # b wins task 8 (A won it too: both) and task 9 (A lost: B only); A only: 0..7
    p = paired(a, b)
    assert (p.a_only, p.b_only, p.both, p.neither) == (8, 1, 1, 2) and p.p == pytest.approx(0.0390625)


def test_paired_gain_is_a_t_interval_over_tasks():
    """Before [0, 0.5, 1, 0.25], after [0.5, 0.5, 1, 0.75]: differences [0.5, 0, 0, 0.5], mean 0.25, sd
    sqrt((3 · 0.0625 + 0.0625) / 3) = 0.288675, half 3.182446 · 0.288675 / 2 = 0.459347; 2 tasks changed.
    Identical outcomes say so instead of ±0."""
    g = paired_gain([0, 0.5, 1, 0.25], [0.5, 0.5, 1, 0.75])
    assert (g.mean, g.tasks, g.changed) == (0.25, 4, 2)
    assert (g.low, g.high) == pytest.approx((0.25 - 0.459347, 0.25 + 0.459347), abs=1e-6)
    assert paired_gain([1, 0], [1, 0]).text(2) == (
        "+0.000: the policy did not change any task's outcome (paired over 2 tasks × 2 samples)"
    )
    with pytest.raises(ValueError, match="4 tasks before but 3 after"):
        paired_gain([0] * 4, [0] * 3)
