"""STEP-HRL protocol: three roles on one backbone, each seeing one step, never the full history (000 Sec. 3.1).

* high  (Eq. 5)  g_{k+1} ~ π^h(· | c, G_k, p̂_k, o_0^{k+1}): task, completed subtasks, last subtask's final progress,
  current observation → ``<subgoal>next subtask</subgoal>``;
* low   (Eq. 4)  a_t^k ~ π^l(· | g_k, p_t^k, o_t^k): subtask, observation, local progress →
  ``<action>…</action><completion>True|False</completion>`` (action plus termination indicator, 000 Limitations);
* progress (Eq. 3)  p_t^k ~ π^p(· | g_k, a_{t-1}^k, o_t^k, p_{t-1}^k) → ``<progress>…</progress>``; p_0^k = ∅
  is shown as "None".

System prompts are Fig. 6 verbatim; the user message lists the inputs in the order of the paper's SFT data
structure (App. A.2).  The paper trains bare-text targets and prints no output syntax, so the tags are our
serialisation (they give every role a format check and token masks, like the other protocols); a reply without
tags falls back to its bare text (the paper's target form) but is marked invalid.  Admissible actions are not a
STEP-HRL input; ``admissible_actions`` adds them to the low-level prompt when given (our option).  An env's
``info["task_info"]`` (TextCraft's crafting commands) goes with the task description into the high-level prompt
where the observation does not hold it (our addition; the low and progress prompts hold no task).
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

HIGH_FORMAT = TagFormat(("subgoal",))
LOW_FORMAT = TagFormat(("action", "completion"))
PROGRESS_FORMAT = TagFormat(("progress",))

HIGH_SYSTEM = (
    "You are a high-level planner. Based on the state (task description, historical subtasks, last subtask "
    "progress and current observation), please generate a clear and simple subtask."
)
LOW_SYSTEM = (
    "You are a low-level action executor. Based on the current subtask, observation and local progress, please "
    "generate a executable action and determine if the subtask is completed (True/False)."
)
PROGRESS_SYSTEM = (
    "You are an AI agent responsible for updating local progress within a subtask. Based on the current subtask, "
    "the previous local progress, the current action, and the resulting observation, update the local progress."
)

HIGH_OUTPUT = "Answer with the subtask inside <subgoal></subgoal>."
LOW_OUTPUT = "Answer with <action>one executable action</action><completion>True or False</completion>."
PROGRESS_OUTPUT = "Answer with the updated local progress inside <progress></progress>."


def _none(s: str | None) -> str:
    return s.strip() if s and s.strip() else "None"


def build_high_messages(
    task: str,
    observation: str,
    completed_subtasks: Sequence[str] = (),
    last_progress: str | None = None,
    *,
    task_info: str = "",
) -> list[Message]:
    """π^h input (Eq. 5): {task description, current observation, completed subtasks, previous local progress};
    ``task_info`` after the task description where the observation does not hold it."""
    done = "; ".join(f"{i}. {g}" for i, g in enumerate(completed_subtasks, start=1)) or "None"
    block = unseen_task_info(task_info, observation)
    user = (
        f"Task description: {task.strip()}\n"
        + (f"Task information:\n{block}\n" if block else "")
        + f"Current observation: {observation}\n"
        f"Historical subtasks: {done}\n"
        f"Last subtask progress: {_none(last_progress)}\n"
        f"{HIGH_OUTPUT}"
    )
    return [{"role": "system", "content": HIGH_SYSTEM}, {"role": "user", "content": user}]


def build_low_messages(
    subtask: str,
    observation: str,
    progress: str | None = None,
    admissible_actions: Sequence[str] | None = None,
) -> list[Message]:
    """π^l input (Eq. 4): {subtask, current observation, local progress}."""
    user = f"Current subtask: {subtask.strip()}\nCurrent observation: {observation}\nLocal progress: {_none(progress)}\n"
    if admissible_actions is not None:
        user += f"Admissible actions: [{format_admissible(admissible_actions)}]\n"
    return [{"role": "system", "content": LOW_SYSTEM}, {"role": "user", "content": user + LOW_OUTPUT}]


def build_progress_messages(
    subtask: str, action: str, observation: str, prev_progress: str | None = None
) -> list[Message]:
    """π^p input (Eq. 3): {subtask, executed action, resulting observation, previous local progress}."""
    user = (
        f"Current subtask: {subtask.strip()}\n"
        f"Executed action: {action}\n"
        f"Resulting observation: {observation}\n"
        f"Previous local progress: {_none(prev_progress)}\n"
        f"{PROGRESS_OUTPUT}"
    )
    return [{"role": "system", "content": PROGRESS_SYSTEM}, {"role": "user", "content": user}]


def parse_high(text: str) -> ParseResult:
    return parse_tagged(text, HIGH_FORMAT)


def parse_low(text: str) -> ParseResult:
    res = parse_tagged(text, LOW_FORMAT)
    read_completion(res)
    return res


def parse_progress(text: str) -> ParseResult:
    return parse_tagged(text, PROGRESS_FORMAT)


def _field_or_bare(res: ParseResult, tag: str) -> str:
    value = res.get(tag)
    return value if value else res.text.strip()


def high_decision(res: ParseResult) -> Decision:
    """A new subtask g_{k+1} (no env action); ``switch`` True: every high-level call opens a segment."""
    return Decision(
        action="", valid=res.valid, switch=True, subgoal=_field_or_bare(res, "subgoal"), error=res.error
    )


def low_decision(res: ParseResult, subtask: str, fallback: str = "empty") -> Decision:
    """Env action under g_k; ``extra["completion"]`` is the termination flag (False when unreadable, so the subtask
    continues and the step limit bounds it)."""
    return Decision(
        action=fallback_action(res, fallback),
        valid=res.valid,
        switch=None,
        subgoal=subtask,
        error=res.error,
        extra={"completion": bool(res.completion)},
    )


def progress_decision(res: ParseResult, subtask: str) -> Decision:
    """Updated local progress p_t^k in ``extra["progress"]`` (no env action)."""
    return Decision(
        action="",
        valid=res.valid,
        switch=None,
        subgoal=subtask,
        error=res.error,
        extra={"progress": _field_or_bare(res, "progress")},
    )


def format_high(subtask: str) -> str:
    return format_blocks({"subgoal": subtask}, HIGH_FORMAT.tags)


def format_low(action: str, completed: bool) -> str:
    return format_blocks({"action": action, "completion": str(bool(completed))}, LOW_FORMAT.tags)


def format_progress(progress: str) -> str:
    return format_blocks({"progress": progress}, PROGRESS_FORMAT.tags)


def expert(role: str, step: PlanStep) -> str:
    """high → the subgoal; low → action + completion flag on the subgoal's last action; progress → the subtask's
    actions so far (the paper's DeepSeek-written summary replaced by a deterministic one: cumulative, bounded by the
    subtask's length, exact names from the env; STEP-HRL Fig. 5's rules 1-2)."""
    if role == "high":
        return format_high(step.subgoal)
    if role == "low":
        return format_low(step.action, step.last)
    return format_progress("done: " + "; ".join([*step.before, step.action]))


@dataclass
class StepHrlAgent(AgentBase):
    """STEP-HRL (000 Sec. 3.1): high (Eq. 5) at the start and after the low level flags completion; low (Eq. 4)
    every step; progress (Eq. 3) after every step, p_0^k = None.  No prompt holds the interaction history."""

    protocol: str = "step_hrl"
    show_admissible: bool = True
    phase: str = "high"
    subtask: str = ""
    completed: list[str] = field(default_factory=list)
    progress: str | None = None
    last_progress: str | None = None
    _action: str = ""
    _completion: bool = False

    def next_call(self) -> ModelCall:
        if self.phase == "high":
            msgs = build_high_messages(
                self.task, self.observation, self.completed, self.last_progress, task_info=self.task_info
            )
            return self._call(msgs, "high", acts=False)
        if self.phase == "progress":
            msgs = build_progress_messages(self.subtask, self._action, self.observation, self.progress)
            return self._call(msgs, "progress", acts=False)
        shown = self.admissible if self.show_admissible else None
        msgs = build_low_messages(self.subtask, self.observation, self.progress, shown)
        return self._call(msgs, "low", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        if call.role == "high":
            res = parse_high(text)
            d = high_decision(res)
            self.subtask, self.progress, self.phase = d.subgoal or "", None, "low"
            return AgentStep(d, res, None, self._open_segment(True))
        if call.role == "progress":
            res = parse_progress(text)
            d = progress_decision(res, self.subtask)
            self.progress = d.extra["progress"]
            if self._completion:  # subtask g_k ended: p̂_k goes to the high level with G_k
                self.completed.append(self.subtask)
                self.last_progress, self.phase = self.progress, "high"
            else:
                self.phase = "low"
            return AgentStep(d, res, None, self._open_segment(False))
        res = parse_low(text)
        d = low_decision(res, self.subtask)
        self._action, self._completion = d.action, bool(d.extra["completion"])
        return AgentStep(d, res, d.action, self._open_segment(False))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        self._advance(observation, info)
        self.phase = "progress"


SPEC = AgentSpec(
    "step_hrl", ("high", "low", "progress"), ("low",), ("compact", "show_admissible"), StepHrlAgent, expert
)
