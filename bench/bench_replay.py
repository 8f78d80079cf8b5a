"""Paired update replay: what one learner update does to the policy, per variant, from the same state on the same
trajectories, in minutes instead of a multi-hour learning run.

    python bench/bench_replay.py --run RUN --iteration 1 --repeats 2 \
        --variant "hiper" --variant "hiper_eq10=algo.switch_adv=eq10" --variant "ppo=algo=ppo" \
        --out bench/results/replay.json

RUN is a finished ``hierarl train ... save_trajectories=true checkpoint_keep_last=0`` run. Every variant starts
from the same state and trains on the same rollouts:
* policy: ``RUN/checkpoints/iter_<k-1>`` (each policy adapter with its optimizer state); the KL term's reference is
  the frozen copy saved with that state, as in the run (the policy RL started from; Multi2's online phase: π_off),
  or ``iter_0``'s policy for a variant that keeps one the run did not;
* critic: fresh (every value 0, as RL iteration 1 finds it) and then the variant's ``learner.critic_warmup_passes``
  critic-only passes (``Updater.warm_up_critic``), so each algorithm's critic is fitted by its own targets on the
  same data; or, with ``--critic-from-run`` and a variant of the run's algorithm, the run's critic at ``iter_<k-1>``
  (with its target copy: STEP-HRL's and Multi2's IQL critics, whose warm-up the run did);
* trajectories: ``RUN/trajectories/iter_<k>.jsonl`` (collected by that policy), shaped afresh per variant (HISR:
  scored by the run's reward models as the run had them, the online hindsight model trained as the run did);
* the variant's driver stage (``launch.driver.stages``) as a resume from ``iter_<k-1>`` has it: restored from the
  checkpoint's driver state and prepared on the learner (HISR's reward models: the checkpoint's, or the stage cache's
  for ``k`` = 1; the stored data's phase and critic steps owed); nothing is collected again;
* one update: the driver's code (``launch.driver.stages.staged_update`` of an ``UpdatePlan`` over the run's
  ``Updater``), seed ``seed + k`` for the mini-batch order; the first variant is repeated with other seeds
  (``--repeats``) to measure the noise floor.
  Replaying iteration 1, RL starts as the driver starts it (``launch.driver.warm_start.start_rl``: the variant's
  ``learner.rl_optimizer`` and warm-up), so a run written before RL's optimizer was reset replays under today's
  default unless the variant says ``learner.rl_optimizer=continue``;
* ``--controls``: each variant also with its advantages negated and zeroed (``learner.advantage_scale`` −1, 0),
  and the table adds its first-order part, (Δ − Δ_negated) / 2, and its sign-independent part, (Δ + Δ_negated) / 2
  (read together with the two rows' KL: the split holds where they are close).
A variant is ``name=key=value key=value ...`` (overrides on the run's config, as ``hierarl train`` takes them;
``algo=ppo`` switches algorithm and keeps the shared ``algo.*`` keys). Measured per variant:
* the update's KL per token group on the batch it trained on (``kl_update/<group>``: switch, subgoal of a boundary
  turn, subgoal copied on a KEEP turn, action, other; ``learners.diagnostics``);
* the change of log P(expert decision) on a fixed teacher-forced probe: the env expert's demonstrations on the first
  eval tasks (sorted ids) until ``--probe-states`` states, each split by the expert's decision (turn 0, KEEP,
  SWITCH) and segment (final or not): Δ log P of the ``<switch>`` block, of the new subgoal (SWITCH states) and of
  the action, in nats, mean over states; for a protocol with several roles, also per role (each row read under its
  role's adapter: STEP-HRL's high / low / progress, Multi2's planner and executor), a second table; split too by
  whether the start policy's greedy reply is already the expert's (``greedy_right`` / ``greedy_wrong``: where it
  is right an update can only lose);
* the same Δ log P on a second probe, the expert's decisions on the batch's own train tasks (``train/...``): what
  the update does where it was taken, beside what it does on held-out tasks.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _env import setup

ROOT = setup()

from bench_prompts import cpu_model  # noqa: E402
from replay_setup import _driver_stage, _run_config, expert_probe, replay_updater  # noqa: E402
from replay_tables import row_line, table  # noqa: E402

NEGATE, ZERO = "learner.advantage_scale=-1", "learner.advantage_scale=0"


@dataclass(frozen=True)
class Shared:
    """What every row replays with: the run's saved config, its model folder and tokenizer, and the probes."""

    base: Any
    model_path: str
    tok: Any
    pad: int
    probes: dict[str, Any]


