"""HIPIF protocol: hierarchical reflection + subgoal planning over a folded execution history (002 Sec. 3, App. E).

Response: ``<reflection>…</reflection>`` then either ``<subgoal>…</subgoal> <action>…</action>`` (the current
subgoal is judged completed, z_t = 1: a new subgoal and its first action) or ``<action>…</action>`` (z_t = 0: the next
action under the current subgoal), Eq. 5–6.  The branch is read from the blocks: a ``<subgoal>`` block means z_t = 1.
At the first step there is no subgoal yet, so a ``<subgoal>`` block is required (Alg. 1 line 9, "Generate initial
subgoal"); the prompt shows "None" as the current subgoal.

Context C_{k,j} = [c; H_{<k}; g_k; T_{k,j}] (Eq. 2) is kept by ``FoldedHistory``: the current subgoal with its
action–observation pairs, the initial observation, and each completed subgoal folded into a compact record
[g_k, o_k^end] (its last action and observation), rendered as in Fig. 10–12.

Prompts: Fig. 7 (ALFWorld), 8 (ScienceWorld), 9 (VirtualHome), verbatim up to line breaks.  As the paper states
(App. E), they list action *templates*, not the grounded admissible actions; ``list_admissible=True`` appends the
grounded list (our option, off by default).  Other environments get a generic template in the same shape.  An env's
``info["task_info"]`` follows the task description where neither the observation nor the rendered history holds
it (our addition; the folded history always shows the initial observation, so TextCraft's recipes stay visible).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.agents.base import AgentBase, AgentSpec, AgentStep, ModelCall, PlanStep, unseen_task_info
from actors.agents.parsing import (
    Message,
    ParseResult,
    TagFormat,
    fallback_action,
    format_admissible,
    format_blocks,
    parse_tagged,
)
from actors.trajectory import Decision

HIPIF_FORMAT = TagFormat(("reflection", "subgoal", "action"), optional=frozenset({"subgoal"}))

_HISTORY = (
    "EXECUTION HISTORY:\nSubgoals are essential milestones on the path to the final task. Below is the execution "
    "history, each entry enclosed in [] contains a subgoal followed by all corresponding actions and "
    "observations:\n{action_history}\n"
)

_REFLECTION_HOUSEHOLD = (
    "REFLECTION:\nYou should first output your reflection process in the following format: "
    "<reflection>the reflection process</reflection>.\nThe reflection process includes two parts:\n"
    "- Part1: Output whether the current subgoal is completed or not according to the current observation.\n"
    "- Part2: If the current subgoal is completed, output your reflection on what the new subgoal should be to "
    "advance the final task based on historical subgoals. If the current subgoal is not completed, output your "
    "reflection on the next action based on the execution of the current subgoal.\n"
)

_ACTION_FMT = (
    "- {completed}: output a new subgoal and its first action in the format "
    "<subgoal>your subgoal</subgoal> <action>your action</action>.\n"
    "- {not_completed}: output the next action in the format <action>your action</action>."
)

_HOUSEHOLD_TAIL = (
    _HISTORY + _REFLECTION_HOUSEHOLD + "ACTION:\nOnce you have finished the reflection process, "
    "choose one output format based on whether the current subgoal is completed:\n"
    + _ACTION_FMT.format(
        completed="If the current subgoal is completed",
        not_completed="If the current subgoal is not completed",
    )
)
"""History, reflection and answer format of the ALFWorld and generic templates (HIPIF App. H)."""

_ALFWORLD = (
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}\n"
    "Your current subgoal is: {current_subgoal}.\n"
    "Your current observation is: {current_observation}\n"
    "Your last action is: {last_action}.\n"
    "Here are the AVAILABLE ACTIONS you could take:\n"
    "- 'go to {{recep}}'\n- 'take {{obj}} from {{recep}}'\n- 'put {{obj}} on {{recep}}'\n"
    "- 'open {{recep}}' / 'close {{recep}}'\n- 'use {{obj}}/{{recep}}'\n- 'clean {{obj}} with {{recep}}'\n"
    "- 'heat {{obj}} with {{recep}}'\n- 'cool {{obj}} with {{recep}}'\n"
    "Ensure that any objects ('{{obj}}') and receptacles ('{{recep}}') are present in your observation. "
    'The current observation "Nothing happens." means the action failed.\n'
    "{admissible}" + _HOUSEHOLD_TAIL
)

_SCIENCEWORLD = (
    "You are a helpful assistant to do some scientific experiment in an environment.\n"
    "Your current subgoal is: {current_subgoal}.\n"
    "Your last action is: {last_action}.\n"
    "Your current observation is: {current_observation}\n"
    "{task_description}\n"
    "In the environment, there are several rooms: kitchen, foundry, workshop, bathroom, outside, living room, "
    "bedroom, greenhouse, art studio, hallway. You can teleport to any room in one step.\n"
    "Here are the AVAILABLE ACTIONS you could take:\n"
    "- 'open {{object}}' / 'close {{object}}': open or close a container\n"
    "- 'connect {{object}} to {{object}}': connect electrical components\n"
    "- 'pick up {{object}}': move an object to the inventory\n"
    "- 'put down {{object}}': drop an inventory item\n"
    "- 'move {{object}} to {{object}}': move an object to a container\n"
    "- 'pour {{object}} into {{object}}': pour a liquid into a container\n"
    "- 'mix {{object}}': chemically mix a container\n"
    "- 'use {{object}} on {{object}}': use thermometer on object to measure its temperature\n"
    "- 'activate {{object}}' / 'deactivate {{object}}': activate or deactivate a device\n"
    "- 'teleport to {{location}}': move to a new location\n"
    "- 'focus on {{object}}': signal intent on a task object\n"
    "- 'wait': wait for 10 steps\n"
    "- 'wait1': wait for a step\n"
    "Ensure that any {{object}} and {{location}} are present in your observation. "
    "Do NOT use 'focus on {{object}}' to get details.\n"
    "{admissible}"
    + _HISTORY
    + "REFLECTION:\nYou should first output your reflection process in the following "
    "format: <reflection>the reflection process</reflection>.\nThe reflection process includes two parts:\n"
    "- Part1: Output whether the current subgoal, NOT the task, is completed or not completed according to the "
    "current observation.\n"
    "- Part2: If the current subgoal is completed, output your reflection on what the new subgoal should be to "
    "advance the final task. If the current subgoal is not completed, output your reflection on the next action.\n"
    "ACTION:\nOnce you have finished the reflection process, choose one output format based on your reflection "
    "process:\n" + _ACTION_FMT.format(completed="If completed", not_completed="If not completed")
)

_VH_ACTIONS = (
    "walk to {obj}|find {obj}|grab {obj}|open {obj}|close {obj}|put {obj} on {recep}|put {obj} in {recep}|"
    "switch on {obj}|switch off {obj}|drink {obj}|sit on {obj}|lie on {obj}|look at {obj}|stand up|watch {obj}|"
    "wipe {obj}|type on {obj}|take off {obj}|wash {obj}|cut {obj}|eat {obj}|sleep|wake up|plug in {obj}|"
    "plug out {obj}|pour {obj} into {recep}|turn to {obj}"
)

_VIRTUALHOME = (
    "You are an agent in a simulated household environment, tasked to assist with daily living activities and "
    "interactions. Your task is to: {task_description}\n"
    "Your current subgoal is: {current_subgoal}.\n"
    "Your current observation is: {current_observation}\n"
    "Your last action is: {last_action}.\n"
    "Here are the AVAILABLE ACTIONS you could take:\n"
    + "".join(f"- {a}\n" for a in _VH_ACTIONS.replace("{", "{{").replace("}", "}}").split("|"))
    + "Ensure that any objects ('{{obj}}') and locations ('{{recep}}') are present in your observation. "
    "You should walk to the object before taking action on it.\n"
    "{admissible}"
    + _HISTORY
    + _REFLECTION_HOUSEHOLD
    + "ACTION:\nOnce you have finished the reflection process, "
    "choose one output format based on whether the current subgoal is completed in Part1:\n"
    + _ACTION_FMT.format(completed="If completed", not_completed="If not completed")
)

_GENERIC = (
    "You are an expert agent operating in a text-based interactive environment. Your task is to: "
    "{task_description}\n"
    "Your current subgoal is: {current_subgoal}.\n"
    "Your current observation is: {current_observation}\n"
    "Your last action is: {last_action}.\n"
    "{admissible}" + _HOUSEHOLD_TAIL
)

HIPIF_TEMPLATES: dict[str, str] = {
    "alfworld": _ALFWORLD,
    "scienceworld": _SCIENCEWORLD,
    "virtualhome": _VIRTUALHOME,
}
"""``str.format`` templates per environment (002 Fig. 7–9); others use ``GENERIC_TEMPLATE``."""

GENERIC_TEMPLATE = _GENERIC

COMPACT_ANSWER = (
    "<reflection>is the subgoal done?</reflection> then, if done or None, "
    "<subgoal>new subgoal</subgoal> <action>its first action</action>; else <action>next action</action>"
)
"""The answer format of the compact prompt (the two branches of Eq. 6 in one line)."""


@dataclass
class FoldedRecord:
    """A completed subgoal folded to [g_k, o_k^end] (002 Sec. 3.1): its text and its last action/observation."""

    subgoal: str
    action: str | None = None
    observation: str | None = None


@dataclass
class FoldedHistory:
    """H_{<k}, g_k and T_{k,j} of Eq. 2: what HIPIF's prompt shows instead of the full trajectory.

    ``steps`` are the (action, resulting observation) pairs under the current subgoal; ``folded`` the completed
    subgoals in order (G_{<=k} of Eq. 6 is ``completed_subgoals``).
    """

    origin_observation: str = ""
    current_subgoal: str | None = None
    steps: list[tuple[str, str]] = field(default_factory=list)
    folded: list[FoldedRecord] = field(default_factory=list)
    last_action: str | None = None

    @property
    def completed_subgoals(self) -> list[str]:
        return [r.subgoal for r in self.folded]

    def switch_to(self, subgoal: str | None) -> None:
        """Fold the current subgoal (if any) and start ``subgoal`` with an empty intra-subgoal history (Alg. 1
        lines 13–16)."""
        if self.current_subgoal is not None:
            last = self.steps[-1] if self.steps else (None, None)
            self.folded.append(FoldedRecord(self.current_subgoal, last[0], last[1]))
        self.current_subgoal = subgoal
        self.steps = []

    def record(self, action: str, observation: str) -> None:
        """Append (a_t, o_{t+1}) to the intra-subgoal history (Alg. 1 line 22)."""
        self.steps.append((action, observation))
        self.last_action = action

    def apply(self, decision: Decision, next_observation: str) -> None:
        """Advance after one step: fold and switch when the decision opened a new subgoal, then record."""
        if decision.switch:
            self.switch_to(decision.subgoal)
        self.record(decision.action, next_observation)

    def render(self, current_window: int | None = None) -> str:
        """Fig. 10 layout: current-subgoal unit, initial-observation unit, then one unit per folded subgoal.
        ``current_window`` keeps only the most recent intra-subgoal pairs (None: all of them)."""
        steps = (
            self.steps if current_window is None else self.steps[-current_window:] if current_window else []
        )
        current = [f"(current_subgoal: {self.current_subgoal if self.current_subgoal else 'None'})"]
        current += [f"(pre_action: {a}, pre_observation: {o})" for a, o in steps]
        units = ["[" + ",".join(current) + "]", f"[(origin_observation: {self.origin_observation})]"]
        for i, rec in enumerate(self.folded, start=1):
            body = [f"(history_subgoal {i}: {rec.subgoal})"]
            if rec.action is not None:
                body.append(f"(pre_action: {rec.action}, pre_observation: {rec.observation})")
            units.append("[" + ",".join(body) + "]")
        return "\n".join(units)


def build_hipif_messages(
    task: str,
    observation: str,
    history: FoldedHistory,
    *,
    env: str = "alfworld",
    admissible_actions: Sequence[str] | None = None,
    list_admissible: bool = False,
    current_window: int | None = None,
    compact: bool = False,
    task_info: str = "",
) -> list[Message]:
    """One user message: 002 Fig. 7–9 filled from ``history`` (current subgoal, last action, folded memory), with
    ``task_info`` after the task description where neither the observation nor the history holds it.
    ``compact``: the same fields (folded history included) with minimal wording and the grounded admissible list
    (~4x fewer template tokens; for small models and fast tests, not the paper's prompt)."""
    rendered = history.render(current_window)
    block = unseen_task_info(task_info, observation, rendered)
    if compact:
        lines = [f"Task: {task.strip()}", *([block] if block else [])]
        lines += [f"History:\n{rendered}", f"Now: {observation}"]
        lines.append(f"Subgoal: {history.current_subgoal if history.current_subgoal else 'None'}")
        if admissible_actions is not None:
            lines.append(f"Actions: {', '.join(admissible_actions)}")
        lines.append(f"Answer: {COMPACT_ANSWER}")
        return [{"role": "user", "content": "\n".join(lines)}]
    template = HIPIF_TEMPLATES.get(env.lower(), GENERIC_TEMPLATE)
    show_list = admissible_actions is not None and (list_admissible or template is GENERIC_TEMPLATE)
    admissible = (
        f"Your admissible actions are: [{format_admissible(admissible_actions)}].\n" if show_list else ""
    )
    content = template.format(
        task_description=task.strip() + (f"\nTask information:\n{block}" if block else ""),
        current_subgoal=history.current_subgoal if history.current_subgoal else "None",
        current_observation=observation,
        last_action=history.last_action if history.last_action else "None",
        admissible=admissible,
        action_history=rendered,
    )
    return [{"role": "user", "content": content}]


def parse_hipif(text: str) -> ParseResult:
    """``<reflection>`` then an optional ``<subgoal>`` then ``<action>``, each at most once."""
    return parse_tagged(text, HIPIF_FORMAT)


def hipif_decision(res: ParseResult, current_subgoal: str | None, fallback: str = "empty") -> Decision:
    """Decision: ``switch`` = z_t (a new subgoal was written), ``subgoal`` = g_{k+1} or g_k."""
    written = res.subgoal or None
    errors = list(res.errors)
    if current_subgoal is None and written is None:
        errors.append("no subgoal proposed at the first step")
    completed = written is not None
    return Decision(
        action=fallback_action(res, fallback),
        valid=not errors,
        switch=completed,
        subgoal=written if completed else current_subgoal,
        error="; ".join(errors),
        extra={"reflection": res.get("reflection"), "completed": completed},
    )


def format_hipif(reflection: str, action: str, subgoal: str | None = None) -> str:
    """Canonical HIPIF response; the paper's own separator between subgoal and action is one space."""
    fields = {"reflection": reflection, "action": action}
    if subgoal is not None:
        fields["subgoal"] = subgoal
    return format_blocks(fields, HIPIF_FORMAT.tags, sep=" ")


def expert(role: str, step: PlanStep) -> str:
    """Part 1 of the reflection is the completion judgement z_t (HIPIF Eq. 5), Part 2 what comes next (Eq. 6); a new
    ``<subgoal>`` on each subgoal's first action."""
    reflection = f"Completed; next: {step.subgoal}." if step.first else f"Not completed: {step.subgoal}."
    return format_hipif(reflection, step.action, step.subgoal if step.first else None)


@dataclass
class HipifAgent(AgentBase):
    """HIPIF (002 Sec. 3): reflection + completion judgment z_t each turn; finished subgoals are folded into
    [g_k, o_k^end] records (``FoldedHistory``, Eq. 2) so the prompt holds H_{<k}, g_k and T_{k,j} only."""

    protocol: str = "hipif"
    folded: FoldedHistory = field(default_factory=FoldedHistory)
    current_window: int | None = None
    _decision: Decision | None = None

    def start(self, observation: str, info: Mapping[str, Any]) -> None:
        super().start(observation, info)
        self.folded = FoldedHistory(origin_observation=observation)

    def next_call(self) -> ModelCall:
        msgs = build_hipif_messages(
            self.task,
            self.observation,
            self.folded,
            env=self.env_name,
            admissible_actions=self.admissible,
            current_window=self.current_window,
            compact=self.compact,
            task_info=self.task_info,
        )
        return self._call(msgs, "agent", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        res = parse_hipif(text)
        d = hipif_decision(res, self.folded.current_subgoal)
        self._decision = d
        return AgentStep(d, res, d.action, self._open_segment(bool(d.switch)))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        if self._decision is not None:
            self.folded.apply(self._decision, observation)  # Alg. 1 lines 13-22: fold on z_t = 1, then record
        self._advance(observation, info)


SPEC = AgentSpec(
    "hipif", ("agent",), ("agent",), ("compact", "current_window"), HipifAgent, expert, states_subgoals=True
)
