"""ReAct protocol (``<think>…</think><action>…</action>``): the flat baseline of verl-agent / GiGPO / HiPER.

Prompt: HiPER App. C.3, Fig. 5 (ALFWorld) and Fig. 7 (WebShop), verbatim; other environments get the same
template with their own opening sentence (``ENV_INTRO``).  The prompt holds a bounded window of the most recent
(observation, action) pairs (``history_window``, default 2 as in verl-agent's GiGPO configs), the step count, the
current observation and, when the environment has a list, the admissible actions.  At step 1 (no history) the two
history sentences are left out, as verl-agent's first-turn template does.  An env's ``info["task_info"]`` (TextCraft's
crafting commands) follows the task sentence on every turn where neither the observation nor the history window
holds it (our addition: the window alone loses turn 0's recipes from step 4 on).

Format penalty (HiPER App. B "Reward Design", 0.1) applies when ``parse_react(...).valid`` is False.
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
    strip_period,
)
from actors.trajectory import Decision

REACT_FORMAT = TagFormat(("think", "action"))

ENV_INTRO: dict[str, str] = {
    "alfworld": "You are an expert agent operating in the ALFRED embodied Environment.",
    "webshop": "You are an expert autonomous agent operating in the WebShop e-commerce environment.",
    "scienceworld": "You are an expert agent operating in the ScienceWorld text-based science environment.",
    "virtualhome": "You are an expert agent operating in the VirtualHome household environment.",
    "textcraft": "You are an expert agent operating in the TextCraft crafting environment.",
}
"""Opening sentence per environment; ALFWorld and WebShop are the papers' wording, the rest ours."""

DEFAULT_INTRO = "You are an expert agent operating in a text-based interactive environment."

Pair = tuple[str, str]
"""(observation the agent saw, action it took)."""


def env_intro(env: str, table: dict[str, str] = ENV_INTRO) -> str:
    return table.get(env.lower(), DEFAULT_INTRO)


def recent_history(
    history: Sequence[Pair], window: int, step_count: int | None = None
) -> list[tuple[int, Pair]]:
    """The last ``window`` pairs with their 1-based step numbers (``step_count`` = steps taken so far, default
    ``len(history)``; pass it when ``history`` is already truncated)."""
    taken = len(history) if step_count is None else step_count
    recent = list(history)[-window:] if window > 0 else []
    first = taken - len(recent) + 1
    return [(first + i, pair) for i, pair in enumerate(recent)]


def format_history(numbered: Sequence[tuple[int, Pair]]) -> str:
    """``[Observation 3: '...', Action 3: '...']`` one per line."""
    return "\n".join(f"[Observation {n}: '{obs}', Action {n}: '{act}']" for n, (obs, act) in numbered)


def shown_task_info(task_info: str, observation: str, shown: Sequence[tuple[int, Pair]]) -> str:
    """``task_info`` unless the observation or an observation of the ``shown`` window holds it ("" then)."""
    return unseen_task_info(task_info, observation, *(obs for _, (obs, _) in shown))


def compact_prompt(
    task: str,
    observation: str,
    admissible_actions: Sequence[str] | None,
    shown: Sequence[tuple[int, Pair]],
    answer: str,
    *,
    subgoal: str | None = None,
    task_info: str = "",
) -> str:
    """Task, task info (where no shown observation holds it), recent history, observation, current subgoal (when
    given), admissible actions and the answer format, in ~80 tokens instead of the papers' ~400: for small models
    and fast tests (an option, not the papers' prompt)."""
    lines = [f"Task: {task.strip()}"]
    if block := shown_task_info(task_info, observation, shown):
        lines.append(block)
    lines += [f"Step {n}: {obs} -> {act}" for n, (obs, act) in shown]
    lines.append(f"Now: {observation}")
    if subgoal is not None:
        lines.append(f"Subgoal: {subgoal}")
    if admissible_actions is not None:
        lines.append(f"Actions: {', '.join(admissible_actions)}")
    lines.append(f"Answer: {answer}")
    return "\n".join(lines)