START_TOLERANCE = 1e-2
"""Nats by which a row's start policy may differ from the first row's on a probe block's summed log-probs (each row
records its ``start_diff``): learner processes of other configs sum the same fp32 log-probs in another order (a
check at 1e-4 once failed on that alone); a wrong checkpoint differs by whole nats."""


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``name=key=value key=value`` → (name, ["key=value", ...]); a bare ``name`` keeps the run's config."""
    head, *rest = text.split()
    name, _, first = head.partition("=")
    return name, ([first] if first else []) + rest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, type=Path)
    ap.add_argument("--iteration", type=int, default=1, help="replay iteration k's update (state iter_<k-1>)")
    ap.add_argument("--variant", action="append", default=[], help="name=key=value ... (repeatable)")
    ap.add_argument(
        "--repeats", type=int, default=2, help="runs of the first variant, with other mini-batch seeds"
    )
    ap.add_argument("--probe-states", type=int, default=50)
    ap.add_argument("--critic-from-run", action="store_true")
    ap.add_argument(
        "--controls", action="store_true", help="each variant also with its advantages negated and zeroed"
    )
    ap.add_argument(
        "--critic-passes",
        type=int,
        default=None,
        help="critic-only passes before the update (default: a fresh critic's learner.critic_warmup_passes; none "
        "for the run's critic, which the run already fitted)",
    )
    ap.add_argument("--out", type=Path, default=Path("bench/results/replay.json"))
    args = ap.parse_args(argv)
    return replay(args)


def replay_plan(args: argparse.Namespace) -> list[tuple[str, list[str], int]]:
    """(row name, overrides, repeat) per row: the first variant ``--repeats`` times, then the others; with
    ``--controls`` each followed by its negated and zeroed twins (the repeats without)."""
    variants = [parse_variant(v) for v in args.variant] or [("run", [])]
    plan = [(variants[0][0] + (f"#{r}" if r else ""), variants[0][1], r) for r in range(args.repeats)]
    plan += [(name, over, 0) for name, over in variants[1:]]
    if args.controls:
        plan = [
            (f"{name}{tag}", [*over, *extra], r)
            for name, over, r in plan
            for tag, extra in (("", []), ("/neg", [NEGATE]), ("/zero", [ZERO]))
            if not (r and tag)
        ]
    return plan


def replay(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from actors.models import resolve_model_path
    from actors.trajectory import read_jsonl
    from cluster.ray_cluster import init_ray
    from launch.config import resolve_algo_config
    from launch.evaluation.tasks import env_task_ids
    from learners.algos.registry import get_algo
    from learners.diagnostics import probe_deltas

    run, k = args.run, args.iteration
    state, start = run / "checkpoints" / f"iter_{k - 1}", run / "checkpoints" / "iter_0"
    traj_path = run / "trajectories" / f"iter_{k}.jsonl"
    for need in (state, start, traj_path):
        if not need.exists():
            raise SystemExit(
                f"bench_replay: {need} is missing (run with save_trajectories=true checkpoint_keep_last=0)"
            )
    base = _run_config(run, [])
    model_path = resolve_model_path(base.model.path, base.model.cache_dir)
    tok = AutoTokenizer.from_pretrained(model_path)
    pad = tok.pad_token_id or tok.eos_token_id
    init_ray(base.ray_address, device="cpu")

    batch_tasks = sorted({t.task_id for t in read_jsonl(traj_path)})
    probes = {
        # held-out: the first eval tasks
        "": expert_probe(base, tok, pad, sorted(env_task_ids(base, base.env.eval_split)), args.probe_states),
        "train/": expert_probe(base, tok, pad, batch_tasks, args.probe_states),  # the replayed batch's tasks
    }
    splits = probes[""].splits
    shared = Shared(base, model_path, tok, pad, probes)
    rows, before = [], None
    for name, overrides, repeat in replay_plan(args):
        cfg = _run_config(run, overrides)
        algo = get_algo(cfg.algo)
        algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
        t0 = time.perf_counter()
        done = replay_update(args, (cfg, algo, algo_cfg), shared, repeat, first=before is None)
        lp_before, lp_after = done["lp_before"], done["lp_after"]
        if before is None:
            before = lp_before[""]
        start_diff = max(float(np.nanmax(np.abs(before[b] - lp_before[""][b]), initial=0.0)) for b in before)
        deltas = {
            f"{key}{name}": v
            for key, p in probes.items()
            for name, v in probe_deltas(p.splits, lp_before[key], lp_after[key]).items()
        }
        row = {
            "variant": name,
            "overrides": overrides,
            "repeat": repeat,
            "algo": cfg.algo,
            "critic_warmup_passes": done["warmup"],
            "start_diff": start_diff,
            "probe": deltas,
            "metrics": {k2: v for k2, v in done["metrics"].items() if isinstance(v, int | float)},
            "timings": done["timings"],
            "wall_s": time.perf_counter() - t0,
        }
        rows.append(row)
        print(row_line(row), flush=True)
        out = {
            "run": str(run),
            "iteration": k,
            "trajectories": done["trajectories"],
            "probe_states": len(splits),
            "probe_split_counts": {
                s: sum(x["kind"] == s for x in splits) for s in ("turn0", "keep", "switch")
            },
            "probe_greedy_right": sum(bool(x.get("start_greedy")) for x in splits),
            "train_probe_tasks": batch_tasks,
            "train_probe_states": len(probes["train/"].splits),
            "train_probe_greedy_right": sum(bool(x.get("start_greedy")) for x in probes["train/"].splits),
            "cpu": cpu_model(),
            "rows": rows,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))  # after every row: a failure later loses none of them
        if start_diff > START_TOLERANCE:
            raise SystemExit(
                f"bench_replay: {name} starts from another policy than the first row (probe log-probs differ by up "
                f"to {start_diff:.3g} nats > {START_TOLERANCE}); rows so far in {args.out}"
            )
    print(table(out), flush=True)
    return 0


