"""What ``keep_episodes`` costs a run: the kept sample of each RL iteration of a finished run (its
``trajectories/``, as the update read them, annotated with the algorithm's targets from a zero critic), written by
the run's own ``EpisodeKeeper``; its write time against the iteration's, its bytes against the run folder's.

    python bench/bench_keep_cost.py --run RUN --out docs/results/view_keep_cost/cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from _env import setup

ROOT = setup()

from bench_prompts import cpu_model  # noqa: E402


def folder_bytes(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoTokenizer

    from actors.models import resolve_model_path
    from actors.trajectory import read_jsonl
    from launch.config import resolve_algo_config
    from launch.driver.kept_episodes import EpisodeKeeper
    from learners.algos.registry import get_algo
    from learners.prepare import learner_batch, shaped_turns
    from learners.targets import sequences

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", type=Path, required=True, help="a finished run with save_trajectories=true")
    p.add_argument("--algo", default="hiper")
    p.add_argument("--keep", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2"))
    algo = get_algo(a.algo)
    cfg = resolve_algo_config(algo.Config, {})
    rows = [json.loads(line) for line in (a.run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    per_iteration = {}
    for path in sorted((a.run / "trajectories").glob("iter_*.jsonl")):
        it = int(path.stem.split("_")[1])
        trajs = list(read_jsonl(path))
        turns = shaped_turns(trajs, cfg, success_reward=1.0, max_len=2048, pad_id=0)
        seqs = sequences(turns, algo.value_slots)
        lp = turns.old_logprobs.numpy()
        values = np.zeros((len(seqs), len(algo.value_slots)), np.float32) if algo.value_slots else None
        batch, _ = learner_batch(algo, cfg, trajs, turns, seqs, lp, lp, values)
        out = Path(tempfile.mkdtemp())
        keeper = EpisodeKeeper(out, tok, a.keep, [s.name for s in algo.value_slots])
        t0 = time.perf_counter()
        keeper.observer(it)(trajs, turns, batch)
        dt = time.perf_counter() - t0
        kept = out / "episodes" / f"iter_{it}.jsonl"
        row = next(r for r in rows if r.get("phase") == "rl" and r.get("iteration") == it)
        per_iteration[it] = {
            "episodes": len(trajs),
            "kept": len(kept.read_text().splitlines()),
            "write_s": dt,
            "bytes": kept.stat().st_size,
            "iteration_s": row["time_iteration"],
        }
    res = {
        "cpu": f"{cpu_model()} (lscpu model name)",
        "run": str(a.run),
        "algo": a.algo,
        "per_iteration": per_iteration,
        "run_folder_bytes": folder_bytes(a.run),
        "kept_bytes": sum(v["bytes"] for v in per_iteration.values()),
        "write_s": sum(v["write_s"] for v in per_iteration.values()),
        "iterations_s": sum(v["iteration_s"] for v in per_iteration.values()),
    }
    res["time_share"] = res["write_s"] / res["iterations_s"]
    res["disk_share"] = res["kept_bytes"] / res["run_folder_bytes"]
    print(
        f"kept {res['kept_bytes'] / 1e6:.2f} MB in {res['write_s']:.3f} s: {100 * res['time_share']:.4f} % of "
        f"{res['iterations_s']:.0f} s of iterations, {100 * res['disk_share']:.3f} % of the run folder"
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