def build_react_messages(
    task: str,
    observation: str,
    admissible_actions: Sequence[str] | None = None,
    history: Sequence[Pair] = (),
    *,
    env: str = "alfworld",
    history_window: int = 2,
    step_count: int | None = None,
    compact: bool = False,
    task_info: str = "",
) -> list[Message]:
    """One user message: HiPER Fig. 5/7 filled in (admissible-action sentence dropped when the list is None;
    ``task_info`` after the task sentence where no shown observation holds it); ``compact``: the same fields with
    minimal wording (``compact_prompt``; not the paper's prompt)."""
    taken = len(history) if step_count is None else step_count
    shown = recent_history(history, history_window, taken)
    if compact:
        answer = "<think>short reasoning</think><action>one action</action>"
        body = compact_prompt(task, observation, admissible_actions, shown, answer, task_info=task_info)
        return [{"role": "user", "content": body}]
    parts = [f"{env_intro(env)} Your task is to: {strip_period(task)}."]
    if block := shown_task_info(task_info, observation, shown):
        parts.append(f"Task information:\n{block}")
    if shown:
        parts.append(
            f"Prior to this step, you have already taken {taken} step(s). Below are the most recent {len(shown)} "
            f"observations and the corresponding actions you took:\n{format_history(shown)}"
        )
    parts.append(f"You are now at step {taken + 1} and your current observation is: {observation}")
    if admissible_actions is not None:
        parts.append(
            f"Your admissible actions of the current situation are: [{format_admissible(admissible_actions)}]."
        )
    parts.append(
        "Now it's your turn to take an action. You should first reason step-by-step about the current situation. "
        "This reasoning process MUST be enclosed within <think> </think> tags. Once you've finished your "
        "reasoning, you should choose an admissible action for current step and present it within "
        "<action> </action> tags."
    )
    return [{"role": "user", "content": "\n".join(parts)}]


def parse_react(text: str) -> ParseResult:
    """Exactly one ``<think>`` then one ``<action>`` block (rules in ``actors.agents.parsing``)."""
    return parse_tagged(text, REACT_FORMAT)


def react_decision(res: ParseResult, fallback: str = "empty") -> Decision:
    """Decision for a ReAct parse; the env command follows ``parsing.fallback_action``."""
    return Decision(
        action=fallback_action(res, fallback),
        valid=res.valid,
        switch=None,
        subgoal=None,
        error=res.error,
        extra={"think": res.get("think")},
    )


def format_react(think: str, action: str) -> str:
    """Canonical ReAct response (BC targets, tests)."""
    return format_blocks({"think": think, "action": action}, REACT_FORMAT.tags)


def expert(role: str, step: PlanStep) -> str:
    """The expert's reply: its subgoal as the thought, then its action."""
    return format_react(f"Current subgoal: {step.subgoal}.", step.action)


@dataclass
class ReactAgent(AgentBase):
    """ReAct baseline: one call per env step over a bounded window of recent (observation, action) pairs."""

    protocol: str = "react"
    history: list[Pair] = field(default_factory=list)
    _action: str = ""

    def next_call(self) -> ModelCall:
        msgs = build_react_messages(
            self.task,
            self.observation,
            self.admissible,
            self.history,
            env=self.env_name,
            history_window=self.history_length,
            step_count=self.steps,
            compact=self.compact,
            task_info=self.task_info,
        )
        return self._call(msgs, "agent", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        res = parse_react(text)
        d = react_decision(res)
        self._action = d.action
        return AgentStep(d, res, d.action, self._open_segment(False))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        # only the window the prompt shows is kept: memory stays bounded on long episodes
        keep = max(self.history_length, 0)
        self.history = [*self.history, (self.observation, self._action)][-keep:] if keep else []
        self._advance(observation, info)


SPEC = AgentSpec("react", ("agent",), ("agent",), ("compact",), ReactAgent, expert)
