"""The tables ``bench_learning.py`` prints and writes, from the runs' logged rows: one curve per run (a point per
BC / RL phase), the mean and interval over seeds per point, each seed's paired RL gain over its BC start and the
tasks' changes averaged over seeds (``gain_table``), and method against method after RL (``contrast_table``); the
task is the unit of every interval (``launch.evaluation.intervals``)."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from launch.evaluation.intervals import paired_gain, seed_mean


def curve(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per logged phase: label, RL iteration (-1 zero-shot, 0 BC), train and eval success."""
    points = []
    for r in history:
        phase = r.get("phase")
        if phase not in ("zero-shot", "bc", "rl"):
            continue
        points.append(
            {
                "label": phase if phase != "rl" else f"rl {r['iteration']}",
                "iteration": int(r["iteration"]),
                "train_success": r.get("success"),
                "eval_success": r.get("eval_success"),
                "rl_tasks_success": r.get("train_eval_success"),
                "eval_task_rates": r.get("eval_task_rates"),
                "rl_task_rates": r.get("train_eval_task_rates"),
                "eval_samples": r.get("eval_samples"),
                "rl_task_samples": r.get("train_eval_samples"),
                "eval_random": r.get("eval_random"),
                "eval_base": r.get("eval_base"),
                "valid_format": r.get("valid_format", r.get("eval_valid_format")),
                "time_iteration": r.get("time_iteration", r.get("wall_s")),
            }
        )
    return points


def aggregate(curves: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Mean, (population) std and the 95 % t-interval's half-width (``_ci95``, ``launch.evaluation.intervals.seed_mean``) over
    seeds at every label all runs share; a missing or NaN value (an offline algorithm's train success: it collects
    no episodes) is left out."""
    labels = [p["label"] for p in curves[0]]
    out = []
    for i, label in enumerate(labels):
        row: dict[str, Any] = {"label": label, "iteration": curves[0][i]["iteration"]}
        for key in ("train_success", "eval_success", "rl_tasks_success", "eval_random", "eval_base"):
            vals = [
                c[i][key]
                for c in curves
                if i < len(c) and c[i].get(key) is not None and not math.isnan(c[i][key])
            ]
            if vals:
                row[key] = statistics.fmean(vals)
                row[key + "_std"] = statistics.pstdev(vals) if len(vals) > 1 else 0.0
                row[key + "_ci95"] = seed_mean(vals).half if len(vals) > 1 else 0.0
                row[key + "_n"] = len(vals)
        out.append(row)
    return out


def eval_gain(c: list[dict[str, Any]]) -> float | None:
    """Eval success at the last evaluated point minus after BC (None without both): one seed's paired gain."""
    evals = [p for p in c if p["eval_success"] is not None]
    start = [p["eval_success"] for p in evals if p["label"] == "bc"]
    if not start or evals[-1]["label"] == "bc":
        return None
    return evals[-1]["eval_success"] - start[0]


def final_rates(c: list[dict[str, Any]], key: str) -> list[float] | None:
    """Per-task success rates (``key``: ``rl_task_rates`` or ``eval_task_rates``) at the last evaluation after BC."""
    return next((p[key] for p in reversed(c) if p["label"] != "bc" and p.get(key)), None)


def task_gain(c: list[dict[str, Any]], key: str) -> list[float] | None:
    """Per-task success rates at the last evaluated point minus after BC (``key``: ``rl_task_rates`` or
    ``eval_task_rates``), None without both: what ``launch.evaluation.intervals.paired_gain`` reads."""
    start = next((p[key] for p in c if p["label"] == "bc" and p.get(key)), None)
    end = final_rates(c, key)
    if start is None or end is None or len(start) != len(end):
        return None
    return [b - a for a, b in zip(start, end, strict=True)]


def gain_table(curves: dict[str, list[list[dict[str, Any]]]], names: dict[str, list[str]]) -> dict[str, Any]:
    """Per label and panel: each seed's paired RL gain over BC (mean per-task change with its t-interval over tasks,
    ``paired_gain``), and the tasks' changes averaged over seeds with a t-interval over tasks (the task the unit;
    seeds of one task are not independent evidence)."""
    out: dict[str, Any] = {}
    for label, cs in curves.items():
        for key, panel in (("rl_task_rates", "rl_tasks"), ("eval_task_rates", "held_out")):
            diffs = [
                (n, d) for n, c in zip(names[label], cs, strict=True) if (d := task_gain(c, key)) is not None
            ]
            if not diffs:
                continue
            per_seed = {n: paired_gain([0.0] * len(d), d).__dict__ for n, d in diffs}
            same = {len(d) for _, d in diffs}
            pooled = None
            if len(same) == 1:
                mean_per_task = [sum(d[i] for _, d in diffs) / len(diffs) for i in range(same.pop())]
                pooled = paired_gain([0.0] * len(mean_per_task), mean_per_task).__dict__
            out[f"{label}/{panel}"] = {"per_seed": per_seed, "over_seeds_by_task": pooled}
    return out


def contrast_table(runs: dict[str, list[dict[str, Any]]], a: str, b: str) -> dict[str, Any]:
    """Per panel: label ``a``'s per-task success after RL minus label ``b``'s, on every seed both ran (the same
    tasks from the same BC start, ``--shared-bc`` or ``bc.from_run``: paired by task), with its t-interval over
    tasks, and the tasks' differences averaged over those seeds with a t-interval over tasks."""
    seeds = sorted(
        int(m.group(1))
        for n in runs
        if (m := re.fullmatch(rf"{re.escape(a)}_seed(\d+)", n)) and f"{b}_seed{m.group(1)}" in runs
    )
    out: dict[str, Any] = {}
    for key, panel in (("rl_task_rates", "rl_tasks"), ("eval_task_rates", "held_out")):
        pairs = {
            s: (ra, rb)
            for s in seeds
            if (ra := final_rates(runs[f"{a}_seed{s}"], key))
            and (rb := final_rates(runs[f"{b}_seed{s}"], key))
        }
        if not pairs:
            continue
        per_seed = {s: paired_gain(rb, ra).__dict__ for s, (ra, rb) in pairs.items()}
        same = {len(ra) for ra, _ in pairs.values()}
        pooled = None
        if len(same) == 1:
            d = [statistics.fmean(ra[i] - rb[i] for ra, rb in pairs.values()) for i in range(same.pop())]
            pooled = paired_gain([0.0] * len(d), d).__dict__
        out[f"{a}-{b}/{panel}"] = {"per_seed": per_seed, "over_seeds_by_task": pooled}
    return out
