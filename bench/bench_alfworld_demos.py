"""ALFWorld demonstrations: how often the hand-coded expert wins, and how well its commands align to the plan.

Every game of each split is played once by alfworld's hand-coded expert (``AlfWorldEnv.play_expert``: the code
``expert_plan()`` runs for behaviour cloning, its ties seeded by the task id) within ``--max-steps`` commands, and
its commands are aligned to the game's ALFRED high-level plan (``envs.alfworld_plan.align``). Per split and task
type: the outcomes (``aligned`` = won and every command assigned, a demonstration; ``unaligned`` = won, commands
after the last plan step; ``gave_up`` = the expert stopped; ``truncated`` = not won within the limit), the expert's
win rate, the share of won games whose every command is assigned, demonstrations won before the plan's last step
(a plan step without its command), games aligned out of plan order, navigation steps left empty, how often a
navigation segment ended at a receptacle of the plan's location type, and the commands and subtasks per
demonstration.

    python bench/bench_alfworld_demos.py                              # valid_seen + valid_unseen + 100 valid_train
    python bench/bench_alfworld_demos.py --splits valid_seen --limit 10 --out /tmp/demos.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

from bench_prompts import cpu_model  # noqa: E402

OUTCOMES = ("aligned", "unaligned", "gave_up", "truncated")


def play(env: Any, task_ids: list[str]) -> list[dict[str, Any]]:
    """One record per game: outcome, commands, plan steps, alignment facts, seconds."""
    from envs.alfworld_plan import GOTO, object_type, subtasks

    rows = []
    for n, task_id in enumerate(task_ids):
        t = time.perf_counter()
        demo = env.play_expert(task_id)
        a = demo.alignment
        gotos = [s for s in a.segments if s.anchor is None]
        rows.append(
            {
                "task_id": task_id,
                "task_type": demo.task_type,
                "outcome": demo.outcome,
                "commands": len(demo.actions),
                "plan": [s.pddl_action for s in demo.plan],
                "subtasks": [g for g, _ in subtasks(a)] if a.complete else [],
                "reordered": a.reordered,
                "empty_goto": len(a.empty),
                "plan_gotos": sum(s.pddl_action == GOTO for s in demo.plan),
                "goto_at_plan_location": sum(object_type(s.reached) == s.args[0] for s in gotos),
                "goto_segments": len(gotos),
                "unmatched": [demo.plan[i].pddl_action for i in a.unmatched],
                "unassigned": len(a.unassigned),
                "seconds": time.perf_counter() - t,
            }
        )
        print(
            f"  {n + 1}/{len(task_ids)} {demo.outcome:9s} {len(demo.actions):3d} cmds  {task_id}", flush=True
        )
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    counts = Counter(r["outcome"] for r in rows)
    won = counts["aligned"] + counts["unaligned"]
    demos = [r for r in rows if r["outcome"] == "aligned"]
    gotos = sum(r["goto_segments"] for r in demos)
    return {
        "games": len(rows),
        **{k: counts[k] for k in OUTCOMES},
        "expert_win_rate": won / len(rows) if rows else float("nan"),
        "all_assigned_of_won": counts["aligned"] / won if won else float("nan"),
        "won_before_plan_end": sum(bool(r["unmatched"]) for r in demos),
        "reordered": sum(r["reordered"] for r in demos),
        "empty_goto_steps": sum(r["empty_goto"] for r in demos),
        "plan_goto_steps": sum(r["plan_gotos"] for r in demos),
        "goto_at_plan_location": sum(r["goto_at_plan_location"] for r in demos) / gotos
        if gotos
        else float("nan"),
        "commands_mean": statistics.mean(r["commands"] for r in demos) if demos else float("nan"),
        "commands_max": max((r["commands"] for r in demos), default=0),
        "subtasks_mean": statistics.mean(len(r["subtasks"]) for r in demos) if demos else float("nan"),
        "seconds_per_game": statistics.mean(r["seconds"] for r in rows) if rows else float("nan"),
    }


def table(name: str, summary: dict[str, Any], by_type: dict[str, dict[str, Any]]) -> None:
    head = f"{'':24s} {'games':>5s} {'won':>6s} {'assigned':>8s} {'gave_up':>7s} {'trunc':>5s} {'unalig':>6s} {'cmds':>5s}"
    print(f"\n{name}\n{head}")
    for label, s in [*sorted(by_type.items()), ("all", summary)]:
        print(
            f"{label:24s} {s['games']:5d} {s['expert_win_rate']:6.3f} {s['all_assigned_of_won']:8.3f} "
            f"{s['gave_up']:7d} {s['truncated']:5d} {s['unaligned']:6d} {s['commands_mean']:5.1f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--splits", default="valid_seen,valid_unseen,valid_train")
    p.add_argument("--train-sample", type=int, default=100, help="games drawn (seed 0) from valid_train")
    p.add_argument("--limit", type=int, default=0, help="first N games of each split (0: all)")
    p.add_argument("--max-steps", type=int, default=50, help="the episode limit (the papers': 50)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "alfworld_demos.json")
    args = p.parse_args()
    from envs.alfworld import AlfWorldEnv

    env = AlfWorldEnv(max_steps=args.max_steps, expert="handcoded")
    report: dict[str, Any] = {"cpu_model": cpu_model(), "max_steps": args.max_steps, "splits": {}}
    t0 = time.perf_counter()
    try:
        for split in args.splits.split(","):
            ids = env.task_ids(split)
            if split == "valid_train" and args.train_sample and args.train_sample < len(ids):
                ids = sorted(random.Random(0).sample(ids, args.train_sample))
            if args.limit:
                ids = ids[: args.limit]
            print(f"{split}: {len(ids)} games", flush=True)
            rows = play(env, ids)
            types = sorted({r["task_type"] for r in rows})
            by_type = {t: summarise([r for r in rows if r["task_type"] == t]) for t in types}
            report["splits"][split] = {"summary": summarise(rows), "by_type": by_type, "games": rows}
    finally:
        env.close()
    report["wall_s"] = time.perf_counter() - t0
    for split, part in report["splits"].items():
        table(f"{split} (max_steps {args.max_steps})", part["summary"], part["by_type"])
    print(f"\nCPU {report['cpu_model']}; {report['wall_s']:.0f} s")
    write_json(args.out, report)


if __name__ == "__main__":
    main()
