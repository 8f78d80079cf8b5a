"""The main job end to end, one run per arm on the same host and seed, read from the runs' ``metrics.jsonl``
(nothing is trained here): wall time, each RL iteration's phase seconds, learner tokens, what it learned.

    python bench/main_job_ab.py --arm today=RUN_A --arm packed=RUN_B --out docs/results/learner_packing/ab.json

A run's wall time is the ``/usr/bin/time -f %e`` file beside it (``RUN.time``), the command's whole wall clock
(Ray's start and shutdown included). Ratios are first arm ÷ each other arm: how many times faster the other is.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _env import write_json

PHASES = ("rollout", "logprobs", "values", "update", "measure", "iteration")
PANELS = {"held_out": "eval_", "held_out_greedy": "eval_greedy_", "rl_tasks": "train_eval_"}


def arm(run: Path) -> dict:
    """One run's figures: its wall time, BC and RL phase seconds, tokens, and success before and after RL."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    bc = next(r for r in rows if r.get("phase") == "bc")
    rl = [r for r in rows if r.get("phase") == "rl"]
    last = next(r for r in reversed(rl) if "eval_task_rates" in r)
    wall = run.with_name(run.name + ".time")
    return {
        "run": run.name,
        "wall_s": float(wall.read_text().split()[-1]) if wall.exists() else None,
        "time_bc_eval_s": bc.get("time_eval"),
        "iterations": [
            {
                "success": r.get("success"),
                "kl_update": r.get("kl_update"),
                "learner_tokens_ratio": r.get("learner_tokens_ratio"),
                **{p: r.get(f"time_{p}") for p in PHASES},
            }
            for r in rl
        ],
        "sums_s": {p: sum(r.get(f"time_{p}") or 0.0 for r in rl) for p in PHASES},
        "success": {
            panel: {"bc": bc.get(f"{prefix}success"), "rl": last.get(f"{prefix}success")}
            for panel, prefix in PANELS.items()
        },
    }


def compare(arms: dict[str, dict]) -> dict:
    """The first arm's seconds ÷ each other arm's: whole run and each RL phase summed over the iterations."""
    (base, a), *others = arms.items()
    out = {}
    for name, b in others:
        ratios = {p: a["sums_s"][p] / b["sums_s"][p] for p in PHASES if b["sums_s"][p]}
        if a["wall_s"] and b["wall_s"]:
            ratios["wall"] = a["wall_s"] / b["wall_s"]
        out[f"{base} / {name}"] = ratios
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME=RUN_DIR, the baseline first")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    arms = {name: arm(Path(path)) for name, _, path in (x.partition("=") for x in a.arm)}
    result = {"arms": arms, "ratios": compare(arms)}
    for name, r in arms.items():
        sums = " ".join(f"{p} {v:.1f}" for p, v in r["sums_s"].items())
        print(f"{name:<10} wall {r['wall_s']} s | RL phases summed: {sums}")
    for pair, ratios in result["ratios"].items():
        print(f"{pair}: " + " ".join(f"{p} {v:.2f}x" for p, v in ratios.items()))
    if a.out:
        write_json(a.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
