"""hierarl metrics on the Ray dashboard: every numeric field of a run's metrics rows as a ``ray.util.metrics`` gauge.

The driver calls ``RunMetrics.record(row)`` with each row it writes to ``metrics.jsonl`` (the RL, BC, eval and
zero-shot rows: success, return, valid-format rate, KL, entropy, switch rate, segment length, tokens, policy version
and lag, phase times, the workers' cumulative fault counters ``total_*``, ...). Each field ``x`` becomes the gauge
``hierarl_x`` (Ray exports it as ``ray_hierarl_x``), tagged ``run``, ``algo``, ``env`` and ``phase``, so the
dashboard's Metrics view (Prometheus + Grafana, ``ray metrics launch-prometheus``) or a scrape of the node's metrics
export port plots a run live and tells runs of a sweep apart. JSONL and TensorBoard stay the record of a run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ray.util.metrics import Gauge

TAG_KEYS: tuple[str, ...] = ("run", "algo", "env", "phase")
_BAD = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(key: str) -> str:
    """``hierarl_<key>`` with every character Prometheus does not allow replaced by ``_``."""
    return "hierarl_" + _BAD.sub("_", key)


class RunMetrics:
    """One run's gauges, created on first use (a metric name is declared once per process)."""

    def __init__(self, run: str, algo: str, env: str, descriptions: Mapping[str, str] | None = None) -> None:
        """``descriptions``: field → what its gauge shows (the driver's metric schema); others say their field."""
        self.tags = {"run": run, "algo": algo, "env": env}
        self.descriptions = dict(descriptions or {})
        self._gauges: dict[str, Gauge] = {}

    def record(self, row: dict[str, Any]) -> None:
        tags = {**self.tags, "phase": str(row.get("phase", ""))}
        for key, value in row.items():
            if (
                isinstance(value, bool) or not isinstance(value, int | float) or value != value
            ):  # NaN: no reading
                continue
            name = metric_name(key)
            if name not in self._gauges:
                what = f": {self.descriptions[key]}" if key in self.descriptions else ""
                self._gauges[name] = Gauge(
                    name, description=f"hierarl {key}{what} (metrics.jsonl)", tag_keys=TAG_KEYS
                )
            self._gauges[name].set(float(value), tags=tags)
