"""A run folder as ``hierarl train`` writes it (metrics rows, kept episodes through ``actors.trajectory.to_jsonl``),
small enough to reason about: what the viewer's unit and browser tests read."""

from __future__ import annotations

import json
from pathlib import Path

from actors.trajectory import Decision, Trajectory, Turn, to_jsonl

TASKS = ("depth2-bow", "depth2-acacia_slab")


def turn(text: str, *, switch: bool | None, segment: int, valid: bool = True, reward: float = 0.0) -> Turn:
    n = 3
    return Turn(
        prompt_ids=[1, 2],
        response_ids=list(range(n)),
        logprobs=[-0.1] * n,
        decision=Decision(action="get 1 stick", valid=valid, switch=switch, subgoal="craft stick", error=""
                          if valid else "no <action> block"),
        observation="Crafting commands: ...\nGoal: craft bow.",
        response_text=text,
        env_reward=reward,
        shaped={"format": 0.0 if valid else -0.1},
        segment_index=segment,
    )  # fmt: skip


def episode(task: str, won: bool, k: int) -> Trajectory:
    turns = [
        turn("<switch>craft stick</switch><subgoal>craft stick</subgoal><action>get 1 stick</action>",
             switch=True, segment=0),
        turn("<switch>KEEP</switch><subgoal>craft stick</subgoal><action>craft 4 stick", switch=False, segment=0,
             valid=False),
        turn("<switch>craft bow</switch><subgoal>craft bow</subgoal><action>craft 1 bow</action>", switch=True,
             segment=1, reward=1.0 if won else 0.0),
    ]  # fmt: skip
    return Trajectory(
        traj_id=f"{task}/{k}",
        group_id=task,
        task_id=task,
        env_name="textcraft",
        turns=turns,
        status="finished" if won else "truncated",
        won=won,
    )


def eval_row(phase: str, iteration: int, rates: list[float]) -> dict:
    return {
        "phase": phase,
        "iteration": iteration,
        "eval_success": sum(rates) / len(rates),
        "eval_ci_low": 0.0,
        "eval_ci_high": 1.0,
        "eval_n": len(rates),
        "eval_samples": 2,
        "eval_random": 0.1,
        "eval_base": float("nan"),  # eval_base_model=false, as json.dumps writes it (NaN)
        "eval_panel": "auto-textcraft-test@1",
        "eval_task_rates": rates,
        "eval_task_ids": list(TASKS),
    }


def write_run(run: Path, *, iterations: int = 2) -> Path:
    """BC, then ``iterations`` RL rows (the last evaluated: bow gained 0 → 0.5, acacia slab lost 1 → 0.5) and each
    iteration's 2 episodes (one won, one lost) in ``trajectories/``."""
    run.mkdir(parents=True, exist_ok=True)
    rows = [eval_row("bc", 0, [0.0, 1.0])]
    for it in range(1, iterations + 1):
        row = {"phase": "rl", "iteration": it, "success": 0.5, "return": 0.4, "switch_rate": 0.3}
        row |= {
            "kl_update/action": 1e-3 * it,
            "kl_update/switch": 2e-4,
            "adv_rms/action": 1.0,
            "time_rollout": 5.0,
        }
        row |= {"time_update": 7.0, "entropy": 0.2}
        if it == iterations:
            row |= eval_row("rl", it, [0.5, 0.5])
        rows.append(row)
        to_jsonl(
            [episode(TASKS[0], True, 0), episode(TASKS[1], False, 1)],
            run / "trajectories" / f"iter_{it}.jsonl",
        )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run
