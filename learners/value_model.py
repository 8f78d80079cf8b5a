"""The torch modules of a learner beside the policy: the value model (a LoRA adapter on the policy's base and a
head), adapter switching on a peft model, the target critic's Polyak step, and the decoder call every learner pass
makes (on padded rows, or on a prefix-tree pack of them: ``learners.packing``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from learners.packing import PackedRows

TREE_MASKS = {"sdpa": "bool", "eager": "additive"}
"""Attention implementations (``config._attn_implementation``) that apply a 4D mask given to the model as it is
(transformers 5.19 ``masking_utils._preprocess_mask_arguments`` returns a 4D mask untouched), and the form each
takes: SDPA a boolean one (True attends), eager attention one added to the scores. Flash-attention kernels take no
arbitrary mask and flex attention a ``BlockMask``: those models run padded rows."""


def tree_mask_kind(config: Any) -> tuple[str, str]:
    """(mask form, "") where this model can run a prefix-tree pack, else ("", why not): its attention applies no
    custom 4D mask, or a sliding window would be dropped with the causal mask the pack's replaces."""
    impl = str(getattr(config, "_attn_implementation", None))
    if impl not in TREE_MASKS:
        return "", f"its attention implementation {impl!r} takes no tree mask"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "", "its sliding-window attention would be dropped by a tree mask"
    return TREE_MASKS[impl], ""


def decoder_hidden(
    decoder: nn.Module,
    ids: torch.Tensor,
    attn: torch.Tensor,
    packed: PackedRows | None = None,
    mask: str = "bool",
) -> torch.Tensor:
    """float[B, L, D]: the decoder's last hidden states of the rows ``ids`` / ``attn`` (int[B, L], bool[B, L]).
    With ``packed`` (those rows' prefix tree) the decoder runs once over the pack, with each node's position and
    the tree mask in the form ``mask`` (``tree_mask_kind``), and the states are gathered back to the rows' layout;
    the LM head, value heads and losses downstream see the same tensors either way."""
    if packed is None:
        return decoder(input_ids=ids, attention_mask=attn).last_hidden_state
    tree = packed.mask
    if mask == "additive":
        tree = packed.additive_mask(next(decoder.parameters()).dtype)
    hidden = decoder(
        input_ids=packed.input_ids, attention_mask=tree, position_ids=packed.position_ids
    ).last_hidden_state
    return packed.rows(hidden)


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

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        packed: PackedRows | None = None,
        mask: str = "bool",
    ) -> torch.Tensor:
        """Values float[B, L, H] of the rows, computed on their pack when ``packed`` is given (``decoder_hidden``)."""
        # the decoder alone: the LM head's B × L × vocab logits are never needed for values
        decoder = self.backbone.get_base_model().get_decoder()
        return _head_values(self.head, decoder_hidden(decoder, input_ids, attention_mask, packed, mask))


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
