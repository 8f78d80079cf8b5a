"""The per-task-type table each paper reports (ALFWorld's six types, ScienceWorld's task families, TextCraft's
depths, WebShop's score beside success, ...), success with its Wilson 95 % interval beside the random policy and the
zero-shot base model on the same tasks, the papers' wide layout (task types as columns, seen / unseen as rows), and
the paired comparison of two runs on one panel: pure, from trajectories and stored outcomes.

``hierarl eval RUN_DIR`` prints the tables and writes ``<run>/eval_<panel>.md`` / ``.csv`` / ``.json``;
``hierarl eval RUN_A RUN_B`` the paired comparison.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.trajectory import Trajectory
from launch.evaluation.intervals import paired, wilson
from learners.transitions import subgoal_counts


def task_type(traj: Trajectory) -> str:
    return str(traj.info.get("task_type") or "all")


def eval_rows(
    trajs: Sequence[Trajectory],
    random_success: Mapping[str, float],
    base_success: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """One row per task type (sorted) and a final ``all`` row: episodes, success with its Wilson 95 % interval
    (``ci_low``, ``ci_high``), mean score, valid-format rate, and the random policy's and the zero-shot base
    model's success on the same tasks (``random_success[type]``, ``base_success[type]``, nan where unknown; the
    ``all`` row weights the types by their episodes). Protocols with several roles also get ``valid_<role>`` per
    role (STEP-HRL's high-level subgoal validity, Multi2's planner and executor, ...), and protocols with sub-goal
    turns ``subgoals_done``: the share of issued sub-goals the acting role completed (``subgoal_rate``)."""
    base_success = base_success or {}
    by_type: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_type.setdefault(task_type(t), []).append(t)
    roles = sorted({turn.role for t in trajs for turn in t.turns} - {"agent"})
    counts = {id(t): subgoal_counts(t) for t in trajs}
    with_subgoals = any(issued for issued, _ in counts.values())

    def valid(turns: Sequence[Any]) -> float:
        return sum(turn.decision.valid for turn in turns) / len(turns) if turns else math.nan

    def row(name: str, members: Sequence[Trajectory], chance: float, base: float) -> dict[str, Any]:
        turns = [turn for t in members for turn in t.turns]
        wins = sum(t.won for t in members)
        lo, hi = wilson(wins, len(members))
        return {
            "task_type": name,
            "episodes": len(members),
            "success": wins / max(1, len(members)),
            "ci_low": lo,
            "ci_high": hi,
            "score": sum(t.score for t in members) / max(1, len(members)),
            "valid_format": sum(turn.decision.valid for turn in turns) / max(1, len(turns)),
            "random": chance,
            "base": base,
            **{f"valid_{role}": valid([t for t in turns if t.role == role]) for role in roles},
            **({"subgoals_done": subgoal_rate([counts[id(t)] for t in members])} if with_subgoals else {}),
        }

    rows = [
        row(k, v, random_success.get(k, math.nan), base_success.get(k, math.nan))
        for k, v in sorted(by_type.items())
    ]
    if len(rows) > 1 or not rows or rows[0]["task_type"] != "all":
        total = max(1, sum(r["episodes"] for r in rows))
        chance = sum(r["random"] * r["episodes"] for r in rows) / total
        base = sum(r["base"] * r["episodes"] for r in rows) / total
        rows.append(row("all", list(trajs), chance, base))
    return rows


def subgoal_rate(counts: Sequence[tuple[int, int]]) -> float:
    """Completed / issued sub-goals over ``subgoal_counts`` pairs (nan when none was issued)."""
    issued = sum(i for i, _ in counts)
    return sum(c for _, c in counts) / issued if issued else math.nan


def eval_markdown(rows: Sequence[dict[str, Any]], title: str) -> str:
    roles = [k for k in rows[0] if k.startswith("valid_") and k != "valid_format"] if rows else []
    roles += ["subgoals_done"] if rows and "subgoals_done" in rows[0] else []
    extra = "".join(
        f" valid {k[len('valid_') :]} |" if k.startswith("valid_") else " subgoals done |" for k in roles
    )
    lines = [
        f"{title}",
        "",
        f"| task type | episodes | success [95 % Wilson] | score | valid format | random policy | base model |{extra}",
        "|---|---|---|---|---|---|---|" + "---|" * len(roles),
    ]
    for r in rows:
        lines.append(
            f"| {r['task_type']} | {r['episodes']} | {r['success']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
            f"{r['score']:.3f} | {r['valid_format']:.2f} | {r['random']:.3f} | {r['base']:.3f} |"
            + "".join(f" {r[k]:.2f} |" for k in roles)
        )
    return "\n".join(lines) + "\n"


def paper_table(panels: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> str:
    """The papers' layout: one row per panel (ALFWorld seen / unseen), one column per task type and ``all``,
    success in each cell (``all`` with its Wilson 95 % interval), and the random policy's and base model's rows
    under each panel's."""
    types = sorted({r["task_type"] for _, rows in panels for r in rows} - {"all"})
    head = f"| panel | {' | '.join(types)} | all |"
    lines = [head, "|---|" + "---|" * (len(types) + 1)]
    for label, rows in panels:
        by = {r["task_type"]: r for r in rows}
        total = by.get("all") or (rows[-1] if rows else {})

        def cells(key: str, by: dict[str, dict[str, Any]] = by) -> str:
            return " | ".join(f"{by[t][key]:.3f}" if t in by else "" for t in types)

        ci = f" [{total['ci_low']:.3f}, {total['ci_high']:.3f}]" if total else ""
        lines.append(f"| {label} | {cells('success')} | {total.get('success', math.nan):.3f}{ci} |")
        lines.append(f"| random policy | {cells('random')} | {total.get('random', math.nan):.3f} |")
        lines.append(f"| base model | {cells('base')} | {total.get('base', math.nan):.3f} |")
    return "\n".join(lines) + "\n"


