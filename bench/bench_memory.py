"""Learner worker memory and time per phase, on the main job's real rows: where the resident memory goes.

The rows are the main job's preset (``hiper_textcraft_cpu``) expert demonstrations in its agent's format, padded as
the driver pads them (``learners.prepare.shaped_turns``), with real HiPER targets from the learner's own log-probs
and values (``learners.prepare.learner_batch``). Each variant runs in a fresh process (RSS is per process), which
builds the learner as the preset does (``launch.driver.wiring.learner_spec``) and measures, phase by phase, the peak
resident set (``VmHWM``, reset before each phase through ``/proc/self/clear_refs``) and the wall time:

``load`` (policy + critic built, the policy copied into its frozen KL reference as the driver does after BC) ·
``logprobs`` · ``reference`` (under that copy; ``learner.kl_reference=base``: adapters off) · ``values`` · ``policy_step`` and
``critic_step`` (one optimizer step each on a ``learner.mini_batch_size`` mini-batch).

Variants are ``name:key=value,key=value`` run-config overrides, separated by ``;``; ``--baseline PATH`` also runs the first variant
with the code of another checkout (e.g. a ``git worktree`` of the previous commit), so before/after ratios come
from one run on one machine::

    python bench/bench_memory.py --out docs/results/memory.json \\
        --variants "default:;mb2:learner.micro_batch_size=2" --baseline /tmp/hierarl-before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

PHASES = ("load", "logprobs", "reference", "values", "policy_step", "critic_step")


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


class Phases:
    """Peak RSS (MB) and seconds of each ``with phases(name):`` block."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = {}

    def __call__(self, name: str) -> Phases:
        self.name = name
        return self

    def __enter__(self) -> None:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
        self.start_mb, self.t0 = _rss_mb("VmRSS"), time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.rows[self.name] = {
            "seconds": time.perf_counter() - self.t0,
            "start_mb": self.start_mb,
            "peak_mb": _rss_mb("VmHWM"),
            "end_mb": _rss_mb("VmRSS"),
        }


def build_rows(preset: str, model: str, episodes: int, out: Path) -> dict[str, Any]:
    """The preset's expert demonstrations → padded turns → ``Sequences`` arrays, saved to ``out`` (npz)."""
    import numpy as np
    from transformers import AutoTokenizer

    from actors.models import resolve_model_path
    from envs import success_reward
    from launch.config import resolve_algo_config, resolve_config
    from launch.driver.wiring import expert_demonstrations
    from launch.evaluation.tasks import env_task_ids
    from learners.algos.registry import get_algo
    from learners.prepare import shaped_turns
    from learners.targets import sequences

    cfg = resolve_config(preset, [f"model.path={model}", f"bc.episodes={episodes}"])
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    tok = AutoTokenizer.from_pretrained(resolve_model_path(model))
    demos = expert_demonstrations(cfg, tok, env_task_ids(cfg, cfg.env.train_split))
    pad = tok.pad_token_id or tok.eos_token_id
    r = success_reward(cfg.env.name, dict(cfg.env.options))
    turns = shaped_turns(demos, algo_cfg, success_reward=r, max_len=cfg.learner.max_seq_len, pad_id=pad)
    seqs = sequences(turns, algo.value_slots)
    np.savez(out, **{k: v for k, v in seqs.__dict__.items() if v is not None})
    lengths = seqs.attention_mask.sum(1)
    return {
        "episodes": len(demos),
        "rows": len(seqs),
        "padded_width": int(seqs.input_ids.shape[1]),
        "mean_length": float(lengths.mean()),
        "padding_fraction": float(1 - lengths.sum() / seqs.attention_mask.size),
    }


