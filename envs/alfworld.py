"""ALFWorld adapter (Shridhar et al., 2021): alfworld 0.4.2's TextWorld-PDDL engine behind ``envs.base.TextEnv``.

Used by STEP-HRL, HiPER (App. B: 50 steps), HIPIF, HISR and Multi2.  Each game is a ``game.tw-pddl`` file loaded
with textworld's ``PddlEnv`` and alfworld's own wrappers (``AlfredDemangler`` gives objects their "apple 1" names,
``AlfredInfos`` the game file), exactly the stack ``AlfredTWEnv.init_env`` builds, minus the gym batching.

* Splits: the folders under ``json_2.1.1`` filtered as ``AlfredTWEnv.collect_game_files`` does (no movable /
  sliced trials, one of the 6 task types, game file present and marked solvable): ``valid_seen`` = 140 games
  (``eval_in_distribution``), ``valid_unseen`` = 134 (``eval_out_of_distribution``), ``valid_train`` = 200 in the
  shared copy, ``train`` = 3,553 after ``alfworld-download``.
* Reward: ``success_reward`` (10 in HiPER / HIPIF / GiGPO-style training; STEP-HRL App. A uses 1) on the step that
  wins, else 0.  ``info["score"]`` is the game's own 0/1 score.
* Expert: alfworld's hand-coded expert (``expert="handcoded"``, driven as alfworld's ``AlfredExpert`` wrapper
  drives it) or the PDDL planner (``expert="planner"``, 0.1-19 s per step: evaluation only); off by default so
  RL rollouts never pay for it.  ``pddl_plan()`` returns the ALFRED high-level plan (``traj_data.json``
  ``plan.high_pddl``) as subgoal steps.
* Demonstrations: ``expert_plan()`` plays the current game with the hand-coded expert on a second engine (its
  random tie-breaks seeded by the task id) and cuts the winning commands into subtasks by ``pddl_plan()``
  (``envs.alfworld_plan``); games the expert gives up on, does not win within ``max_steps`` or whose commands do
  not align give [] and name the reason in ``expert_failure``.
* Text: the shared json_2.1.1 game files carry the grammar of alfworld <= 0.3 ("put X in/on Y", "You arrive at
  loc 5."), which is what the papers' prompts use; files from ``alfworld-download`` (json_2.1.2) say "move X to Y".
  The adapter passes either through unchanged.
* Memory: RSS grows with every game loaded in one process (docs/platform.md: ~7 MB per game; ~2 MB measured over 12
  games here), so long-lived workers should be recycled (the env pool does).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.alfworld_plan import Alignment, PlanStep, align, plan_subgoal_text, subtasks
from envs.data import ALFWORLD_JSON_DIR, alfworld_data_dir

INVALID_OBSERVATION = "Nothing happens."  # the engine's own answer to a command it cannot match
ENDED_OBSERVATION = "The episode has ended. Call reset() to start a new one."

# traj_data.json task_type -> the six task-type names used in the papers' per-type tables.
TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick_and_place",
    "pick_two_obj_and_place": "pick_two_obj",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "pick_clean_then_place_in_recep": "pick_clean_then_place",
    "pick_heat_then_place_in_recep": "pick_heat_then_place",
    "pick_cool_then_place_in_recep": "pick_cool_then_place",
}
SPLIT_ALIASES: dict[str, str] = {
    "eval_in_distribution": "valid_seen",
    "eval_out_of_distribution": "valid_unseen",
}
EXPERTS = ("handcoded", "planner")


@dataclass(frozen=True)
class ExpertDemo:
    """The hand-coded expert's play of one game: its commands, how it ended, and their alignment to the plan.

    ``outcome``: ``aligned`` (won, every command assigned: a demonstration), ``unaligned`` (won, with commands after
    the last one that completes a plan step: plan and expert disagree), ``gave_up`` (the expert stopped: its subgoals ran out or it timed out), ``truncated`` (not
    won within ``max_steps``)."""

    task_id: str
    task_type: str
    outcome: str
    actions: tuple[str, ...]
    plan: tuple[PlanStep, ...]
    alignment: Alignment

    @property
    def subtasks(self) -> list[tuple[str, list[str]]]:
        return subtasks(self.alignment) if self.outcome == "aligned" else []


@dataclass(frozen=True)
class GameRecord:
    task_id: str  # "<split>/<task folder>/<trial>", relative to json_2.1.1
    game_file: Path
    task_type: str  # one of TASK_TYPES' values


def list_games(data_dir: Path, split: str) -> list[GameRecord]:
    """The games of ``split`` that ALFWorld's loader keeps (same four filters as ``collect_game_files``), sorted."""
    split = SPLIT_ALIASES.get(split, split)
    root = data_dir / ALFWORLD_JSON_DIR / split
    if not root.is_dir():
        present = sorted(p.name for p in (data_dir / ALFWORLD_JSON_DIR).iterdir() if p.is_dir())
        raise ValueError(
            f"no ALFWorld split {split!r} under {data_dir / ALFWORLD_JSON_DIR} (present: {present})"
        )
    games = []
    for traj_file in sorted(root.glob("*/*/traj_data.json")):
        trial = traj_file.parent
        game_file = trial / "game.tw-pddl"
        if "movable" in str(trial) or "Sliced" in str(trial) or not game_file.is_file():
            continue
        task_type = json.loads(traj_file.read_text())["task_type"]
        if task_type not in TASK_TYPES or not json.loads(game_file.read_text()).get("solvable", False):
            continue
        task_id = str(trial.relative_to(data_dir / ALFWORLD_JSON_DIR).as_posix())
        games.append(GameRecord(task_id, game_file, TASK_TYPES[task_type]))
    return games


