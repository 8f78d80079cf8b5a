"""Multi2 protocol: System 1 planner and System 2 executor, two LoRA adapters on one base (004 Sec. 3–4, App. A, C).

* System 1 (planner) maps {task, state summary} → sub-goal, where the state summary is ``group_action`` (the running
  list of executed commands) concatenated with the current observation (App. C.1) → ``<subgoal>…</subgoal>``.
* System 2 (executor) maps {sub-goal, current observation} → an executable atomic action and a boolean completion
  flag (App. A.2, C.1: "done=True" hands control back to System 1) →
  ``<action>…</action><completion>True|False</completion>``.

The paper describes "standardized prompt templates per role with fixed instruction headers and output schemas"
(App. A) but does not print them; the wording and the tag schema here are ours, in the form of the other protocols.
``admissible_actions`` adds the grounded list to the executor prompt when given (ALFWorld exposes it, App. B.2).
An env's ``info["task_info"]`` (TextCraft's crafting commands) follows the task in the planner prompt where the
observation does not hold it (the executor prompt holds no task).
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
    read_completion,
)
from actors.trajectory import Decision

PLANNER_FORMAT = TagFormat(("subgoal",))
EXECUTOR_FORMAT = TagFormat(("action", "completion"))

ENV_NAMES: dict[str, str] = {
    "scienceworld": "ScienceWorld, a text-based science experiment environment",
    "alfworld": "ALFWorld, a text-based household environment",
    "textcraft": "TextCraft, a text-based Minecraft crafting environment",
    "webshop": "WebShop, a text-based e-commerce environment",
    "virtualhome": "VirtualHome, a text-based household environment",
}
DEFAULT_ENV_NAME = "a text-based interactive environment"

PLANNER_SYSTEM = (
    "You are System 1, the high-level planner of an agent acting in {env}. Given the task, the actions executed so "
    "far and the current observation, propose the next sub-goal: one short milestone on the way to the task that "
    "the executor can reach in a few actions. Answer with the sub-goal inside <subgoal></subgoal>."
)
EXECUTOR_SYSTEM = (
    "You are System 2, the low-level executor of an agent acting in {env}. Given the current sub-goal and the "
    "current observation, output one executable atomic action and whether the sub-goal is completed. Answer with "
    "<action>one executable action</action><completion>True or False</completion>."
)


def _env(env: str) -> str:
    return ENV_NAMES.get(env.lower(), DEFAULT_ENV_NAME)


def build_planner_messages(
    task: str,
    observation: str,
    group_action: Sequence[str] = (),
    *,
    env: str = "alfworld",
    max_actions: int | None = None,
    task_info: str = "",
) -> list[Message]:
    """System 1 input: task (+ ``task_info`` where the observation does not hold it) + state summary (group_action
    + current observation).  ``max_actions`` keeps only the most recent executed commands (None: all, as in the
    paper)."""
    acts = (
        list(group_action)
        if max_actions is None
        else list(group_action)[-max_actions:]
        if max_actions
        else []
    )
    done = "; ".join(acts) if acts else "None"
    block = unseen_task_info(task_info, observation)
    info = f"Task information:\n{block}\n" if block else ""
    user = f"Task: {task.strip()}\n{info}Executed actions: {done}\nCurrent observation: {observation}"
    return [
        {"role": "system", "content": PLANNER_SYSTEM.format(env=_env(env))},
        {"role": "user", "content": user},
    ]


def build_executor_messages(
    subgoal: str,
    observation: str,
    admissible_actions: Sequence[str] | None = None,
    *,
    env: str = "alfworld",
) -> list[Message]:
    """System 2 input: {sub-goal, current observation} (+ the admissible list when given)."""
    user = f"Sub-goal: {subgoal.strip()}\nCurrent observation: {observation}"
    if admissible_actions is not None:
        user += f"\nAdmissible actions: [{format_admissible(admissible_actions)}]"
    return [
        {"role": "system", "content": EXECUTOR_SYSTEM.format(env=_env(env))},
        {"role": "user", "content": user},
    ]


def parse_planner(text: str) -> ParseResult:
    return parse_tagged(text, PLANNER_FORMAT)


def parse_executor(text: str) -> ParseResult:
    res = parse_tagged(text, EXECUTOR_FORMAT)
    read_completion(res)
    return res


def planner_decision(res: ParseResult) -> Decision:
    """A new sub-goal (no env action); a reply without the block falls back to its bare text, marked invalid."""
    subgoal = res.subgoal or res.text.strip()
    return Decision(action="", valid=res.valid, switch=True, subgoal=subgoal, error=res.error)


def executor_decision(res: ParseResult, subgoal: str, fallback: str = "empty") -> Decision:
    """Env action under the sub-goal; ``extra["completion"]`` is done (False when unreadable)."""
    return Decision(
        action=fallback_action(res, fallback),
        valid=res.valid,
        switch=None,
        subgoal=subgoal,
        error=res.error,
        extra={"completion": bool(res.completion)},
    )


def format_planner(subgoal: str) -> str:
    return format_blocks({"subgoal": subgoal}, PLANNER_FORMAT.tags)


def format_executor(action: str, completed: bool) -> str:
    return format_blocks({"action": action, "completion": str(bool(completed))}, EXECUTOR_FORMAT.tags)


def expert(role: str, step: PlanStep) -> str:
    """planner → the subgoal; executor → action + completion flag on the subgoal's last action."""
    if role == "planner":
        return format_planner(step.subgoal)
    return format_executor(step.action, step.last)


@dataclass
class Multi2Agent(AgentBase):
    """Multi2 (004 App. C.1): System 1 (planner adapter) proposes a sub-goal from task + group_action + current
    observation; System 2 (executor adapter) acts each step until its completion flag hands control back."""

    protocol: str = "multi2"
    show_admissible: bool = True
    max_actions: int | None = None
    phase: str = "planner"
    subgoal: str = ""
    group_action: list[str] = field(default_factory=list)
    _completion: bool = False

    def next_call(self) -> ModelCall:
        if self.phase == "planner":
            msgs = build_planner_messages(
                self.task,
                self.observation,
                self.group_action,
                env=self.env_name,
                max_actions=self.max_actions,
                task_info=self.task_info,
            )
            return self._call(msgs, "planner", acts=False)
        shown = self.admissible if self.show_admissible else None
        msgs = build_executor_messages(self.subgoal, self.observation, shown, env=self.env_name)
        return self._call(msgs, "executor", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        if call.role == "planner":
            res = parse_planner(text)
            d = planner_decision(res)
            self.subgoal, self.phase = d.subgoal or "", "executor"
            return AgentStep(d, res, None, self._open_segment(True))
        res = parse_executor(text)
        d = executor_decision(res, self.subgoal)
        self._completion = bool(d.extra["completion"])
        self.group_action.append(d.action)
        return AgentStep(d, res, d.action, self._open_segment(False))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        self._advance(observation, info)
        if self._completion:
            self.phase = "planner"


SPEC = AgentSpec(
    "multi2",
    ("planner", "executor"),
    ("executor",),
    ("compact", "show_admissible", "max_actions"),
    Multi2Agent,
    expert,
)
