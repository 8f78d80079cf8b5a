"""What the steps of ``bench/gpu_vllm.py`` share: whether CUDA is there, the run config's LoRA, the wait for a vLLM
engine's GPU memory to come back, random adapters, and response tokens without log-probs."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

CUDA = torch.cuda.is_available()
T0 = time.time()
"""The script's start: ``--budget-s`` counts from here."""


def lora_spec() -> Any:
    """The run config's default LoRA (``model.lora_*``), what ``hierarl train`` trains."""
    from common.lora import LoraSpec
    from launch.config import ModelConfig

    m = ModelConfig()
    return LoraSpec(m.lora_rank, m.lora_alpha, tuple(m.lora_targets))


def wait_for_gpu_memory(fraction: float = 0.6, timeout_s: float = 120.0) -> None:
    """Until ``fraction`` of the GPU's memory is free: a vLLM engine that just ended frees its memory when its process
    exits, and the next one refuses to start with less free memory than it asks for (half the GPU)."""
    if not CUDA:
        return
    end = time.perf_counter() + timeout_s
    while time.perf_counter() < end:
        free, total = torch.cuda.mem_get_info()
        if free >= fraction * total:
            return
        time.sleep(1.0)
    print(
        f"[gpu_vllm] only {free / 2**30:.1f} of {total / 2**30:.1f} GiB free after {timeout_s:.0f} s",
        flush=True,
    )


def random_adapter(zero: dict[str, Any], seed: int, scale: float = 0.02) -> dict[str, Any]:
    """LoRA tensors of ``zero``'s names and shapes with A and B drawn from N(0, ``scale``²): a policy unlike the base
    (B = 0, LoRA's start, would be the base itself)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {k: rng.normal(0, scale, v.shape).astype(np.float32) for k, v in zero.items()}


@dataclasses.dataclass
class ResponseTokens:
    """A response's tokens with zero log-probs: rows for the learner alone."""

    response_ids: list[int]

    @property
    def logprobs(self) -> list[float]:
        return [0.0] * len(self.response_ids)
