"""Episode statistics of a batch of trajectories (pure): the training line's success, return, format validity,
tokens, and the hierarchy's shape, which tells good switching from degenerate switching.

``switch_rate`` alone cannot: switching every turn and switching where a stage ends can give similar rates. So
where the env reports its progress (``subgoals_done`` after each step: the synthetic env), each decided turn's
switch is compared with the expert's (the expert starts a new subgoal exactly on the turn after one was finished),
and the segment lengths are reported as a distribution.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from actors.trajectory import Trajectory
from launch.evaluation.report import subgoal_rate
from learners.transitions import subgoal_counts

SEGMENT_BINS = (1, 2, 3)
"""Segment lengths reported one by one (``seglen_share/<n>``); longer ones together (``seglen_share/4+``)."""


def expert_switches(traj: Trajectory) -> np.ndarray | None:
    """bool[T]: where the env's expert would start a new subgoal (turn 0, and every turn after one that finished a
    subgoal, read from ``turn.info["subgoals_done"]``); None when a turn lacks that reading."""
    done = [t.info.get("subgoals_done") for t in traj.turns]
    if not done or any(d is None for d in done):
        return None
    before = [0, *done[:-1]]  # subgoals done when turn t was decided
    out = np.array([t == 0 or before[t] > before[t - 1] for t in range(len(done))], dtype=bool)
    return out


def segment_lengths(traj: Trajectory) -> list[int]:
    """Turns per segment (q_t from ``traj.switches()``, turn 0 always starts one)."""
    starts = [*np.flatnonzero(traj.switches()).tolist(), len(traj.turns)]
    return [e - b for b, e in itertools.pairwise(starts)]


def hierarchy_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """``switch_rate`` (SWITCH share of decided turns, t >= 1), ``segment_len`` (mean), ``seglen_share/<n>``, and
    where the env reports progress ``expert_switch_rate``, ``switch_agreement`` (share of decided turns whose
    switch matches the expert's) and ``subgoals_done`` (mean per episode)."""
    decided = [bool(q) for tr in trajs for q in tr.switches()[1:]]
    lengths = [n for tr in trajs if tr.turns for n in segment_lengths(tr)]
    out = {
        "switch_rate": float(np.mean(decided)) if decided else 0.0,
        "segment_len": float(np.mean(lengths)) if lengths else 0.0,
    }
    if lengths:
        arr = np.array(lengths)
        for n in SEGMENT_BINS:
            out[f"seglen_share/{n}"] = float(np.mean(arr == n))
        out[f"seglen_share/{SEGMENT_BINS[-1] + 1}+"] = float(np.mean(arr > SEGMENT_BINS[-1]))
    pairs = []
    for tr in trajs:
        expert = expert_switches(tr)
        if expert is not None:
            pairs += list(zip(tr.switches()[1:], expert[1:], strict=True))
    if pairs:
        agent, expert = np.array(pairs, dtype=bool).T
        out["expert_switch_rate"] = float(expert.mean())
        out["switch_agreement"] = float(np.mean(agent == expert))
    done = [
        tr.turns[-1].info["subgoals_done"]
        for tr in trajs
        if tr.turns and "subgoals_done" in tr.turns[-1].info
    ]
    if done:
        out["subgoals_done"] = float(np.mean(done))
    return out


def trajectory_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Success, return, format validity (also per role, ``valid_format_<role>``, for protocols with several roles:
    STEP-HRL's high / low / progress, Multi2's planner / executor), tokens per turn, the hierarchy's shape
    (``hierarchy_stats``), and for protocols with sub-goal turns the share of issued sub-goals completed
    (``subgoal_completion``)."""
    turns = [t for tr in trajs for t in tr.turns]
    counts = [subgoal_counts(t) for t in trajs]
    n = max(1, len(trajs))
    return {
        "success": sum(t.won for t in trajs) / n,
        "return": float(np.mean([t.episode_return for t in trajs])) if trajs else 0.0,
        "env_steps": float(np.mean([t.info.get("env_steps", len(t.turns)) for t in trajs])) if trajs else 0.0,
        "valid_format": float(np.mean([t.decision.valid for t in turns])) if turns else 0.0,
        **hierarchy_stats(trajs),
        "prompt_tokens": float(np.mean([t.prompt_ids.size for t in turns])) if turns else 0.0,
        "response_tokens": float(np.mean([t.response_ids.size for t in turns])) if turns else 0.0,
        "failed": float(sum(t.status == "failed" for t in trajs)),
        **{
            f"valid_format_{role}": float(np.mean([t.decision.valid for t in turns if t.role == role]))
            for role in sorted({t.role for t in turns} - {"agent"})
        },
        **({"subgoal_completion": subgoal_rate(counts)} if any(i for i, _ in counts) else {}),
    }


def evaluation_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """What an evaluation measures of its episodes (``PanelEvaluator``): ``trajectory_stats``, and the mean turns of
    its won episodes (``won_turns``, NaN without a win: how directly the policy wins, which success alone does not
    tell), which the schema's ``from_episodes`` metrics (``launch.evaluation.metrics``) are copied from into the
    evaluation's result."""
    won = [len(t.turns) for t in trajs if t.won]
    return {**trajectory_stats(trajs), "won_turns": float(np.mean(won)) if won else float("nan")}
