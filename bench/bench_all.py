"""Every speed and memory ratio in one run: a table of ratios beside their goals, and one JSON.

Each section runs in its own subprocess (a crash costs one section, named in the table), one after another on the
same machine:

* ``rollout``  (``bench_rollout.py``, throughput part): rollout tokens/s ÷ the raw engine's tokens/s replaying
  the same batches; goal ≥ 0.9.
* ``learner``  (here): rows/s of ``LearnerGroup.update`` (one Ray learner actor: batch through the object store,
  micro-batching, the algorithm's loss, DeepSpeed step) ÷ rows/s of a bare loop on the same batch in this process
  (the same PEFT model and DeepSpeed config: forward, −A·log π on the response tokens, backward, step); goal ≥ 0.9.
* ``pipeline`` (``bench_pipeline.py``: two short ``hierarl train`` runs): one-step-off ÷ synchronous iteration
  time; adapter push ÷ iteration time (goal ≤ 1 %); the learner-vs-engine log-prob gap on response tokens.
* ``envs``     (``bench_envs.py``): env-pool steps/s ÷ in-process steps/s per env (one pool worker).
* ``prompts``  (``bench_prompts.py``, ALFWorld expert games): prompt tokens per turn per protocol, first vs last
  turns of the episodes.
* ``memory``   (``bench_memory.py``): the learner's peak resident memory over its phases ÷ the fp32 weights.

The pipeline and memory rows carry a ``detail``: each mode's phase medians, the learner's peak MB and seconds per
phase, so a ratio can be explained from the JSON alone.

``--quick`` (~10-15 min on 2 cores) uses the tiny model where a section takes one, short runs and few repeats;
without it the main job's SmolLM2. Record the CPU: figures differ ~2× between AVX2 and AVX-512/AMX machines.

    python bench/bench_all.py --quick --out docs/results/all_quick.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()
BENCH = ROOT / "bench"
SECTIONS = ("rollout", "learner", "pipeline", "envs", "prompts", "memory")


def _run(args: list[str], timeout: float) -> None:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args[:1])} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")


def rollout(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    out = tmp / "rollout.json"
    model = "tiny" if quick else "smollm2"
    _run(
        [
            str(BENCH / "bench_rollout.py"),
            "--skip-tokens",
            "--engines",
            "hf",
            "--workers",
            "1",
            "--model",
            model,
            "--repeats",
            "2" if quick else "3",
            "--out",
            str(out),
        ],
        3600,
    )
    res = json.loads(out.read_text())["throughput"]["hf"]["1"]
    return [
        _row(
            "rollout tok/s ÷ raw engine tok/s",
            res["ratio"],
            ">= 0.9",
            res["ratio"] >= 0.9,
            f"HF, {model}, 1 worker: {res['tokens_per_s']:.0f} vs {res['raw']['tokens_per_s']:.0f} tok/s",
        )
    ]


def learner(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    out = tmp / "learner.json"
    _run([str(Path(__file__)), "--learner-child", str(out)] + (["--quick"] if quick else []), 3600)
    r = json.loads(out.read_text())
    ratio = r["raw_ms"] / r["group_ms"]
    return [
        _row(
            "learner rows/s ÷ raw DeepSpeed step",
            ratio,
            ">= 0.9",
            ratio >= 0.9,
            f"{r['model']}, {r['rows']}×{r['width']} tokens, micro-batch {r['micro_batch_size']}: "
            f"{r['group_ms']:.0f} vs {r['raw_ms']:.0f} ms per step",
        )
    ]


def bare_policy_steps(path: str, spec: Any, batch: Any, steps: int, device: str) -> list[float]:
    """ms per optimizer step of the bare loop: the PEFT model in DeepSpeed with ``spec``'s config, forward,
    −A·log π on the response tokens, backward, step; no learner code (the process group must exist)."""
    import deepspeed
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from common.dtypes import pick_dtype
    from learners.distributed import ds_config

    torch.manual_seed(0)
    net = get_peft_model(
        AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
        LoraConfig(
            r=spec.lora.rank, lora_alpha=spec.lora.alpha, target_modules=list(spec.lora.target_modules)
        ),
    )
    params = [p for p in net.parameters() if p.requires_grad]
    bf16 = pick_dtype(spec.dtype, device) == torch.bfloat16
    engine, _, _, _ = deepspeed.initialize(
        model=net, optimizer=torch.optim.AdamW(params, lr=spec.actor_lr), config=ds_config(spec, 1, bf16)
    )
    lm = net.get_base_model()
    dev = engine.device
    raw = []
    for _ in range(steps):
        t0 = time.perf_counter()
        for start in range(0, len(batch.seqs), spec.micro_batch_size):
            sl = slice(start, start + spec.micro_batch_size)
            ids = torch.from_numpy(batch.seqs.input_ids[sl]).to(dev)
            sel = torch.from_numpy(batch.seqs.response_mask[sl])[:, 1:].to(dev)
            hidden = lm.get_decoder()(input_ids=ids).last_hidden_state[:, :-1][sel]
            logp = torch.log_softmax(lm.get_output_embeddings()(hidden).float(), -1)
            picked = logp.gather(-1, ids[:, 1:][sel][:, None]).squeeze(-1)
            adv = torch.from_numpy(batch.token_adv[sl][:, 1:][sel.cpu().numpy()]).to(dev)
            engine.backward(-(adv * picked).sum() / float(batch.loss_mask.sum()))
        engine.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        raw.append(1e3 * (time.perf_counter() - t0))
    del engine, net, lm
    return raw


def learner_child(out: Path, quick: bool) -> None:
    """Median ms per optimizer step: the bare loop here, then ``LearnerGroup.update`` with one Ray actor."""
    import dataclasses

    import numpy as np
    import ray
    from bench_checkpoints import _free_port, synthetic_batch

    from actors.models import resolve_model_path
    from cluster.ray_cluster import WorkerResources
    from common.lora import LoraSpec
    from learners.algos import grpo
    from learners.distributed import init_dist
    from learners.group import LearnerGroup
    from learners.learner_spec import PADDED_ROWS, LearnerSpec

    model = "tiny" if quick else "smollm2"
    rows, width, steps = (8, 128, 4) if quick else (16, 256, 4)
    path = resolve_model_path(model)
    lora = LoraSpec(8, 16, ("q_proj", "v_proj"))
    spec = LearnerSpec(
        path,
        lora,
        "float32",
        0,
        1e-5,
        1e-5,
        1.0,
        4,
        False,
        seed=0,
        critic_trunk="own",
        **PADDED_ROWS,
        master_port=_free_port(),
    )
    batch = synthetic_batch(rows, width)

    init_dist(0, 1, spec.master_port, "cpu")
    raw = bare_policy_steps(path, spec, batch, steps + 1, "cpu")

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    group = LearnerGroup(dataclasses.replace(spec, master_port=_free_port()), 1, WorkerResources(1, 0))
    old = dataclasses.replace(batch, old_logprobs=group.logprobs(batch.seqs))
    through = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        group.update(
            old,
            policy_loss=grpo.ALGORITHM.policy_loss,
            value_loss=None,
            loss_cfg=grpo.Config(kl_coef=0.0),
            agg="token-mean",
            mini_batch_size=rows,
            epochs=1,
            seed=i,
        )
        through.append(1e3 * (time.perf_counter() - t0))
    group.shutdown()
    ray.shutdown()
    out.write_text(
        json.dumps(
            {
                "model": model,
                "rows": rows,
                "width": width,
                "micro_batch_size": spec.micro_batch_size,
                "raw_ms": statistics.median(raw[1:]),  # the first step warms up
                "group_ms": statistics.median(through[1:]),
                "raw_all_ms": raw,
                "group_all_ms": through,
                "numpy": np.__version__,
            }
        )
    )


def pipeline(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    out = tmp / "pipeline"
    sets = ["iterations=3", "eval_every=0", "eval_episodes=8", "rollout.groups_per_iter=2"]
    if quick:
        sets += ["model.path=tiny", "bc.enabled=false", "learner.ppo_epochs=1"]
    _run(
        [
            str(BENCH / "bench_pipeline.py"),
            "--out",
            str(out),
            "--preset",
            "hiper_synthetic_small",
            "--set",
            *sets,
        ],
        5400,
    )
    res = json.loads((out / "pipeline.json").read_text())["result"]
    sync, off = res["sync"], res["one_step_off"]
    rows = [
        json.loads(line)
        for line in (out / "sync" / "metrics.jsonl").read_text().splitlines()
        if '"phase": "rl"' in line
    ]
    push = statistics.median(r["time_push"] / r["time_iteration"] for r in rows)
    gap = max(r.get("logprob_gap", 0.0) for r in rows)
    model = "tiny" if quick else "smollm2"
    return [
        _row(
            "one-step-off ÷ sync iteration time",
            off["iteration"] / sync["iteration"],
            "(lower is better)",
            None,
            f"hiper_synthetic_small, {model}: {off['iteration']:.1f} vs {sync['iteration']:.1f} s",
            detail=res,  # per-mode phase medians: where an overlapping loop gains or loses
        ),
        _row(
            "adapter push ÷ iteration time",
            push,
            "<= 0.01",
            push <= 0.01,
            f"median of {len(rows)} iterations",
        ),
        _row("learner vs engine log-prob gap", gap, "(fp32 rounding)", None, "max over iterations, mean |Δ|"),
    ]


def envs(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    out = tmp / "envs.json"
    _run(
        [str(BENCH / "bench_envs.py"), "--envs", "synthetic,textcraft", "--workers", "1", "--out", str(out)]
        + (["--seconds", "1.5", "--n", "50"] if quick else []),
        1800,
    )
    res = json.loads(out.read_text())["envs"]
    return [
        _row(
            f"{name} pool steps/s ÷ in-process",
            r["pool"]["1"]["ratio"],
            "(pipe overhead)",
            None,
            f"{r['pool']['1']['steps_per_s']:.0f} vs {r['inproc_steps_per_s']:.0f} steps/s, 1 worker",
        )
        for name, r in res.items()
        if "pool" in r
    ]


def prompts(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    out = tmp / "prompts.json"
    _run([str(BENCH / "bench_prompts.py"), "--games", "4" if quick else "12", "--out", str(out)], 1800)
    table = json.loads(out.read_text())["summary"]["mean_by_bucket"]
    rows = []
    for variant in ("react", "plan_execute", "hipif"):
        buckets = table[variant]
        first, last = buckets[0], buckets[-1]
        rows.append(
            _row(
                f"prompt tokens/turn, {variant}: last ÷ first",
                last["mean"] / first["mean"],
                "(flat ≈ 1)",
                None,
                f"turns {first['start']}+: {first['mean']:.0f} → turns {last['start']}+: {last['mean']:.0f}",
            )
        )
    return rows


def memory(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    out = tmp / "memory.json"
    _run(
        [str(BENCH / "bench_memory.py"), "--episodes", "2" if quick else "8", "--out", str(out)]
        + (["--model", "tiny"] if quick else []),
        3600,
    )
    r = json.loads(out.read_text())
    res = r["results"][0]
    worst = max(res["phases"], key=lambda p: res["phases"][p]["peak_mb"])
    return [
        _row(
            "learner peak RSS ÷ fp32 weights",
            res["peak_mb"] / res["weights_mb"],
            "(lower is better)",
            None,
            f"{r['preset']}, {r['model']}: {res['peak_mb']:.0f} MB at {worst} vs {res['weights_mb']:.0f} MB weights",
            detail=res["phases"],  # peak MB and seconds per learner phase
        )
    ]


def _row(
    metric: str, value: float, goal: str, met: bool | None, note: str, detail: Any = None
) -> dict[str, Any]:
    row = {"metric": metric, "value": value, "goal": goal, "met": met, "note": note}
    return row if detail is None else {**row, "detail": detail}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections to run, comma-separated")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "all.json")
    ap.add_argument("--learner-child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.learner_child:
        learner_child(args.learner_child, args.quick)
        return
    from bench_prompts import cpu_model

    from common.dtypes import pick_dtype

    fns = {"rollout": rollout, "learner": learner, "pipeline": pipeline, "envs": envs}
    fns |= {"prompts": prompts, "memory": memory}
    rows: list[dict[str, Any]] = []
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="hierarl-bench-") as tmp:
        for name in [s for s in args.only.split(",") if s]:
            t0 = time.perf_counter()
            print(f"[bench_all] {name} ...", flush=True)
            try:
                got = fns[name](Path(tmp), args.quick)
            except Exception as e:  # one section's failure is a row, not the end of the run
                got = [_row(f"{name}: failed", float("nan"), "", False, str(e).splitlines()[-1][:200])]
            seconds[name] = time.perf_counter() - t0
            rows += [{"section": name, **r} for r in got]
    report = {
        "quick": args.quick,
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "learner_dtype_auto": str(pick_dtype("auto", "cpu")).removeprefix("torch."),
        "seconds": seconds,
        "rows": rows,
    }
    quick = " (--quick)" if args.quick else ""
    print(
        f"\nCPU {report['cpu_model']}, {report['cpus']} cores, auto dtype {report['learner_dtype_auto']}{quick}"
    )
    print(f"{'metric':<44} {'value':>8} {'goal':>18}  met  note")
    for r in rows:
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        print(f"{r['metric']:<44} {r['value']:>8.3f} {r['goal']:>18}  {met:<4} {r['note']}")
    write_json(args.out, report)


if __name__ == "__main__":
    main()
