"""Synchronous vs one-step-off vs asynchronous training loops: time per RL iteration and where it goes.

``hierarl train`` runs of one setting that differ only in the loop (``<out>/<mode>``; a finished run is read, not
re-run): ``sync`` (the rollout workers idle while the learner updates and vice versa), ``one_step_off`` (iteration
k+1 generates during iteration k's update; the push waits for it) and ``async<k>`` (``max_staleness=k``: the workers
never wait, pushes land between generation rounds, groups are taken as they finish).  All on the same cores:
``cpu_threads`` auto gives each phase of the synchronous loop every core and the overlapping loops one per worker;
``<mode>@<n>`` runs a mode with ``cpu_threads=n`` in every worker (``async1@2``: rollout and learner both take
both cores, leaving the OS to share them; their run folder is ``<out>/<mode>@<n>``).
Iteration 1 follows BC's push in every mode, so the medians are over iterations 2..N.  Printed per mode: the median
of each timed phase (``rollout`` = waiting for the iteration's groups, ``rollout_wait`` = one-step-off's wait after
the update), the iteration time, its ratio to the synchronous one, the policy lag, groups dropped as stale, and
train success; written: ``<out>/pipeline.json``.  ``env.options`` with ``step_latency_s``/``latency_sigma`` give
the synthetic env slow, long-tailed steps::

    python bench/bench_pipeline.py --out bench/results/pipeline --preset hiper_synthetic_small \\
        --modes sync,one_step_off,async1,async2 \\
        --set iterations=4 eval_every=0 rollout.groups_per_iter=2 learner.ppo_epochs=1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from _env import setup
from bench_learning import ensure_run
from bench_prompts import cpu_model

setup()

PHASES = ("rollout", "logprobs", "values", "update", "rollout_wait", "push", "iteration")


def mode_overrides(mode: str) -> list[str]:
    """``sync``, ``one_step_off`` or ``async<k>``, each optionally ``@<threads>``, as run-config overrides."""
    loop, _, threads = mode.partition("@")
    if threads and not (threads.isdigit() and int(threads) >= 1):
        raise SystemExit(f"--modes: {mode!r} has threads {threads!r}; allowed: <mode>@<n>, n >= 1")
    pinned = [f"cpu_threads={threads}"] if threads else []
    if loop in ("sync", "one_step_off"):
        return [f"one_step_off={loop == 'one_step_off'}", "max_staleness=0", *pinned]
    if loop.startswith("async") and loop[5:].isdigit() and int(loop[5:]) >= 1:
        return ["one_step_off=false", f"max_staleness={int(loop[5:])}", *pinned]
    raise SystemExit(
        f"--modes: unknown mode {mode!r}; allowed: sync, one_step_off, async<k> (k >= 1), each optionally @<threads>"
    )


def loop_summary(history: list[dict]) -> dict | None:
    """One run's medians of each phase over RL iterations 2..N (iteration 1 follows BC's push in every loop), its
    policy lags, stale groups and mean train success; None without such an iteration."""
    rl = [r for r in history if r.get("phase") == "rl" and r["iteration"] >= 2]
    if not rl:
        return None
    return {
        "iterations": len(rl),
        "policy_lag": sorted({r.get("policy_lag", 0) for r in rl}),
        "groups_stale": sum(r.get("groups_stale", 0) for r in rl),
        "success": statistics.fmean(r["success"] for r in rl),
        **{ph: statistics.median(r.get(f"time_{ph}", 0.0) for r in rl) for ph in PHASES},
    }


def print_loops(result: dict[str, dict]) -> None:
    """Adds each loop's speed-up over the first one's iteration time and prints them as a table."""
    base = next(iter(result.values()))["iteration"]
    for r in result.values():
        r["speedup"] = base / r["iteration"]
    print(
        f"\n{'mode':<13} {'n':>2} "
        + " ".join(f"{ph:>12}" for ph in PHASES)
        + f" {'speedup':>8} {'lag':>6} {'stale':>5} {'success':>8}"
    )
    for mode, r in result.items():
        cells = " ".join(f"{r[ph]:>11.1f}s" for ph in PHASES)
        lag = ",".join(str(v) for v in r["policy_lag"])
        print(
            f"{mode:<13} {r['iterations']:>2} {cells} {r['speedup']:>7.2f}x {lag:>6} {r['groups_stale']:>5.0f} "
            f"{r['success']:>8.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default=None)
    p.add_argument("--set", nargs="*", default=[], help="key=value overrides for every run")
    p.add_argument(
        "--modes", default="sync,one_step_off", help="comma-separated: sync, one_step_off, async<k>"
    )
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, dict] = {}
    modes = a.modes.split(",")
    if modes[0].partition("@")[0] != "sync":
        raise SystemExit("--modes: the first mode is the baseline of the ratios and must be sync")
    for mode in modes:
        history = ensure_run(out, mode, a.preset, [*a.set, *mode_overrides(mode)])
        summary = loop_summary(history)
        if summary is None:
            print(f"[bench] {mode}: no RL iteration after the first in {out / mode}", file=sys.stderr)
            return 1
        result[mode] = summary
    print_loops(result)
    report = {"args": vars(a), "cpu_model": cpu_model(), "result": result}
    (out / "pipeline.json").write_text(json.dumps(report, indent=1))
    print(f"[bench] wrote {out / 'pipeline.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
