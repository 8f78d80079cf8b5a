"""The one metric schema (pure): every metric a run's readers print, plot or copy, with how and where.

Readers: ``launch.driver.run_log`` (the metrics rows' evaluation fields, the final table, the dashboard gauges'
descriptions), ``launch.evaluation.scoring`` (what an evaluation result copies from its episodes' statistics),
``hierarl eval`` (``launch/cli/eval.py``: its JSON record), sweeps (``launch/cli/sweep.py``: the curve points and
the results table) and ``hierarl view`` (``launch/view/page.py``: its figures). A new evaluation metric is one entry
here plus its computation (``launch.evaluation.episode_stats.evaluation_stats`` for a figure of the episodes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

EVAL_PREFIXES = ("eval_", "train_eval_")
"""The metric-key prefixes of the held-out panel's evaluation and the RL tasks' (``run_log.eval_fields``)."""


@dataclass(frozen=True)
class Metric:
    """One metric. ``key``: its key in an evaluation result (``PanelEvaluator.evaluate``), which a metrics row holds
    as ``eval_<key>`` (``train_eval_<key>``, ``eval_greedy_<key>``), or, not ``evaluation``, an RL iteration's own
    row key."""

    key: str
    fmt: str = ""
    """Format spec of a value in the tables ("": not a figure printed in a table: a label, a list)."""
    label: str = ""
    """What it is, in words: a sweep table's header, a legend, the dashboard gauge's description."""
    evaluation: bool = True
    column: str = ""
    """Its column in the run's final table ("": none); ``width``: the column's (0: the header's)."""
    width: int = 0
    interval: bool = False
    """Printed with its Wilson 95 % interval (``ci_low``, ``ci_high``) beside; a sweep reports its final and best."""
    optional: bool = False
    """Its final-table column is left out where no row has a value (the base model off: ``eval_base_model``)."""
    figure: str = ""
    """The ``hierarl view`` figure it is drawn in: ``success`` (with the baselines) or ``policy`` ("": none)."""
    from_episodes: bool = False
    """An evaluation's figure of its episodes (``evaluation_stats``), which its result copies as is."""

    def row_key(self, prefix: str = "eval_") -> str:
        return f"{prefix}{self.key}" if self.evaluation else self.key

    @property
    def gauge(self) -> str:
        """The dashboard gauge's description (``cluster.metrics.RunMetrics``)."""
        return self.label or self.key


METRICS: tuple[Metric, ...] = (
    Metric("success", ".3f", "train success", evaluation=False, column="train_success", figure="success"),
    Metric("success", ".3f", "eval success", column="eval_success", interval=True, figure="success"),
    Metric("ci_low", ".3f", "Wilson 95 % interval, low"),
    Metric("ci_high", ".3f", "Wilson 95 % interval, high"),
    Metric("n", "d", "panel tasks"),
    Metric("random", ".3f", "random policy", column="eval_random", figure="success"),
    Metric("base", ".3f", "base model", column="eval_base", optional=True),
    Metric("valid_format", ".2f", "valid format", column="eval_valid", from_episodes=True),
    Metric("subgoal_completion", ".2f", "subgoals completed", from_episodes=True),
    Metric(
        "won_turns", ".1f", "turns of a win", column="eval_won_turns", figure="policy", from_episodes=True
    ),
    Metric("dropped", "d", "tasks dropped"),
    Metric("samples", "d", "episodes a task"),
    Metric("temperature", "g", "sampling temperature"),
    Metric("panel", label="eval panel"),
    Metric("outcomes", label="outcome per task"),
    Metric("task_rates", label="success per task"),
    Metric("task_ids", label="panel task ids"),
    Metric("return", "+.2f", "train return", evaluation=False, column="return", width=7),
    Metric("time_iteration", ".1f", "iteration seconds", evaluation=False, column="iter_time_s", width=11),
    Metric("switch_rate", ".2f", "switch rate", evaluation=False, figure="policy"),
    Metric(
        "switch_agreement", ".2f", "agreement with the expert's switches", evaluation=False, figure="policy"
    ),
    Metric("expert_switch_rate", ".2f", "the expert's switch rate", evaluation=False, figure="policy"),
    Metric("valid_format", ".2f", "train valid format", evaluation=False, figure="policy"),
    Metric("entropy", ".2f", "entropy", evaluation=False, figure="policy"),
    Metric("segment_len", ".1f", "segment length", evaluation=False, figure="policy"),
)
"""Every metric, in the order of the metrics rows' evaluation fields and of the final table's columns. Its readers go
through the functions below, which read it when called."""


def eval_metrics() -> tuple[Metric, ...]:
    """The evaluation metrics, in the order of a metrics row's evaluation fields."""
    return tuple(m for m in METRICS if m.evaluation)


def columns() -> tuple[Metric, ...]:
    """The final table's columns, left to right."""
    return tuple(m for m in METRICS if m.column)


def in_figure(name: str) -> tuple[Metric, ...]:
    """The metrics ``hierarl view``'s figure ``name`` draws, in order."""
    return tuple(m for m in METRICS if m.figure == name)


def scalar_eval_metrics() -> tuple[Metric, ...]:
    """The evaluation metrics a sweep's curve points hold: the numeric ones of the final table."""
    return tuple(m for m in eval_metrics() if m.column and m.fmt)


def gauge_descriptions() -> dict[str, str]:
    """Row key → its dashboard gauge's description, every evaluation metric under each panel's prefix."""
    return dict(_described())


def _described() -> Iterator[tuple[str, str]]:
    for m in METRICS:
        if not m.fmt:
            continue
        prefixes = EVAL_PREFIXES if m.evaluation else ("",)
        for prefix in prefixes:
            where = (
                f" ({'RL tasks' if prefix == 'train_eval_' else 'held-out panel'})" if m.evaluation else ""
            )
            yield m.row_key(prefix), f"{m.gauge}{where}"
