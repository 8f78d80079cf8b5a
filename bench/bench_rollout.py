"""Rollout machinery cost and per-protocol prompt cost: the numbers behind worker sizing and protocol choice.

(a) Throughput.  ``ray.remote(RolloutWorker)`` actors (1 and 2, in-process synthetic envs) collect groups; we report
env steps/s and generated tokens/s over the whole collection (driver wall clock), next to the *raw* engine
replaying exactly the batches the workers sent to ``engine.generate`` (same prompt ids, same batch sizes, same
sampling params) in this process, alone.  ``ratio`` = rollout tokens/s / raw tokens/s: below 1 is the overhead of
the rollout machinery (Ray call, env steps, prompt rendering, response decoding, masks); with 2 workers on 2 cores
it also holds the parallel gain.  ``gen share`` = time inside ``engine.generate`` / worker wall time.  Medians over
``--repeats`` collections after one warm-up collection.

(b) Token efficiency.  Prompt tokens per model call against the env-step index for ReAct, HiPER (plan_execute),
HIPIF and STEP-HRL (sum over its high/low/progress calls per env step, and per role) on the SAME expert
trajectories -- the comparison behind STEP-HRL Fig. 3 and HIPIF Fig. 4.  Each trajectory is played once by the
env's expert (ALFWorld: hand-coded expert; ScienceWorld: gold action sequence), cut into subgoals by a fixed rule
(``split_subgoals``), then replayed for every protocol through the real rollout loop with ``ExpertEngine`` (as
``actors.demos.collect_demonstrations`` does), so the prompts are those the real prompt builders render.
Tokenizer: SmolLM2's chat template.

    python bench/bench_rollout.py --engines hf,vllm --repeats 3 --out bench/results/rollout.json
    python bench/bench_rollout.py --skip-throughput --alfworld-games 3 --sciworld-tasks boil:0,find-plant:0

Environment: ``OMP_NUM_THREADS=1``, ``RAY_AUTH_MODE=disabled``, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` and the
vLLM-cpu variables of docs/platform.md are set (``setdefault``) before anything is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

from _env import setup

ROOT = setup()

from rollout_throughput import run_throughput  # noqa: E402
from rollout_tokens import run_token_efficiency, token_table  # noqa: E402


def print_throughput(results: dict[str, Any]) -> None:
    head = [
        "engine",
        "workers",
        "env st/s",
        "tok/s",
        "raw tok/s",
        "ratio",
        "gen share",
        "startup s",
        "prompt tok",
    ]
    rows = []
    for kind, by_w in results.items():
        for w, r in by_w.items():
            rows.append(
                [
                    kind,
                    w,
                    f"{r['steps_per_s']:.1f}",
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['raw']['tokens_per_s']:.0f}",
                    f"{r['ratio']:.2f}",
                    f"{r['gen_share']:.2f}",
                    f"{r['startup_s']:.1f}",
                    f"{r['mean_prompt_tokens']:.0f}",
                ]
            )
    print_rows(head, rows)


def print_rows(head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results/rollout.json")
    parser.add_argument("--model", default="tiny", help='"tiny", "smollm2" or an HF folder')
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--protocol", default="react")
    parser.add_argument("--tasks", type=int, default=4, help="synthetic tasks per worker per collection")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=4, help="env slots per worker (max batch size)")
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-tokens", action="store_true")
    parser.add_argument("--alfworld-games", type=int, default=3, help="valid_seen games, one per task type")
    parser.add_argument("--sciworld-tasks", default="find-plant:0,chemistry-mix:0")
    parser.add_argument("--demo-max-steps", type=int, default=60)
    args = parser.parse_args()
    args.engines = [e for e in args.engines.split(",") if e]
    args.workers = [int(w) for w in args.workers.split(",")]
    args.sciworld_tasks = [t for t in args.sciworld_tasks.split(",") if t]
    out: dict[str, Any] = {}
    if not args.skip_throughput:
        out["throughput"] = run_throughput(args)
        print(
            f"\nrollout throughput: {args.model}, {args.protocol} on synthetic, T=1, {args.max_new_tokens} new tok"
        )
        print_throughput(out["throughput"])
    if not args.skip_tokens:
        out["token_efficiency"] = {"tasks": run_token_efficiency(args), "tables": {}}
        for env_name, per_task in out["token_efficiency"]["tasks"].items():
            head, rows, summary = token_table(per_task)
            out["token_efficiency"]["tables"][env_name] = summary
            ok = sum(e["expert_won"] for e in per_task.values())
            print(f"\nprompt tokens per env step, {env_name} ({ok}/{len(per_task)} expert trajectories won)")
            print_rows(head, rows)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    path.write_text(json.dumps({"machine": machine, "settings": settings, **out}, indent=2, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
