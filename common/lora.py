"""What a LoRA adapter is besides its tensors: the rollout engines serve it, the learner trains it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA adapter's shape and scale (PEFT ``adapter_config.json`` fields)."""

    rank: int
    alpha: int
    target_modules: tuple[str, ...]
    dropout: float = 0.0

    def peft_config(self) -> dict[str, Any]:
        return {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": self.rank,
            "lora_alpha": self.alpha,
            "lora_dropout": self.dropout,
            "target_modules": list(self.target_modules),
            "bias": "none",
            "inference_mode": True,
        }
