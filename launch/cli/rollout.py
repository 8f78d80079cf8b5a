"""``hierarl rollout``: play N episodes with a model (and an optional PEFT adapter) in one process, write the
trajectories as JSONL and a summary JSON (evaluation outside a run, or offline data)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actors.agents.base import DEFAULT_ADAPTERS
from actors.rollout import RolloutWorker
from actors.trajectory import Trajectory, to_jsonl
from launch.evaluation.episode_stats import trajectory_stats


def summarize(trajectories: Sequence[Trajectory], wall_s: float) -> dict[str, Any]:
    """A run's episode summary (``trajectory_stats``: the same keys as a run's metrics rows) with the episode and turn
    counts, the mean score, how episodes ended and the throughput."""
    turns = sum(len(tr.turns) for tr in trajectories)
    return {
        "episodes": len(trajectories),
        **trajectory_stats(trajectories),
        "score": float(np.mean([tr.score for tr in trajectories])) if trajectories else 0.0,
        "turns": turns,
        "status": {
            s: sum(tr.status == s for tr in trajectories) for s in ("finished", "truncated", "failed")
        },
        "wall_s": wall_s,
        "turns_per_s": turns / wall_s if wall_s > 0 else 0.0,
    }


def rollout_parser() -> argparse.ArgumentParser:
    """``hierarl rollout``'s options; every default is the run config's (``launch.config``), not restated."""
    from actors.protocols import PROTOCOLS
    from launch.config import DTYPES, ENGINES, EnvConfig, ModelConfig, RolloutConfig, TrainConfig

    m, e, r, t = ModelConfig(), EnvConfig(), RolloutConfig(), TrainConfig()
    p = argparse.ArgumentParser(
        prog="hierarl rollout",
        description="Play N episodes with a model (+ optional PEFT adapter), write JSONL + summary JSON. "
        "Defaults are the run config's (launch/config/schema.py: the main job's model, env, agent and eval settings).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default=m.path, help="HF folder or 'smollm2' (model.path)")
    p.add_argument("--adapter", default=None, help="PEFT adapter folder (optional)")
    p.add_argument("--protocol", default=r.agent, choices=PROTOCOLS, help="rollout.agent")
    p.add_argument("--env", default=e.name, help="env.name")
    p.add_argument(
        "--env-options",
        default=None,
        type=json.loads,
        help=f"JSON for envs.make (env.options); default: {json.dumps(e.options)} for {e.name}, else {{}}",
    )
    p.add_argument(
        "--agent-options",
        default=r.agent_options,
        type=json.loads,
        help="JSON protocol options (rollout.agent_options; {} = the papers' prompts)",
    )
    p.add_argument("--split", default=e.eval_split, help="env.eval_split")
    p.add_argument("--episodes", type=int, default=t.eval_episodes, help="eval_episodes")
    p.add_argument("--engine", default=r.engine, choices=ENGINES, help="rollout.engine")
    p.add_argument("--dtype", default=m.dtype, choices=DTYPES, help="model.dtype")
    p.add_argument("--temperature", type=float, default=r.eval_temperature, help="rollout.eval_temperature")
    p.add_argument("--max-steps", type=int, default=e.max_steps, help="env.max_steps")
    p.add_argument("--max-new-tokens", type=int, default=r.max_new_tokens, help="rollout.max_new_tokens")
    p.add_argument("--num-envs", type=int, default=e.workers_per_rollout, help="env.workers_per_rollout")
    p.add_argument(
        "--env-workers", action="store_true", default=e.use_pool, help="run envs in a subprocess EnvPool"
    )
    p.add_argument("--seed", type=int, default=t.seed, help="seed")
    p.add_argument("--out", default="rollouts.jsonl")
    return p


def rollout_run_config(args: argparse.Namespace) -> Any:
    """The run config (``TrainConfig``) that ``hierarl rollout``'s options describe, checked by
    ``launch.config.validate`` (without BC: nothing is cloned here)."""
    from launch.config import EnvConfig, TrainConfig, apply_overrides, validate

    overrides: dict[str, Any] = {
        "model.path": args.model,
        "model.dtype": args.dtype,
        "rollout.agent": args.protocol,
        "rollout.agent_options": args.agent_options,
        "rollout.engine": args.engine,
        "rollout.eval_temperature": args.temperature,
        "rollout.max_new_tokens": args.max_new_tokens,
        "env.name": args.env,
        "env.eval_split": args.split,
        "env.max_steps": args.max_steps,
        "env.workers_per_rollout": args.num_envs,
        "env.use_pool": args.env_workers,
        "eval_episodes": args.episodes,
        "seed": args.seed,
        "bc.enabled": False,
    }
    if args.env_options is not None:
        overrides["env.options"] = args.env_options
    elif args.env != EnvConfig().name:
        overrides["env.options"] = {}  # env.options' default belongs to the default env
    cfg = apply_overrides(TrainConfig(), overrides)
    validate(cfg)
    return cfg


def rollout_main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``hierarl rollout``: play N episodes with a model (+ optional PEFT adapter), write JSONL + summary JSON."""
    from launch.config import ConfigError

    p = rollout_parser()
    a = p.parse_args(argv)
    try:
        run_cfg = rollout_run_config(a)
    except ConfigError as e:
        p.error(str(e))

    import torch

    from envs import make
    from launch.driver.wiring import rollout_worker_config

    probe = make(a.env, **dict(run_cfg.env.options))
    tasks = probe.task_ids(a.split)
    probe.close()
    if not tasks:
        raise SystemExit(f"no tasks in split {a.split!r} of {a.env!r}")
    adapters = dict(DEFAULT_ADAPTERS)  # every role of the protocol: the one adapter
    cfg = rollout_worker_config(
        run_cfg,
        a.model,
        "cuda" if torch.cuda.is_available() else "cpu",
        adapter_path=a.adapter,
        adapters=adapters,
        temperature=a.temperature,
    )
    worker = RolloutWorker(cfg)
    t0 = time.perf_counter()
    try:
        picked = [tasks[i % len(tasks)] for i in range(a.episodes)]
        groups = worker.collect(picked, 1, a.seed, packed=False)
    finally:
        worker.close()
    trajs = [tr for g in groups for tr in g.trajectories]  # type: ignore[union-attr]
    summary = summarize(trajs, time.perf_counter() - t0)
    summary["config"] = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "lora"}
    out = Path(a.out)
    to_jsonl(trajs, out)
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2, default=str))
    rows = [
        (k, summary[k])
        for k in (
            "episodes",
            "success",
            "return",
            "env_steps",
            "turns",
            "valid_format",
            "prompt_tokens",
            "response_tokens",
            "wall_s",
            "turns_per_s",
        )
    ]
    print(f"{a.protocol} on {a.env} ({a.engine}, T={a.temperature})")
    for k, v in rows:
        print(f"  {k:<26} {v:.3f}" if isinstance(v, float) else f"  {k:<26} {v}")
    print(f"  wrote {out} and {out.with_suffix('.summary.json')}")
    return summary
