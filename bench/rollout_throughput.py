"""Part (a) of ``bench/bench_rollout.py``: rollout workers (Ray actors on in-process synthetic envs) collect groups
while a timed engine logs every ``generate`` batch; the same batches are then replayed through a bare engine alone,
so that their ratio is the rollout machinery's overhead."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


class TimedEngine:
    """Wraps an engine and logs every ``generate`` batch (prompt ids, tokens out, seconds) for the raw replay."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.batches: list[dict[str, Any]] = []

    def generate(self, requests: Sequence[Any], params: Any) -> list[Any]:
        t = time.perf_counter()
        out = self.engine.generate(requests, params)
        self.batches.append(
            {
                "prompts": [list(r.prompt_ids) for r in requests],
                "adapter": requests[0].adapter if requests else None,
                "tokens": sum(len(o.response_ids) for o in out),
                "seconds": time.perf_counter() - t,
            }
        )
        return out

    def load_adapter(self, name: str, weights: Any, version: int) -> bool:
        return self.engine.load_adapter(name, weights, version)

    def adapter_version(self, name: str | None) -> int:
        return self.engine.adapter_version(name)

    def close(self) -> None:
        self.engine.close()


def bench_worker_config(engine_kind: str, args: argparse.Namespace) -> Any:
    """The rollout workers' config: the run config's defaults (launch/config/schema.py) with this benchmark's settings
    (synthetic env, in-process envs, sampling at temperature 1, the papers' prompts)."""
    from launch.config import TrainConfig, apply_overrides
    from launch.driver.wiring import rollout_worker_config

    cfg = apply_overrides(
        TrainConfig(),
        {
            "rollout.engine": engine_kind,
            "rollout.agent": args.protocol,
            "rollout.agent_options": {},
            "rollout.temperature": 1.0,
            "rollout.max_new_tokens": args.max_new_tokens,
            "model.max_model_len": args.max_model_len,
            "env.name": "synthetic",
            "env.options": {},
            "env.workers_per_rollout": args.num_envs,
            "env.use_pool": False,
            "env.max_steps": args.max_steps,
        },
    )
    return rollout_worker_config(cfg, args.model, "cpu")


def make_bench_worker_class() -> type:
    """``RolloutWorker`` plus a timed ``collect``; built lazily so that part (b) never imports the worker's deps."""
    from actors.episodes import unpack_group
    from actors.rollout import RolloutWorker

    class BenchWorker(RolloutWorker):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.engine = TimedEngine(self.engine)

        def timed_collect(self, task_ids: list[str], group_size: int, seed: int) -> dict[str, Any]:
            self.engine.batches = []
            t = time.perf_counter()
            groups = self.collect(task_ids, group_size, seed)
            wall = time.perf_counter() - t
            trajs = [tr for g in groups for tr in unpack_group(g).trajectories]
            return {
                "wall_s": wall,
                "episodes": len(trajs),
                "env_steps": sum(int(tr.info.get("env_steps", 0)) for tr in trajs),
                "turns": sum(len(tr.turns) for tr in trajs),
                "tokens": sum(int(t.response_ids.size) for tr in trajs for t in tr.turns),
                "generate_s": sum(b["seconds"] for b in self.engine.batches),
                "batches": self.engine.batches,
            }

    return BenchWorker


