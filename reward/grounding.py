"""What the environment said about each action: executability, invalid-action penalty, HISR action grounding.

This module also owns the reading of the ``Turn.info`` contract (see ``reward/__init__.py``), because every
environment-facing rule (here and in ``reward/process.py``) asks the same three questions of a turn: did it send an
action, what did the environment answer, and which actions were admissible when the decision was made.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from actors.trajectory import Trajectory

FAILURE_PATTERNS: tuple[str, ...] = (
    "nothing happens",
    "nothing happened",
    "no known action matches that input",
)
"""Observation fragments that mean "the action had no effect" (case-insensitive substrings).

ALFWorld answers "Nothing happens." and ScienceWorld "No known action matches that input." (HIPIF App. B names both);
HISR's ALFWorld prompt (App., format prompt) calls "Nothing happened" an invalid action."""


def normalize_text(text: str) -> str:
    """Lower-case and collapse whitespace, so that string matching ignores layout differences only."""
    return " ".join(text.lower().split())


def is_acting(traj: Trajectory) -> np.ndarray:
    """bool[T]: the turn sent an action to the environment (``Decision.action`` is the command actually sent)."""
    return np.array([bool(t.decision.action.strip()) for t in traj.turns], dtype=bool)


def next_observation(traj: Trajectory, t: int) -> str:
    """The observation the environment returned after turn ``t``'s action.

    ``info["next_observation"]`` when the rollout recorded it, else the observation of turn ``t + 1`` (the next
    decision was made from it), else ``""`` (last turn without the key: unknown)."""
    obs = traj.turns[t].info.get("next_observation")
    if obs is not None:
        return str(obs)
    return traj.turns[t + 1].observation if t + 1 < len(traj.turns) else ""


def admissible_per_turn(traj: Trajectory) -> list[list[str] | None]:
    """For each turn, the admissible actions offered at the state it decided from (None: the benchmark has none).

    ``Turn.info`` holds the step info returned *after* that turn's action, whose ``admissible_actions`` describe the
    next state; so turn ``t`` sees the list of the most recent earlier turn that recorded one, and turns before any
    such record see the reset info stored in ``Trajectory.info["admissible_actions"]``. One forward pass."""
    current = traj.info.get("admissible_actions")
    out: list[list[str] | None] = []
    for turn in traj.turns:
        out.append(current)
        if "admissible_actions" in turn.info:
            current = turn.info["admissible_actions"]
    return out


def shows_failure(observation: str, patterns: Sequence[str] = FAILURE_PATTERNS) -> bool:
    """True when the observation contains one of the failure ``patterns`` (case- and layout-insensitive)."""
    obs = normalize_text(observation)
    return any(normalize_text(p) in obs for p in patterns)


def action_failed(traj: Trajectory, t: int, patterns: Sequence[str] = FAILURE_PATTERNS) -> bool:
    """The environment rejected turn ``t``'s action: ``info["valid_action"] is False`` or its answer shows failure."""
    return traj.turns[t].info.get("valid_action") is False or shows_failure(
        next_observation(traj, t), patterns
    )


def action_executable(traj: Trajectory, patterns: Sequence[str] = FAILURE_PATTERNS) -> np.ndarray:
    """bool[T]: HISR's executability (Sec. 3.3): the turn sent an action, it was in the admissible list of its state
    (when the benchmark has one; compared after ``normalize_text``), and the environment did not reject it."""
    acting = is_acting(traj)
    out = np.zeros(len(traj.turns), dtype=bool)
    for t, (turn, admissible) in enumerate(zip(traj.turns, admissible_per_turn(traj), strict=True)):
        if not acting[t]:
            continue
        action = turn.decision.action
        in_list = (
            admissible is None
            or action in admissible  # the common case, before normalising the whole list
            or normalize_text(action) in {normalize_text(a) for a in admissible}
        )
        out[t] = in_list and not action_failed(traj, t, patterns)
    return out


def action_grounding_reward(
    traj: Trajectory, alpha: float = 0.3, patterns: Sequence[str] = FAILURE_PATTERNS
) -> np.ndarray:
    """float64[T]: the α-weighted HISR action-grounding term α·r^g_t of Eq. 8, r^g_t = 1 if executable else 0.

    Eq. 8 fuses r^fuse = (1 − α)·r^him + α·r^g; this returns the second summand (α = 0.3, HISR App. B) so that it can
    sit in ``Turn.shaped`` next to the (1 − α)-scaled segment reward computed by the HISR reward models
    (``learners.reward_models``, Eq. 7 in ``learners.hindsight.hindsight_modulated_rewards``)."""
    return alpha * action_executable(traj, patterns).astype(np.float64)


def invalid_action_penalty(traj: Trajectory, penalty: float) -> np.ndarray:
    """float64[T]: −penalty on turns whose step info says the action was not understood (``valid_action is False``).

    verl-agent's invalid-action penalty (−0.1); a turn without the key is not penalised (no evidence)."""
    return np.array(
        [-penalty if t.info.get("valid_action") is False else 0.0 for t in traj.turns], dtype=np.float64
    )
