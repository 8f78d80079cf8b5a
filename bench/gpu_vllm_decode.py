"""The decode step of ``bench/gpu_vllm.py`` (CUDA only; its docstring): decode steps/s of vLLM with the pushed LoRA,
vLLM on merged weights and the HF engine, one engine per process of the script (``--decode-one``)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_engines import decode_steps_per_s
from gpu_vllm_common import ResponseTokens, lora_spec, random_adapter, wait_for_gpu_memory

SCRIPT = Path(__file__).with_name("gpu_vllm.py")
"""The script each engine runs in, in a process of its own."""


class PlainVLLM:
    """vLLM without LoRA on a folder of merged weights: what ``rollout.weight_sync=merged`` serves, here on CUDA
    (``VLLMEngine`` merges in place on the CPU only). ``generate`` as the engines', token counts only."""

    def __init__(self, path: str) -> None:
        from vllm import LLM

        self.llm = LLM(
            model=path, dtype="bfloat16", enable_prefix_caching=True, max_model_len=2048, seed=0,
            gpu_memory_utilization=0.5,
        )  # fmt: skip

    def generate(self, requests: list[Any], params: Any) -> list[Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sp = SamplingParams(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens)
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        return [
            ResponseTokens(list(o.outputs[0].token_ids))
            for o in self.llm.generate(prompts, sp, use_tqdm=False)
        ]


def merged_copy(path: str, weights: dict[str, Any], lora: Any, dest: Path) -> str:
    """A copy of the model folder with the adapter merged into its projections (W + α/r·B·A, ``merge_lora``)."""
    from safetensors.torch import load_file, save_file

    from actors.lora_weights import merge_lora, projection_weights

    merged = merge_lora(projection_weights(path), weights, lora.alpha / lora.rank)
    dest.mkdir(parents=True)
    for f in Path(path).iterdir():
        if f.suffix != ".safetensors" and f.is_file():
            shutil.copy(f, dest / f.name)
    for f in Path(path).glob("*.safetensors"):
        state = load_file(str(f))
        for k in state.keys() & merged.keys():
            state[k] = torch.from_numpy(merged[k]).to(state[k].dtype)
        save_file(state, str(dest / f.name), metadata={"format": "pt"})
    return str(dest)


def decode_one(kind: str, a: argparse.Namespace) -> dict[str, Any]:
    """One engine in this process: its start-up and decode steps/s at batch 1 and ``--batch`` per adapter case."""
    import numpy as np

    from actors.hf_engine import HFEngine
    from actors.inference import GenerationRequest, SamplingParams
    from actors.lora_weights import zero_lora_weights
    from actors.models import resolve_model_path
    from actors.vllm_engine import VLLMEngine

    path, lora = resolve_model_path(a.model), lora_spec()
    weights = random_adapter(zero_lora_weights(path, lora), 1)
    rng = np.random.default_rng(0)
    prompts = [tuple(int(t) for t in rng.integers(100, 40000, a.prompt_tokens)) for _ in range(a.batch)]
    t0 = time.perf_counter()
    engine: Any
    if kind == "vllm_merged":
        engine = PlainVLLM(merged_copy(path, weights, lora, Path(tempfile.mkdtemp()) / "merged"))
        cases: dict[str, str | None] = {"merged": None}
    elif kind == "vllm_lora":
        engine = VLLMEngine(path, lora, device="cuda", max_model_len=2048, max_loras=2)
        cases = {"lora": "policy", "no_adapter": None}
    else:
        engine = HFEngine(path, lora, device="cuda")
        cases = {"hf_lora": "policy"}
    out: dict[str, Any] = {"engine": kind, "startup_s": time.perf_counter() - t0}
    if kind != "vllm_merged":
        engine.load_adapter("policy", weights, 1)
    for case, adapter in cases.items():
        reqs = [GenerationRequest(p, adapter) for p in prompts]
        engine.generate(reqs[:2], SamplingParams(max_tokens=a.new_tokens))  # warm-up
        for b in (1, a.batch):
            steps, _ = decode_steps_per_s(engine, reqs[:b], a.new_tokens, a.repeats)
            out[f"{case}_steps_s_b{b}"] = steps
            out[f"{case}_tokens_s_b{b}"] = steps * b
    return out


def decode(a: argparse.Namespace) -> dict[str, Any]:
    """The decode step: each engine in a fresh process (one vLLM per process, its GPU memory freed on exit)."""
    rows = {}
    for kind in ("vllm_lora", "vllm_merged", "hf"):
        wait_for_gpu_memory()
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), "--decode-one", kind, *sys.argv[1:]], capture_output=True, text=True
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        rows[kind] = json.loads(line[7:]) if line else {"error": (proc.stdout + proc.stderr)[-3000:]}
        print(f"decode {kind}: {rows[kind]}", flush=True)
    return {"batch": a.batch, "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens, "engines": rows}
