"""ScienceWorld adapter (Wang et al., 2022) behind the ``envs.base.TextEnv`` contract.

Used by STEP-HRL (§5.1, App. A: 30 task families, dense 0-1 progress reward, 50 steps), HIPIF (App. A: binary
success, 40 turns) and Multi2 (App. B.1: the official score as the reward signal).  The adapter returns the
benchmark's own signal: ``reward`` is the increment of the 0-100 score, ``info["score"]`` the score itself; any
rescaling to 0-1 or binarisation is shaping and lives in ``reward/``.

Task ids are ``"<family>:<variation>"`` (e.g. ``"boil:3"``); splits are the official train / dev / test variation
ranges.  The simulator is a JVM (py4j); its heap is bounded to 256 MiB by default (``JAVA_TOOL_OPTIONS``), which
keeps one env at ~250 MB instead of 1-1.9 GB with every task still runnable (docs/platform.md).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Sequence
from typing import Any

DEFAULT_JAVA_OPTIONS = "-Xmx256m -XX:+UseSerialGC"
SPLITS: tuple[str, ...] = ("train", "dev", "test")
INVALID_OBSERVATION = "No known action matches that input."
ENDED_OBSERVATION = "The episode has ended. Call reset() to start a new one."
MAX_ACTION_CHARS = 1000

# (n_train, n_dev, n_test) per task family in scienceworld 1.2.3.  The simulator numbers each family's variations
# 0..n-1 and its official splits are the contiguous ranges [0, n_train), [n_train, n_train + n_dev) and the rest.
# Read once from the simulator (``get_variations_train/dev/test`` after loading each family, ~45 s for all 30);
# tests/envs/test_scienceworld.py checks entries against the live simulator.
SPLIT_SIZES: dict[str, tuple[int, int, int]] = {
    "boil": (14, 7, 9),
    "change-the-state-of-matter-of": (14, 7, 9),
    "chemistry-mix": (16, 8, 8),
    "chemistry-mix-paint-secondary-color": (18, 9, 9),
    "chemistry-mix-paint-tertiary-color": (18, 9, 9),
    "find-animal": (150, 75, 75),
    "find-living-thing": (150, 75, 75),
    "find-non-living-thing": (150, 75, 75),
    "find-plant": (150, 75, 75),
    "freeze": (14, 7, 9),
    "grow-fruit": (62, 31, 33),
    "grow-plant": (62, 31, 33),
    "identify-life-stages-1": (6, 3, 5),
    "identify-life-stages-2": (4, 2, 4),
    "inclined-plane-determine-angle": (84, 42, 42),
    "inclined-plane-friction-named-surfaces": (692, 346, 348),
    "inclined-plane-friction-unnamed-surfaces": (80, 40, 42),
    "lifespan-longest-lived": (62, 31, 32),
    "lifespan-longest-lived-then-shortest-lived": (62, 31, 32),
    "lifespan-shortest-lived": (62, 31, 32),
    "measure-melting-point-known-substance": (218, 109, 109),
    "measure-melting-point-unknown-substance": (150, 75, 75),
    "melt": (14, 7, 9),
    "mendelian-genetics-known-plant": (60, 30, 30),
    "mendelian-genetics-unknown-plant": (240, 120, 120),
    "power-component": (10, 5, 5),
    "power-component-renewable-vs-nonrenewable-energy": (10, 5, 5),
    "test-conductivity": (450, 225, 225),
    "test-conductivity-of-unknown-substances": (300, 150, 150),
    "use-thermometer": (270, 135, 135),
}


MOVE_PREFIXES: tuple[str, ...] = ("teleport to ", "go to ")


def split_at_moves(actions: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Cut a gold action sequence into subgoals: a new one starts at every move to another location; each is named
    "<move>, then <its last action>" (or the single action). Deviation, labelled: ScienceWorld's gold paths carry no
    subgoal annotations (STEP-HRL had GPT-4 annotate them); cutting where the agent changes location is our offline
    stand-in, so subgoals read like "go to kitchen, then pick up thermometer"."""
    segments: list[list[str]] = []
    for action in actions:
        if not segments or action.startswith(MOVE_PREFIXES):
            segments.append([])
        segments[-1].append(action)
    return [(seg[0] if len(seg) == 1 else f"{seg[0]}, then {seg[-1]}", seg) for seg in segments]


