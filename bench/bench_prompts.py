"""Prompt tokens per turn over episode length: ReAct, HiPER (plan_execute) and HIPIF on the same ALFWorld expert
trajectories (the comparison behind HIPIF Fig. 4 and Table 4), with the HIPIF prompt split into its parts.

Each game is played once by ALFWorld's hand-coded expert; its actions, observations and infos are recorded and cut
into subgoals by ``bench_rollout.split_subgoals`` (a subgoal ends with take / put / heat / cool / clean / use /
slice; named after the non-navigation ``high_pddl`` steps), the rule of the earlier token-efficiency bench.  Every
protocol's agent state machine (``actors.protocols.make_agent``) then replays that trajectory: it gets the
recorded observations and infos, answers with the expert's response in the protocol's own format
(``actors.demos.expert_text``: HIPIF writes a new ``<subgoal>`` on each subgoal's first action, HiPER a SWITCH),
and every prompt is rendered with SmolLM2's chat template by ``render_prompt``, the function the rollout loop
feeds the engine with, so the counts are the engine's prompt lengths.  The replayed action must equal the
recorded one (checked), so the observations are those the real env returns for it.

HIPIF's prompt (002 Eq. 2, C = [c; H_<k; g_k; T_k,j]) is split by removing one part at a time from the
``FoldedHistory`` and re-rendering: ``current`` = the action-observation pairs of the current subgoal (T_k,j),
``folded`` = the completed-subgoal records [g_k, o_k^end] (H_<k), ``origin`` = the initial observation unit,
``rest`` = template, task, current observation, last action.  A second table groups HIPIF's prompts by the number
of pairs under the current subgoal.

Variants: ``react``, ``plan_execute`` and ``hipif`` with the papers' prompts (``{}``) and ``{"compact": true}``
(the same fields in minimal wording; HIPIF keeps its folded history), and ``hipif`` with ``{"current_window": 2}``
(only the 2 most recent pairs of the current subgoal; our option, not the paper's).

    python bench/bench_prompts.py                        # 12 valid_train games, ~1 min on 2 cores
    python bench/bench_prompts.py --games 20 --split valid_seen --out bench/results/prompts_seen.json

Games come from ``envs.data.alfworld_data_dir`` (``--data-dir``, else ``$ALFWORLD_DATA``, else the shared
tarball unpacked into ``~/.cache/hierarl``), taken in split order, one task type after another.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _env import setup

ROOT = setup()

from bench_rollout import print_rows  # noqa: E402
from rollout_tokens import ALFWORLD_BOUNDARY_VERBS, split_subgoals  # noqa: E402

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "react": ("react", {}),
    "react/compact": ("react", {"compact": True}),
    "plan_execute": ("plan_execute", {}),
    "plan_execute/compact": ("plan_execute", {"compact": True}),
    "hipif": ("hipif", {}),
    "hipif/compact": ("hipif", {"compact": True}),
    "hipif/window2": ("hipif", {"current_window": 2}),
}
"""Column name -> (protocol, ``rollout.agent_options``)."""
HIPIF_PARTS = ("current", "folded", "origin", "rest")


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "")


def pick_games(env: Any, split: str, n: int) -> list[str]:
    """``n`` games of ``split`` in split order, one task type after another (round robin)."""
    from envs.alfworld import list_games

    by_type: dict[str, list[str]] = {}
    for g in list_games(env.data_dir, split):
        by_type.setdefault(g.task_type, []).append(g.task_id)
    out: list[str] = []
    while len(out) < n and any(by_type.values()):
        for ids in by_type.values():
            if ids and len(out) < n:
                out.append(ids.pop(0))
    return out


def record_expert(env: Any, task_id: str, max_steps: int) -> dict[str, Any]:
    """The hand-coded expert's episode: actions, observations (o_0 .. o_T), infos, rewards, end flags."""
    obs, info = env.reset(task_id=task_id, seed=0)
    rec: dict[str, Any] = {"observations": [obs], "infos": [info], "actions": [], "steps": []}
    while len(rec["actions"]) < max_steps:
        action = env.expert_action()
        if action is None:
            break
        obs, reward, terminated, truncated, info = env.step(action)
        rec["actions"].append(action)
        rec["observations"].append(obs)
        rec["infos"].append(info)
        rec["steps"].append((reward, terminated, truncated))
        if terminated or truncated:
            break
    rec["won"] = bool(rec["infos"][-1].get("won", False))
    return rec


def count_tokens(tokenizer: Any, messages: Sequence[Any]) -> int:
    from actors.agents.parsing import render_prompt

    return len(render_prompt(tokenizer, messages))


