"""HISR segmentation without GPT-4o: how close each offline segmentation comes to the subgoal boundaries of ALFWorld
expert trajectories (the measurement behind ``algo.segmentation``'s default).

Each game is played once by ALFWorld's hand-coded expert and cut into subgoals by ``bench_rollout.split_subgoals``
(a subgoal ends with take / put / heat / cool / clean / use / slice; the rule of the prompt and rollout benches):
the reference boundaries. The ReAct agent (``actors.protocols.make_agent``, the protocol HISR trains) replays the
trajectory with the expert's responses in its own format; SmolLM2 scores every response, and the mean token entropy
of each turn's response feeds ``reward.segments.entropy_segments`` at several thresholds. Two response texts:

``thought``  the demonstrations' ReAct text, whose thought names the current subgoal (``actors.demos.expert_text``);
``action``   the action alone under an empty thought: what entropy sees when the thought carries no subgoal.

Compared with the reference (pooled boundary precision / recall / F1, ``reward.segments.boundary_agreement``):
entropy change points, ``turn`` (every turn a segment) and ``none`` (one segment). ``subgoal`` segmentation is the
reference itself wherever the protocol states subgoals (``plan_execute``, ``hipif``), so it agrees by construction.

    python bench/bench_segmentation.py                 # 12 valid_train games, ~2 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from _env import setup

ROOT = setup()

from bench_prompts import cpu_model, pick_games, record_expert  # noqa: E402
from rollout_tokens import ALFWORLD_BOUNDARY_VERBS, split_subgoals  # noqa: E402

JUMPS = (0.25, 0.5, 1.0, 1.5)


def turn_entropy(model: Any, prompt: list[int], response: list[int]) -> float:
    """Mean entropy of the model's next-token distribution at the positions that predict ``response``."""
    import torch

    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return float(-(logp.exp() * logp).sum(-1).mean())


def replay_entropies(rec: dict[str, Any], plan: Any, tok: Any, model: Any, text: str) -> list[float]:
    from actors.agents.parsing import render_prompt
    from actors.agents.react import format_react
    from actors.demos import expert_text, flatten_plan
    from actors.protocols import make_agent

    agent: Any = make_agent("react", env_name="alfworld", history_length=2)
    agent.start(rec["observations"][0], rec["infos"][0])
    out = []
    for t, step in enumerate(flatten_plan(plan)):
        call = agent.next_call()
        response = expert_text("react", "agent", step) if text == "thought" else format_react("", step.action)
        ids = tok(response, add_special_tokens=False)["input_ids"]
        out.append(turn_entropy(model, render_prompt(tok, call.messages), ids))
        res = agent.on_output(call, response)
        if res.action != rec["actions"][t]:
            raise RuntimeError(f"replayed {res.action!r}, expert took {rec['actions'][t]!r}")
        reward, terminated, truncated = rec["steps"][t]
        agent.observe(rec["observations"][t + 1], reward, terminated, truncated, rec["infos"][t + 1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="bench/results/segmentation.json")
    parser.add_argument("--split", default="valid_train")
    parser.add_argument("--games", type=int, default=12)
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from actors.models import resolve_model_path
    from envs.alfworld import AlfWorldEnv
    from reward.segments import boundary_agreement, entropy_segments, turn_segments

    start = time.perf_counter()
    torch.manual_seed(0)
    path = resolve_model_path("smollm2")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    env = AlfWorldEnv(split=args.split, expert="handcoded", max_steps=args.max_steps, data_dir=args.data_dir)
    games: list[dict[str, Any]] = []
    try:
        for task_id in pick_games(env, args.split, args.games):
            rec = record_expert(env, task_id, args.max_steps)
            if not rec["won"]:
                continue
            names = [s.subgoal for s in env.pddl_plan() if s.pddl_action != "GotoLocation"]
            plan = split_subgoals(rec["actions"], ALFWORLD_BOUNDARY_VERBS, names)
            reference = [k for k, (_, acts) in enumerate(plan) for _ in acts]
            entry = {"task_id": task_id, "reference": reference}
            for text in ("thought", "action"):
                entry[f"entropy_{text}"] = replay_entropies(rec, plan, tok, model, text)
            games.append(entry)
            print(f"... {task_id}: {len(reference)} turns, {reference[-1] + 1} subgoals", flush=True)
    finally:
        env.close()

    refs = [np.array(g["reference"]) for g in games]
    rows: list[dict[str, Any]] = []

    def add(method: str, predicted: list[np.ndarray]) -> None:
        a = boundary_agreement(predicted, refs)
        rows.append(
            {
                "method": method,
                "precision": a.precision,
                "recall": a.recall,
                "f1": a.f1,
                "boundaries": a.true_pos + a.false_pos,
                "reference_boundaries": a.true_pos + a.false_neg,
            }
        )

    for text in ("thought", "action"):
        for jump in JUMPS:
            add(
                f"entropy/{text} jump {jump}",
                [entropy_segments(np.array(g[f"entropy_{text}"]), jump) for g in games],
            )
    add("turn", [turn_segments(len(r)) for r in refs])
    add("none (one segment)", [np.zeros(len(r), dtype=np.int64) for r in refs])

    cpu = cpu_model()
    print(f"\nsegment boundaries vs the expert's subgoals, {len(games)} ALFWorld games ({cpu})")
    print(f"{'method':<28} {'precision':>9} {'recall':>7} {'F1':>6} {'claimed':>8} {'actual':>7}")
    for r in rows:
        print(
            f"{r['method']:<28} {r['precision']:>9.3f} {r['recall']:>7.3f} {r['f1']:>6.3f} "
            f"{r['boundaries']:>8} {r['reference_boundaries']:>7}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    elapsed = time.perf_counter() - start
    out.write_text(json.dumps({"cpu": cpu, "seconds": elapsed, "rows": rows, "games": games}, indent=1))
    print(f"\n{len(games)} games in {elapsed:.0f} s; wrote {out}")


if __name__ == "__main__":
    main()
