"""Composition: apply a configured set of shaping terms to a trajectory, one ``Turn.shaped`` entry per term.

Each term is a pure function ``Trajectory -> float64[T]`` from the modules of this package; keeping them as separate
``shaped`` components (rather than one summed number) lets the learner log and ablate them, and
``Turn.reward = env_reward + sum(shaped.values())`` is what the advantage estimators read.

Units: every penalty is a fraction of the env's success reward R (``envs.success_reward``; ALFWorld pays 10,
TextCraft, WebShop, VirtualHome and the synthetic env 1, ScienceWorld's score 100), so one rule gives every
algorithm and env the papers' ratio: HiPER's c_KEEP 0.3 and format 0.1 against R = 10 are 0.03 R and 0.01 R.
The HISR grounding term is the exception: α is a weight inside the fused model reward (Eq. 8), not an amount.

=====================  ====================================================  ================================
component name         rule                                                  source
=====================  ====================================================  ================================
``format``             −0.01 R per malformed output                          HiPER App. C; HIPIF App. B r^fmt
``keep``               −c_KEEP (1 − q_t), c_KEEP = 0.03 R                    HiPER App. C, D.2
``keep_consistency``   −0.03 R when KEEP changed the subgoal text            HiPER authors' code; App. C.3 prompt
``invalid_action``     −0.01 R when the env did not understand the action    verl-agent
``ungrounded_subgoal`` −0.01 R subgoal names nothing in the env context      HIPIF App. B r^gr
``subgoal_failure``    −0.01 R (won episodes) subgoal ended on a failure     HIPIF App. B r^term
``repeat``             −0.01 R on the 3rd+ same action–observation pair      HIPIF App. B r^exec
``action_grounding``   +α·1[action executable], α = 0.3 (not scaled by R)    HISR Eq. 8
=====================  ====================================================  ================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from actors.trajectory import Trajectory
from reward.format import format_penalty
from reward.grounding import FAILURE_PATTERNS, action_grounding_reward, invalid_action_penalty
from reward.keep import keep_consistency_penalty, keep_penalty
from reward.process import repeat_penalty, subgoal_failure_penalty, ungrounded_subgoal_penalty


@dataclass(frozen=True)
class ShapingConstants:
    """The shaping terms' constants (defaults from the papers): their one definition. Every RL algorithm's
    ``Config`` holds one as its ``shaping`` field, so ``algo.shaping.<name>=v`` reaches each of them
    (``shaping_for``). Amounts are in units of the env's success reward R (the module docstring)."""

    format_penalty: float = 0.01
    """Cost of a malformed output, × R (HiPER App. C and HIPIF App. B: 0.1 against R = 10)."""
    c_keep: float = 0.03
    """HiPER's KEEP penalty c_KEEP, × R (App. C: 0.3 against R = 10, the best value of App. D.2, Table 4)."""
    keep_mode: str = "per_turn"
    """"per_turn": −c_KEEP on every KEEP turn (HiPER App. C); "normalized": −c_KEEP / T on every KEEP turn of a T-turn
    episode, at most c_KEEP per episode (the HiPER authors' code, ``keep_penalty_mode``)."""
    keep_consistency_penalty: float = 0.03
    """Cost of a KEEP that rewrote the subgoal, × R (the HiPER authors' code: 0.3 against R = 10; the paper's prompt
    (App. C.3) makes it a format requirement)."""
    invalid_action_penalty: float = 0.01
    """Cost of an action the environment did not understand, × R (verl-agent: 0.1 against ALFWorld's R = 10)."""
    process_penalty: float = 0.01
    """Each HIPIF process penalty r^gr, r^term, r^exec, × R (App. B: 0.1 against R = 10; App. D: 0.1 beat 0.05, 0.2)."""
    repeat_threshold: int = 3
    """HIPIF r^exec fires from this occurrence of an action–observation pair within a subgoal on (App. B: third)."""
    ground_in_task: bool = True
    """Whether the task instruction counts as environment context for HIPIF's subgoal grounding check."""
    grounding_alpha: float = 0.3
    """HISR α of Eq. 8 (App. B): weight of the action-grounding reward against the modulated segment reward."""
    failure_patterns: tuple[str, ...] = FAILURE_PATTERNS
    """Observation fragments that mean the action failed (HIPIF r^term, HISR executability)."""

    def __post_init__(self) -> None:
        cost = "a cost >= 0 (applied with a minus sign)"
        for name in (
            "format_penalty",
            "c_keep",
            "keep_consistency_penalty",
            "invalid_action_penalty",
            "process_penalty",
        ):
            _check(name, getattr(self, name) >= 0, getattr(self, name), cost)
        _check("repeat_threshold", self.repeat_threshold >= 1, self.repeat_threshold, "an integer >= 1")
        _check(
            "grounding_alpha",
            0.0 <= self.grounding_alpha <= 1.0,
            self.grounding_alpha,
            "a number in [0, 1] (HISR Eq. 8 is a convex combination)",
        )
        _check("keep_mode", self.keep_mode in KEEP_MODES, self.keep_mode, ", ".join(KEEP_MODES))


def _check(name: str, ok: bool, value: Any, allowed: str) -> None:
    if not ok:
        raise ValueError(f"algo.shaping.{name}: got {value!r}; allowed: {allowed}")


