"""VirtualHome in text (HIPIF = 002_*, App. A and Fig. 9/11; HISR = 003_*) behind ``envs.base.TextEnv``.

Simulator and tasks come from ``virtualhome-eval==0.1.1``: its pure-Python evolving-graph executor (the Unity-free
part of VirtualHome) and the 342 scene-1 tasks of its action-sequencing set, each with an initial scene graph, a
gold program and symbolic goal conditions (node states, edges, required actions).  ``virtualhome==2.3.0`` itself
crashes on import, hence the eval package's copy.

Text interface, in HIPIF's wording (Fig. 9 action list, Fig. 11 observations):

* actions ``walk to X``, ``find X``, ``grab X``, ``open X``, ``close X``, ``put X on Y``, ``put X in Y``,
  ``switch on/off X``, ``drink X``, ``sit on X``, ``lie on X``, ``look at X``, ``stand up``, ``watch X``,
  ``wipe X``, ``type on X``, ``take off X``, ``wash X``, ``cut X``, ``eat X``, ``sleep``, ``wake up``,
  ``plug in/out X``, ``pour X into Y``, ``turn to X`` -- plus the remaining simulator verbs the gold programs use
  (``rinse``, ``scrub``, ``touch``, ``read``, ``push``, ``pull``, ``point at``, ``put on`` clothes, ``put back``,
  ``run to``, ``drop``, ``squeeze``, ...).  Objects are class names (``kitchen_counter``; spaces also accepted).
  A name picks the instance held > near the agent > used by the task > in the agent's room > lowest id; an
  optional ``(id)`` suffix picks an instance explicitly (the expert adds it only where a name is ambiguous).
* observations: the rooms and current room at reset; "You arrive in the R. You see ..." on entering a room;
  otherwise the states of the objects near the agent, their ON/INSIDE relations, and what the agent holds.

Success: all goal conditions hold (reward 1, terminated).  ``score`` = fraction of goal conditions satisfied.
``valid_action`` is False when the text was not understood *or* the simulator refused it (state unchanged, as
ALFWorld's "Nothing happens."); ``admissible_actions`` is None: HIPIF gives templates, not a grounded list.
Expert: the task's gold program, translated to these action strings (``expert_plan`` groups it into subgoals).
Default ``max_steps=50`` (HIPIF App. A).
"""

from __future__ import annotations

import functools
import json
import random
from importlib import resources
from pathlib import Path
from typing import Any

from envs._common import choose_task, clean_action, make_info, stable_hash
from envs.virtualhome_commands import NAV, TEXT_OF, TWO_TEXT, parse_command, parse_gold

_HIDDEN = {"Walls", "Floor", "Floors", "Ceiling", "Rooms", "Characters"}
_MAX_NEAR = 12  # objects listed in a near-agent observation
_TEST_EVERY = 5
INVALID_OBS = "Nothing happens."


def _package_root() -> Path:
    return Path(str(resources.files("virtualhome_eval")))


@functools.lru_cache(maxsize=16)
def _load_graph(graphs_dir: str, task_id: str) -> Any:
    """Parsed initial scene graph (the executor never mutates it, so episodes can share it)."""
    from virtualhome_eval.simulation.evolving_graph.environment import EnvironmentGraph

    with open(Path(graphs_dir) / f"file{task_id}.json") as f:
        return EnvironmentGraph(json.load(f)["init_graph"])


