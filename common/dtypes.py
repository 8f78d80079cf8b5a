"""The one dtype rule of the engines and the learner."""

from __future__ import annotations

from pathlib import Path

import torch


def pick_dtype(name: str, device: str = "cpu") -> torch.dtype:
    """``auto``: bf16 on CUDA and on CPUs with AMX (3.5× faster prefill here, docs/platform.md), else fp32."""
    if name == "float32":
        return torch.float32
    if name == "bfloat16":
        return torch.bfloat16
    if name != "auto":
        raise ValueError(f"model.dtype must be auto, float32 or bfloat16, got {name!r}")
    if device.startswith("cuda"):
        return torch.bfloat16
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return torch.float32
    return torch.bfloat16 if "amx_bf16" in flags else torch.float32
