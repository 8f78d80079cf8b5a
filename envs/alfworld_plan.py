"""ALFWorld expert demonstrations segmented by the game's ALFRED high-level plan (pure: no textworld, no alfworld).

ALFRED's ``plan.high_pddl`` gives each game a subgoal sequence (``GotoLocation``, ``PickupObject``, ``PutObject``,
``HeatObject`` / ``CoolObject`` / ``CleanObject``, ``ToggleObject``, ``SliceObject``); alfworld's hand-coded expert
plays the text game with its own heuristics (search receptacle by receptacle, open and close them, put back a wrong
object). ``align`` assigns every expert command to the plan step it serves; ``subtasks`` merges each navigation step
into the step it leads to, which gives the subgoals the papers write (HiPER App. D "find and cool a cup", STEP-HRL
App. A.2 "Locate and pick up ..." / "Place ...", HIPIF's "put the cooled tomato in the microwave").

Alignment rules, in order (``docs/envs/alfworld.md`` has worked examples):

1. **Anchors.** Each manipulation step is completed by one command: ``take O from R`` ↔ PickupObject(O),
   ``put O in/on R`` / ``move O to R`` ↔ PutObject(O, R), ``heat|cool|clean|slice O with R`` ↔ Heat/Cool/Clean/
   SliceObject(O), ``use O`` ↔ ToggleObject(O); object and receptacle match by type (``apple 2`` is an ``apple``).
   Commands are scanned in the expert's order and each anchor completes the earliest pending step it matches, so a
   step done out of plan order still aligns (two look_at_obj_in_light plans toggle the lamp before the pickup; the
   expert always picks up first): ``Alignment.reordered`` says so.
2. **Undo.** Putting the object of the last completed pickup anywhere that completes no PutObject step (the
   expert's "discard a wrong object", or a random command of its repeat rule) re-opens that pickup: the take and
   the put become part of the search.
3. **Navigation.** The commands between two anchors up to the last ``go to`` among them belong to the
   GotoLocation step just before the next anchor's step in the plan (exploratory ``go to`` / ``open`` / ``close``
   / ``look`` while searching included); the commands after that ``go to`` (opening the receptacle, ``examine``)
   belong to the manipulation step. With no ``go to`` in between (the expert was already there, e.g. the lamp on
   the desk it took the bowl from) the GotoLocation step stays empty (``Alignment.empty``); with no GotoLocation
   step before it in the plan, everything goes to the manipulation step. The first command (the expert's ``look``)
   thus joins the first navigation.
4. **Complete** means every command is assigned: none follows the last anchor. A winning expert ends on an
   anchor, so commands after the last one mean plan and expert disagree (counted and skipped by the demonstrations,
   never kept). Plan steps no command completes are reported (``Alignment.unmatched``) but do not make the
   alignment incomplete: ALFWorld's PDDL goal can hold before the plan's last step (cooling a pan taken from a
   stoveburner already wins "cool some pan and put it in stoveburner").

GotoLocation arguments are not used to align: the plan's location is where ALFRED found the object (``go to
dresser``), the expert may find another instance elsewhere (``sidetable 1``); ``Segment.reached`` records where
it went.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


class PlanStep(NamedTuple):
    """One ALFRED high-level subgoal: ``subgoal`` in ALFWorld's command vocabulary, the PDDL action, its arguments,
    and the crowd-sourced description of that step (empty when the annotation has none)."""

    subgoal: str
    pddl_action: str
    args: tuple[str, ...]
    description: str


GOTO = "GotoLocation"
ANCHOR_VERBS: dict[str, str] = {
    "PickupObject": "take",
    "PutObject": "put",
    "HeatObject": "heat",
    "CoolObject": "cool",
    "CleanObject": "clean",
    "SliceObject": "slice",
    "ToggleObject": "use",
}
"""The command verb that completes each manipulation step (``move X to Y`` is read as ``put``)."""

_VERBS = {"GotoLocation": "go to", **ANCHOR_VERBS}
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("go", re.compile(r"go to (?P<recep>.+)")),
    ("take", re.compile(r"take (?P<obj>.+) from (?P<recep>.+)")),
    ("put", re.compile(r"put (?P<obj>.+) in/on (?P<recep>.+)")),
    ("put", re.compile(r"move (?P<obj>.+) to (?P<recep>.+)")),
    ("heat", re.compile(r"heat (?P<obj>.+) with (?P<recep>.+)")),
    ("cool", re.compile(r"cool (?P<obj>.+) with (?P<recep>.+)")),
    ("clean", re.compile(r"clean (?P<obj>.+) with (?P<recep>.+)")),
    ("slice", re.compile(r"slice (?P<obj>.+) with (?P<recep>.+)")),
    ("use", re.compile(r"use (?P<obj>.+)")),
    ("open", re.compile(r"open (?P<recep>.+)")),
    ("close", re.compile(r"close (?P<recep>.+)")),
    ("examine", re.compile(r"examine (?P<obj>.+)")),
)


class Command(NamedTuple):
    """An ALFWorld command split into verb, object and receptacle ("" where the command has none)."""

    verb: str
    obj: str = ""
    recep: str = ""


def parse_command(text: str) -> Command:
    """``take apple 1 from countertop 2`` -> Command("take", "apple 1", "countertop 2"); unknown text keeps its first
    word as the verb (``look``, ``inventory``)."""
    text = text.strip()
    for verb, pattern in _PATTERNS:
        m = pattern.fullmatch(text)
        if m:
            groups = m.groupdict()
            return Command(verb, groups.get("obj", "") or "", groups.get("recep", "") or "")
    return Command(text.split(" ", 1)[0] if text else "")


def object_type(name: str) -> str:
    """``alarmclock 3`` -> ``alarmclock`` (ALFWorld names are a class word and an instance number)."""
    head, _, tail = name.strip().rpartition(" ")
    return head if head and tail.isdigit() else name.strip()


def plan_subgoal_text(action: str, args: Sequence[str]) -> str:
    """A ``plan.high_pddl`` step in ALFWorld's command words (``heat apple``, ``put apple in/on countertop``)."""
    if action == "PutObject" and len(args) == 2:
        return f"put {args[0]} in/on {args[1]}"
    return " ".join([_VERBS.get(action, action), *args])


