"""Synchronous vs one-step-off training loop: time per RL iteration and where it goes.

Two ``hierarl train`` runs of one setting, identical except ``one_step_off`` (``<out>/sync``, ``<out>/one_step_off``;
a finished run is read, not re-run).  In the synchronous loop the rollout workers idle while the learner updates and
vice versa; one-step-off generates iteration k+1 during iteration k's update.  Iteration 1 is synchronous in both
(it follows BC's push), so the medians are over iterations 2..N.  Printed per mode: the median of each timed phase
(``rollout`` = waiting for the iteration's rollouts, ``rollout_wait`` = waiting after the update for the next
iteration's), the iteration time, its ratio to the synchronous one, and train success; written: ``<out>/pipeline.json``.

    python bench/bench_pipeline.py --out bench/results/pipeline --preset hiper_synthetic_small \\
        --set iterations=3 eval_every=0 eval_episodes=8 rollout.groups_per_iter=2 learner.ppo_epochs=1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from _env import setup
from bench_learning import ensure_run

setup()

PHASES = ("rollout", "logprobs", "values", "update", "rollout_wait", "push", "iteration")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default=None)
    p.add_argument("--set", nargs="*", default=[], help="key=value overrides for both runs")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, dict] = {}
    for mode in ("sync", "one_step_off"):
        history = ensure_run(out, mode, a.preset, [*a.set, f"one_step_off={mode != 'sync'}"])
        rl = [r for r in history if r.get("phase") == "rl" and r["iteration"] >= 2]
        if not rl:
            print(f"[bench] {mode}: no RL iteration after the first in {out / mode}", file=sys.stderr)
            return 1
        result[mode] = {
            "iterations": len(rl),
            "policy_lag": sorted({r.get("policy_lag", 0) for r in rl}),
            "success": statistics.fmean(r["success"] for r in rl),
            **{ph: statistics.median(r.get(f"time_{ph}", 0.0) for r in rl) for ph in PHASES},
        }
    base = result["sync"]["iteration"]
    for r in result.values():
        r["speedup"] = base / r["iteration"]
    print(
        f"\n{'mode':<13} {'n':>2} "
        + " ".join(f"{ph:>12}" for ph in PHASES)
        + f" {'speedup':>8} {'success':>8}"
    )
    for mode, r in result.items():
        cells = " ".join(f"{r[ph]:>11.1f}s" for ph in PHASES)
        print(f"{mode:<13} {r['iterations']:>2} {cells} {r['speedup']:>7.2f}x {r['success']:>8.3f}")
    (out / "pipeline.json").write_text(json.dumps({"args": vars(a), "result": result}, indent=1))
    print(f"[bench] wrote {out / 'pipeline.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
