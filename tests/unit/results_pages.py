"""What the results-page tests share: a page and its JSON, the page's table rows and printed figures, and whether
a printed figure is a value rounded to the digits shown."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

RESULTS = Path(__file__).parents[2] / "docs" / "results"
T95 = {2: 4.302652729911275, 7: 2.364624251592785, 15: 2.131449545559323}
"""Two-sided 95 % Student t quantiles by degrees of freedom: 3 seeds, 8 tasks, 16 tasks (the standard table)."""
NUMBER = re.compile(r"[−+-]?\d+(?:\.\d+)?(?:e[−+-]?\d+)?")


def page(name: str) -> str:
    return (RESULTS / name).read_text()


def data(name: str):
    return json.loads((RESULTS / name).read_text())


def flat(text: str) -> str:
    """The page's prose with line breaks and runs of spaces as single spaces (a figure may wrap)."""
    return re.sub(r"\s+", " ", text)


def row(text: str, first_cell: str, second_cell: str = "") -> list[str]:
    """The cells of the one table row whose first cell starts with ``first_cell`` (and second with
    ``second_cell``)."""
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]
    found = [r for r in rows if r[0].startswith(first_cell) and r[1:2] and r[1].startswith(second_cell)]
    assert len(found) == 1, f"{len(found)} table rows start with {first_cell!r} | {second_cell!r}"
    return found[0]


def numbers(cell: str) -> list[str]:
    return NUMBER.findall(cell)


def shows(printed: str, value: float) -> bool:
    """Whether ``printed`` (as the page prints it: '0.375', '−0.014', '9.9e-06', '2e-5') is ``value`` rounded to
    the digits shown."""
    text = printed.replace("−", "-").lstrip("+")
    mantissa, _, exponent = text.partition("e")
    scale = 10.0 ** int(exponent) if exponent else 1.0
    decimals = len(mantissa.partition(".")[2])
    return abs(value / scale - float(mantissa)) <= 0.5 * 10.0**-decimals + 1e-9


def assert_shows(printed: list[str], values: list[float]) -> None:
    assert len(printed) == len(values), (printed, values)
    wrong = [(p, round(v, 6)) for p, v in zip(printed, values, strict=True) if not shows(p, v)]
    assert wrong == [], f"page figure vs the JSON's: {wrong}"


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def sign_test(gained: int, lost: int) -> float:
    """Exact two-sided sign test on the changed pairs."""
    n = gained + lost
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def t95(values: list[float]) -> float:
    return T95[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values))


def paired(before: list[float], after: list[float]) -> list[float]:
    """The paired gain over tasks, mean of (after − before) with its 95 % t interval: [mean, low, high]. Written
    apart from ``launch.evaluation.intervals.paired_gain`` so that the page is not checked against the code that
    printed it."""
    diffs = [a - b for b, a in zip(before, after, strict=True)]
    mean = statistics.mean(diffs)
    half = T95[len(diffs) - 1] * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return [mean, mean - half, mean + half]


def signed(value: float, digits: int = 3) -> str:
    """A figure as the pages print a signed one: '+0.344', '−0.007'."""
    return f"{value:+.{digits}f}".replace("-", "−")


def interval(figures: list[float]) -> str:
    """[mean, low, high] as the pages print a gain: '+0.344 [+0.025, +0.662]'."""
    mean, low, high = figures
    return f"{signed(mean)} [{signed(low)}, {signed(high)}]"