def bench_rollout_workers(
    engine_kind: str, workers: int, args: argparse.Namespace, tasks: list[str]
) -> dict[str, Any]:
    """Warm-up + ``repeats`` collections on ``workers`` actors, each with the same load (weak scaling)."""
    import ray

    config = bench_worker_config(engine_kind, args)
    actor_cls = ray.remote(num_cpus=1)(make_bench_worker_class())
    t = time.perf_counter()
    actors = [actor_cls.remote(config) for _ in range(workers)]
    ray.get([a.version.remote() for a in actors])
    startup_s = time.perf_counter() - t
    per_worker = [tasks[i * args.tasks : (i + 1) * args.tasks] for i in range(workers)]
    runs: list[dict[str, Any]] = []
    try:
        for rep in range(args.repeats + 1):
            t = time.perf_counter()
            outs = ray.get(
                [
                    a.timed_collect.remote(ts, args.group_size, rep)
                    for a, ts in zip(actors, per_worker, strict=True)
                ]
            )
            wall = time.perf_counter() - t
            if rep == 0:
                continue  # warm-up: first actor call, first generate, allocator growth
            steps, tokens = sum(o["env_steps"] for o in outs), sum(o["tokens"] for o in outs)
            runs.append(
                {
                    "wall_s": wall,
                    "env_steps": steps,
                    "tokens": tokens,
                    "turns": sum(o["turns"] for o in outs),
                    "steps_per_s": steps / wall,
                    "tokens_per_s": tokens / wall,
                    "gen_share": statistics.mean(o["generate_s"] / o["wall_s"] for o in outs),
                    "batches": [b for o in outs for b in o["batches"]],
                }
            )
    finally:
        for a in actors:
            ray.get(a.close.remote())
            ray.kill(a)
    best = min(runs, key=lambda r: abs(r["tokens_per_s"] - median([x["tokens_per_s"] for x in runs])))
    return {
        "startup_s": startup_s,
        "steps_per_s": median([r["steps_per_s"] for r in runs]),
        "tokens_per_s": median([r["tokens_per_s"] for r in runs]),
        "gen_share": median([r["gen_share"] for r in runs]),
        "runs": [{k: v for k, v in r.items() if k != "batches"} for r in runs],
        "median_run_batches": best["batches"],
    }


def bench_raw(engine_kind: str, batches: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The same batches through a bare engine in this process (LoRA adapter loaded, as in the workers)."""
    from actors.engines import make_engine
    from actors.inference import GenerationRequest, SamplingParams
    from actors.lora_weights import zero_lora_weights
    from actors.models import resolve_model_path

    path = resolve_model_path(args.model)
    spec = bench_worker_config(engine_kind, args).lora
    engine = make_engine(engine_kind, path, spec, max_model_len=args.max_model_len)
    try:
        engine.load_adapter("policy", zero_lora_weights(path, spec), 0)
        params = SamplingParams(1.0, 1.0, args.max_new_tokens)
        reqs = [[GenerationRequest(tuple(p), b["adapter"]) for p in b["prompts"]] for b in batches]
        engine.generate(reqs[0], params)  # warm-up
        runs = []
        for _ in range(args.repeats):
            tokens = 0
            t = time.perf_counter()
            for r in reqs:
                tokens += sum(len(o.response_ids) for o in engine.generate(r, params))
            wall = time.perf_counter() - t
            runs.append({"wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall})
    finally:
        engine.close()
    return {"tokens_per_s": median([r["tokens_per_s"] for r in runs]), "runs": runs}


def run_throughput(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from envs import make

    probe = make("synthetic")
    tasks = probe.task_ids("train")[: args.tasks * max(args.workers)]
    probe.close()
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    results: dict[str, Any] = {}
    try:
        for kind in args.engines:
            results[kind] = {}
            for w in args.workers:
                print(f"... rollout {kind} x{w}", flush=True)
                res = bench_rollout_workers(kind, w, args, tasks)
                batches = res.pop("median_run_batches")
                res["batch_sizes"] = [len(b["prompts"]) for b in batches]
                res["mean_prompt_tokens"] = statistics.mean(len(p) for b in batches for p in b["prompts"])
                results[kind][str(w)] = res
                res["raw_batches"] = batches
    finally:
        ray.shutdown()
    for kind in args.engines:  # raw replays after the actors are gone: the engine runs alone
        for w in args.workers:
            res = results[kind][str(w)]
            print(f"... raw {kind} (batches of x{w})", flush=True)
            res["raw"] = bench_raw(kind, res.pop("raw_batches"), args)
            res["ratio"] = res["tokens_per_s"] / res["raw"]["tokens_per_s"]
    return results