def hipif_parts(agent: Any, tokenizer: Any, total: int) -> dict[str, int]:
    """Tokens each part of the folded history adds to the rendered prompt (remove it, re-render, subtract)."""
    from actors.agents.hipif import build_hipif_messages

    def without(**change: Any) -> int:
        history = dataclasses.replace(agent.folded, **change)
        msgs = build_hipif_messages(
            agent.task,
            agent.observation,
            history,
            env=agent.env_name,
            admissible_actions=agent.admissible,
            current_window=agent.current_window,
            compact=agent.compact,
        )
        return total - count_tokens(tokenizer, msgs)

    parts = {
        "current": without(steps=[]),
        "folded": without(folded=[]),
        "origin": without(origin_observation=""),
    }
    parts["rest"] = total - sum(parts.values())
    parts["current_pairs"] = len(agent.folded.steps)
    parts["folded_records"] = len(agent.folded.folded)
    return parts


def replay(rec: dict[str, Any], plan: list[tuple[str, list[str]]], tokenizer: Any) -> dict[str, Any]:
    """Every variant's agent on the recorded episode; prompt tokens per turn (one call per env step)."""
    from actors.demos import expert_text, flatten_plan
    from actors.protocols import make_agent

    steps = flatten_plan(plan)
    out: dict[str, Any] = {}
    for name, (protocol, options) in VARIANTS.items():
        agent: Any = make_agent(protocol, env_name="alfworld", history_length=2, **options)
        agent.start(rec["observations"][0], rec["infos"][0])
        tokens: list[int] = []
        parts: list[dict[str, int]] = []
        valid = 0
        for t, step in enumerate(steps):
            call = agent.next_call()
            n = count_tokens(tokenizer, call.messages)
            tokens.append(n)
            if protocol == "hipif" and not options:
                parts.append(hipif_parts(agent, tokenizer, n))
            res = agent.on_output(call, expert_text(protocol, "agent", step))
            if res.action != rec["actions"][t]:
                raise RuntimeError(f"{name}: replayed {res.action!r}, expert took {rec['actions'][t]!r}")
            valid += bool(res.decision.valid)
            reward, terminated, truncated = rec["steps"][t]
            agent.observe(rec["observations"][t + 1], reward, terminated, truncated, rec["infos"][t + 1])
        out[name] = {"tokens": tokens, "valid_format_rate": valid / max(len(steps), 1)}
        if parts:
            out[name]["parts"] = parts
    return out


