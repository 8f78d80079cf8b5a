"""A run folder as ``hierarl train`` writes it (metrics rows; the kept episodes through ``launch.driver.kept_episodes``'
writer, each response token's group and advantage given here; or, as older runs have them, ``trajectories/``
through ``actors.trajectory.to_jsonl``), small enough to reason about: what the viewer's tests read."""

from __future__ import annotations

import json
from pathlib import Path

from actors.trajectory import Decision, Trajectory, Turn, to_jsonl
from launch.driver.kept_episodes import EpisodeKeeper, episode_record

TASKS = ("depth2-bow", "depth2-acacia_slab")


BLOCKS = ("switch", "subgoal", "action")
"""Each fixture response is three blocks, one token each: the tokenizer's pieces are the blocks' texts."""
VOCAB: dict[str, int] = {}
"""piece → token id, filled as the fixture's turns are made (its inverse is the fixture's tokenizer)."""


def blocks(text: str) -> list[str]:
    return [
        text[text.index(f"<{b}>") : (text.index(f"</{b}>") + len(b) + 3 if f"</{b}>" in text else None)]
        for b in BLOCKS
    ]


def turn(text: str, *, switch: bool | None, segment: int, valid: bool = True, reward: float = 0.0) -> Turn:
    ids = [VOCAB.setdefault(piece, len(VOCAB)) for piece in blocks(text)]
    return Turn(
        prompt_ids=[1, 2],
        response_ids=ids,
        logprobs=[-0.1] * len(ids),
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


def notes(traj: Trajectory) -> dict[int, dict]:
    """Per turn, what the update's ``turn_annotations`` gives: a won episode's tokens +0.5 each (the action +1), a
    lost one's −0.5 (−1); the KEEP turn's subgoal copy ``subgoal_keep``; values V_high 0.25, V_low 0.5."""
    sign = 1.0 if traj.won else -1.0
    return {
        j: {
            "groups": ["switch", "subgoal" if t.decision.switch else "subgoal_keep", "action"],
            "token_adv": [0.5 * sign, 0.5 * sign, 1.0 * sign],
            "in_loss": [True, True, True],
            "values": {"v_high": 0.25, "v_low": 0.5},
        }
        for j, t in enumerate(traj.turns)
    }


def pieces(ids: list[int]) -> list[str]:
    text = {i: p for p, i in VOCAB.items()}
    return [text[i] for i in ids]


def write_run(
    run: Path, *, iterations: int = 2, kept: bool = True, last: tuple[float, float] = (0.5, 0.5)
) -> Path:
    """BC, then ``iterations`` RL rows (the last evaluated: bow gained 0 → 0.5, acacia slab lost 1 → 0.5) and each
    iteration's 2 episodes (one won, one lost) in ``episodes/`` (``kept=False``: in ``trajectories/``)."""
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
        row |= {"time_update": 7.0, "entropy": 0.2, "switch_agreement": 0.6}
        if it == iterations:
            row |= eval_row("rl", it, list(last))
        rows.append(row)
        eps = [episode(TASKS[0], True, 0), episode(TASKS[1], False, 1)]
        if kept:
            (run / "episodes").mkdir(exist_ok=True)
            lines = [json.dumps(episode_record(e, it, notes(e), pieces)) for e in eps]
            (run / "episodes" / f"iter_{it}.jsonl").write_text("".join(ln + "\n" for ln in lines))
        else:
            to_jsonl(eps, run / "trajectories" / f"iter_{it}.jsonl")
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if kept:  # the evaluations' episodes, as the driver keeps them: after BC and at the last iteration
        keeper = EpisodeKeeper(run, None, 16, [])
        for it in (0, iterations):
            keeper.keep_eval(it, "eval", [episode(TASKS[0], it > 0, 0), episode(TASKS[1], True, 1)])
    return run
