"""What ``actors.vllm_engine`` decides before vLLM runs: the prefix-cache name of a hot-swapped adapter and the
dtype vLLM's CUDA LoRA kernels accept (both seen on an H200, docs/results/gpu_vllm.md)."""

from __future__ import annotations

import os

import pytest

from actors.vllm_engine import VLLMEngine, cache_name
from common.lora import LoraSpec


def test_each_version_of_an_adapter_has_its_own_prefix_cache_name() -> None:
    # vLLM 0.26 keys cached KV on the LoRARequest's name alone: one name for v1 and v2 reuses v1's KV after a swap
    assert cache_name("executor", 1) != cache_name("executor", 2)
    assert cache_name("planner", 2) != cache_name("executor", 2)


def test_float32_lora_on_cuda_is_refused_in_one_line_before_vllm_starts() -> None:
    with pytest.raises(ValueError, match=r"model\.dtype auto or bfloat16, got float32"):
        VLLMEngine("no-model-needed", LoraSpec(8, 16, ("q_proj",)), dtype="float32", device="cuda")


def test_cuda_without_flashinfer_turns_its_sampler_off(monkeypatch):
    """vLLM 0.26's GPU model runner imports FlashInfer for its sampler unless told not to (every engine start failed
    on an H200 without it); a user's own setting wins. This machine has no FlashInfer, as the GPU bundle."""
    import importlib.util

    from actors.vllm_engine import configure_vllm_env

    assert importlib.util.find_spec("flashinfer") is None
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    configure_vllm_env(on_cpu=True)
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in os.environ  # the CPU build never asks for it
    configure_vllm_env(on_cpu=False)
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    configure_vllm_env(on_cpu=False)
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "1"
