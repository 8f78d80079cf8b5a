"""Environment costs, in-process and through ``actors.env_pool.EnvPool``: the numbers behind pool sizing.

Per environment: reset and step latency (median, in-process), the pool's round trip for one step (median,
one worker), resident memory of one worker (VmRSS of the worker and its children), and throughput in env
steps/s under random admissible actions (resets included) for the env stepped in this process and for pools of
1, 2, 4 workers; ``ratio`` = pool / in-process throughput (below 1 on one worker: the pipe's overhead; above 1
with more workers only where the env step is heavier than the IPC and cores are free).

    python bench/bench_envs.py --envs synthetic,textcraft --out bench/results/envs.json

Names are ``envs.make`` registry names or ``module:callable`` paths; an env that cannot be built is skipped
with a note.  Actions come from ``info["admissible_actions"]``; envs without a list get ``"look"``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Environment variables a benchmark's workers need (docs/platform.md: a capped heap keeps ScienceWorld's JVM small).
WORKER_ENV: dict[str, dict[str, str]] = {"scienceworld": {"JAVA_TOOL_OPTIONS": "-Xmx256m -XX:+UseSerialGC"}}
FALLBACK_ACTION = "look"


def _build(name: str, options: dict[str, Any]) -> Any:
    from actors.env_process import build_env

    return build_env(name, options)


def _pick(info: dict[str, Any], rng: random.Random) -> str:
    actions = info.get("admissible_actions") or [FALLBACK_ACTION]
    return rng.choice(list(actions))


def bench_in_process(name: str, options: dict[str, Any], n: int, seconds: float) -> dict[str, Any]:
    """Median reset / step latency over ``n`` calls, then steps/s for ``seconds`` (one env, this process)."""
    env = _build(name, options)
    rng = random.Random(0)
    try:
        reset_s, step_s = [], []
        info: dict[str, Any] = {}
        for i in range(max(3, n // 10)):
            t = time.perf_counter()
            _, info = env.reset(seed=i)
            reset_s.append(time.perf_counter() - t)
        while len(step_s) < n:
            action = _pick(info, rng)
            t = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            step_s.append(time.perf_counter() - t)
            if terminated or truncated:
                _, info = env.reset(seed=len(step_s))
        steps, episodes = 0, 0
        _, info = env.reset(seed=0)
        end = time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            _, _, terminated, truncated, info = env.step(_pick(info, rng))
            steps += 1
            if terminated or truncated:
                episodes += 1
                _, info = env.reset(seed=episodes)
        elapsed = time.perf_counter() - start
    finally:
        env.close()
    return {
        "reset_ms": 1e3 * statistics.median(reset_s),
        "step_ms": 1e3 * statistics.median(step_s),
        "inproc_steps_per_s": steps / elapsed,
    }


def bench_pool(
    name: str, options: dict[str, Any], workers: int, n: int, seconds: float, worker_env: dict[str, str]
) -> dict[str, Any]:
    """Pool start-up time, steps/s for ``seconds`` with every slot busy, worker RSS; on one worker also the
    median round trip of a synchronous ``step``."""
    from actors.env_pool import EnvPool

    rng = random.Random(workers)
    t = time.perf_counter()
    with EnvPool(name, workers, options, worker_env=worker_env) as pool:
        startup_s = time.perf_counter() - t
        out: dict[str, Any] = {"startup_s": startup_s}
        infos = {r.slot: r.info for r in pool.reset([(s, None, s) for s in range(workers)])}
        if workers == 1:
            round_trip = []
            while len(round_trip) < n:
                t = time.perf_counter()
                r = pool.step({0: _pick(infos[0], rng)})[0]
                round_trip.append(time.perf_counter() - t)
                infos[0] = pool.reset([(0, None, len(round_trip))])[0].info if r.done else r.info
            out["pool_step_ms"] = 1e3 * statistics.median(round_trip)
        steps = failures = episodes = 0
        for s in range(workers):
            pool.submit_step(s, _pick(infos[s], rng))
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            for r in pool.poll(timeout=end - time.perf_counter()):
                if r.op == "step":
                    steps += 1
                failures += r.failed
                if r.done:
                    episodes += 1
                    pool.submit_reset(r.slot, None, episodes)
                else:
                    pool.submit_step(r.slot, _pick(r.info, rng))
        elapsed = time.perf_counter() - start
        pool.poll(timeout=60.0)  # drain what is in flight before closing
        out.update(
            steps_per_s=steps / elapsed,
            failures=failures,
            rss_mb=statistics.mean(pool.worker_rss_mb(s) for s in range(workers)),
            restarts=pool.stats["restarts"],
        )
    return out


def bench_env(name: str, options: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    worker_env = WORKER_ENV.get(name, {})
    os.environ.update(worker_env)  # the in-process run gets the same settings as the workers
    try:
        result = bench_in_process(name, options, args.n, args.seconds)
    except Exception as e:  # not installed / no adapter yet / needs data: skip, say why
        return {"skipped": f"{type(e).__name__}: {e}"}
    result["pool"] = {}
    for w in args.workers:
        pool = bench_pool(name, options, w, args.n, args.seconds, worker_env)
        pool["ratio"] = pool["steps_per_s"] / result["inproc_steps_per_s"]
        result["pool"][str(w)] = pool
    one = result["pool"].get("1", {})
    result["rss_mb"] = one.get("rss_mb")
    result["pool_step_ms"] = one.get("pool_step_ms")
    return result


def print_table(results: dict[str, dict[str, Any]], workers: list[int]) -> None:
    head = ["env", "reset ms", "step ms", "pool step ms", "RSS MB", "in-proc st/s"]
    head += [f"pool {w}w st/s (ratio)" for w in workers]
    rows, notes = [], []
    for name, r in results.items():
        if "skipped" in r:
            notes.append(f"skipped {name}: {r['skipped']}")
            continue
        row = [name, f"{r['reset_ms']:.3f}", f"{r['step_ms']:.4f}"]
        row += [f"{r['pool_step_ms']:.3f}" if r.get("pool_step_ms") else "-"]
        row += [f"{r['rss_mb']:.0f}" if r.get("rss_mb") else "-", f"{r['inproc_steps_per_s']:.0f}"]
        row += [f"{r['pool'][str(w)]['steps_per_s']:.0f} ({r['pool'][str(w)]['ratio']:.2f})" for w in workers]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))
    for note in notes:
        print(note)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", default="synthetic,textcraft,scienceworld,alfworld,virtualhome,webshop")
    parser.add_argument("--out", default="bench/results/envs.json")
    parser.add_argument("--n", type=int, default=200, help="calls per latency median")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each throughput run")
    parser.add_argument("--workers", default="1,2,4", help="pool sizes")
    parser.add_argument("--options", default="{}", help='JSON {"env name": {option: value}} for envs.make')
    args = parser.parse_args()
    args.workers = [int(w) for w in args.workers.split(",")]
    options = json.loads(args.options)
    results: dict[str, dict[str, Any]] = {}
    for name in [e.strip() for e in args.envs.split(",") if e.strip()]:
        print(f"... {name}", flush=True)
        results[name] = bench_env(name, options.get(name, {}), args)
    print_table(results, args.workers)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],  # the machine is shared: throughput depends on it
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    settings = {"n": args.n, "seconds": args.seconds, "workers": args.workers, "options": options}
    out.write_text(json.dumps({"machine": machine, "settings": settings, "envs": results}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