class VirtualHomeEnv:
    """VirtualHome text adapter (see module docstring)."""

    name = "virtualhome"
    SUCCESS_REWARD = 1.0

    def __init__(
        self,
        *,
        max_steps: int = 50,
        split: str = "train",
        data_dir: str | None = None,
        seed: int | None = None,
    ) -> None:
        from virtualhome_eval.simulation.evolving_graph import utils as vh_utils
        from virtualhome_eval.simulation.evolving_graph.environment import EnvironmentState, Relation
        from virtualhome_eval.simulation.evolving_graph.execution import ScriptExecutor
        from virtualhome_eval.simulation.evolving_graph.scripts import Script, parse_script_line

        self._State, self._Relation, self._Executor = EnvironmentState, Relation, ScriptExecutor
        self._Script, self._parse_line = Script, parse_script_line
        root = Path(data_dir) if data_dir else _package_root()
        programs = root / "dataset" / "programs_processed_precond_nograb_morepreconds"
        sub = Path("TrimmedTestScene1_graph") / "results_intentions_march-13-18"
        self._graphs_dir = str(programs / "init_and_final_graphs" / sub)
        self._programs_dir = programs / "executable_programs" / sub
        res = root / "resources" / "virtualhome"
        self._category: dict[str, str] = json.loads((res / "id2task.json").read_text())
        self._goals = json.loads((res / "task_state_LTL_formula_accurate.json").read_text())["scene_1"]
        self._name_equivalence = vh_utils.load_name_equivalence()
        self.max_steps = int(max_steps)
        self.split = split
        self._rng = random.Random(seed)
        self._task_id = ""
        self._state: Any = None

    # ------------------------------------------------------------------ tasks
    @staticmethod
    def _split_of(task_id: str) -> str:
        return "test" if stable_hash(task_id) % _TEST_EVERY == 0 else "train"

    def task_ids(self, split: str | None = None) -> list[str]:
        """Program ids (``"27_2"``) of ``split`` (default: the env's split), sorted."""
        split = split or self.split
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}; use 'train' or 'test'")
        return sorted((t for t in self._category if self._split_of(t) == split), key=lambda t: (len(t), t))

    # ------------------------------------------------------------------ episode
    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if task_id is None:
            task_id = choose_task(self.task_ids(), seed, self._rng)
        if task_id not in self._category:
            raise ValueError(f"unknown VirtualHome task id {task_id!r}")
        graph = _load_graph(self._graphs_dir, task_id)
        self._task_id = task_id
        self._state = self._State(graph, self._name_equivalence, instance_selection=True)
        self._executor = self._Executor(graph, self._name_equivalence)
        self._char = next(n for n in graph.get_nodes() if n.class_name == "character")
        self._rooms = sorted(
            (n for n in graph.get_nodes() if n.category == "Rooms"), key=lambda n: n.class_name
        )
        lines = (self._programs_dir / f"file{task_id}.txt").read_text().splitlines()
        self._task_text = f"{lines[0].strip()}. Instructions: {lines[1].strip()}"
        self._gold = [g for g in (parse_gold(line) for line in lines) if g is not None]
        self._gold_pos = 0
        goal = self._goals[self._category[task_id]][task_id]["vh_goal"]
        self._goal_nodes = [g for g in goal["goal"] if "state" in g]
        self._goal_edges = [g for g in goal["goal"] if "relation_type" in g]
        self._goal_actions: list[str] = list(goal["actions"])
        self._relevant = {i for _, args in self._gold for _, i in args}
        self._relevant |= {g["id"] for g in self._goal_nodes}
        self._relevant |= {g[k] for g in self._goal_edges for k in ("from_id", "to_id")}
        self._done_actions: list[str] = []
        self._steps, self._won = 0, False
        rooms = ", ".join(r.class_name for r in self._rooms)
        obs = f"Available rooms in the house are: {rooms}. You are currently in the {self._room_name()}."
        return obs, self._info(valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if self._won:
            return "The task is already complete.", 0.0, True, False, self._info(valid=False)
        self._steps += 1
        command = clean_action(action)
        parsed = parse_command(command)
        if parsed is None:
            obs, valid = f"{INVALID_OBS} Unknown action.", False
        else:
            obs, valid = self._execute(command, *parsed)
        self._won = self._satisfied() == self._num_conditions()
        truncated = not self._won and self._steps >= self.max_steps
        return obs, 1.0 if self._won else 0.0, self._won, truncated, self._info(valid=valid)

    def close(self) -> None:
        self._state = None

    # ------------------------------------------------------------------ experts
    def expert_action(self) -> str | None:
        """The next gold-program action (exact while the agent follows the program; None when it is used up)."""
        if self._state is None or self._won or self._gold_pos >= len(self._gold):
            return None
        return self._gold_text(*self._gold[self._gold_pos])

    def expert_plan(self) -> list[tuple[str, list[str]]]:
        """Rest of the gold program as (subgoal, actions): a new subgoal starts at each move to a new target.

        The program is replayed on a scratch copy of the state so that every action string is exactly what
        ``expert_action`` would say at that point (an ``(id)`` only where the bare name would pick another object).
        """
        if self._state is None or self._won:
            return []
        groups: list[list[tuple[str, str]]] = []  # per subgoal: (simulator action, text)
        target, saved = None, self._state
        try:
            for act, args in self._gold[self._gold_pos :]:
                if not groups or (act in NAV and args and args[0][1] != target):
                    target = args[0][1] if act in NAV and args else target
                    groups.append([])
                groups[-1].append((act, self._gold_text(act, args)))
                self._state = self._run_line(act, [i for _, i in args], [n for n, _ in args]) or self._state
        finally:
            self._state = saved
        out = []
        for group in groups:
            doing = [text for act, text in group if act not in NAV]
            out.append((" then ".join(doing) if doing else group[0][1], [text for _, text in group]))
        return out

    # ------------------------------------------------------------------ internals
    def _gold_text(self, act: str, args: list[tuple[str, int]]) -> str:
        names = []
        for name, node_id in args:
            picked = self._resolve(name, None)
            names.append(name if picked is not None and picked.id == node_id else f"{name} ({node_id})")
        if act in TWO_TEXT:
            return TWO_TEXT[act].format(*names)
        verb = TEXT_OF.get(act, act.lower())
        return f"{verb} {names[0]}" if names else verb

    def _resolve(self, name: str, node_id: int | None) -> Any:
        """The scene node a name (and optional id) refers to; priority in the module docstring."""
        candidates = self._state.get_nodes_by_attr("class_name", name)
        if node_id is not None:
            return next((n for n in candidates if n.id == node_id), None)
        if not candidates:
            return None
        held = self._ids_from(self._char.id, "HOLDS_RH") | self._ids_from(self._char.id, "HOLDS_LH")
        near = self._ids_from(self._char.id, "CLOSE")
        room = self._room()
        in_room = {n.id for n in candidates if room is not None and self._has_edge(n.id, "INSIDE", room.id)}

        def rank(n: Any) -> tuple:
            return (n.id not in held, n.id not in near, n.id not in self._relevant, n.id not in in_room, n.id)

        return min(candidates, key=rank)

    def _execute(self, command: str, act: str, objects: list[tuple[str, int | None]]) -> tuple[str, bool]:
        nodes = []
        for name, node_id in objects:
            node = self._resolve(name, node_id)
            if node is None:
                return f"{INVALID_OBS} There is no {name} here.", False
            nodes.append(node)
        new_state = self._run_line(act, [n.id for n in nodes], [n.class_name for n in nodes])
        if new_state is None:
            return f"{INVALID_OBS} You cannot {command} now.", False
        self._state = new_state
        self._done_actions.append(act)
        if self._gold_pos < len(self._gold):
            gold_act, gold_args = self._gold[self._gold_pos]
            if gold_act == act and [i for _, i in gold_args] == [n.id for n in nodes]:
                self._gold_pos += 1
        verb = TEXT_OF.get(act, act.lower())
        if act in NAV and nodes and nodes[0].category == "Rooms":
            return f"You successfully {verb} {nodes[0].class_name}. {self._describe_room()}", True
        return f"You successfully {command}. {self._describe_near(nodes)}", True

    def _run_line(self, act: str, ids: list[int], names: list[str]) -> Any:
        """The simulator's next state after one script line, or None if it refuses (or raises)."""
        line = f"[{act}]" + "".join(f" <{name}> ({i})" for name, i in zip(names, ids, strict=True))
        try:
            ok, new_state = self._executor.execute_one_step(
                self._Script([self._parse_line(line, 0)]), self._state
            )
        except Exception:  # it raises on some impossible combinations; the contract says never raise
            return None
        return new_state if ok else None

    def _ids_from(self, from_id: int, relation: str) -> set[int]:
        return set(self._state.get_node_ids_from(from_id, self._Relation[relation]))

    def _has_edge(self, from_id: int, relation: str, to_id: int) -> bool:
        return self._state.has_edge(
            self._state.get_node(from_id), self._Relation[relation], self._state.get_node(to_id)
        )

    def _room(self) -> Any:
        return next((r for r in self._rooms if self._has_edge(self._char.id, "INSIDE", r.id)), None)

    def _room_name(self) -> str:
        room = self._room()
        return room.class_name if room is not None else "house"

    def _describe_room(self) -> str:
        room = self._room()
        if room is None:
            return ""
        names = sorted(
            {
                n.class_name
                for n in self._state.get_nodes()
                if n.category not in _HIDDEN and self._has_edge(n.id, "INSIDE", room.id)
            }
        )
        return f"You arrive in the {room.class_name}. You see {', '.join(names)}."

    def _describe_near(self, targets: list[Any]) -> str:
        near_ids = self._ids_from(self._char.id, "CLOSE")
        held_ids = self._ids_from(self._char.id, "HOLDS_RH") | self._ids_from(self._char.id, "HOLDS_LH")
        ordered = [n.id for n in targets] + sorted(near_ids - {n.id for n in targets}, key=lambda i: i)
        shown: list[int] = []
        for node_id in ordered:
            node = self._state.get_node(node_id)
            if node is not None and node.category not in _HIDDEN and node_id not in shown:
                shown.append(node_id)
        shown = shown[:_MAX_NEAR]
        parts = []
        for node_id in shown:
            node = self._state.get_node(node_id)
            states = sorted(s.name for s in node.states)
            parts.append(f"{node.class_name} is {' and '.join(states)}" if states else node.class_name)
        for a in shown:
            for b in shown:
                for rel in ("ON", "INSIDE"):
                    if a != b and self._has_edge(a, rel, b):
                        parts.append(
                            f"{self._state.get_node(a).class_name} {rel} {self._state.get_node(b).class_name}"
                        )
        held = sorted(self._state.get_node(i).class_name for i in held_ids)
        near = ", ".join(parts) + "." if parts else "Nothing is near you."
        return f"{near} {'You have ' + ', '.join(held) + '.' if held else 'Your hands are empty.'}"

    def _num_conditions(self) -> int:
        return len(self._goal_nodes) + len(self._goal_edges) + len(self._goal_actions)

    def _satisfied(self) -> int:
        """Goal conditions that hold: node states, edges, and required actions as an ordered subsequence."""
        count = 0
        for g in self._goal_nodes:
            node = self._state.get_node(g["id"])
            count += node is not None and g["state"] in {s.name for s in node.states}
        for g in self._goal_edges:
            count += self._has_edge(g["from_id"], g["relation_type"], g["to_id"])
        pos = 0
        for group in self._goal_actions:
            options = {o.strip().upper().replace(" ", "") for o in group.split("|")}
            hit = next(
                (k for k in range(pos, len(self._done_actions)) if self._done_actions[k] in options), None
            )
            if hit is not None:
                count, pos = count + 1, hit + 1
        return count

    def _info(self, *, valid: bool) -> dict[str, Any]:
        total = self._num_conditions()
        return make_info(
            task=self._task_text,
            task_id=self._task_id,
            task_type=self._category.get(self._task_id, ""),
            split=self._split_of(self._task_id),
            admissible_actions=None,
            won=self._won,
            score=self._satisfied() / total if total else 0.0,
            valid_action=valid,
        )
