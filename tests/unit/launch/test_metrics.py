"""The metric schema (``launch/evaluation/metrics.py``): one entry reaches every reader, so a new evaluation metric
is that entry plus its computation. Each reader is asked here, not its code: the evaluation's result, the metrics
row, the final table, ``hierarl view``'s figure, a sweep's summary and results table, the dashboard gauges."""

from __future__ import annotations

import dataclasses

import pytest

from actors.trajectory import Trajectory
from launch.cli.sweep import SweepSpec, cells, summarize, write_table
from launch.config import resolve_config
from launch.driver.run_log import eval_fields, final_table
from launch.evaluation import metrics
from launch.evaluation.metrics import Metric, gauge_descriptions
from launch.evaluation.panels import load_panel
from launch.evaluation.scoring import Evaluation, scope
from launch.view.page import policy_figure
from launch.view.run_data import RunView

EXTRA = Metric(
    "turns_left", ".1f", "turns left", column="eval_turns_left", figure="policy", from_episodes=True
)
"""A made-up evaluation metric of the episodes, with a final-table column and a place in a figure."""


@pytest.fixture
def extra(monkeypatch, tmp_path):
    monkeypatch.setenv("HIERARL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, EXTRA))


def evaluated(stats: dict[str, float]) -> dict:
    """An evaluation result of 2 panel tasks (the first won) whose episodes' statistics are ``stats``."""
    cfg = resolve_config(None, ["env.name=synthetic", "eval_baselines=false"])
    panel = load_panel("synthetic_multi_test").head(2)
    trajs = [
        Trajectory(f"t{i}", f"g{i}", t.task_id, "synthetic", won=i == 0, info={"seed": t.seed})
        for i, t in enumerate(panel.tasks)
    ]
    return Evaluation(scope(cfg), "model").result(panel, trajs, stats)


def test_one_entry_reaches_every_reader(extra, tmp_path):
    ev = evaluated({"valid_format": 1.0, "turns_left": 2.5, "not_in_the_schema": 7.0})
    assert ev["turns_left"] == 2.5 and "not_in_the_schema" not in ev
    row = {"phase": "rl", "iteration": 2, "success": 0.5, **eval_fields(ev)}
    assert (
        row["eval_turns_left"] == 2.5
        and eval_fields(ev, prefix="train_eval_")["train_eval_turns_left"] == 2.5
    )
    header, line = final_table([row]).splitlines()[1:3]
    assert header.split()[-3:] == ["return", "iter_time_s", "eval_turns_left"] and line.split()[-1] == "2.5"
    names = [t["name"] for t in policy_figure([RunView("a", [row])])["data"]]
    assert "a eval_turns_left" in names
    (cell,) = cells(SweepSpec(out=str(tmp_path), grid={"seed": [0]}))
    (summary,) = summarize([(cell, [row])])
    assert summary["turns_left"] == 2.5
    table = write_table([summary], tmp_path / "sweep")
    assert "| turns left |" in table and "| 2.5 |" in table
    assert gauge_descriptions()["train_eval_turns_left"] == "turns left (RL tasks)"


def test_without_the_entry_no_reader_shows_it(tmp_path):
    """The same figure of the episodes, outside the schema, reaches no reader (the entry is what carries it)."""
    ev = evaluated({"valid_format": 1.0, "turns_left": 2.5})
    assert "turns_left" not in ev and "eval_turns_left" not in final_table(
        [{"phase": "rl", **eval_fields(ev)}]
    )


def test_every_final_table_column_and_figure_entry_is_numeric_and_named():
    """A column or a figure needs a format (what is printed, plotted, gauged) and a label or a header."""
    for m in metrics.METRICS:
        if m.column or m.figure:
            assert m.fmt and m.label, m
    keys = [(m.key, m.evaluation) for m in metrics.METRICS]
    assert len(keys) == len(set(keys))  # one entry a metric
    assert [m.column for m in metrics.columns()][:2] == ["train_success", "eval_success"]
    assert dataclasses.replace(EXTRA, evaluation=False).row_key("eval_") == "turns_left"