class AlfWorldEnv:
    """One TextWorld-PDDL engine playing ALFWorld games one at a time (``reset`` loads the next game file)."""

    name = "alfworld"
    SUCCESS_REWARD = 10.0
    """R by default (HiPER, HIPIF, GiGPO); ``success_reward`` sets another."""

    def __init__(
        self,
        *,
        split: str = "valid_unseen",
        max_steps: int = 50,
        success_reward: float = SUCCESS_REWARD,
        data_dir: str | Path | None = None,
        tarball: str | Path | None = None,
        expert: str | None = None,
        task_types: list[str] | None = None,
        seed: int | None = None,
    ) -> None:
        """``data_dir`` / ``tarball`` are resolved by ``envs.data.alfworld_data_dir``; ``task_types`` (short names)
        restricts the games, like ALFWorld's ``env.task_types`` config."""
        if expert is not None and expert not in EXPERTS:
            raise ValueError(f"expert must be one of {EXPERTS} or None, got {expert!r}")
        unknown = sorted(set(task_types or []) - set(TASK_TYPES.values()))
        if unknown:
            raise ValueError(f"unknown task types {unknown}; known: {sorted(TASK_TYPES.values())}")
        self.split = SPLIT_ALIASES.get(split, split)
        self.max_steps = max_steps
        self.success_reward = success_reward
        self.expert = expert
        self.task_types = set(task_types) if task_types else set(TASK_TYPES.values())
        self.data_dir = alfworld_data_dir(data_dir, tarball=tarball)
        self._rng = random.Random(seed)
        self._games: dict[str, list[GameRecord]] = {}
        self._by_id: dict[str, GameRecord] = {}
        self._engine = self._build_engine()
        self._record: GameRecord | None = None
        self._traj: dict[str, Any] = {}
        self._task = ""
        self._state: Any = None
        self._admissible: list[str] = []
        self._won = False
        self._steps = 0
        self._done = True
        self._end_flags = (False, True)  # (terminated, truncated) repeated by step() once an episode is over
        self._handcoded: Any = None
        self._expert_next: str | None = None
        self._demo_env: AlfWorldEnv | None = None  # plays the expert for expert_plan(), built on first use
        self.expert_failure = ""
        """Why the last ``expert_plan()`` gave [] (an ``ExpertDemo.outcome``), "" when it gave a plan."""

    # -- TextEnv -------------------------------------------------------------------------------------------------
    def task_ids(self, split: str | None = None) -> list[str]:
        return [g.task_id for g in self._split_games(split or self.split)]

    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Load ``task_id`` (or a game of ``self.split`` drawn with ``seed``) and return its intro text."""
        if task_id is None:
            rng = random.Random(seed) if seed is not None else self._rng
            record = rng.choice(self._split_games(self.split))
        else:
            record = self._lookup(task_id)
        self._record = record
        self._traj = json.loads((record.game_file.parent / "traj_data.json").read_text())
        self._engine.load(str(record.game_file))
        self._state = self._engine.reset()
        observation = str(self._state["feedback"])
        self._task = (
            observation.split("Your task is to: ", 1)[-1].strip()
            if "Your task is to: " in observation
            else ""
        )
        self._admissible = list(self._state["admissible_commands"])
        self._won, self._steps, self._done = bool(self._state["won"]), 0, False
        self._start_expert(observation)
        return observation, self._info(valid_action=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One command.  Anything that is not exactly an admissible command (after stripping) gets the engine's
        "Nothing happens." and ``valid_action=False``; it still costs a step, as in ALFWorld."""
        if self._done:
            terminated, truncated = self._end_flags
            return ENDED_OBSERVATION, 0.0, terminated, truncated, self._info(valid_action=False)
        self._steps += 1
        command = action.strip() if isinstance(action, str) else ""
        valid = command in self._admissible
        # Unmatched text is replaced by "" (the engine answers both with "Nothing happens."), so odd strings never
        # reach the grammar; the step still goes through the engine so the expert sees it, as in ALFWorld.
        self._state, _, done = self._engine.step(command if valid else "")
        observation = str(self._state["feedback"])
        self._admissible = list(self._state["admissible_commands"])
        newly_won = bool(self._state["won"]) and not self._won
        self._won = self._won or bool(self._state["won"])
        reward = self.success_reward if newly_won else 0.0
        terminated = bool(done) or self._won
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._end_flags = (terminated, truncated)
        self._advance_expert(command)
        return observation, reward, terminated, truncated, self._info(valid_action=valid)

    def expert_action(self) -> str | None:
        """The configured expert's next command (None without ``expert=``, after the episode, or when the
        hand-coded expert gives up)."""
        return None if self._done else self._expert_next

    def pddl_plan(self) -> list[PlanStep]:
        """The current game's ALFRED high-level plan (``plan.high_pddl`` without the final NoOp), each subgoal
        paired with its human description (``turk_annotations.anns[0].high_descs``, aligned by index)."""
        if not self._traj:
            return []
        anns = self._traj.get("turk_annotations", {}).get("anns", [])
        descriptions = anns[0].get("high_descs", []) if anns else []
        plan = []
        for step in self._traj.get("plan", {}).get("high_pddl", []):
            action = step["discrete_action"]["action"]
            if action == "NoOp":
                continue
            args = [str(a) for a in step["discrete_action"]["args"]]
            index = int(step.get("high_idx", len(plan)))
            description = descriptions[index] if index < len(descriptions) else ""
            plan.append(PlanStep(plan_subgoal_text(action, args), action, tuple(args), description))
        return plan

    def expert_plan(self) -> list[tuple[str, list[str]]]:
        """The current game's demonstration as (subtask, commands) pairs for ``actors.demos``; [] when the expert's
        play is not a usable demonstration (``expert_failure`` says why). Played on a second engine, so this env's
        own state is left alone."""
        if self._record is None:
            raise RuntimeError("expert_plan() needs a game: call reset() first")
        if self._demo_env is None:
            self._demo_env = AlfWorldEnv(
                split=self.split,
                data_dir=self.data_dir,
                expert="handcoded",
                task_types=sorted(self.task_types),
            )
        self._demo_env.max_steps = self.max_steps
        demo = self._demo_env.play_expert(self._record.task_id)
        self.expert_failure = "" if demo.outcome == "aligned" else demo.outcome
        return demo.subtasks

    def play_expert(self, task_id: str) -> ExpertDemo:
        """Reset to ``task_id``, let the hand-coded expert play at most ``max_steps`` commands, and align them to
        ``pddl_plan()`` (needs ``expert="handcoded"``). The expert breaks ties with the global ``random``: it is
        seeded by the task id for the play and restored after, so a game always gives the same demonstration."""
        if self.expert != "handcoded":
            raise ValueError(f"play_expert needs expert='handcoded', this env has expert={self.expert!r}")
        state = random.getstate()
        random.seed(f"alfworld-expert:{task_id}")
        try:
            _, info = self.reset(task_id=task_id)
            actions: list[str] = []
            ended = False
            while not ended and (action := self.expert_action()) is not None:
                _, _, terminated, truncated, info = self.step(action)
                actions.append(action)
                ended = terminated or truncated
        finally:
            random.setstate(state)
        plan = self.pddl_plan()
        alignment = align(plan, actions)
        if info["won"]:
            outcome = "aligned" if alignment.complete else "unaligned"
        else:
            outcome = "truncated" if ended else "gave_up"
        return ExpertDemo(task_id, info["task_type"], outcome, tuple(actions), tuple(plan), alignment)

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        demo_env, self._demo_env = self._demo_env, None
        if demo_env is not None:
            demo_env.close()

    # -- internals -----------------------------------------------------------------------------------------------
    def _build_engine(self) -> Any:
        """textworld's PddlEnv wrapped as ``AlfredTWEnv.init_env`` does (no shuffled names: evaluation setting)."""
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(
            won=True,
            admissible_commands=True,
            facts=self.expert == "handcoded",  # the hand-coded expert reads the game's facts
            policy_commands=self.expert == "planner",
            extras=["gamefile"],
        )
        engine = PddlEnv(infos)
        for wrapper in (AlfredDemangler(shuffle=False), AlfredInfos):
            engine = wrapper(engine)
        return engine

    def _split_games(self, split: str) -> list[GameRecord]:
        split = SPLIT_ALIASES.get(split, split)
        if split not in self._games:
            games = [g for g in list_games(self.data_dir, split) if g.task_type in self.task_types]
            self._games[split] = games
            self._by_id.update((g.task_id, g) for g in games)
        return self._games[split]

    def _lookup(self, task_id: str) -> GameRecord:
        split = task_id.split("/", 1)[0]
        if task_id not in self._by_id and (self.data_dir / ALFWORLD_JSON_DIR / split).is_dir():
            self._split_games(split)
        if task_id not in self._by_id:
            raise ValueError(
                f"unknown ALFWorld task id {task_id!r} (expected '<split>/<task>/<trial>' of a kept game)"
            )
        return self._by_id[task_id]

    def _start_expert(self, observation: str) -> None:
        """Mirror of alfworld's ``AlfredExpert`` wrapper at reset (its first suggestion is always ``look``)."""
        self._handcoded, self._expert_next = None, None
        if self.expert == "planner":
            self._expert_next = _first(self._state.get("policy_commands"))
        elif self.expert == "handcoded":
            from alfworld.agents.expert import HandCodedTWAgent

            self._handcoded = HandCodedTWAgent(max_steps=200)
            self._handcoded.reset(str(self._record.game_file))
            self._handcoded.observe(observation)
            self._expert_next = "look"

    def _advance_expert(self, command: str) -> None:
        """Mirror of ``AlfredExpert._gather_infos`` after a step, except that the expert's failures (timeout,
        exhausted subgoals) make it return None instead of raising out of ``step``."""
        if self.expert == "planner":
            self._expert_next = _first(self._state.get("policy_commands"))
        elif self._handcoded is not None:
            # alfworld 0.4.2's expert speaks the json_2.1.2 grammar ("move X to Y"); json_2.1.1 game files say
            # "put X in/on Y".  Show it translated commands and map its answer back (identity on 2.1.2 files).
            as_expert = {_put_as_move(c): c for c in self._admissible}
            view = {
                "feedback": self._state["feedback"],
                "facts": self._state["facts"],
                "admissible_commands": list(as_expert),
            }
            try:
                suggestion = as_expert.get(self._handcoded.act(view, 0, self._won, command))
            except Exception:  # HandCodedAgentTimeout / HandCodedAgentFailed / heuristics hitting odd states
                self._handcoded, self._expert_next = None, None
                return
            self._expert_next = suggestion or "look"

    def _info(self, *, valid_action: bool) -> dict[str, Any]:
        record = self._record
        return {
            "task": self._task,
            "admissible_actions": list(self._admissible),
            "won": self._won,
            "score": 1.0 if self._won else 0.0,
            "valid_action": valid_action,
            "task_id": record.task_id if record else "",
            "task_type": record.task_type if record else "",
            "split": record.task_id.split("/", 1)[0] if record else self.split,
            "steps": self._steps,
            "game_file": os.fspath(record.game_file) if record else "",
        }


def _put_as_move(command: str) -> str:
    """``put mug 1 in/on desk 1`` -> ``move mug 1 to desk 1`` (other commands unchanged)."""
    if command.startswith("put ") and " in/on " in command:
        obj, recep = command[len("put ") :].split(" in/on ", 1)
        return f"move {obj} to {recep}"
    return command


def _first(commands: Any) -> str | None:
    return str(commands[0]) if commands else None
