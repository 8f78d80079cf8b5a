"""One RL iteration against the roofline of the cores it runs on: where the seconds go, what each pass computes, and
how far the whole is from what the machine could do, for the learner with and without prefix-tree packing (and as
configured at the throughput issue's filing), on the same saved batch, in one run.

    python bench/bench_iteration.py --run RUN --iterations 1,2 --out docs/results/iteration_bench/iteration.json
    python bench/bench_iteration.py --run RUN --passes-only --arms padded,today   # tokens and FLOPs, no timing

RUN is a finished ``hierarl train ... save_trajectories=true checkpoint_keep_last=0`` run (the main job by
default). Measured, in this order, nothing else on the cores:
* the machine: fp32 matmul GFLOP/s (2048³, best of 3) and read GB/s (a sum over 1 GiB, best of 5) at 1 and 2 torch
  threads: the roofline's two bounds;
* the rollout engine: the run's generate calls of iteration k replayed (the same prompt ids and batches, each round
  capped at its longest response; sampling, so lengths differ a little) on HF + peft and on HF with the adapter
  merged (iteration k's policy, the rollout worker's thread count), and decode steps/s at batch 1, 8 and 32 against
  the bound ``max(weights ÷ read GB/s, 2 · weights · batch ÷ GFLOP/s)``;
* the learner, one update of iteration k from the state before it (``bench_replay``'s set-up), per arm (``ARMS``):
  ``padded`` (the run config's defaults before packing: π_old from the engine checked on a few rows, no π_ref pass
  at RL's first update, the KL on a sample, the critic cut where its value slots read; padded rows, rows shuffled
  one by one) and ``today`` (the same with prefix-tree packs over mini-batches of whole groups); ``filing`` (π_old
  recomputed, the π_ref pass even while the reference is the policy, the update's KL on every row). Per phase:
  seconds, and from the batch itself (``iteration_passes``) each named pass's rows, useful (the rows' own) and
  computed (padded or tree) tokens and FLOPs; ``learner_tokens_ratio``, computed ÷ useful tokens; achieved
  GFLOP/s; the share of learner FLOPs whose output cannot change the update; the floor of the needed passes at the
  2-thread peak (for a packed arm, its packs' FLOPs).
From the trajectories: the histogram of generate batch sizes, the tokens a static batch computes beside the rows'
own (padding, decode steps after a row ended), the prompt tokens an ideal prefix cache would skip, and the
rollout's floor at the bounds (``iteration_model.rollout_floor_s``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

from bench_engines import machine_bounds  # noqa: E402
from bench_prompts import cpu_model  # noqa: E402
from bench_replay import _driver_stage, _run_config, replay_updater  # noqa: E402
from iteration_engines import ENGINES, engine_replay  # noqa: E402
from iteration_model import (  # noqa: E402
    Shape,
    rollout_floor_s,
    rollout_rounds,
    shared_prefix_tokens,
    static_batch_work,
)
from iteration_passes import learner_passes  # noqa: E402

PADDED = ["learner.pack=padded", "learner.minibatches=rows"]
"""The learner before prefix-tree packing."""
ARMS = {
    "filing": ["learner.old_logprobs=recompute", "learner.measure_rows=0", *PADDED],
    "padded": PADDED,
    "tree_rows": ["learner.minibatches=rows"],
    "today": [],
    "trunk": ["learner.critic_trunk=policy"],
}
"""Learner settings per arm (overrides on the run's config); ``filing`` also takes the π_ref pass at RL's first
update, where the reference is still the policy, and generates with HF + peft (the CPU default then); ``padded``
is today's learner before packing (padded rows, rows shuffled one by one); ``tree_rows`` packs over rows shuffled
one by one; ``today`` (prefix-tree packs over mini-batches of whole groups) and ``trunk`` (today's with the critic a head on the policy's trunk, its head fresh)
run with the engine of today's main job."""
SPEEDUPS = (("filing", "today", ""), ("padded", "today", "pack_"), ("today", "trunk", "trunk_"))
"""(slower arm, faster arm, key prefix) of the speed-ups reported where both arms ran."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, type=Path)
    ap.add_argument("--iterations", default="1,2", help="RL iterations to replay (comma-separated)")
    ap.add_argument("--engines", default="hf_peft,hf_merged", help=f"of {', '.join(ENGINES)}; empty: none")
    ap.add_argument("--arms", default="padded,today", help=f"learner arms, of {', '.join(ARMS)}")
    ap.add_argument("--out", type=Path, default=Path("bench/results/iteration.json"))
    ap.add_argument("--summarise", type=Path, help="derive the figures of a saved JSON again (no measuring)")
    ap.add_argument("--passes-only", action="store_true", help="count each arm's passes, time nothing")
    args = ap.parse_args(argv)
    if args.passes_only:
        iterations = [int(k) for k in args.iterations.split(",")]
        write_json(args.out, count_passes(args.run, iterations, args.arms.split(",")))
        return 0
    if args.summarise:
        out = json.loads(args.summarise.read_text())
        for row in out["iterations"].values():
            _summarise(row, out["machine"]["threads_2"]["matmul_gflop_s"] * 1e9)
        write_json(args.summarise, out)
        print(table(out))
        return 0
    iterations = [int(k) for k in args.iterations.split(",")]
    base = _run_config(args.run, [])
    out: dict[str, Any] = {"run": str(args.run), "cpu": cpu_model(), "iterations": {}}
    out["machine"] = {f"threads_{t}": machine_bounds(t) for t in (1, 2)}
    write_json(args.out, out)
    shape, model_path = _shape(base)
    out["model"] = {"matmul_weights": shape.matmul_weights, "lora_weights": shape.lora_weights}
    run_rows = {
        r["iteration"]: r for r in map(json.loads, (args.run / "metrics.jsonl").read_text().splitlines())
    }
    peak = out["machine"]["threads_2"]["matmul_gflop_s"] * 1e9
    read = out["machine"]["threads_2"]["read_gb_s"] * 1e9
    for k in iterations:
        trajs = _trajectories(args.run, k)
        rounds = rollout_rounds(
            [[(t.prompt_ids.size, t.response_ids.size) for t in tr.turns] for tr in trajs],
            base.env.workers_per_rollout,
        )
        prompts = [t.prompt_ids for tr in trajs for t in tr.turns]
        row = {
            "episodes": len(trajs),
            "rollout": {
                "run_s": run_rows[k].get("time_rollout"),
                "batch_histogram": dict(sorted(Counter(r.batch for r in rounds).items())),
                "static_batch": static_batch_work(rounds),
                "ideal_prefix_hits": shared_prefix_tokens(prompts) / max(1, sum(p.size for p in prompts)),
                "floor": rollout_floor_s(rounds, shape, peak, read),
            },
            "run_phases_s": {key: v for key, v in run_rows[k].items() if key.startswith("time_")},
        }
        out["iterations"][str(k)] = row
        if args.engines:
            row["engine"] = engine_replay(
                args.engines.split(","), args.run, base, k, rounds, prompts, model_path, out["machine"], shape
            )
            write_json(args.out, out)
        row["run_engine"] = engine_name(base)
        row["learner"] = {
            name: _learner_arm(args.run, base, k, ARMS[name], name, shape) for name in args.arms.split(",")
        }
        _summarise(row, peak)
        write_json(args.out, out)  # after every iteration: a cut run keeps what it measured
    print(table(out))
    return 0


def engine_name(cfg: Any) -> str:
    """The ``ENGINES`` name of a run config's rollout engine on the CPU."""
    from actors.engines import engine_kind

    kind = engine_kind(cfg.rollout.engine, "cpu")
    return f"{kind}_{'merged' if cfg.rollout.weight_sync == 'merged' else 'peft'}"


def _shape(cfg: Any) -> tuple[Shape, str]:
    from actors.models import resolve_model_path

    path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    config = json.loads((Path(path) / "config.json").read_text())
    return Shape.from_config(config, cfg.model.lora_rank, cfg.model.lora_targets), path


def _trajectories(run: Path, k: int) -> list[Any]:
    from actors.trajectory import read_jsonl

    trajs = list(read_jsonl(run / "trajectories" / f"iter_{k}.jsonl"))
    for t in trajs:
        for turn in t.turns:
            turn.shaped.clear()
    return trajs


def _learner_arm(
    run: Path, base: Any, k: int, overrides: list[str], name: str, shape: Shape
) -> dict[str, Any]:
    """One update of iteration k from ``iter_<k-1>`` under ``overrides``: timings, metrics and the named passes."""
    import torch
    from transformers import AutoTokenizer

    from cluster.ray_cluster import WorkerResources, init_ray
    from launch.config import DEFAULT_PRESET, engine_old_logprobs, resolve_algo_config, resolve_config
    from launch.driver.stages import staged_update
    from launch.driver.update_plan import UpdatePlan
    from launch.driver.warm_start import start_rl
    from launch.driver.wiring import learner_spec
    from learners.algos.registry import get_algo
    from learners.group import LearnerGroup

    cfg = _run_config(run, overrides)
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    path = _shape(cfg)[1]
    tok = AutoTokenizer.from_pretrained(path)
    pad = tok.pad_token_id or tok.eos_token_id
    init_ray(cfg.ray_address, device="cpu")
    state, start = run / "checkpoints" / f"iter_{k - 1}", run / "checkpoints" / "iter_0"
    filing = name == "filing"
    spec = dataclasses.replace(learner_spec(cfg, algo, algo_cfg, path, "cpu"), critic_reach=not filing)
    learner = LearnerGroup(spec, cfg.learner.num_workers, WorkerResources(cfg.learner.cpus_per_worker, 0.0))
    try:
        policy = list(cfg.model.adapter_names) or ["default"]
        learner.load_checkpoint(str(state), only=policy)
        updater = replay_updater(
            (cfg, algo, algo_cfg),
            learner,
            state,
            start,
            pad,
            engine_old_logprobs=engine_old_logprobs(cfg, "cpu"),
        )
        if k == 1:
            start_rl(learner, cfg.learner, policy)
            updater.reference_is_policy = not filing  # the driver's freeze_reference just ran
        stage = _driver_stage((cfg, algo, algo_cfg), tok, pad, updater, run)
        stage.restore(torch.load(state / "driver.pt", weights_only=False))
        stage.prepare(k - 1)
        ref_is_policy = updater.reference_is_policy
        trajs = _trajectories(run, k)
        t0 = time.perf_counter()
        metrics, timings = staged_update(updater, stage, trajs, UpdatePlan(seed=cfg.seed + k), k)
        wall = time.perf_counter() - t0
    finally:
        learner.shutdown()
    passes = _arm_passes(cfg, name, k, trajs, shape, pad, ref_is_policy)
    print(f"learner {name}, iteration {k}: {wall:.1f} s {timings}", flush=True)
    return {
        "overrides": overrides,
        "engine": "hf_peft" if filing else engine_name(resolve_config(DEFAULT_PRESET, [])),
        "wall_s": wall,
        "timings": timings,
        "update_kl": metrics.get("kl_update"),
        "passes": [p.__dict__ for p in passes],
    }


def _arm_passes(
    cfg: Any, name: str, k: int, trajs: list[Any], shape: Shape, pad: int, ref_is_policy: bool
) -> list[Any]:
    """The named passes of arm ``name``'s update of iteration k (``iteration_passes.learner_passes``)."""
    from launch.config import resolve_algo_config
    from learners.algos.registry import get_algo

    algo = get_algo(cfg.algo)
    return learner_passes(
        cfg,
        algo,
        resolve_algo_config(algo.Config, cfg.algo_overrides),
        trajs,
        shape,
        pad,
        seed=cfg.seed + k,
        ref_is_policy=ref_is_policy,
        ref_equals_policy=k == 1,
        critic_reach=name != "filing",
        critic_trunk=cfg.learner.critic_trunk == "policy",
    )


def tokens_ratio(passes: list[dict[str, Any]]) -> float:
    """The tokens an arm's passes compute ÷ the rows' own tokens they read: above 1 by the padding, below 1 by
    what prefix-tree packs share (``learner_tokens_ratio``)."""
    return sum(p["computed_tokens"] for p in passes) / max(1, sum(p["useful_tokens"] for p in passes))


def count_passes(run: Path, iterations: list[int], arms: list[str]) -> dict[str, Any]:
    """No timing and no learner: each arm's named passes of each iteration's update, from the run's saved
    trajectories (rows, useful and computed tokens, FLOPs) and its ``learner_tokens_ratio``. The π_ref pass is
    counted as the driver runs it: skipped at RL's first update where the reference is the policy."""
    from transformers import AutoTokenizer

    out: dict[str, Any] = {"run": str(run), "iterations": {}}
    for k in iterations:
        trajs, row = _trajectories(run, k), {}
        for name in arms:
            cfg = _run_config(run, ARMS[name])
            shape, path = _shape(cfg)
            tok = AutoTokenizer.from_pretrained(path)
            ref_is_policy = k == 1 and name != "filing"
            passes = [
                p.__dict__ for p in _arm_passes(cfg, name, k, trajs, shape, tok.pad_token_id, ref_is_policy)
            ]
            row[name] = {
                "passes": passes,
                "learner_tokens_ratio": tokens_ratio(passes),
                "needed_gflop": sum(p["flops"] for p in passes if p["needed"]) / 1e9,
            }
            print(
                f"iteration {k}, {name}: learner_tokens_ratio {row[name]['learner_tokens_ratio']:.3f}, needed "
                f"{row[name]['needed_gflop']:.0f} GFLOP; "
                + ", ".join(f"{p['name']} {p['computed_tokens']}/{p['useful_tokens']}" for p in passes),
                flush=True,
            )
        out["iterations"][str(k)] = {"learner": row}
    return out


def _summarise(row: dict[str, Any], peak: float) -> None:
    """Per arm: GFLOP/s per phase, the redundant share, the needed passes' floor; the arms' ratio."""

    run_rollout = row["rollout"]["run_s"] or 0.0
    replay = {name: e["replay_s"] for name, e in row.get("engine", {}).items() if isinstance(e, dict)}
    for arm in row["learner"].values():
        # the run's rollout, its generation swapped for the arm's engine's replay of the same calls (the rest of a
        # rollout, env steps and prompts, is the same on every engine)
        rollout = run_rollout
        if arm["engine"] != row["run_engine"] and {arm["engine"], row["run_engine"]} <= replay.keys():
            rollout += replay[arm["engine"]] - replay[row["run_engine"]]
        arm["rollout_s"] = rollout
        passes, times = arm["passes"], arm["timings"]
        phases = {}
        for phase in ("logprobs", "values", "update", "measure"):
            flops = sum(p["flops"] for p in passes if p["phase"] == phase)
            s = times.get(phase, 0.0)
            phases[phase] = {"s": s, "gflop": flops / 1e9, "gflop_s": flops / s / 1e9 if s else None}
        total = sum(p["flops"] for p in passes)
        needed = sum(p["flops"] for p in passes if p["needed"])
        learner_s = sum(times.get(ph, 0.0) for ph in phases)
        arm["phases"] = phases
        arm["learner_s"] = learner_s
        arm["learner_tokens_ratio"] = tokens_ratio(passes)
        arm["redundant_share"] = 1 - needed / total
        arm["learner_floor_s"] = needed / peak
        arm["iteration_s"] = rollout + learner_s
        arm["iteration_floor_s"] = row["rollout"]["floor"]["total_s"] + needed / peak
        arm["iteration_over_floor"] = arm["iteration_s"] / arm["iteration_floor_s"]
    arms = row["learner"]
    for slow, fast, key in SPEEDUPS:
        if {slow, fast} <= arms.keys():
            row[f"{key}learner_speedup"] = arms[slow]["learner_s"] / arms[fast]["learner_s"]
            row[f"{key}iteration_speedup"] = arms[slow]["iteration_s"] / arms[fast]["iteration_s"]


def table(out: dict[str, Any]) -> str:
    m = out["machine"]
    lines = [
        f"machine ({out['cpu']}): matmul {m['threads_1']['matmul_gflop_s']:.0f} / {m['threads_2']['matmul_gflop_s']:.0f}"
        f" GFLOP/s, read {m['threads_1']['read_gb_s']:.1f} / {m['threads_2']['read_gb_s']:.1f} GB/s (1 / 2 threads)",
        "| iteration | arm | logprobs s | values s | update s | measure s | learner s | GFLOP/s update | redundant | "
        "tokens ratio | learner floor s | rollout s | iteration ÷ floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, row in out["iterations"].items():
        for name, arm in row.get("learner", {}).items():
            ph = arm.get("phases", {})
            if not ph:
                continue
            lines.append(
                f"| {k} | {name} | {ph['logprobs']['s']:.1f} | {ph['values']['s']:.1f} | {ph['update']['s']:.1f} | "
                f"{ph['measure']['s']:.1f} | {arm['learner_s']:.1f} | {ph['update']['gflop_s'] or 0:.0f} | "
                f"{arm['redundant_share']:.1%} | {arm['learner_tokens_ratio']:.2f} | {arm['learner_floor_s']:.1f} | "
                f"{arm['rollout_s']:.1f} | "
                f"{arm['iteration_over_floor']:.2f} |"
            )
        for slow, fast, key in SPEEDUPS:
            if f"{key}learner_speedup" in row:
                lines.append(
                    f"iteration {k}: {slow} ÷ {fast}, learner {row[f'{key}learner_speedup']:.2f}, "
                    f"iteration {row[f'{key}iteration_speedup']:.2f}"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
