"""The per-task-type table each paper reports (ALFWorld's six types, ScienceWorld's task families, TextCraft's
depths, WebShop's score beside success, ...), beside the random policy on the same tasks: pure, from trajectories.

``hierarl eval RUN_DIR`` prints it and writes ``<run>/eval_<split>.md`` / ``.csv``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from actors.trajectory import Trajectory
from learners.transitions import subgoal_counts


def task_type(traj: Trajectory) -> str:
    return str(traj.info.get("task_type") or "all")


def eval_rows(trajs: Sequence[Trajectory], random_success: Mapping[str, float]) -> list[dict[str, Any]]:
    """One row per task type (sorted) and a final ``all`` row: episodes, success, mean score, valid-format rate
    and the random policy's success on the same tasks (``random_success[type]``, nan where unknown; the ``all``
    row weights the types by their episodes). Protocols with several roles also get ``valid_<role>`` per role
    (STEP-HRL's high-level subgoal validity, Multi2's planner and executor, ...), and protocols with sub-goal turns
    ``subgoals_done``: the share of issued sub-goals the acting role completed (``subgoal_rate``)."""
    by_type: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_type.setdefault(task_type(t), []).append(t)
    roles = sorted({turn.role for t in trajs for turn in t.turns} - {"agent"})
    counts = {id(t): subgoal_counts(t) for t in trajs}
    with_subgoals = any(issued for issued, _ in counts.values())

    def valid(turns: Sequence[Any]) -> float:
        return sum(turn.decision.valid for turn in turns) / len(turns) if turns else math.nan

    def row(name: str, members: Sequence[Trajectory], chance: float) -> dict[str, Any]:
        turns = [turn for t in members for turn in t.turns]
        return {
            "task_type": name,
            "episodes": len(members),
            "success": sum(t.won for t in members) / max(1, len(members)),
            "score": sum(t.score for t in members) / max(1, len(members)),
            "valid_format": sum(turn.decision.valid for turn in turns) / max(1, len(turns)),
            "random": chance,
            **{f"valid_{role}": valid([t for t in turns if t.role == role]) for role in roles},
            **({"subgoals_done": subgoal_rate([counts[id(t)] for t in members])} if with_subgoals else {}),
        }

    rows = [row(k, v, random_success.get(k, math.nan)) for k, v in sorted(by_type.items())]
    if len(rows) > 1 or not rows or rows[0]["task_type"] != "all":
        total = sum(r["episodes"] for r in rows)
        chance = sum(r["random"] * r["episodes"] for r in rows) / max(1, total)
        rows.append(row("all", list(trajs), chance))
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
        f"| task type | episodes | success | score | valid format | random policy |{extra}",
        "|---|---|---|---|---|---|" + "---|" * len(roles),
    ]
    for r in rows:
        lines.append(
            f"| {r['task_type']} | {r['episodes']} | {r['success']:.3f} | {r['score']:.3f} | "
            f"{r['valid_format']:.2f} | {r['random']:.3f} |" + "".join(f" {r[k]:.2f} |" for k in roles)
        )
    return "\n".join(lines) + "\n"


def write_eval(rows: Sequence[dict[str, Any]], markdown: str, path_stem: Path) -> None:
    """``<stem>.md`` and ``<stem>.csv``."""
    path_stem.with_suffix(".md").write_text(markdown)
    with open(path_stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
