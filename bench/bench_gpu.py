"""The learner and the HF engine on a GPU: correctness checks and step times, without Ray or vLLM.

Our GPU machine has CUDA torch, transformers and peft but no Ray or vLLM (docs/platform.md: their wheels do not travel;
DeepSpeed's pure-Python wheel does), and no model weights. So this runs the plain classes the Ray actors wrap —
``learners.worker.LearnerWorker`` (DeepSpeed over NCCL, world size 1) and ``actors.hf_engine.HFEngine`` — in one
process, on random-weight Llama models of real shapes with the SmolLM2 tokenizer (``--tokenizer``: a folder with
its files). Per shape it reports, each a median over ``--repeats`` after one warm-up:

* ms of the learner's phases on ``--rows`` × ``--width`` rows (half response): policy log-probs, values
  (HiPER's two heads), one policy step (PPO's clipped loss with the KL term), one critic step; the peak GPU memory
  of each; the policy step ÷ the bare loop (``bench_all.bare_policy_steps``: PEFT + DeepSpeed, −A·log π) on
  the same batch (bench_all's learner goal ≥ 0.9);
* generation with the updated adapter pushed into the HF engine (tokens/s) and the learner-vs-engine log-prob gap
  on the sampled tokens (both bf16);
* for the first shape only: ZeRO stages 2 and 3 against stage 0 (largest |Δ| of the adapter after one identical
  step on one micro-batch), and a checkpoint saved and loaded into a fresh worker (largest |Δ| of log-probs and values).

    python bench/bench_gpu.py --tokenizer <folder> --out gpu.json --shapes smollm2-135m,smollm2-1.7b
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

from bench_all import bare_policy_steps  # noqa: E402
from bench_checkpoints import _free_port, engine_sequences, random_targets, synthetic_batch  # noqa: E402

SHAPES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2),  # a smoke test of this script (--device cpu)
    # SmolLM2-135M-Instruct's own config (docs/platform.md); 1.7B: SmolLM2-1.7B's; 8b: Llama-3-8B's (GQA 32/8)
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3),
    "smollm2-1.7b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                         num_key_value_heads=32),
    "llama-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=8),
}  # fmt: skip


def build_model(shape: str, tokenizer: str, dest: Path, device: str) -> str:
    """A random-weight Llama of ``shape`` with the tokenizer's vocabulary, saved in bf16 (initialised on ``device``)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tok),
        max_position_embeddings=8192,
        tie_word_embeddings=not shape.startswith("llama"),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        **SHAPES[shape],
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    del model
    _free()
    return str(dest)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn: Any, repeats: int) -> tuple[Any, float, float]:
    """(last result, median ms after one warm-up, peak GPU MB over the calls; 0 without a GPU)."""
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, out = [], None
    for _ in range(repeats + 1):
        _sync()
        t0 = time.perf_counter()
        out = fn()
        _sync()
        times.append(1e3 * (time.perf_counter() - t0))
    return out, statistics.median(times[1:]), torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0


def _free() -> None:
    """Return what the dropped models held to the allocator (callers ``del`` their references first)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def learner_phases(spec: Any, batch: Any, repeats: int) -> tuple[dict[str, Any], Any]:
    """The learner's phases on one worker; returns (the row, the worker)."""
    from learners.algos import ppo
    from learners.worker import LearnerWorker

    t0 = time.perf_counter()
    worker = LearnerWorker(spec)
    row: dict[str, Any] = {"init_s": time.perf_counter() - t0}
    seqs = batch.seqs
    old, row["logprobs_ms"], row["logprobs_peak_mb"] = _timed(lambda: worker.logprobs(seqs), repeats)
    ref = worker.logprobs(seqs, reference=True)
    vals, row["values_ms"], row["values_peak_mb"] = _timed(lambda: worker.values(seqs), repeats)
    full = random_targets(seqs, old_logprobs=old, ref_logprobs=ref, old_values=vals)
    cfg = ppo.Config()
    policy = lambda: worker.update_policy(full, ppo.ALGORITHM.policy_loss, cfg)  # noqa: E731
    metrics, row["policy_step_ms"], row["policy_step_peak_mb"] = _timed(policy, repeats)
    critic = lambda: worker.update_critic(full, ppo.ALGORITHM.value_loss, cfg)  # noqa: E731
    _, row["critic_step_ms"], row["critic_step_peak_mb"] = _timed(critic, repeats)
    row["policy_loss_finite"] = all(v == v for v in metrics.values())
    return row, worker


