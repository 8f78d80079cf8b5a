"""Two LoRA adapters on one base (Multi2's planner and executor) against one: learner step time, adapter export +
load ("push") latency, and generation throughput when requests alternate adapters — each ratio from one run.

* ``learner``: a ``LearnerWorker`` with one adapter takes ``--steps`` policy steps on a fixed batch; one with two
  adapters takes the same number alternating planner / executor (each adapter with its own engine and AdamW).
  Reported: median ms per step (the first step excluded), and the policy's trainable tensors plus their AdamW
  moments (fp32) in MB: what a second adapter adds on top of the one base the two share.
* ``push``: export the adapter(s) from the learner (``adapter_weights``) and load them into the HF engine
  (``load_adapter``); one adapter vs both. The object-store hop is ``bench_weight_sync.py``'s.
* ``generate``: the rollout engine (``--engine hf`` or ``vllm``; both adapters resident) generates ``--requests``
  prompts × ``--new-tokens`` tokens, every request on one adapter vs requests alternating the two; tokens per
  second. The HF engine decodes each adapter's requests as a batch of its own; vLLM batches both adapters'
  requests together (multi-LoRA, ``max_loras`` 2).

    python bench/bench_adapters.py --model tiny --out bench/results/adapters.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from _env import setup

ROOT = setup()

from bench_checkpoints import synthetic_batch  # noqa: E402
from bench_prompts import cpu_model  # noqa: E402


def _trainable_mb(worker: Any) -> float:
    """Trainable policy tensors + AdamW's two moments, fp32."""
    n = sum(p.numel() for p in worker.policy.module.parameters() if p.requires_grad)
    return 3 * 4 * n / 2**20


def run(
    model: str, steps: int, rows: int, width: int, requests: int, new_tokens: int, engine_kind: str
) -> dict[str, Any]:
    import numpy as np

    from actors.hf_engine import HFEngine
    from actors.inference import GenerationRequest, SamplingParams
    from actors.models import resolve_model_path
    from actors.vllm_engine import VLLMEngine
    from common.lora import LoraSpec
    from learners.algos import grpo
    from learners.learner_spec import PADDED_ROWS, LearnerSpec
    from learners.worker import LearnerWorker

    path = resolve_model_path(model)
    lora = LoraSpec(8, 16, ("q_proj", "v_proj"))
    spec = LearnerSpec(
        path,
        lora,
        "float32",
        0,
        1e-4,
        1e-4,
        1.0,
        rows,
        False,
        seed=0,
        critic_trunk="own",
        master_port=29611,
        **PADDED_ROWS,
    )
    cfg = grpo.Config(kl_coef=0.0)
    batch = synthetic_batch(rows, width)
    out: dict[str, Any] = {"model": model, "engine": engine_kind}

    def steps_ms(worker: LearnerWorker, adapters: list[str | None]) -> float:
        times = []
        for i in range(steps + 1):
            t0 = time.perf_counter()
            worker.update_policy(batch, grpo.ALGORITHM.policy_loss, cfg, adapters[i % len(adapters)])
            times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times[1:])  # the first step warms up

    one = LearnerWorker(spec)
    two = LearnerWorker(LearnerSpec(**{**spec.__dict__, "adapters": (("planner", 1e-4), ("executor", 1e-4))}))
    out["learner"] = {
        "one_ms": steps_ms(one, [None]),
        "two_ms": steps_ms(two, ["planner", "executor"]),
        "one_state_mb": _trainable_mb(one),
        "two_state_mb": _trainable_mb(two),
    }
    if engine_kind == "vllm":
        engine: Any = VLLMEngine(path, lora, dtype="float32", max_loras=2)
    else:
        engine = HFEngine(path, lora, dtype="float32", adapters=("planner", "executor"))

    def push_ms(names: list[str]) -> float:
        times = []
        for v in range(1, 6):
            t0 = time.perf_counter()
            for name in names:
                engine.load_adapter(name, two.adapter_weights(name), v)
            times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)

    out["push"] = {"one_ms": push_ms(["executor"]), "two_ms": push_ms(["planner", "executor"])}
    rng = np.random.default_rng(1)
    prompts = [tuple(int(t) for t in rng.integers(10, 2000, 24)) for _ in range(requests)]
    params = SamplingParams(temperature=1.0, max_tokens=new_tokens)

    def tokens_per_s(names: list[str]) -> float:
        reqs = [GenerationRequest(p, names[i % len(names)]) for i, p in enumerate(prompts)]
        engine.generate(reqs[:2], params)  # warm-up
        t0 = time.perf_counter()
        res = engine.generate(reqs, params)
        return sum(len(r.response_ids) for r in res) / (time.perf_counter() - t0)

    out["generate"] = {
        "one_tok_s": tokens_per_s(["executor"]),
        "alternating_tok_s": tokens_per_s(["planner", "executor"]),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument(
        "--engine", choices=("hf", "vllm"), default="hf", help="the rollout engine that generates"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "adapters.json")
    args = ap.parse_args()
    r = run(args.model, args.steps, args.rows, args.width, args.requests, args.new_tokens, args.engine)
    r.update(
        cpu_model=cpu_model(), python=platform.python_version(), args=vars(args) | {"out": str(args.out)}
    )
    rows = [
        ("learner step (ms)", r["learner"]["one_ms"], r["learner"]["two_ms"]),
        ("adapter + AdamW state (MB)", r["learner"]["one_state_mb"], r["learner"]["two_state_mb"]),
        ("push: export + load (ms)", r["push"]["one_ms"], r["push"]["two_ms"]),
        ("generate (tokens/s)", r["generate"]["one_tok_s"], r["generate"]["alternating_tok_s"]),
    ]
    print(f"\n{args.model}, {args.engine} engine, on {r['cpu_model']}")
    print(f"{'':<26} {'one adapter':>12} {'two adapters':>13} {'ratio':>7}")
    for name, a, b in rows:
        print(f"{name:<26} {a:>12.1f} {b:>13.1f} {b / a if a else float('nan'):>7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=1))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
