"""The torch modules of a learner beside the policy: the value model (a LoRA adapter on the policy's base and a
head), adapter switching on a peft model, and the target critic's Polyak step."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn


@torch.no_grad()
def polyak_update_(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], tau: float) -> None:
    """θ̄ ← (1 − τ) θ̄ + τ θ in place, tensor by tensor (Haarnoja et al. 2018; STEP-HRL App. B: τ₁ = 0.2): a small τ
    moves the target a little towards the critic. Pure tensor arithmetic, unit-tested without a learner."""
    for t, p in zip(targets, sources, strict=True):
        t.mul_(1.0 - tau).add_(p.detach(), alpha=tau)


@contextmanager
def using_adapter(model: nn.Module, adapter: str | None) -> Iterator[None]:
    """Forward passes of ``model`` (a peft model) inside use LoRA adapter ``adapter`` (None: unchanged). Sets each
    LoRA layer's active adapter directly: peft's ``set_adapter`` would also flip ``requires_grad``, which the
    engines' optimizers and checkpoints key on."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    if adapter is None:
        yield
        return
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    before = [m._active_adapter for m in layers]
    for m in layers:
        m._active_adapter = [adapter]
    try:
        yield
    finally:
        for m, b in zip(layers, before, strict=True):
            m._active_adapter = b


def value_head(hidden: int, heads: int, mlp_hidden: int = 0) -> nn.Module:
    """A value head on hidden states of width ``hidden``: linear, or with ``mlp_hidden`` > 0 the two-layer
    W₂·SiLU(W₁h) of HISR Eq. 2. The output layer starts at 0 (every value 0)."""
    out = nn.Linear(mlp_hidden or hidden, heads)
    nn.init.zeros_(out.weight)
    nn.init.zeros_(out.bias)
    return nn.Sequential(nn.Linear(hidden, mlp_hidden), nn.SiLU(), out) if mlp_hidden else out


def _head_values(head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    dtype = next(head.parameters()).dtype
    return head(hidden.to(dtype)).float()


class ValueModel(nn.Module):
    """Base LM with its active LoRA adapter + a head on the last hidden state: values float[B, L, H]."""

    def __init__(self, backbone: nn.Module, hidden: int, heads: int, mlp_hidden: int = 0) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = value_head(hidden, heads, mlp_hidden)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # the decoder alone: the LM head's B × L × vocab logits are never needed for values
        decoder = self.backbone.get_base_model().get_decoder()
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return _head_values(self.head, hidden)


class TrunkValueHead(nn.Module):
    """A value head on the policy's own last hidden states (``learner.critic_trunk=policy``): values float[B, L, H]
    from hidden float[B, L, D]. It is given the states detached, so the value loss trains the head and never moves
    the policy: the policy's update stays what it is with a critic of its own, and the critic's own decoder passes
    (its training forward and backward, about half of an update's FLOPs on the main job) are not run."""

    def __init__(self, hidden: int, heads: int, mlp_hidden: int = 0) -> None:
        super().__init__()
        self.head = value_head(hidden, heads, mlp_hidden)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return _head_values(self.head, hidden.detach())


def adapter_of(param_name: str) -> str | None:
    """The adapter a PEFT parameter belongs to (``...q_proj.lora_A.<adapter>.weight``), None for base weights."""
    parts = param_name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in ("lora_A", "lora_B"):
            return parts[i + 1]
    return None