KEEP_MODES = ("per_turn", "normalized")


SHAPING_CONSTANTS: tuple[str, ...] = tuple(f.name for f in fields(ShapingConstants))
"""The names of the shaping constants (each an ``algo.shaping.<name>`` key of every RL algorithm)."""


@dataclass(frozen=True)
class ShapingConfig:
    """Which shaping terms to apply, and the constants they use."""

    terms: tuple[str, ...] = ("format",)
    """Component names to apply, in order (keys of ``TERMS``); see ``HIPER_TERMS`` / ``HIPIF_TERMS`` /
    ``HISR_TERMS``. The default is the format penalty every baseline uses (HiPER App. C)."""
    constants: ShapingConstants = field(default_factory=ShapingConstants)
    """The terms' constants (an RL algorithm's ``Config.shaping``; default: the papers')."""
    success_reward: float = 1.0
    """The env's success reward R: every amount in ``constants`` is multiplied by it (``SCALED_TERMS``)."""

    def __post_init__(self) -> None:
        unknown = [t for t in self.terms if t not in TERMS]
        if unknown:
            raise ValueError(f"unknown shaping terms {unknown}; known: {sorted(TERMS)}")
        if len(set(self.terms)) != len(self.terms):
            raise ValueError(f"shaping terms repeated: {self.terms}")
        if not isinstance(self.constants, ShapingConstants):
            raise ValueError(
                f"shaping constants must be a ShapingConstants, got {type(self.constants).__name__}"
            )
        if not self.success_reward > 0:
            raise ValueError(f"success_reward must be > 0, got {self.success_reward}")


def shaping_for(algo_cfg: Any, success_reward: float = 1.0) -> ShapingConfig:
    """The shaping of an algorithm's ``Config`` in an env paying ``success_reward``: its ``reward_terms`` with its
    ``shaping`` constants (every RL algorithm's ``Config`` has that field; a config without one, e.g. SFT's, keeps
    the paper defaults). The unit R is the success reward the algorithm's returns see: an algorithm that pays the
    outcome at its own scale (HIPIF's ``success_reward``, 10 whatever the env pays) sets it, else the env's."""
    constants = getattr(algo_cfg, "shaping", None)
    own = getattr(algo_cfg, "success_reward", None)
    return ShapingConfig(
        terms=tuple(algo_cfg.reward_terms),
        constants=ShapingConstants() if constants is None else constants,
        success_reward=success_reward if own is None else float(own),
    )


TermFn = Callable[[Trajectory, ShapingConstants], np.ndarray]

TERMS: dict[str, TermFn] = {
    "format": lambda traj, c: format_penalty(traj, c.format_penalty),
    "keep": lambda traj, c: keep_penalty(traj, c.c_keep, normalized=c.keep_mode == "normalized"),
    "keep_consistency": lambda traj, c: keep_consistency_penalty(traj, c.keep_consistency_penalty),
    "invalid_action": lambda traj, c: invalid_action_penalty(traj, c.invalid_action_penalty),
    "ungrounded_subgoal": lambda traj, c: ungrounded_subgoal_penalty(
        traj, c.process_penalty, c.ground_in_task
    ),
    "subgoal_failure": lambda traj, c: subgoal_failure_penalty(traj, c.process_penalty, c.failure_patterns),
    "repeat": lambda traj, c: repeat_penalty(traj, c.process_penalty, c.repeat_threshold),
    "action_grounding": lambda traj, c: action_grounding_reward(traj, c.grounding_alpha, c.failure_patterns),
}
"""Component name -> term; each reads its constants from ``ShapingConstants`` and returns float64[T] for the
trajectory's turns (amounts in units of R: ``shaping_components`` scales them)."""

SCALED_TERMS: frozenset[str] = frozenset(TERMS) - {"action_grounding"}
"""The terms whose amounts are fractions of the env's success reward (all but HISR's weighted grounding term)."""

HIPER_TERMS: tuple[str, ...] = ("format", "keep", "keep_consistency")
HIPIF_TERMS: tuple[str, ...] = ("format", "ungrounded_subgoal", "subgoal_failure", "repeat")
HISR_TERMS: tuple[str, ...] = ("action_grounding",)


def shaping_components(traj: Trajectory, config: ShapingConfig) -> dict[str, np.ndarray]:
    """{component name: float64[T]} for the configured terms, amounts × R; pure (the trajectory is not modified)."""
    return {
        name: np.asarray(TERMS[name](traj, config.constants), dtype=np.float64)
        * (config.success_reward if name in SCALED_TERMS else 1.0)
        for name in config.terms
    }


def apply_shaping(traj: Trajectory, config: ShapingConfig) -> Trajectory:
    """Write each configured component into ``turn.shaped[name]`` **in place** and return the same trajectory.

    Every turn gets every configured component (0.0 where the rule does not fire), so components line up across
    turns for logging. Entries under other names (e.g. a model-based reward written by another stage) are left
    alone; applying twice gives the same result, since all terms are computed before any is written and none reads
    ``shaped``."""
    components = shaping_components(traj, config)
    for name, values in components.items():
        for turn, value in zip(traj.turns, values, strict=True):
            turn.shaped[name] = float(value)
    return traj