def bucket_means(series: Sequence[Sequence[float]], width: int) -> list[tuple[int, int, float]]:
    """(bucket start, turns in bucket, mean) over all turns with index in [start, start + width)."""
    by: dict[int, list[float]] = {}
    for s in series:
        for k, x in enumerate(s):
            by.setdefault(k // width * width, []).append(x)
    return [(b, len(xs), statistics.mean(xs)) for b, xs in sorted(by.items())]


def _ratio(played: Sequence[dict[str, Any]], part: str, count: str) -> float | None:
    """Mean tokens of ``part`` per unit of ``count`` over HIPIF turns where ``count`` > 0."""
    xs = [x[part] / x[count] for g in played for x in g["hipif"]["parts"] if x[count]]
    return statistics.mean(xs) if xs else None


def summarize(games: dict[str, Any], width: int) -> dict[str, Any]:
    played = [g["variants"] for g in games.values() if "variants" in g]
    per_variant = {v: [g[v]["tokens"] for g in played] for v in VARIANTS}
    by_bucket = {v: bucket_means(s, width) for v, s in per_variant.items()}
    hipif_series = {p: [[x[p] for x in g["hipif"]["parts"]] for g in played] for p in HIPIF_PARTS}
    parts_by_bucket = {p: bucket_means(s, width) for p, s in hipif_series.items()}
    # HIPIF prompt against the number of pairs under the current subgoal
    by_pairs: dict[int, list[tuple[int, int]]] = {}
    for g in played:
        for total, x in zip(g["hipif"]["tokens"], g["hipif"]["parts"], strict=True):
            by_pairs.setdefault(x["current_pairs"], []).append((total, x["current"]))
    per_pair = {
        k: {
            "turns": len(v),
            "prompt": statistics.mean(a for a, _ in v),
            "current": statistics.mean(b for _, b in v),
        }
        for k, v in sorted(by_pairs.items())
    }
    return {
        "games": len(played),
        "mean_by_bucket": {
            v: [{"start": b, "turns": n, "mean": m} for b, n, m in rows] for v, rows in by_bucket.items()
        },
        "hipif_parts_by_bucket": {
            p: [{"start": b, "turns": n, "mean": m} for b, n, m in rows]
            for p, rows in parts_by_bucket.items()
        },
        "hipif_by_current_pairs": per_pair,
        "hipif_tokens_per_current_pair": _ratio(played, "current", "current_pairs"),
        "hipif_tokens_per_folded_record": _ratio(played, "folded", "folded_records"),
        "mean_per_turn": {v: statistics.mean(x for s in ss for x in s) for v, ss in per_variant.items()},
        "mean_per_episode": {v: statistics.mean(sum(s) for s in ss) for v, ss in per_variant.items()},
        "max_per_turn": {v: max(x for s in ss for x in s) for v, ss in per_variant.items()},
    }


def print_tables(summary: dict[str, Any], width: int) -> None:
    cols = list(VARIANTS)
    buckets = [r["start"] for r in summary["mean_by_bucket"]["react"]]
    turns = {r["start"]: r["turns"] for r in summary["mean_by_bucket"]["react"]}
    means = {v: {r["start"]: r["mean"] for r in rows} for v, rows in summary["mean_by_bucket"].items()}
    rows = [[f"{b}-{b + width - 1}", str(turns[b])] + [f"{means[v][b]:.0f}" for v in cols] for b in buckets]
    rows.append(["mean/turn", ""] + [f"{summary['mean_per_turn'][v]:.0f}" for v in cols])
    rows.append(["max/turn", ""] + [f"{summary['max_per_turn'][v]:.0f}" for v in cols])
    rows.append(["sum/episode", ""] + [f"{summary['mean_per_episode'][v]:.0f}" for v in cols])
    react = summary["mean_per_episode"]["react"]
    rows.append(["x react", ""] + [f"{summary['mean_per_episode'][v] / react:.2f}" for v in cols])
    print(f"\nmean prompt tokens per turn, ALFWorld expert trajectories ({summary['games']} games)")
    print_rows(["turns", "n", *cols], rows)

    parts = {p: {r["start"]: r["mean"] for r in rows} for p, rows in summary["hipif_parts_by_bucket"].items()}
    rows = [
        [f"{b}-{b + width - 1}", f"{means['hipif'][b]:.0f}"] + [f"{parts[p][b]:.0f}" for p in HIPIF_PARTS]
        for b in buckets
    ]
    print("\nHIPIF prompt by part (tokens it adds to the rendered prompt)")
    print_rows(["turns", "hipif", *(f"{p}" for p in HIPIF_PARTS)], rows)

    rows = [
        [str(k), str(v["turns"]), f"{v['prompt']:.0f}", f"{v['current']:.0f}"]
        for k, v in summary["hipif_by_current_pairs"].items()
    ]
    print("\nHIPIF prompt by pairs under the current subgoal (|T_k,j|)")
    print_rows(["pairs", "turns", "hipif", "current"], rows)
    per_pair, per_record = summary["hipif_tokens_per_current_pair"], summary["hipif_tokens_per_folded_record"]
    print(
        f"HIPIF: {per_pair:.1f} tokens per current-subgoal pair, "
        f"{per_record:.1f} per folded record [g_k, o_k^end]"
        if per_pair is not None and per_record is not None
        else "HIPIF: no current pairs or folded records"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results/prompts.json")
    parser.add_argument("--split", default="valid_train")
    parser.add_argument("--games", type=int, default=12)
    parser.add_argument("--max-steps", type=int, default=50, help="expert steps per game (ALFWorld: 50)")
    parser.add_argument("--bucket", type=int, default=5, help="turn-index bucket width of the table")
    parser.add_argument(
        "--data-dir", default=None, help="folder holding json_2.1.1 (default: envs.data rules)"
    )
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from actors.models import resolve_model_path
    from envs.alfworld import AlfWorldEnv

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("smollm2"))
    env = AlfWorldEnv(split=args.split, expert="handcoded", max_steps=args.max_steps, data_dir=args.data_dir)
    games: dict[str, Any] = {}
    try:
        for task_id in pick_games(env, args.split, args.games):
            t = time.perf_counter()
            rec = record_expert(env, task_id, args.max_steps)
            names = [s.subgoal for s in env.pddl_plan() if s.pddl_action != "GotoLocation"]
            plan = split_subgoals(rec["actions"], ALFWORLD_BOUNDARY_VERBS, names)
            entry: dict[str, Any] = {
                "expert_won": rec["won"],
                "expert_steps": len(rec["actions"]),
                "plan": plan,
            }
            if rec["won"]:
                entry["variants"] = replay(rec, plan, tokenizer)
            entry["seconds"] = time.perf_counter() - t
            games[task_id] = entry
            longest = max((len(a) for _, a in plan), default=0)
            print(
                f"... {task_id}: {len(rec['actions'])} steps, {len(plan)} subgoals (longest {longest} actions), "
                f"won={rec['won']}",
                flush=True,
            )
    finally:
        env.close()
    summary = summarize(games, args.bucket)
    print_tables(summary, args.bucket)
    elapsed = time.perf_counter() - start
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    settings["variants"] = {k: {"protocol": p, "agent_options": o} for k, (p, o) in VARIANTS.items()}
    settings["tokenizer"] = "SmolLM2-135M-Instruct chat template (actors.agents.parsing.render_prompt)"
    result = {
        "machine": machine,
        "settings": settings,
        "seconds": elapsed,
        "summary": summary,
        "games": games,
    }
    path.write_text(json.dumps(result, indent=2, default=str))
    print(
        f"\n{summary['games']}/{len(games)} expert trajectories won and replayed in {elapsed:.0f} s; wrote {path}"
    )


if __name__ == "__main__":
    main()
