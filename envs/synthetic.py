"""A tiny synthetic multi-stage crafting world for fast tests and from-scratch RL smoke runs.

NOT a benchmark: no paper reports numbers on it.  It exists because every real benchmark here costs milliseconds to
seconds per step and needs a big model to make progress, while the hierarchical machinery (subgoal switches, HiPER's
two-level advantages, HIPIF's subgoal process rewards) needs an environment whose subgoal structure is explicit,
that a tiny model learns in minutes, and that runs in microseconds per step.

Each task: "craft a <goal>: collect K items in a fixed order, then craft at the workbench".  Every collected item
is one stage, the craft is the last stage, so the expert plan has ``stages`` subgoals (``stages - 1`` items + craft).
Items live in fixed homes (wood is always on the shelf), so a policy can learn the world, not just the task.
Difficulty knobs, all encoded in the task id ``stages{n}-acts{a}-dist{d}-seed{s}``:

* ``stages`` 1-6 (subgoals per task);
* ``acts`` 1-3 actions per item stage: 1 = ``take X`` (everything in one room), 2 = ``go to L`` + ``take X``,
  3 = ``go to L`` + ``open L`` + ``take X``;
* ``dist`` 0-3 distractor items (their homes add ``go to`` actions; taking them only wastes a step).  It is
  clamped so that the admissible list never exceeds 9 commands.

Reward: ``success_reward`` when the goal is crafted (terminated), 0 otherwise; ``truncated`` at ``max_steps``.
Splits are disjoint by task *content*, not just by id, so a test task never replays a training task.
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass
from typing import Any

from envs._common import choose_task, clean_action, make_info, stable_hash

HOMES: dict[str, str] = {
    "wood": "shelf",
    "stone": "crate",
    "iron": "chest",
    "string": "drawer",
    "gem": "box",
    "cloth": "cabinet",
    "clay": "barrel",
    "glass": "basket",
}
ITEMS: tuple[str, ...] = tuple(HOMES)
GOALS: tuple[str, ...] = ("lamp", "sword", "bow", "shield", "boat", "ring", "hammer", "kite")
WORKBENCH = "workbench"
START = "hallway"
MAX_ADMISSIBLE = 9
INVALID_OBS = "Nothing happens."
_TASK_ID = re.compile(r"^stages(\d+)-acts(\d+)-dist(\d+)-seed(\d+)$")
_TEST_EVERY = 5  # one task content in five goes to the test split


@dataclass(frozen=True)
class TaskSpec:
    """Everything a task id determines."""

    task_id: str
    stages: int
    acts: int
    distractors: tuple[str, ...]
    needed: tuple[str, ...]
    goal: str

    @property
    def instruction(self) -> str:
        where = "at the workbench" if self.acts > 1 else "in the workshop"
        if not self.needed:
            return f"Craft a {self.goal} {where}."
        return f"Craft a {self.goal}: collect {', '.join(self.needed)} in that order, then craft it {where}."

    @property
    def split(self) -> str:
        """'test' for one task content in ``_TEST_EVERY``, else 'train' (disjoint by content, not only by id)."""
        key = f"{self.stages}|{self.acts}|{','.join(self.needed)}|{','.join(sorted(self.distractors))}|{self.goal}"
        return "test" if stable_hash(key) % _TEST_EVERY == 0 else "train"


def clamp_distractors(stages: int, acts: int, distractors: int) -> int:
    """Largest distractor count <= ``distractors`` that keeps the admissible list within ``MAX_ADMISSIBLE``."""
    needed = stages - 1
    # acts 1: a take per present item + craft; else: go to every other location (needed + distractors +
    # workbench) + open/close + take.
    limit = MAX_ADMISSIBLE - 1 - needed if acts == 1 else MAX_ADMISSIBLE - stages - (1 if acts == 3 else 0)
    return max(0, min(distractors, 3, limit, len(ITEMS) - needed))


def parse_task_id(task_id: str) -> TaskSpec | None:
    """The task behind ``task_id`` (None if it is not a synthetic task id); generation is seeded by the id."""
    m = _TASK_ID.match(task_id) if isinstance(task_id, str) else None
    if m is None:
        return None
    stages, acts, dist, seed = (int(g) for g in m.groups())
    if not (1 <= stages <= 6 and 1 <= acts <= 3):
        return None
    dist = clamp_distractors(stages, acts, dist)
    canonical = f"stages{stages}-acts{acts}-dist{dist}-seed{seed}"
    rng = random.Random(canonical)  # str seeds are hashed with SHA-512: same task in every process
    picked = rng.sample(ITEMS, stages - 1 + dist)
    goal = rng.choice(GOALS)
    return TaskSpec(canonical, stages, acts, tuple(picked[stages - 1 :]), tuple(picked[: stages - 1]), goal)


class SyntheticHierEnv:
    """Synthetic staged crafting world (see module docstring); implements ``envs.base.TextEnv``."""

    name = "synthetic"
    SUCCESS_REWARD = 1.0

    def __init__(
        self,
        *,
        max_steps: int = 30,
        stages: int | tuple[int, ...] = (1, 2, 3, 4, 5, 6),
        actions_per_stage: int = 2,
        distractors: int = 1,
        split: str = "train",
        success_reward: float = SUCCESS_REWARD,
        train_tasks_per_stage: int = 200,
        test_tasks_per_stage: int = 50,
        seed: int | None = None,
        step_latency_s: float = 0.0,
        latency_sigma: float = 0.0,
    ) -> None:
        """``step_latency_s`` > 0: every step sleeps a log-normal time with this median and log-scale
        ``latency_sigma`` (sigma 1: 1 step in 20 takes > 5x the median), standing in for envs whose steps are slow and
        long-tailed (ALFWorld, ScienceWorld, a web browser) when timing a rollout loop (``bench/bench_pipeline.py``)."""
        if step_latency_s < 0 or latency_sigma < 0:
            raise ValueError(
                f"step_latency_s and latency_sigma must be >= 0, got {step_latency_s}, {latency_sigma}"
            )
        self.step_latency_s, self.latency_sigma = float(step_latency_s), float(latency_sigma)
        self._latency_rng = random.Random(seed)
        self.max_steps = int(max_steps)
        self.stages = (stages,) if isinstance(stages, int) else tuple(stages)
        self.actions_per_stage = int(actions_per_stage)
        self.distractors = int(distractors)
        self.split = split
        self.success_reward = float(success_reward)
        self._per_split = {"train": train_tasks_per_stage, "test": test_tasks_per_stage}
        self._rng = random.Random(seed)
        self._ids_cache: dict[str, list[str]] = {}
        self._spec: TaskSpec | None = None

    # ------------------------------------------------------------------ tasks
    def task_ids(self, split: str | None = None) -> list[str]:
        """Task ids of ``split`` (default: the env's split) for the configured stage counts and knobs."""
        split = split or self.split
        if split not in self._per_split:
            raise ValueError(f"unknown split {split!r}; use 'train' or 'test'")
        if split not in self._ids_cache:
            ids: list[str] = []
            for n in self.stages:
                seen: set[str] = set()
                for seed in range(20 * self._per_split[split] + 100):
                    spec = parse_task_id(
                        f"stages{n}-acts{self.actions_per_stage}-dist{self.distractors}-seed{seed}"
                    )
                    if spec is None:
                        break
                    key = f"{spec.needed}{sorted(spec.distractors)}{spec.goal}"
                    if key in seen or spec.split != split:
                        continue
                    seen.add(key)
                    ids.append(spec.task_id)
                    if len(seen) == self._per_split[split]:
                        break
            self._ids_cache[split] = ids
        return list(self._ids_cache[split])

    # ------------------------------------------------------------------ episode
    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if task_id is None:
            task_id = choose_task(self.task_ids(), seed, self._rng)
        spec = parse_task_id(task_id)
        if spec is None:
            raise ValueError(
                f"not a synthetic task id: {task_id!r} (want stages{{n}}-acts{{a}}-dist{{d}}-seed{{s}})"
            )
        self._spec = spec
        self._location = START if spec.acts > 1 else "workshop"
        self._opened: set[str] = set()
        self._carried: list[str] = []
        self._crafted = False
        self._steps = 0
        obs = f"{spec.instruction} {self._describe()}"
        return obs, self._info(valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._require_spec()
        if self._crafted:  # stepping a finished episode changes nothing and pays nothing
            return "The task is already complete.", 0.0, True, False, self._info(valid=False)
        self._steps += 1
        if self.step_latency_s:
            time.sleep(self.step_latency_s * math.exp(self.latency_sigma * self._latency_rng.gauss(0.0, 1.0)))
        command = clean_action(action)
        admissible = self._admissible()
        if command not in admissible:
            feedback, valid = INVALID_OBS, False
        else:
            feedback, valid = self._apply(command), True
        won = self._crafted
        reward = self.success_reward if won else 0.0
        truncated = not won and self._steps >= self.max_steps
        obs = f"{feedback} {self._describe()}" if not won else feedback
        return obs, reward, won, truncated, self._info(valid=valid)

    def close(self) -> None:
        self._spec = None

    # ------------------------------------------------------------------ experts
    def expert_plan(self) -> list[tuple[str, list[str]]]:
        """Remaining plan from the current state: one (subgoal, actions) pair per unfinished stage."""
        spec = self._require_spec()
        plan: list[tuple[str, list[str]]] = []
        location, opened = self._location, set(self._opened)
        for item in spec.needed:
            if item in self._carried:
                continue
            home, actions = HOMES[item], []
            if spec.acts >= 2 and location != home:
                actions.append(f"go to {home}")
                location = home
            if spec.acts == 3 and home not in opened:
                actions.append(f"open {home}")
                opened.add(home)
            actions.append(f"take {item}")
            plan.append((f"get the {item}", actions))
        if not self._crafted:
            actions = [] if spec.acts == 1 or location == WORKBENCH else [f"go to {WORKBENCH}"]
            plan.append((f"craft the {spec.goal}", [*actions, f"craft {spec.goal}"]))
        return plan

    def expert_action(self) -> str | None:
        plan = self.expert_plan() if self._spec is not None else []
        return plan[0][1][0] if plan else None

    # ------------------------------------------------------------------ internals
    def _require_spec(self) -> TaskSpec:
        if self._spec is None:
            raise RuntimeError("call reset() before step()")
        return self._spec

    def _locations(self) -> list[str]:
        spec = self._require_spec()
        return sorted({HOMES[i] for i in (*spec.needed, *spec.distractors)} | {WORKBENCH})

    def _present(self) -> list[str]:
        """Items the agent can see (and take) where it stands."""
        spec = self._require_spec()
        here = [i for i in (*spec.needed, *spec.distractors) if i not in self._carried]
        if spec.acts == 1:
            return sorted(here)
        if spec.acts == 3 and self._location not in self._opened:
            return []
        return sorted(i for i in here if HOMES[i] == self._location)

    def _admissible(self) -> list[str]:
        spec = self._require_spec()
        actions = [f"take {i}" for i in self._present()]
        if spec.acts > 1:
            actions += [f"go to {loc}" for loc in self._locations() if loc != self._location]
        if spec.acts == 3 and self._location in HOMES.values():
            actions.append(f"{'close' if self._location in self._opened else 'open'} {self._location}")
        if spec.acts == 1 or self._location == WORKBENCH:
            actions.append(f"craft {spec.goal}")
        return sorted(actions)

    def _apply(self, command: str) -> str:
        spec = self._require_spec()
        verb, _, obj = command.partition(" ")
        if verb == "go":
            self._location = obj.removeprefix("to ")
            return f"You go to the {self._location}."
        if verb == "open":
            self._opened.add(obj)
            return f"You open the {obj}."
        if verb == "close":
            self._opened.discard(obj)
            return f"You close the {obj}."
        if verb == "take":
            earlier = spec.needed[: spec.needed.index(obj)] if obj in spec.needed else ()
            missing = [i for i in earlier if i not in self._carried]
            if missing:
                return f"You need the {missing[0]} first."
            self._carried.append(obj)
            return f"You take the {obj}."
        lacking = [i for i in spec.needed if i not in self._carried]
        if lacking:
            return f"You lack the {lacking[0]}."
        self._crafted = True
        return f"You craft the {spec.goal}. Task complete!"

    def _describe(self) -> str:
        spec = self._require_spec()
        carried = ", ".join(self._carried) if self._carried else "nothing"
        if spec.acts == 1:
            where = "You are in the workshop."
        elif self._location == START:
            where = "You are in the hallway."
        elif spec.acts == 3 and self._location in HOMES.values() and self._location not in self._opened:
            where = f"You are at the {self._location}. It is closed."
        else:
            where = f"You are at the {self._location}."
        present = self._present()
        seen = f" You see: {', '.join(present)}." if present else ""
        return f"{where}{seen} You carry: {carried}."

    def _subgoals_done(self) -> int:
        spec = self._require_spec()
        return sum(i in self._carried for i in spec.needed) + int(self._crafted)

    def _info(self, *, valid: bool) -> dict[str, Any]:
        spec = self._require_spec()
        done = self._subgoals_done()
        return make_info(
            task=spec.instruction,
            task_id=spec.task_id,
            task_type=f"stages{spec.stages}",
            split=spec.split,
            admissible_actions=None if self._crafted else self._admissible(),
            won=self._crafted,
            score=done / spec.stages,
            valid_action=valid,
            subgoals_done=done,
            num_subgoals=spec.stages,
        )
