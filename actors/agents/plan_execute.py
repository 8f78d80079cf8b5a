"""HiPER's Plan–Execute protocol: ``<switch>KEEP|SWITCH</switch><subgoal>…</subgoal><action>…</action>`` (001 Eq. 4).

Prompt: HiPER App. C.3, Fig. 6 (ALFWorld) and Fig. 8 (WebShop), verbatim; it extends the ReAct prompt (same
history window) with the current subgoal and the "EXACTLY THREE blocks" format rules.  Other environments reuse
the template with their own opening sentence.  Before the first subgoal exists the current subgoal reads "None"
(the paper prints no first-step variant).  An env's ``info["task_info"]`` follows the task sentence where no shown
observation holds it, as in ReAct (``react.shown_task_info``; our addition).

Decision semantics (001 Sec. 4.1): q_t = 1 (SWITCH) takes the written subgoal o_t; q_t = 0 (KEEP) copies the
previous subgoal, o_t = o_{t-1}, whatever was written; a KEEP whose written subgoal differs (after collapsing
whitespace) is recorded as ``extra["keep_changed_subgoal"] = True`` (not a format error: the paper's own rollouts,
App. E, contain such turns).  An unreadable switch is inferred (``extra["switch_inferred"]``): SWITCH when a subgoal
different from the previous one was written, else KEEP; a SWITCH without a readable subgoal keeps o_{t-1}; such
parses are invalid (format penalty 0.1, 001 App. B "Reward Design").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.agents.base import AgentBase, AgentSpec, AgentStep, ModelCall, PlanStep
from actors.agents.parsing import (
    Message,
    ParseResult,
    TagFormat,
    fallback_action,
    format_admissible,
    format_blocks,
    normalize_ws,
    parse_tagged,
    read_switch,
)
from actors.agents.react import (
    ENV_INTRO,
    Pair,
    compact_prompt,
    env_intro,
    format_history,
    recent_history,
    shown_task_info,
)
from actors.trajectory import Decision

PLAN_EXECUTE_FORMAT = TagFormat(("switch", "subgoal", "action"))

PE_ENV_INTRO: dict[str, str] = {
    **ENV_INTRO,
    "alfworld": "You are an expert agent operating in the ALFRED Embodied Environment.",
}
"""Fig. 6 capitalises "Embodied" where Fig. 5 does not; kept as printed."""

SUBGOAL_RULES = (
    "You will complete the task by maintaining a SHORT-TERM subgoal at each step. A subgoal is a small high-level "
    "objective that can typically be achieved in a few actions. A subgoal is NOT the full task and NOT a low-level "
    "action. At every step, you reconsider your current subgoal based on the latest observation, and may continue "
    "it or switch to a new short-term subgoal."
)

FORMAT_RULES = (
    "You MUST output EXACTLY THREE blocks, in the order shown below:\n"
    "1) A <switch>...</switch> block (KEEP or SWITCH);\n"
    "2) A <subgoal>...</subgoal> block (the subgoal to follow next);\n"
    "3) A <action>...</action> block (one admissible action).\n"
    "Format requirements:\n"
    '- <switch> MUST contain only "KEEP" or "SWITCH".\n'
    "- <subgoal> MUST appear at every step: If you KEEP, copy the exact current subgoal into <subgoal>. If you "
    "SWITCH, write a new short subgoal achievable in a few actions and not the entire task.\n"
    "- <action> MUST contain exactly action verbatim copied as is from the admissible actions list."
)


def build_plan_execute_messages(
    task: str,
    observation: str,
    admissible_actions: Sequence[str] | None = None,
    history: Sequence[Pair] = (),
    current_subgoal: str | None = None,
    *,
    env: str = "alfworld",
    history_window: int = 2,
    step_count: int | None = None,
    compact: bool = False,
    task_info: str = "",
) -> list[Message]:
    """One user message: HiPER Fig. 6/8 filled in (``task_info`` after the task sentence where no shown
    observation holds it); ``compact``: the same fields with minimal wording (~80 tokens instead of ~400, for
    small models and fast tests; not the paper's prompt)."""
    taken = len(history) if step_count is None else step_count
    shown = recent_history(history, history_window, taken)
    if compact:
        answer = "<switch>KEEP or SWITCH</switch><subgoal>short subgoal</subgoal><action>one action</action>"
        body = compact_prompt(
            task,
            observation,
            admissible_actions,
            shown,
            answer,
            subgoal=current_subgoal or "None",
            task_info=task_info,
        )
        return [{"role": "user", "content": body}]
    parts = [f"{env_intro(env, PE_ENV_INTRO)} Your overall task is: {task.strip()}"]
    if block := shown_task_info(task_info, observation, shown):
        parts.append(f"Task information:\n{block}")
    parts += [SUBGOAL_RULES, f"You have already taken {taken} step(s)."]
    if shown:
        parts.append(
            f"Below are the most recent {len(shown)} observations and actions you took:\n{format_history(shown)}"
        )
    parts.append(f"You are now at step {taken + 1} and your current observation is: {observation}")
    parts.append(f"Your current subgoal is: {current_subgoal if current_subgoal else 'None'}.")
    if admissible_actions is not None:
        parts.append(f"Your admissible actions are: [{format_admissible(admissible_actions)}].")
    parts.append(FORMAT_RULES)
    return [{"role": "user", "content": "\n".join(parts)}]


def parse_plan_execute(text: str) -> ParseResult:
    """Exactly three blocks switch, subgoal, action; ``switch`` read as KEEP/SWITCH (any case)."""
    res = parse_tagged(text, PLAN_EXECUTE_FORMAT)
    read_switch(res)
    return res


def plan_execute_decision(res: ParseResult, prev_subgoal: str | None, fallback: str = "empty") -> Decision:
    """Decision with q_t and o_t resolved against o_{t-1} = ``prev_subgoal`` (module docstring)."""
    written = res.subgoal or None
    extra: dict[str, object] = {"written_subgoal": written}
    changed = written is not None and (
        prev_subgoal is None or normalize_ws(written) != normalize_ws(prev_subgoal)
    )
    switch = res.switch
    if switch is None:
        switch = changed
        extra["switch_inferred"] = True
    if switch:
        subgoal = written if written is not None else prev_subgoal
    elif prev_subgoal is None:
        subgoal = written
        extra["keep_without_subgoal"] = True
    else:
        subgoal = prev_subgoal
        if changed:
            extra["keep_changed_subgoal"] = True
    return Decision(
        action=fallback_action(res, fallback),
        valid=res.valid,
        switch=switch,
        subgoal=subgoal,
        error=res.error,
        extra=extra,
    )


def format_plan_execute(switch: bool, subgoal: str, action: str) -> str:
    """Canonical Plan–Execute response (BC targets, tests)."""
    fields = {"switch": "SWITCH" if switch else "KEEP", "subgoal": subgoal, "action": action}
    return format_blocks(fields, PLAN_EXECUTE_FORMAT.tags)


def expert(role: str, step: PlanStep) -> str:
    """SWITCH on a subgoal's first action (HiPER: subgoal boundaries = expert plan boundaries), KEEP after."""
    return format_plan_execute(step.first, step.subgoal, step.action)


@dataclass
class PlanExecuteAgent(AgentBase):
    """HiPER Plan–Execute (001 Eq. 4): q_t = SWITCH takes the written subgoal, KEEP copies o_{t-1}."""

    protocol: str = "plan_execute"
    history: list[Pair] = field(default_factory=list)
    subgoal: str | None = None
    _action: str = ""

    def next_call(self) -> ModelCall:
        msgs = build_plan_execute_messages(
            self.task,
            self.observation,
            self.admissible,
            self.history,
            self.subgoal,
            env=self.env_name,
            history_window=self.history_length,
            step_count=self.steps,
            compact=self.compact,
            task_info=self.task_info,
        )
        return self._call(msgs, "agent", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        res = parse_plan_execute(text)
        d = plan_execute_decision(res, self.subgoal)
        self.subgoal = d.subgoal
        self._action = d.action
        return AgentStep(d, res, d.action, self._open_segment(bool(d.switch)))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        keep = max(self.history_length, 0)
        self.history = [*self.history, (self.observation, self._action)][-keep:] if keep else []
        self._advance(observation, info)


SPEC = AgentSpec(
    "plan_execute", ("agent",), ("agent",), ("compact",), PlanExecuteAgent, expert, states_subgoals=True
)