def engine_check(model: str, spec: Any, worker: Any, prompt_len: int, rows: int, new: int) -> dict[str, Any]:
    """The updated adapter pushed into the HF engine; tok/s and the learner-vs-engine log-prob gap."""
    import numpy as np

    from actors.hf_engine import HFEngine
    from actors.inference import GenerationRequest, SamplingParams

    engine = HFEngine(model, spec.lora, dtype=spec.dtype, device=spec.device)
    ok = engine.load_adapter("policy", worker.adapter_weights(), 1)
    rng = np.random.default_rng(1)
    prompts = [tuple(int(t) for t in rng.integers(10, 2000, prompt_len)) for _ in range(rows)]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=new, seed=0)
    reqs = [GenerationRequest(p, "policy") for p in prompts]
    engine.generate(reqs[:2], params)  # warm-up
    _sync()
    t0 = time.perf_counter()
    results = engine.generate(reqs, params)
    _sync()
    secs = time.perf_counter() - t0
    tokens = sum(len(r.response_ids) for r in results)
    seqs, engine_lp = engine_sequences(prompts, results)
    gap = np.abs(worker.logprobs(seqs) - engine_lp)[seqs.response_mask]
    engine.close()
    del engine
    _free()
    return {
        "adapter_loaded": ok,
        "gen_tokens": tokens,
        "gen_tok_s": tokens / secs,
        "logprob_gap_mean": float(gap.mean()),
        "logprob_gap_max": float(gap.max()),
    }


def zero_stages(spec: Any, batch: Any) -> dict[str, float]:
    """Largest |Δ| of the adapter after one identical policy step under ZeRO 2 and 3 vs stage 0, beside the step's
    own size (the largest |B| after it; LoRA's B starts at 0)."""
    import numpy as np

    from learners.algos import ppo
    from learners.worker import LearnerWorker

    out: dict[str, float] = {}
    ref: dict[str, Any] = {}
    batch = batch.rows(np.arange(spec.micro_batch_size))  # one micro-batch: ZeRO-3 accumulates no further
    for stage in (0, 2, 3):
        # ZeRO-3 needs the whole mini-batch in one micro-batch here (LearnerWorker._check_zero3_accumulation)
        s = dataclasses.replace(spec, zero_stage=stage, micro_batch_size=len(batch.seqs))
        worker = LearnerWorker(s)
        full = dataclasses.replace(batch, old_logprobs=worker.logprobs(batch.seqs))
        worker.update_policy(full, ppo.ALGORITHM.policy_loss, ppo.Config(kl_coef=0.0))
        weights = worker.adapter_weights()
        if stage == 0:
            ref = weights
            out["zero0_step_max_abs"] = max(
                float(np.abs(w).max()) for k, w in weights.items() if "lora_B" in k
            )
        else:
            out[f"zero{stage}_vs_zero0_max_abs"] = max(float(np.abs(weights[k] - ref[k]).max()) for k in ref)
        del worker
        _free()
    return out


def checkpoint_roundtrip(spec: Any, worker: Any, seqs: Any) -> dict[str, float]:
    """Save, load into a fresh worker: largest |Δ| of log-probs and values (0 means exact resume)."""
    import numpy as np

    from learners.worker import LearnerWorker

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        worker.save_checkpoint(tmp)
        saved = time.perf_counter() - t0
        fresh = LearnerWorker(dataclasses.replace(spec, seed=spec.seed + 1))
        t0 = time.perf_counter()
        fresh.load_checkpoint(tmp)
        loaded = time.perf_counter() - t0
        lp = float(np.abs(fresh.logprobs(seqs) - worker.logprobs(seqs)).max())
        v = float(np.abs(fresh.values(seqs) - worker.values(seqs)).max())
    del fresh
    _free()
    return {"save_s": saved, "load_s": loaded, "resume_logprob_max_abs": lp, "resume_value_max_abs": v}


