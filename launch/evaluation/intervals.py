"""The statistics every reported success rate carries: 95 % intervals and paired comparisons (pure; no Ray, vLLM,
DeepSpeed, numpy or scipy).

* One run on n tasks: the **Wilson score interval** of k wins in n (Wilson 1927), which stays inside [0, 1] and
  keeps its coverage at the small n and rates near 0 or 1 that short evaluations give (the normal interval
  p ± z·sqrt(p(1−p)/n) collapses to a point at 0 / n).
* Several runs (seeds) of one setting: the mean of their success rates ± the **Student t** half-width
  t_{0.975, m−1} · s / sqrt(m) over the m runs (seed-to-seed variation, the task panel fixed).
* Two runs on one panel: per-task wins and losses and the **exact sign test** on the tasks where they differ (two-
  sided binomial p with probability 1/2; the same p as the exact McNemar test on the discordant pairs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

Z95 = 1.959963984540054
"""The standard normal's 0.975 quantile."""

T95 = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
    2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
    2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)  # fmt: skip
"""Student t's 0.975 quantile for 1..30 degrees of freedom (the standard table, 6 decimals)."""


def t95(df: int) -> float:
    """Student t's 0.975 quantile: the table up to 30 degrees of freedom, beyond it the Cornish-Fisher expansion
    in 1/df around z (four terms; 3e-8 off at df = 31, less beyond)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(T95):
        return T95[df - 1]
    z = Z95
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def wilson(wins: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``wins`` in ``n`` (nan, nan for n = 0):
    (p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n), p = wins / n."""
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= wins <= n:
        raise ValueError(f"wins must be in [0, {n}], got {wins}")
    p = wins / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    # at 0 or n wins one end is exactly 0 or 1 (centre = half there); set it so rounding cannot move it
    low = 0.0 if wins == 0 else (centre - half) / scale
    high = 1.0 if wins == n else (centre + half) / scale
    return low, high


@dataclass(frozen=True)
class SeedMean:
    """The mean of ``n`` runs' rates ± the 95 % t-interval's half-width (nan for a single run)."""

    mean: float
    half: float
    n: int

    def text(self, digits: int = 3) -> str:
        if math.isnan(self.mean):
            return "–"
        if math.isnan(self.half):
            return f"{self.mean:.{digits}f} (1 run)"
        return f"{self.mean:.{digits}f} ± {self.half:.{digits}f} ({self.n} runs, t)"


def seed_mean(rates: Sequence[float]) -> SeedMean:
    """Mean ± t_{0.975, m−1} · s / sqrt(m) over the m runs' rates (nan values dropped)."""
    xs = [float(x) for x in rates if x == x]
    if not xs:
        return SeedMean(math.nan, math.nan, 0)
    if len(xs) == 1:
        return SeedMean(xs[0], math.nan, 1)
    return SeedMean(
        statistics.fmean(xs), t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs)), len(xs)
    )


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test: P(a split at least as uneven as ``wins`` : ``losses``) when each of the
    n = wins + losses differing tasks goes either way with probability 1/2 (1.0 when n = 0)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


K = TypeVar("K")


@dataclass(frozen=True)
class Paired:
    """Two runs on the same tasks: ``a_only`` tasks A won and B lost, ``b_only`` the reverse, ``both`` and
    ``neither`` the ties; ``p`` the exact sign test on the ``a_only + b_only`` tasks that differ."""

    n: int
    a_only: int
    b_only: int
    both: int
    neither: int

    @property
    def a_rate(self) -> float:
        return (self.a_only + self.both) / self.n if self.n else math.nan

    @property
    def b_rate(self) -> float:
        return (self.b_only + self.both) / self.n if self.n else math.nan

    @property
    def p(self) -> float:
        return sign_test(self.a_only, self.b_only)


def paired(a: Mapping[K, bool], b: Mapping[K, bool]) -> Paired:
    """Compare two runs' per-task outcomes on the tasks both scored (keys: (task id, env seed))."""
    shared = [k for k in a if k in b]
    a_only = sum(a[k] and not b[k] for k in shared)
    b_only = sum(b[k] and not a[k] for k in shared)
    both = sum(a[k] and b[k] for k in shared)
    return Paired(len(shared), a_only, b_only, both, len(shared) - a_only - b_only - both)


def rate_text(wins: int, n: int, digits: int = 3) -> str:
    """``0.333 [0.180, 0.530]``: the rate and its Wilson 95 % interval."""
    if n <= 0:
        return "–"
    lo, hi = wilson(wins, n)
    return f"{wins / n:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


@dataclass(frozen=True)
class Gain:
    """The mean per-task change of a success rate between two evaluations of the same panel, with the 95 % t-interval
    over tasks (the task is the unit: a task's samples are not independent evidence), and how many tasks changed."""

    mean: float
    low: float
    high: float
    tasks: int
    changed: int

    def text(self, samples: int) -> str:
        """``+0.250 [+0.047, +0.453] (paired over 8 tasks × 4 samples)``, or that no task's outcomes changed."""
        where = f"paired over {self.tasks} tasks × {samples} sample{'s' * (samples != 1)}"
        if self.changed == 0:
            return f"+0.000: the policy did not change any task's outcome ({where})"
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}] ({where}, t over tasks)"


def paired_gain(before: Sequence[float], after: Sequence[float]) -> Gain:
    """Per-task success rates of one panel before and after (same tasks, same order): the mean difference ±
    t_{0.975, n−1} · sd / sqrt(n) over the n tasks. Before [0, 0.5, 1, 0.25], after [0.5, 0.5, 1, 0.75]:
    differences [0.5, 0, 0, 0.5], mean 0.25, sd 0.2887, half 3.182446 · 0.2887 / 2 = 0.4593."""
    if len(before) != len(after):
        raise ValueError(f"{len(before)} tasks before but {len(after)} after")
    d = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    if not d:
        return Gain(math.nan, math.nan, math.nan, 0, 0)
    mean = statistics.fmean(d)
    half = t95(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    return Gain(mean, mean - half, mean + half, len(d), sum(x != 0 for x in d))
