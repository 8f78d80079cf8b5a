"""The HF transformers + peft engine (``actors.inference``'s protocol): the fallback where vLLM is not installed,
and the CPU default (``actors.engines.make_engine``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from actors.inference import GenerationRequest, GenerationResult, SamplingParams, merge_or_keep
from actors.lora_weights import projection_weights
from common.dtypes import pick_dtype
from common.lora import LoraSpec


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

    def _apply_merged(self, merged: dict[str, np.ndarray]) -> None:
        """``merge_or_keep``'s last step: the merged projections copied into the plain model's layers."""
        with torch.no_grad():
            for key, w in merged.items():
                layer = self.model.get_submodule(key.removesuffix(".weight"))
                layer.weight.copy_(torch.from_numpy(w).to(layer.weight.dtype))

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