def completes(step: PlanStep, command: Command) -> bool:
    """Whether ``command`` is the anchor of manipulation ``step`` (rule 1: verb and argument types match)."""
    verb = ANCHOR_VERBS.get(step.pddl_action)
    if verb is None or command.verb != verb or not step.args or object_type(command.obj) != step.args[0]:
        return False
    return step.pddl_action != "PutObject" or (
        len(step.args) > 1 and object_type(command.recep) == step.args[1]
    )


@dataclass(frozen=True)
class Segment:
    """The expert commands that serve plan step ``step``; ``anchor`` is the command that completes a manipulation
    step (None for navigation); ``reached`` is the receptacle a navigation segment's last ``go to`` reached."""

    step: int
    pddl_action: str
    args: tuple[str, ...]
    actions: tuple[str, ...]
    anchor: str | None = None
    reached: str = ""


@dataclass(frozen=True)
class Alignment:
    """The expert's commands cut by plan step, in the order the expert played them (empty steps left out)."""

    segments: tuple[Segment, ...]
    unassigned: tuple[str, ...] = ()
    """Commands after the last anchor (none when complete)."""
    unmatched: tuple[int, ...] = ()
    """Manipulation steps (plan indices) no command completed (the game may have been won without them)."""
    empty: tuple[int, ...] = ()
    """Navigation steps with no command (the expert was already where the next step happens)."""
    reordered: bool = False
    """Whether the expert completed the manipulation steps in another order than the plan's."""

    @property
    def complete(self) -> bool:
        """Every command assigned to a plan step (rule 4)."""
        return not self.unassigned


def _anchors(plan: Sequence[PlanStep], commands: Sequence[Command]) -> list[tuple[int, int]]:
    """(command index, plan step) of every anchor, in command order, after undos (rules 1-2)."""
    pending = [i for i, s in enumerate(plan) if s.pddl_action in ANCHOR_VERBS]
    matched: list[tuple[int, int]] = []
    for j, command in enumerate(commands):
        step = next((i for i in pending if completes(plan[i], command)), None)
        if step is not None:
            pending.remove(step)
            matched.append((j, step))
            continue
        if command.verb == "put" and matched:
            last_j, last_step = matched[-1]
            if plan[last_step].pddl_action == "PickupObject" and commands[last_j].obj == command.obj:
                matched.pop()  # rule 2: the pickup is undone, its step pending again
                pending = sorted([*pending, last_step])
    return matched


def align(plan: Sequence[PlanStep], actions: Sequence[str]) -> Alignment:
    """Assign every expert command in ``actions`` to the plan step it serves (module docstring, rules 1-4)."""
    commands = [parse_command(a) for a in actions]
    anchors = _anchors(plan, commands)
    segments: list[Segment] = []
    empty: list[int] = []
    start = 0
    for j, step in anchors:
        goto = step - 1 if step > 0 and plan[step - 1].pddl_action == GOTO else None
        gos = [k for k in range(start, j) if commands[k].verb == "go"]
        split = start
        if goto is not None:
            if gos:
                split = gos[-1] + 1
                reached = commands[gos[-1]].recep
                s = plan[goto]
                segments.append(
                    Segment(goto, s.pddl_action, s.args, tuple(actions[start:split]), None, reached)
                )
            else:
                empty.append(goto)
        s = plan[step]
        segments.append(Segment(step, s.pddl_action, s.args, tuple(actions[split : j + 1]), actions[j]))
        start = j + 1
    done = {step for _, step in anchors}
    unmatched = tuple(i for i, s in enumerate(plan) if s.pddl_action in ANCHOR_VERBS and i not in done)
    order = [step for _, step in anchors]
    return Alignment(
        segments=tuple(segments),
        unassigned=tuple(actions[start:]),
        unmatched=unmatched,
        empty=tuple(sorted(empty)),
        reordered=order != sorted(order),
    )


_LOCATE = {"PickupObject": "find and take", "ToggleObject": "find and use"}
"""Steps whose navigation is a search (the expert's own ``find`` subgoal; STEP-HRL's "Locate and ..." subtasks)."""


def subtask_text(segment: Segment, repeat: bool = False) -> str:
    """The subgoal a manipulation segment (with its navigation merged in) is written as: ``find and take apple``,
    ``heat apple``, ``put apple in/on countertop``, ``find and use desklamp``; ``repeat`` (the same step a second
    time, pick_two_obj) says ``another``."""
    obj = f"another {segment.args[0]}" if repeat else segment.args[0]
    if segment.pddl_action in _LOCATE:
        return f"{_LOCATE[segment.pddl_action]} {obj}"
    return plan_subgoal_text(segment.pddl_action, (obj, *segment.args[1:]))


def subtasks(alignment: Alignment) -> list[tuple[str, list[str]]]:
    """(subgoal, commands) per manipulation step, each navigation segment merged into the step after it: the
    ``expert_plan`` format ``actors.demos`` renders for every protocol."""
    out: list[tuple[str, list[str]]] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    carry: list[str] = []
    for seg in alignment.segments:
        carry += seg.actions
        if seg.anchor is None:
            continue
        key = (seg.pddl_action, seg.args)
        out.append((subtask_text(seg, repeat=key in seen), carry))
        seen.add(key)
        carry = []
    return out
