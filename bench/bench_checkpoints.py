"""Checkpoint size and save/load time per algorithm, beside the frozen base weights they no longer contain.

For each preset, the learner worker its run would build (``launch.driver.wiring.learner_spec``: the algorithm's critic
heads, target critic, policy adapters, Multi2's frozen offline copies, HISR's hindsight adapter and SPRM) is created
in this process on ``--model``; every trained adapter and value model take one optimizer step (so AdamW's moments
exist, as in any RL checkpoint),
then ``save_checkpoint`` / ``load_checkpoint`` run ``--repeats`` times. Reported per algorithm: the checkpoint's
size in MB and by part (policy engines, critic engines, the PEFT adapter export, the learner state file holding RNG
and the target critic), its ratio to the base model's weight file, and median save / load ms. The driver adds
``driver.pt`` (RNG, cursors: kilobytes).

    python bench/bench_checkpoints.py --model smollm2 --out bench/results/checkpoints.json
"""

from __future__ import annotations

import argparse
import gc
import platform
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

from bench_prompts import cpu_model  # noqa: E402

PRESETS = (
    "hiper_textcraft_cpu",
    "ppo_synthetic_multi",
    "grpo_alfworld",
    "hipif_synthetic_multi",
    "hisr_synthetic_multi",
    "step_hrl_synthetic_multi",
    "multi2_synthetic_multi",
)


def random_targets(
    seqs: Any, *, old_logprobs: Any = None, ref_logprobs: Any = None, old_values: Any = None, seed: int = 0
) -> Any:
    """A ``LearnerBatch`` on ``seqs`` with random advantages on the response tokens and a random target for every
    value slot (benchmarks time the learner, not the targets), its weights those of one mini-batch of all rows."""
    import numpy as np

    from learners.batch import LearnerBatch
    from learners.prepare import minibatch

    rng = np.random.default_rng(seed)
    resp = seqs.response_mask.astype(bool)
    n, k = len(seqs), seqs.value_pos.shape[1]
    batch = LearnerBatch(
        seqs=seqs,
        old_logprobs=np.zeros(resp.shape, np.float32) if old_logprobs is None else old_logprobs,
        ref_logprobs=ref_logprobs,
        token_adv=(rng.normal(size=resp.shape) * resp).astype(np.float32),
        loss_mask=resp,
        value_target=rng.normal(size=(n, k)).astype(np.float32),
        value_valid=np.ones((n, k), bool),
        old_values=np.zeros((n, k), np.float32) if old_values is None else old_values,
    )
    return minibatch(batch, np.arange(n), "token-mean")


