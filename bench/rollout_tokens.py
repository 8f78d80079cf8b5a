"""Part (b) of ``bench/bench_rollout.py``: prompt tokens per env step of every protocol on the same expert trajectories
(ALFWorld, ScienceWorld), each cut into subgoals by a fixed rule and replayed through the real rollout loop with
``ExpertEngine``; ``split_subgoals`` and its verbs are shared with ``bench_prompts`` and ``bench_segmentation``."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

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