def write_eval(rows: Sequence[dict[str, Any]], markdown: str, path_stem: Path) -> None:
    """``<stem>.md`` and ``<stem>.csv``."""
    path_stem.with_suffix(".md").write_text(markdown)
    with open(path_stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@dataclass(frozen=True)
class RunOutcomes:
    """One run's per-task outcomes on a panel: its label (``name@version``, ``[:N]`` for a prefix), one character
    per task in panel order (``1`` won, ``0`` lost, ``-`` not played), and where they were read."""

    label: str
    outcomes: str
    source: str

    @property
    def panel(self) -> str:
        """The panel without its prefix: two runs compare where this is equal."""
        return self.label.split("[", 1)[0]


def run_outcomes(run_dir: Path, panel: str | None = None) -> RunOutcomes | None:
    """A run's outcomes: from ``hierarl eval``'s ``eval_<panel>.json`` when ``panel`` names one, else its last
    metrics row with an evaluation (on ``panel`` if given). None: nothing on that panel."""
    if panel is not None:
        path = run_dir / f"eval_{panel}.json"
        if path.exists():
            data = json.loads(path.read_text())
            return RunOutcomes(data["panel"], data["outcomes"], str(path))
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line] if metrics.exists() else []
    for r in reversed(rows):
        label = r.get("eval_panel")
        if label and "eval_outcomes" in r and (panel is None or label.split("@", 1)[0] == panel):
            where = f"{metrics} ({r.get('phase', '')} {r.get('iteration', '')})"
            return RunOutcomes(label, r["eval_outcomes"], where)
    return None


def paired_rows(a: str, b: str, task_types: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Per task type (if ``task_types``, one per task in panel order) and ``all``: the two runs' per-task outcomes
    compared on the tasks both played (the shorter prefix), ``launch.evaluation.intervals.paired`` with its exact sign test."""
    n = min(len(a), len(b))
    keys = [i for i in range(n) if a[i] != "-" and b[i] != "-"]
    groups: dict[str, list[int]] = {}
    if task_types is not None:
        for i in keys:
            groups.setdefault(task_types[i], []).append(i)
    rows = []
    for name, idx in [*(sorted(groups.items()) if len(groups) > 1 else []), ("all", keys)]:
        p = paired({i: a[i] == "1" for i in idx}, {i: b[i] == "1" for i in idx})
        rows.append(
            {
                "task_type": name,
                "tasks": p.n,
                "a_success": p.a_rate,
                "b_success": p.b_rate,
                "a_only": p.a_only,
                "b_only": p.b_only,
                "both": p.both,
                "neither": p.neither,
                "sign_test_p": p.p,
            }
        )
    return rows


def paired_markdown(rows: Sequence[dict[str, Any]], title: str) -> str:
    lines = [
        title,
        "",
        "| task type | tasks | A success | B success | A won, B lost | B won, A lost | both won | neither | sign test p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task_type']} | {r['tasks']} | {r['a_success']:.3f} | {r['b_success']:.3f} | {r['a_only']} | "
            f"{r['b_only']} | {r['both']} | {r['neither']} | {r['sign_test_p']:.3f} |"
        )
    lines += [
        "",
        "sign test p: two-sided exact binomial on the tasks where A and B differ (= exact McNemar).",
    ]
    return "\n".join(lines) + "\n"
