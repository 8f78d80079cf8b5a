"""The rollout engine's side of ``bench_iteration.py``: an iteration's generate calls replayed on each engine, and
decode steps/s at batch 1, 8 and 32 against the machine's bound."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from iteration_model import Shape

ENGINES = {"hf_peft": ("hf", False), "hf_merged": ("hf", True), "vllm_merged": ("vllm", True)}
"""Rollout engines the replay can time: (``rollout.engine``, merged weights)."""


def engine_replay(
    engines: list[str],
    run: Path,
    cfg: Any,
    k: int,
    rounds: list[Any],
    prompts: list[np.ndarray],
    path: str,
    machine: dict,
    shape: Shape,
) -> dict[str, Any]:
    """Iteration k's generate calls on each HF engine, then decode steps/s at batch 1, 8 and 32."""
    import torch

    from actors.engines import make_engine
    from actors.inference import GenerationRequest, SamplingParams
    from actors.lora_weights import read_peft_adapter
    from launch.driver.wiring import lora_spec, torch_threads

    threads = torch_threads(cfg, cfg.rollout.num_workers, 2, "cpu")
    torch.set_num_threads(threads)
    folder = run / "checkpoints" / f"iter_{k - 1}" / "adapter"
    weights = read_peft_adapter(folder / "default" if (folder / "default").is_dir() else folder)[0]
    bound = machine[f"threads_{threads}"]
    out: dict[str, Any] = {"threads": threads}
    for name in engines:
        kind, merged = ENGINES[name]
        t0 = time.perf_counter()
        engine = make_engine(kind, path, lora_spec(cfg), dtype="float32", merged=merged, max_model_len=2048)
        start_s = time.perf_counter() - t0
        engine.load_adapter("default", weights, 1)
        it = iter(prompts)
        t0, generated = time.perf_counter(), 0
        for i, r in enumerate(rounds):
            requests = [GenerationRequest(tuple(int(x) for x in next(it)), "default") for _ in range(r.batch)]
            res = engine.generate(requests, SamplingParams(1.0, 1.0, r.decode_steps, seed=cfg.seed + i))
            generated += sum(len(x.response_ids) for x in res)
        replay_s = time.perf_counter() - t0
        sweep = {}
        for b in (1, 8, 32):
            request = [GenerationRequest(tuple(int(x) for x in prompts[0]), "default")] * b
            times = []
            longest = 1
            for steps in (1, 33):
                t0 = time.perf_counter()
                res = engine.generate(request, SamplingParams(1.0, 1.0, steps, seed=0))
                times.append(time.perf_counter() - t0)
                longest = max(len(x.response_ids) for x in res)  # a sample may end early (EOS)
            bound_steps = 1 / max(
                shape.weight_bytes_fp32 / (bound["read_gb_s"] * 1e9),
                shape.forward_flops(b, 1, b, lora=False) / (bound["matmul_gflop_s"] * 1e9),
            )
            sweep[str(b)] = {
                "decode_steps_s": (longest - 1) / (times[1] - times[0]),
                "steps": longest - 1,
                "bound_steps_s": bound_steps,
            }
        engine.close()
        out[name] = {"start_s": start_s, "replay_s": replay_s, "generated": generated, "decode": sweep}
        print(
            f"engine {name}: iteration {k}'s rounds in {replay_s:.1f} s ({generated} tokens); decode {sweep}",
            flush=True,
        )
    return out