def child(preset: str, model: str, overrides: list[str], rows_file: Path) -> dict[str, Any]:
    """One variant in this process: the learner's phases on the saved rows."""
    import dataclasses
    import socket

    import numpy as np
    from bench_checkpoints import random_targets

    from actors.models import resolve_model_path
    from launch.config import resolve_algo_config, resolve_config
    from launch.driver.wiring import learner_spec
    from learners.algos.registry import get_algo
    from learners.batch import Sequences
    from learners.prepare import minibatch
    from learners.worker import LearnerWorker

    cfg = resolve_config(preset, [f"model.path={model}", *overrides])
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = resolve_model_path(model)
    spec = dataclasses.replace(learner_spec(cfg, algo, algo_cfg, path, "cpu"), master_port=port)
    saved = np.load(rows_file)
    seqs = Sequences(**{k: saved[k] for k in saved.files})
    phases = Phases()
    with phases("load"):
        worker = LearnerWorker(spec)
        # the driver's ``freeze_reference``: ref_<name> := the policy <name>
        for frozen in spec.frozen_adapters:
            worker.load_adapter_weights(worker.adapter_weights(frozen.removeprefix("ref_")), adapter=frozen)
    with phases("logprobs"):
        lp = worker.logprobs(seqs)
    with phases("reference"):
        ref = None
        if spec.frozen_adapters:
            ref = worker.logprobs(seqs, adapter=spec.frozen_adapters[0])
        elif algo.uses_reference(algo_cfg):
            ref = worker.logprobs(seqs, reference=True)
    with phases("values"):
        values = worker.values(seqs) if algo.value_slots else None
    # the demonstrations carry no rewards worth a target: random advantages and value targets, the algorithm's losses
    batch = random_targets(seqs, old_logprobs=lp, ref_logprobs=ref, old_values=values)
    mb = minibatch(batch, np.arange(min(len(batch), cfg.learner.mini_batch_size)), algo_cfg.agg)
    with phases("policy_step"):
        policy = worker.update_policy(mb, algo.policy_loss, algo_cfg)
    with phases("critic_step"):
        critic = worker.update_critic(mb, algo.value_loss, algo_cfg) if algo.value_loss else {}
    weights_mb = sum(f.stat().st_size for f in Path(path).glob("*.safetensors")) / 2**20
    return {
        "overrides": overrides,
        "micro_batch_size": spec.micro_batch_size,
        "dtype": spec.dtype,
        "phases": phases.rows,
        "peak_mb": max(r["peak_mb"] for r in phases.rows.values()),
        "weights_mb": weights_mb,
        "policy_loss": policy.get("loss", float("nan")),
        "value_loss": critic.get("value_loss", float("nan")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="hiper_textcraft_cpu")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--episodes", type=int, default=8, help="expert demonstrations the rows come from")
    ap.add_argument(
        "--variants", default="default:", help="name:key=value,...;name:... (run-config overrides)"
    )
    ap.add_argument("--baseline", type=Path, help="another checkout: the first variant also runs on its code")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "memory.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--rows-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        overrides = [o for o in args.child.split(",") if o]
        print("RESULT " + json.dumps(child(args.preset, args.model, overrides, args.rows_file)))
        return
    from bench_prompts import cpu_model

    variants = [(v.split(":", 1)[0], v.split(":", 1)[1]) for v in args.variants.split(";") if v]
    runs = [(name, ROOT, ov) for name, ov in variants]
    if args.baseline:
        runs.insert(0, (f"{variants[0][0]} @ baseline", args.baseline.resolve(), variants[0][1]))
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = Path(tmp) / "rows.npz"
        rows = build_rows(args.preset, args.model, args.episodes, rows_file)
        results = []
        for name, tree, ov in runs:
            env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ['PYTHONPATH']}"}
            cmd = [sys.executable, __file__, "--preset", args.preset, "--model", args.model]
            cmd += ["--child", ov, "--rows-file", str(rows_file)]
            # the child imports the project from ``tree`` (first on its path), this script's helpers from here
            proc = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(f"variant {name} failed:\n{proc.stderr[-3000:]}")
            results.append({"name": name, "tree": str(tree), **json.loads(line[7:])})
    report = {
        "preset": args.preset,
        "model": args.model,
        "rows": rows,
        "cpu_model": cpu_model(),
        "results": results,
    }
    print(
        f"{args.preset}, {args.model}, CPU {report['cpu_model']}: {rows['rows']} rows from {rows['episodes']} "
        f"expert episodes, padded width {rows['padded_width']}, mean length {rows['mean_length']:.0f}"
    )
    print(f"{'variant':<24}" + "".join(f"{p:>18}" for p in PHASES) + f"{'peak MB':>9}")
    print(" " * 24 + "".join(f"{'peak MB / s':>18}" for _ in PHASES))
    for r in results:
        cells = "".join(
            f"{r['phases'][p]['peak_mb']:>11.0f} /{r['phases'][p]['seconds']:>5.1f}" for p in PHASES
        )
        print(f"{r['name']:<24}{cells}{r['peak_mb']:>9.0f}")
    base = results[0]["peak_mb"]
    print("peak ÷ first: " + ", ".join(f"{r['name']} {r['peak_mb'] / base:.2f}" for r in results))
    write_json(args.out, report)


if __name__ == "__main__":
    main()