def synthetic_batch(n: int, width: int, slots: int = 0, seed: int = 0) -> Any:
    """``random_targets`` on random tokens: the second half of each row is the response; each of ``slots`` value
    slots is read at the last prompt token by head 0."""
    import numpy as np

    from learners.batch import Sequences

    rng = np.random.default_rng(seed)
    resp = np.zeros((n, width), bool)
    resp[:, width // 2 :] = True
    seqs = Sequences(
        rng.integers(10, 2000, (n, width)),
        np.ones((n, width), np.int64),
        resp,
        np.full((n, slots), width // 2 - 1, np.int64),
        np.zeros(slots, np.int64),
    )
    return random_targets(seqs, seed=seed)


def engine_sequences(prompts: list[tuple[int, ...]], results: list[Any]) -> tuple[Any, Any]:
    """Prompt + response rows (right-padded) of an engine's ``generate`` results, and the engine's log-probs on the
    response positions: what a learner reads to compare its log-probs with the engine's."""
    import numpy as np

    from learners.batch import Sequences

    width = max(len(p) + len(r.response_ids) for p, r in zip(prompts, results, strict=True))
    n = len(prompts)
    ids, attn = np.zeros((n, width), np.int64), np.zeros((n, width), bool)
    resp, engine = np.zeros((n, width), bool), np.zeros((n, width), np.float32)
    for i, (p, r) in enumerate(zip(prompts, results, strict=True)):
        end = len(p) + len(r.response_ids)
        ids[i, :end] = list(p) + list(r.response_ids)
        attn[i, :end] = True
        resp[i, len(p) : end] = True
        engine[i, len(p) : end] = r.logprobs
    return Sequences(ids, attn, resp, np.zeros((n, 0), np.int64), np.zeros(0, np.int64)), engine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mb(path: Path) -> float:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files) / 2**20


def _part(name: str) -> str:
    if name.startswith("policy_ds"):
        return "policy"
    if name.startswith("critic_ds"):
        return "critic"
    return {"adapter": "adapter_export"}.get(name, "learner_state")


def measure(preset: str, model: str, repeats: int, rows: int, width: int) -> dict[str, Any]:
    import dataclasses

    from actors.models import resolve_model_path
    from launch.config import resolve_algo_config, resolve_config
    from launch.driver.wiring import learner_spec
    from learners.algos import grpo, ppo
    from learners.algos.registry import get_algo
    from learners.worker import LearnerWorker

    cfg = resolve_config(preset, [f"model.path={model}"])
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    path = resolve_model_path(model)
    spec = dataclasses.replace(
        learner_spec(cfg, algo, algo_cfg, path, "cpu"), micro_batch_size=rows, master_port=_free_port()
    )
    worker = LearnerWorker(spec)
    trained = [name for name, lr in spec.adapters if lr > 0] or [None]
    for name in trained:
        worker.update_policy(
            synthetic_batch(rows, width), grpo.ALGORITHM.policy_loss, grpo.Config(kl_coef=0.0), name
        )
    critics = [None] if spec.value_heads else []
    for critic in [*critics, *(c.name for c in spec.extra_critics)]:
        worker.update_critic(
            synthetic_batch(rows, width, slots=1), ppo.value_loss, ppo.Config(), critic=critic
        )
    tmp = Path(tempfile.mkdtemp(prefix="hierarl-ckpt-"))
    save, load = [], []
    try:
        for i in range(repeats):
            folder = tmp / f"c{i}"
            t0 = time.perf_counter()
            worker.save_checkpoint(str(folder))
            save.append(1e3 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            worker.load_checkpoint(str(folder))
            load.append(1e3 * (time.perf_counter() - t0))
        parts: dict[str, float] = {}
        for child in (tmp / "c0").iterdir():
            parts[_part(child.name)] = parts.get(_part(child.name), 0.0) + _mb(child)
        total = _mb(tmp / "c0")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        del worker
        gc.collect()
    base = sum(_mb(f) for f in Path(path).glob("*.safetensors"))
    return {
        "preset": preset,
        "algo": cfg.algo,
        "adapters": [name for name, _ in spec.adapters] or ["default"],
        "value_heads": spec.value_heads,
        "target_critic": spec.target_critic,
        "total_mb": total,
        "parts_mb": parts,
        "base_weights_mb": base,
        "ratio_to_base": total / base if base else float("nan"),
        "save_ms": statistics.median(save),
        "load_ms": statistics.median(load),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "checkpoints.json")
    args = ap.parse_args()
    results = [
        measure(p, args.model, args.repeats, args.rows, args.width) for p in args.presets.split(",") if p
    ]
    report = {
        "results": results,
        "model": args.model,
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "args": vars(args) | {"out": str(args.out)},
    }
    print(f"model {args.model}, CPU {report['cpu_model']}, fp32")
    head = f"{'algo':<10} {'MB':>7} {'policy':>7} {'critic':>7} {'export':>7} {'state':>6} {'x base':>7}"
    print(head + f" {'save ms':>8} {'load ms':>8}  adapters")
    for r in results:
        p = r["parts_mb"]
        print(
            f"{r['algo']:<10} {r['total_mb']:7.1f} {p.get('policy', 0):7.1f} {p.get('critic', 0):7.1f} "
            f"{p.get('adapter_export', 0):7.1f} {p.get('learner_state', 0):6.1f} {r['ratio_to_base']:7.3f} "
            f"{r['save_ms']:8.0f} {r['load_ms']:8.0f}  {','.join(r['adapters'])}"
        )
    write_json(args.out, report)


if __name__ == "__main__":
    main()
