"""Step-level transitions of the STEP-HRL protocol: each turn of a trajectory as one (s, u, r, s', done) of its
role (pure: numpy only).

STEP-HRL trains three roles of one backbone with separate critics on step-level transitions (STEP-HRL Sec. 3.1,
3.3). A trajectory of the ``step_hrl`` agent is the turn sequence

    high, low, progress, low, progress, ..., low(completion), progress, high, low, progress, ...

where every high turn g_k opens subtask k, every low turn acts in the env, and the progress turn after a low turn
writes the local progress the next low turn reads. ``s`` of a turn is its prompt, ``u`` its response; this module
says, per turn, its reward r, the turn whose prompt is s' (``next_turn``) and whether V(s') is 0 (``done``):

* **low** (the transition (o_t, p_t, a_t, r̂_t, o_{t+1}, p_{t+1}) of Sec. 3.1): r̂_t = 1 when the step completes
  subtask g_k, else 0. The paper does not say how completion is judged on collected data (its subtasks were
  annotated on expert data). Our reading: the step *ends* the subtask (the low level's completion flag, which
  hands control back to the high level) and the env's progress score (``Turn.info["score"]``) rose during the
  subtask, or the step won the episode. s' is the next low turn of the subtask; done when the subtask ended or
  the episode terminated.
* **high** (the transition (p̂_{k-1}, o_0^k, g_k, R_k, p̂_k, o_0^{k+1}) of Sec. 3.1): R_k = Σ_t r_t, the env
  reward accumulated during subtask k; s' is the next high turn; done when the episode terminated in subtask k.
* **progress** (not specified by the paper; our reading): p_t is credited with r̂ of the low step that reads it;
  s' is the progress turn after that low step; done when that step ended the subtask. The final progress p̂_k
  (written after the completing step, read by the high level) gets r = 0, done.

Every turn also keeps its own shaping terms (``Turn.shaped``, e.g. a format penalty) in r. A transition with no
s' in the data and not done (the episode was truncated mid-subtask) has ``next_turn`` = −1: V(s') is taken as
V(s), the approximation ``learners.targets.bootstrap_value`` documents for the on-policy algorithms, unless the
algorithm's ``truncation`` is ``"terminal"`` (``with_truncation``: such a transition is done).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from actors.trajectory import Trajectory

ROLES: tuple[str, ...] = ("high", "low", "progress")
MULTI2_ROLES: tuple[str, ...] = ("planner", "executor")


@dataclass(frozen=True)
class StepTransitions:
    """Per turn of one trajectory (T turns): ``reward`` float64[T], ``next_turn`` int64[T] (−1: none),
    ``done`` bool[T] (V(s') = 0), ``subtask`` int64[T] (k of the subtask the turn belongs to)."""

    reward: np.ndarray
    next_turn: np.ndarray
    done: np.ndarray
    subtask: np.ndarray


def with_truncation(tr: StepTransitions, truncation: str) -> StepTransitions:
    """``tr`` as given for ``"bootstrap"``; for ``"terminal"`` every cut transition (no s' and not done) is done,
    V(s') = 0 (``learners.advantages.Truncation``)."""
    if truncation == "bootstrap":
        return tr
    return replace(tr, done=tr.done | (tr.next_turn < 0))


def _completes(traj: Trajectory, j: int, score_at_start: float) -> bool:
    turn = traj.turns[j]
    if turn.terminated and traj.won:
        return True
    flagged = bool(turn.decision.extra.get("completion", False))
    return flagged and float(turn.info.get("score", 0.0)) > score_at_start


def _start(
    traj: Trajectory, roles: tuple[str, ...], method: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reward = each turn's shaping terms, next_turn all −1, done all False) after checking every role."""
    for t in traj.turns:
        if t.role not in roles:
            raise ValueError(f"turn role {t.role!r} is not a {method} role; allowed: {', '.join(roles)}")
    n = len(traj.turns)
    reward = np.array([sum(t.shaped.values()) for t in traj.turns], dtype=np.float64)
    return reward, np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool)


def step_hrl_transitions(traj: Trajectory, env_reward_scale: float = 1.0) -> StepTransitions:
    """The transitions of every turn of a ``step_hrl`` trajectory (module docstring); the high level's R_k is the
    env reward times ``env_reward_scale`` (STEP-HRL reads ScienceWorld's reward on a 0-1 scale, our adapter
    reports the 0-100 score's increments: 0.01)."""
    turns = traj.turns
    n = len(turns)
    reward, next_turn, done = _start(traj, ROLES, "STEP-HRL")
    subtask = np.zeros(n, dtype=np.int64)

    # subtasks: each high turn opens one; turns before the first high turn belong to subtask 0
    k = -1
    for j, t in enumerate(turns):
        if t.role == "high" or k < 0:
            k += 1
        subtask[j] = k
    highs = [j for j, t in enumerate(turns) if t.role == "high"]
    score = 0.0  # the env's progress score before the current subtask
    last_score = 0.0
    for k_id in range(int(subtask[-1]) + 1 if n else 0):
        members = [j for j in range(n) if subtask[j] == k_id]
        lows = [j for j in members if turns[j].role == "low"]
        score = last_score
        # r̂ of each low turn and whether it ends the subtask's low-level MDP
        r_hat: dict[int, float] = {}
        ends: dict[int, bool] = {}
        for i, j in enumerate(lows):
            r_hat[j] = 1.0 if _completes(traj, j, score) else 0.0
            flagged = bool(turns[j].decision.extra.get("completion", False))
            ends[j] = flagged or turns[j].terminated
            last_score = float(turns[j].info.get("score", last_score))
            reward[j] += r_hat[j]
            if ends[j]:
                done[j] = True
            elif i + 1 < len(lows):
                next_turn[j] = lows[i + 1]
        # progress: the turn right after low j writes p read by the next low turn of the subtask
        for j in members:
            if turns[j].role != "progress":
                continue
            prev_low = max((x for x in lows if x < j), default=None)
            if prev_low is not None and ends[prev_low]:
                done[j] = True  # p̂_k: read by the high level, not by a low step
                continue
            nxt = min((x for x in lows if x > j), default=None)
            if nxt is None:
                continue  # truncated before the low step that would read it: bootstrap
            reward[j] += r_hat[nxt]
            if ends[nxt]:
                done[j] = True
            else:
                after = [x for x in members if x > nxt and turns[x].role == "progress"]
                if after:
                    next_turn[j] = after[0]
        # high: R_k = env reward during the subtask; s' = the next high turn
        for j in members:
            if turns[j].role != "high":
                continue
            reward[j] += env_reward_scale * sum(turns[x].env_reward for x in lows)
            later = [h for h in highs if h > j]
            if later:
                next_turn[j] = later[0]
            elif traj.terminated:
                done[j] = True
    return StepTransitions(reward=reward, next_turn=next_turn, done=done, subtask=subtask)


def multi2_transitions(traj: Trajectory, env_reward_scale: float = 1.0) -> StepTransitions:
    """The executor's sub-goal-conditioned transitions (o_t, g, a_t, r_t, o_{t+1}) of a ``multi2`` trajectory
    (Multi2 Sec. 4.1 Eq. 2, App. B). Each planner turn opens sub-goal g; the executor turns after it act under g.

    * **executor**: r_t = ``env_reward_scale`` · the env reward + 1 when the step completes g (App. B: "an internal
      reward of 1 when the active sub-goal is completed ... the environment reward remains unchanged"; completion
      judged as for STEP-HRL's low level: the completion flag with the env score risen, or the winning step). s' is
      the next executor turn under the same g; done when the step ends g (flag) or the episode terminated, so values
      are conditioned on one sub-goal, V(o, g), as Eq. 4-5 write them.
    * **planner**: trained by SFT (Eq. 3), no critic: r = its shaping terms, done.
    """
    turns = traj.turns
    reward, next_turn, done = _start(traj, MULTI2_ROLES, "Multi2")
    subtask = np.cumsum([t.role == "planner" for t in turns]).astype(np.int64)
    subtask = np.maximum(subtask - 1, 0)
    score_at_start = 0.0
    score = 0.0
    prev: int | None = None  # the previous executor turn of the current sub-goal
    for j, t in enumerate(turns):
        if t.role == "planner":
            done[j] = True
            score_at_start, prev = score, None
            continue
        if prev is not None:
            next_turn[prev] = j
        reward[j] += env_reward_scale * t.env_reward + (1.0 if _completes(traj, j, score_at_start) else 0.0)
        score = float(t.info.get("score", score))
        if bool(t.decision.extra.get("completion", False)) or t.terminated:
            done[j] = True
            score_at_start, prev = score, None
        else:
            prev = j
    return StepTransitions(reward=reward, next_turn=next_turn, done=done, subtask=subtask)


SUBGOAL_OPENERS = ("high", "planner")
"""Roles whose turn issues a sub-goal: STEP-HRL's high level, Multi2's planner."""


def subgoal_counts(traj: Trajectory) -> tuple[int, int]:
    """(sub-goals issued, sub-goals completed) in a STEP-HRL or Multi2 trajectory: each opener turn issues one; the
    acting role (low / executor) completes it as the transitions judge it (the completion flag with the env score
    risen since the sub-goal began, or the winning step). (0, 0) for protocols without sub-goal turns. The eval's
    "executor completion rate" is completed / issued."""
    issued = completed = 0
    score_at_start = score = 0.0
    for j, t in enumerate(traj.turns):
        if t.role in SUBGOAL_OPENERS:
            issued += 1
            score_at_start = score
        elif t.role in ("low", "executor"):
            completed += _completes(traj, j, score_at_start)
            score = float(t.info.get("score", score))
            if bool(t.decision.extra.get("completion", False)):
                score_at_start = score
    return issued, completed
