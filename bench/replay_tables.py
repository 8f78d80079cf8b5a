"""What ``bench/bench_replay.py`` prints: a line per replayed row as it ends, then the markdown tables (update KL per
token group, Δ log P of the expert's decisions, the controls' first-order and sign-independent parts, per role)."""

from __future__ import annotations

from typing import Any


def row_line(row: dict[str, Any]) -> str:
    m, p = row["metrics"], row["probe"]
    return (
        f"[replay] {row['variant']:<16} kl {m.get('kl_update', 0):.5f} switch {m.get('kl_update/switch', 0):.5f} "
        f"action {m.get('kl_update/action', 0):.5f} | dlogP action {p.get('action/all', 0):+.4f} switch "
        f"{p.get('switch/all', 0):+.4f}"
        + (
            f" | A mean {m['adv_mean']:+.4f} sd {m['adv_std']:.4f} >0 {m['adv_pos_share']:.2f}"
            if "adv_std" in m
            else ""
        )
        + f" ({row['wall_s']:.0f}s)"
    )


TABLE_KL = (
    "kl_update",
    "kl_update/switch",
    "kl_update/subgoal",
    "kl_update/subgoal_keep",
    "kl_update/action",
)
TABLE_PROBE = (
    "action/all",
    "action/turn0",
    "action/keep",
    "action/greedy_wrong",
    "action/greedy_right",
    "switch/keep",
    "subgoal/switch",
    "response/keep",
    "train/action/all",
)


def table(out: dict[str, Any]) -> str:
    """Markdown: one row per variant; update KL per token group (x1e3), then Δ log P(expert) on the probe."""
    head = ["variant", *(c.replace("kl_update", "KL").replace("/", " ") for c in TABLE_KL), "steps"]
    head += [f"dlogP {c.replace('/', ' ')}" for c in TABLE_PROBE]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in out["rows"]:
        m, p = row["metrics"], row["probe"]
        cells = [row["variant"], *(f"{1e3 * m.get(c, float('nan')):.2f}" for c in TABLE_KL)]
        cells.append(f"{m.get('optimizer_steps', 0):.0f}")
        cells += [f"{p.get(c, float('nan')):+.3f}" for c in TABLE_PROBE]
        lines.append("| " + " | ".join(cells) + " |")
    lines += controls_table(out["rows"])
    role_cols = sorted({c for row in out["rows"] for c in row["probe"] if "." in c.split("/")[0]})
    if role_cols:  # several roles: Δ log P of each role's blocks, every state of that role
        lines += [
            "",
            "| variant | " + " | ".join(f"dlogP {c.removesuffix('/all')}" for c in role_cols) + " |",
        ]
        lines.append("|" + "---|" * (len(role_cols) + 1))
        for row in out["rows"]:
            cells = [row["variant"], *(f"{row['probe'].get(c, float('nan')):+.3f}" for c in role_cols)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def controls_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: for each variant replayed with its controls (``--controls``), the update KL of it and its
    negated twin, and on the probe's action blocks its first-order part (Δ − Δ_neg) / 2, its sign-independent part
    (Δ + Δ_neg) / 2 and the zero-advantage row's Δ (what the optimizer and the KL term do with no signal)."""
    by = {r["variant"]: r for r in rows}
    cols = ("action/all", "action/turn0", "action/keep", "action/greedy_wrong", "train/action/all")
    lines = []
    for name, row in by.items():
        neg, zero = by.get(f"{name}/neg"), by.get(f"{name}/zero")
        if neg is None or zero is None:
            continue
        if not lines:
            head = ["variant", "KL ×1e3", "KL neg ×1e3", "KL zero ×1e3"]
            head += [f"{kind} {c}" for c in cols for kind in ("first-order", "sign-indep.", "zero")]
            lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        cells = [name] + [
            f"{1e3 * r['metrics'].get('kl_update', float('nan')):.2f}" for r in (row, neg, zero)
        ]
        for c in cols:
            a, b = row["probe"].get(c, float("nan")), neg["probe"].get(c, float("nan"))
            cells += [
                f"{(a - b) / 2:+.3f}",
                f"{(a + b) / 2:+.3f}",
                f"{zero['probe'].get(c, float('nan')):+.3f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