def main() -> None:
    import deepspeed
    import numpy as np
    import torch
    import transformers

    from common.lora import LoraSpec
    from learners.distributed import init_dist
    from learners.learner_spec import PADDED_ROWS, LearnerSpec

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True, help="a folder with the SmolLM2 tokenizer files")
    ap.add_argument("--shapes", default="smollm2-135m,smollm2-1.7b")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--gradient-checkpointing", action="store_true", help="learner.gradient_checkpointing")
    ap.add_argument(
        "--skip-zero-check",
        action="store_true",
        help="an 8B shape's three ZeRO workers overflow one 80 GB GPU",
    )
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script (--shapes tiny)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu.json")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu needs a CUDA device (--device cpu: a smoke test)")

    lora = LoraSpec(8, 16, ("q_proj", "k_proj", "v_proj", "o_proj"))
    port = _free_port()
    init_dist(0, 1, port, args.device)
    batch = synthetic_batch(args.rows, args.width, slots=2)
    # HiPER's slots: V_high and V_low(s, o_{t-1}) at the last prompt token (heads 0 and 1)
    seqs = dataclasses.replace(batch.seqs, value_head=np.array([0, 1]))
    batch = dataclasses.replace(batch, seqs=seqs)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "deepspeed": deepspeed.__version__,
        "python": platform.python_version(),
        "rows": args.rows,
        "width": args.width,
        "micro_batch_size": args.micro_batch_size,
        "gradient_checkpointing": args.gradient_checkpointing,
        "lora": dataclasses.asdict(lora),
        "shapes": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for i, shape in enumerate(s for s in args.shapes.split(",") if s):
            model = build_model(shape, args.tokenizer, Path(tmp) / shape, args.device)
            spec = LearnerSpec(
                model, lora, "auto", 0, 1e-5, 1e-5, 1.0, args.micro_batch_size, args.gradient_checkpointing, seed=0,
                critic_trunk="own", **PADDED_ROWS,
                device=args.device, value_heads=2, master_port=port,
            )  # fmt: skip
            row, worker = learner_phases(spec, batch, args.repeats)
            row.update(engine_check(model, spec, worker, args.width // 2, args.rows, args.gen_tokens))
            if i == 0:
                row.update(checkpoint_roundtrip(spec, worker, batch.seqs))
            del worker
            _free()
            row["bare_policy_step_ms"] = statistics.median(
                bare_policy_steps(model, spec, batch, args.repeats + 1, args.device)[1:]
            )
            row["policy_step_vs_bare"] = row["bare_policy_step_ms"] / row["policy_step_ms"]
            report["shapes"][shape] = row
            write_json(args.out, report)
            if i == 0 and not args.skip_zero_check:
                row.update(zero_stages(spec, batch))
            print(
                shape,
                {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in row.items()},
                flush=True,
            )
            _free()
    keys = ("logprobs_ms", "values_ms", "policy_step_ms", "critic_step_ms", "policy_step_peak_mb",
            "policy_step_vs_bare", "gen_tok_s", "logprob_gap_mean", "logprob_gap_max")  # fmt: skip
    print(f"\n{report['device']}, torch {report['torch']}, {args.rows} rows × {args.width}, dtype auto")
    print(f"{'shape':14s}" + "".join(f"{k:>22s}" for k in keys))
    for shape, row in report["shapes"].items():
        print(f"{shape:14s}" + "".join(f"{row[k]:>22.4g}" for k in keys))
    write_json(args.out, report)


if __name__ == "__main__":
    main()