def split_variations(family: str, split: str) -> range:
    """The official variation indices of ``family`` in ``split`` (train / dev / test)."""
    n_train, n_dev, n_test = SPLIT_SIZES[family]
    starts = {"train": 0, "dev": n_train, "test": n_train + n_dev}
    sizes = {"train": n_train, "dev": n_dev, "test": n_test}
    return range(starts[split], starts[split] + sizes[split])


def split_of(family: str, variation: int) -> str:
    n_train, n_dev, _ = SPLIT_SIZES[family]
    if variation < n_train:
        return "train"
    return "dev" if variation < n_train + n_dev else "test"


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"boil:3"`` -> ``("boil", 3)``; ValueError naming the problem otherwise."""
    family, sep, variation = task_id.rpartition(":")
    if not sep or family not in SPLIT_SIZES or not variation.isdigit():
        raise ValueError(
            f"bad ScienceWorld task id {task_id!r}: expected '<family>:<variation>', family one of "
            f"{sorted(SPLIT_SIZES)}"
        )
    index = int(variation)
    if index >= sum(SPLIT_SIZES[family]):
        raise ValueError(
            f"variation {index} out of range for {family!r} ({sum(SPLIT_SIZES[family])} variations)"
        )
    return family, index


def _clean_action(action: object) -> str | None:
    """The action as the simulator should see it, or None when it cannot be a command.

    Why: py4j raises on strings that are not valid UTF-8 (lone surrogates), and multi-line or huge LLM outputs
    are never commands; rejecting them here keeps ``step`` from raising and saves a JVM round trip.
    """
    if not isinstance(action, str):
        return None
    text = action.strip()
    if not text or len(text) > MAX_ACTION_CHARS or "\n" in text or "\r" in text:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


class ScienceWorldEnv:
    """One ScienceWorld simulator (one JVM) playing one task variation at a time.

    ``info["admissible_actions"]`` is the simulator's full list of valid action-object combinations (500-6,400
    strings; the simulator computes it on every step anyway).  It is not capped: prompt builders decide how many
    to show.  ``expert_action()`` is the gold action sequence's next step while the agent has followed it
    (None once it has deviated); the gold path is generated only on the first call per episode because
    generating it costs 1-35 s per load (first load in a fresh JVM is the slowest).
    """

    name = "scienceworld"
    SUCCESS_REWARD = 100.0
    """A won task's rewards (score increments) sum to its 0-100 score."""

    def __init__(
        self,
        *,
        split: str = "train",
        max_steps: int = 50,
        task_families: list[str] | None = None,
        simplifications: str = "",
        java_options: str | None = DEFAULT_JAVA_OPTIONS,
        seed: int | None = None,
    ) -> None:
        """``java_options`` go into ``JAVA_TOOL_OPTIONS`` for this JVM only, unless the user already set that
        variable (theirs wins); None leaves the JVM unbounded.  ``task_families`` restricts random task choice."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        families = list(task_families) if task_families else sorted(SPLIT_SIZES)
        unknown = [f for f in families if f not in SPLIT_SIZES]
        if unknown:
            raise ValueError(f"unknown ScienceWorld task families {unknown}; known: {sorted(SPLIT_SIZES)}")
        self.split = split
        self.max_steps = max_steps
        self.task_families = families
        self.simplifications = simplifications
        self._rng = random.Random(seed)
        self._sim = _start_simulator(java_options)
        self._family = ""
        self._variation = -1
        self._task = ""
        self._score = 0
        self._steps = 0
        self._done = True
        self._end_flags = (False, True)  # (terminated, truncated) repeated by step() once an episode is over
        self._admissible: list[str] = []
        self._templates: list[str] = []
        self._valid_history: list[str] = []
        self._sent_history: list[str] = []
        self._gold: list[str] | None = None

    # -- TextEnv -------------------------------------------------------------------------------------------------
    def task_ids(self, split: str | None = None) -> list[str]:
        split = split or self.split
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return [f"{family}:{v}" for family in self.task_families for v in split_variations(family, split)]

    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Load ``task_id`` (or draw a family uniformly, then a variation of ``self.split``, as the official
        ``get_random_variation_*`` protocol does) and return the first ``look around`` observation."""
        if task_id is None:
            rng = random.Random(seed) if seed is not None else self._rng
            family = rng.choice(self.task_families)
            variation = rng.choice(split_variations(family, self.split))
        else:
            family, variation = parse_task_id(task_id)
        self._family, self._variation = family, variation
        self._load(generate_gold=False)
        self._task = str(self._sim.get_task_description())
        self._templates = [str(a) for a in self._sim.get_possible_actions()]
        self._steps, self._done = 0, False
        self._valid_history, self._sent_history, self._gold = [], [], None
        observation, _, _, raw = self._sim.step("look around")  # the package's own reset() ends the same way
        self._score, self._admissible = int(raw["score"]), list(raw["valid"])
        return observation, self._info(valid_action=True, moves=raw["moves"])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One command; unparseable text costs a step but never reaches the JVM (the state cannot change)."""
        if self._done:
            terminated, truncated = self._end_flags
            return ENDED_OBSERVATION, 0.0, terminated, truncated, self._info(valid_action=False)
        self._steps += 1
        command = _clean_action(action)
        observation, completed, moves, score = INVALID_OBSERVATION, False, None, self._score
        if command is not None:
            observation, _, completed, raw = self._sim.step(command)
            self._sent_history.append(command)
            self._admissible = list(raw["valid"])
            moves, score = raw["moves"], int(raw["score"])
        valid = command is not None and not observation.startswith(INVALID_OBSERVATION)
        if valid:
            self._valid_history.append(command)
        reward = float(score - self._score)  # the increment of the 0-100 score: the benchmark's dense reward
        self._score = score
        # The simulator flags completion on success and on failure (score < 0, e.g. focusing on a wrong object).
        terminated = bool(completed) or score >= 100 or score < 0
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._end_flags = (terminated, truncated)
        return observation, reward, terminated, truncated, self._info(valid_action=valid, moves=moves)

    def expert_action(self) -> str | None:
        """Next step of the gold action sequence, or None off the gold path / after the episode."""
        if self._done or self._variation < 0:
            return None
        if self._gold is None:
            self._gold = self._generate_gold()
        k = len(self._valid_history)
        if self._gold[:k] != self._valid_history or k >= len(self._gold):
            return None
        return self._gold[k]

    def expert_plan(self) -> list[tuple[str, list[str]]]:
        """The rest of the gold action sequence as (subgoal, actions), cut at every move (``split_at_moves``): the
        behaviour-cloning demonstrations of every protocol (``actors.demos``). Empty off the gold path."""
        if self._done or self._variation < 0:
            return []
        if self._gold is None:
            self._gold = self._generate_gold()
        k = len(self._valid_history)
        if self._gold[:k] != self._valid_history:
            return []
        return split_at_moves(self._gold[k:])

    def close(self) -> None:
        sim, self._sim = self._sim, None
        if sim is not None:
            with contextlib.suppress(Exception):
                sim.close()

    # -- internals -----------------------------------------------------------------------------------------------
    def _load(self, *, generate_gold: bool) -> None:
        self._sim.load(self._family, self._variation, self.simplifications, generateGoldPath=generate_gold)

    def _generate_gold(self) -> list[str]:
        """Reload with the gold path and replay this episode's commands (the simulator is deterministic)."""
        self._load(generate_gold=True)
        self._sim.step("look around")
        for command in self._sent_history:
            self._sim.step(command)
        return [str(a) for a in self._sim.get_gold_action_sequence()]

    def _info(self, *, valid_action: bool, moves: int | None = None) -> dict[str, Any]:
        return {
            "task": self._task,
            "admissible_actions": self._admissible,
            # Prompts list the action templates ("open OBJ", "go to LOC", ...) as STEP-HRL and HIPIF do: the full
            # valid list (500-6,400 strings, 3k-24k tokens) would overflow any context.
            "prompt_actions": self._templates,
            "won": self._score >= 100,
            "score": self._score,
            "valid_action": valid_action,
            "task_id": f"{self._family}:{self._variation}" if self._variation >= 0 else "",
            "task_type": self._family,
            "split": split_of(self._family, self._variation) if self._variation >= 0 else self.split,
            "steps": self._steps,
            "moves": moves,
        }


def _start_simulator(java_options: str | None) -> Any:
    """Start the JVM with ``JAVA_TOOL_OPTIONS`` set only for the child process unless the user already set it."""
    from scienceworld import ScienceWorldEnv as _Simulator

    override = java_options is not None and "JAVA_TOOL_OPTIONS" not in os.environ
    if override:
        os.environ["JAVA_TOOL_OPTIONS"] = java_options
    try:
        # The simulator's own step limit would flag completion; ours (max_steps) truncates instead.
        return _Simulator("", envStepLimit=2**31 - 1)
    finally:
        if override:
            del os.environ["JAVA_TOOL_OPTIONS"]
