"""``hierarl train`` end to end on one GPU: the main job and every paper's method through Ray, DeepSpeed over NCCL and
the HF engine on CUDA, each worker on a share of the one GPU (``rollout.gpus_per_worker``, ``learner.gpus_per_worker``).

The lent GPU machine has no model weights and no vLLM (platform.md), so the model is a random-weight Llama of
SmolLM2-135M's shape with the SmolLM2 tokenizer (``bench_gpu.build_model``) and the engine is HF. Its outputs are
noise: these runs check the path (fractional-GPU placement, the NCCL learner group inside Ray actors, CUDA generation,
adapter pushes through the object store, each method's extra stages, checkpoints) and time each
phase; they show no learning. Every run is shortened the same way (``SHORT``), and its rc, wall time, phases and the
tail of a failed run's log go to the JSON.

    python bench/bench_gpu_train.py --tokenizer <folder> --out gpu_train.json [--presets a,b]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

SHORT = [
    "iterations=2",
    "eval_every=2",
    "eval_episodes=4",
    "bc.episodes=4",
    "bc.epochs=1",
    "checkpoint_every=1",
]
"""The same for every preset: 2 RL iterations after a 4-demonstration BC, one eval of 4 tasks at the end."""
EXTRA: dict[str, list[str]] = {
    "hisr_synthetic_multi": [
        "algo.collect_tasks=4",
        "algo.collect_per_task=2",
        "algo.sprm_epochs=1",
        "algo.hindsight_epochs=1",
    ],
    "multi2_synthetic_multi": ["algo.offline_iterations=1"],
}
"""HISR's reward-model stages, shrunk like BC; Multi2's one offline iteration, so that iteration 2 is online."""
PRESETS = (
    "hiper_textcraft_cpu,hiper_synthetic_multi,ppo_synthetic_multi,hipif_synthetic_multi,hisr_synthetic_multi,"
    "step_hrl_synthetic_multi,multi2_synthetic_multi"
)
PHASES = ("time_rollout", "time_logprobs", "time_values", "time_update", "time_push", "time_iteration")


def train(preset: str, model: str, run_dir: Path, share: float, extra: list[str]) -> dict[str, Any]:
    """One ``hierarl train`` run in a child process; its metrics.jsonl summarised."""
    args = [
        sys.executable, "-m", "launch.cli", "train", preset, f"model.path={model}", f"run_dir={run_dir}",
        f"rollout.gpus_per_worker={share}", f"learner.gpus_per_worker={share}", *SHORT, *EXTRA.get(preset, []),
        *extra,
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (run_dir.parent / f"{run_dir.name}.log").write_text(proc.stdout + proc.stderr)
    rows = (
        [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        if (run_dir / "metrics.jsonl").exists()
        else []
    )
    out: dict[str, Any] = {"preset": preset, "rc": proc.returncode, "wall_s": round(wall, 1), "rows": rows}
    if proc.returncode:
        out["log_tail"] = (proc.stdout + proc.stderr)[-3000:]
    return out


def summary(run: dict[str, Any]) -> str:
    rl = [r for r in run["rows"] if r.get("phase") == "rl"]
    phases = " ".join(f"{p[5:]} {sum(r.get(p, 0) for r in rl) / max(1, len(rl)):.1f}" for p in PHASES)
    bc = next((r for r in run["rows"] if r.get("phase") == "bc"), {})
    return (
        f"{run['preset']:<26} rc {run['rc']} wall {run['wall_s']:6.0f} s  BC {bc.get('wall_s', 0):5.1f} s  "
        f"RL iters {len(rl)}  per iteration (s): {phases}  gap {rl[-1].get('logprob_gap', float('nan')) if rl else 0:.2g}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="a folder with the SmolLM2 tokenizer's files")
    ap.add_argument("--out", default="gpu_train.json")
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument(
        "--share", type=float, default=0.25, help="GPU share of each worker (HISR runs three groups)"
    )
    ap.add_argument("--shape", default="smollm2-135m")
    a = ap.parse_args()

    import torch
    from bench_gpu import build_model

    work = Path(tempfile.mkdtemp(prefix="gpu_train_"))
    model = build_model(a.shape, a.tokenizer, work / "model", "cuda")
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "shape": a.shape,
    }
    result["runs"] = runs = []
    for preset in a.presets.split(","):
        runs.append(train(preset, model, work / preset, a.share, []))
        print(summary(runs[-1]), flush=True)
        if runs[-1]["rc"]:
            print(runs[-1]["log_tail"], flush=True)
        # after every run: a call cut at the lent machine's time limit keeps the finished runs
        write_json(Path(a.out), result)


if __name__ == "__main__":
    main()
