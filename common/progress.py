"""Live progress lines for long phases (rollouts, log-prob/value passes, updates): no phase stays silent for long.

Plain Python: the rollout worker and the learner group print through it; inside a Ray actor the lines reach the
driver's output (``log_to_driver``), prefixed with the actor.
"""

from __future__ import annotations

import time


def small_text(x: float, decimals: int = 3) -> str:
    """``x`` with ``decimals`` decimals, or two significant digits below ``10**-decimals``: a KL of a small update
    prints ``9.9e-06``, not ``0.0000``, which reads as an update that moved nothing."""
    return f"{x:.{decimals}f}" if x == 0 or abs(x) >= 10.0**-decimals else f"{x:.1e}"


class Ticker:
    """Live progress of a long learner phase: a line at most every ``every`` seconds (so no phase is silent for
    longer), and a closing line if any was printed."""

    def __init__(self, what: str, total: int, unit: str, every: float = 10.0) -> None:
        self.what, self.total, self.unit, self.every = what, total, unit, every
        self.done, self.t0 = 0, time.perf_counter()
        self.last, self.printed = self.t0, False

    def advance(self, n: int, note: str = "") -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= self.every and self.done < self.total:
            self._print(note)
            self.last = now

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def close(self, note: str = "") -> None:
        if self.printed:
            self._print(note)

    def _print(self, note: str) -> None:
        self.printed = True
        print(
            f"[hierarl]   {self.what}: {self.done}/{self.total} {self.unit} ({self.elapsed:.0f}s)"
            f"{' ' + note if note else ''}",
            flush=True,
        )