def replay_update(
    args: argparse.Namespace, variant: tuple[Any, Any, Any], shared: Shared, repeat: int, *, first: bool
) -> dict[str, Any]:
    """One row's update (``variant``: its config, algorithm and algorithm config) on fresh learner workers: the state at ``iter_<k-1>`` loaded, RL started as the driver starts
    it (``k`` = 1), the probes read, the driver stage restored, ``staged_update`` on the iteration's trajectories, the
    probes read again. ``first``: also mark each probe state with whether the start policy's greedy reply is the
    expert's. Returns the probes' log-probs before and after, the update's metrics and timings, the critic warm-up
    passes and the number of trajectories."""
    import torch

    from actors.trajectory import read_jsonl
    from cluster.ray_cluster import WorkerResources
    from launch.driver.stages import staged_update
    from launch.driver.update_plan import UpdatePlan
    from launch.driver.warm_start import start_rl
    from launch.driver.wiring import learner_spec
    from learners.group import LearnerGroup
    from learners.learner_spec import CRITIC_ADAPTER

    cfg, algo, algo_cfg = variant
    run, k, probes, pad = args.run, args.iteration, shared.probes, shared.pad
    state, start = run / "checkpoints" / f"iter_{k - 1}", run / "checkpoints" / "iter_0"
    spec = learner_spec(cfg, algo, algo_cfg, shared.model_path, "cpu")
    learner = LearnerGroup(spec, cfg.learner.num_workers, WorkerResources(cfg.learner.cpus_per_worker, 0.0))
    try:
        own_critic = args.critic_from_run and cfg.algo == shared.base.algo and algo.value_slots
        policy = list(cfg.model.adapter_names) or ["default"]
        learner.load_checkpoint(str(state), only=[*policy, *([CRITIC_ADAPTER] if own_critic else [])])
        updater = replay_updater(variant, learner, state, start, pad)
        if k == 1:  # RL starts here, as the driver starts it
            start_rl(learner, cfg.learner, policy)
        lp_before = {key: p.logprobs(updater) for key, p in probes.items()}
        if first:  # the start policy: whether its greedy reply is already the expert's
            for p in probes.values():
                p.mark_greedy(learner, updater)
        trajs = list(read_jsonl(run / "trajectories" / f"iter_{k}.jsonl"))
        for t in trajs:
            for turn in t.turns:
                turn.shaped.clear()
        warmup = args.critic_passes
        if warmup is None:
            warmup = 0 if own_critic else cfg.learner.critic_warmup_passes
        # the algorithm's own models beside policy and critic (HISR's reward models) as the run had them, and
        # its driver stage as a resume from iter_<k-1> finds it
        models = [n for n, _ in spec.adapters if n not in policy] + [c.name for c in spec.extra_critics]
        if models:
            learner.load_checkpoint(str(state), only=models)
        stage = _driver_stage(variant, shared.tok, pad, updater, run)
        stage.restore(torch.load(state / "driver.pt", weights_only=False))
        stage.prepare(k - 1)
        plan = UpdatePlan(seed=cfg.seed + k + 1000 * repeat, critic_warmup=warmup)
        metrics, timings = staged_update(updater, stage, trajs, plan, k)
        lp_after = {key: p.logprobs(updater) for key, p in probes.items()}
    finally:
        learner.shutdown()
    return {
        "lp_before": lp_before,
        "lp_after": lp_after,
        "metrics": metrics,
        "timings": timings,
        "warmup": warmup,
        "trajectories": len(trajs),
    }


if __name__ == "__main__":
    raise SystemExit(main())
