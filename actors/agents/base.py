"""What every agent protocol shares (pure): the model call an episode asks for, the step an output becomes, the
state every protocol's agent keeps, and the ``AgentSpec`` record each protocol module declares beside its agent
(``actors/agents/<name>.py``: prompts, parser, agent, expert rendering, ``SPEC``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from actors.agents.parsing import Message, ParseResult
from actors.trajectory import Decision

DEFAULT_ADAPTERS: dict[str, str | None] = {"policy": "policy"}
"""Role → LoRA adapter name; ``"policy"`` is the fallback for every role not named (None = the base model)."""


def adapter_names(adapters: Mapping[str, str | None]) -> list[str]:
    """The distinct LoRA adapters a role map serves, sorted (the base model, None, is none of them)."""
    return sorted({name for name in adapters.values() if name is not None})


@dataclass(frozen=True)
class PlanStep:
    """One step of an env expert's plan, as the protocols render it: the subgoal it serves, its action, whether it is
    the subgoal's first or last action, and the subgoal's actions before it."""

    subgoal: str
    action: str
    first: bool
    last: bool
    before: tuple[str, ...] = ()
    """The subgoal's actions before this one (STEP-HRL's local progress accumulates within a subtask)."""


@dataclass(frozen=True)
class AgentSpec:
    """One agent protocol, declared beside its prompts and parser.

    ``roles``: the ``Turn.role`` values it emits; ``acting_roles``: those whose reply steps the env; ``options``:
    the ``rollout.agent_options`` it accepts; ``agent``: its episode agent class; ``expert(role, step)``: what a
    perfect model writes for ``role`` at a plan step (behaviour cloning's demonstrations); ``states_subgoals``:
    whether its turns state their subgoal (HISR can segment by them)."""

    name: str
    roles: tuple[str, ...]
    acting_roles: tuple[str, ...]
    options: tuple[str, ...]
    agent: type
    expert: Callable[[str, PlanStep], str]
    states_subgoals: bool = False


@dataclass(frozen=True)
class ModelCall:
    """One model call an episode needs. ``observation`` is the observation the decision is made from;
    ``acts`` says whether the reply carries an environment action."""

    messages: list[Message]
    adapter: str | None
    role: str
    observation: str
    acts: bool


@dataclass
class AgentStep:
    """What the agent made of one reply: ``action`` is the env command (None for non-acting calls)."""

    decision: Decision
    parse: ParseResult
    action: str | None
    segment_index: int


class EpisodeAgent(Protocol):
    """The interface every protocol's agent implements (module docstring)."""

    protocol: str
    admissible: list[str] | None

    def start(self, observation: str, info: Mapping[str, Any]) -> None: ...

    def next_call(self) -> ModelCall: ...

    def on_output(self, call: ModelCall, text: str) -> AgentStep: ...

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None: ...


def adapter_for(adapters: Mapping[str, str | None], role: str) -> str | None:
    return adapters[role] if role in adapters else adapters.get("policy")


@dataclass
class AgentBase:
    """State every protocol keeps: task (and its ``task_info``), current observation and admissible list, steps
    taken, segment."""

    env_name: str
    adapters: Mapping[str, str | None]
    history_length: int = 2
    task: str = ""
    task_info: str = ""
    """The env's ``info["task_info"]`` at reset ("" when it has none): what the task needs beyond its sentence
    (TextCraft's crafting commands); the prompts show it wherever no shown observation holds it
    (``unseen_task_info``)."""
    observation: str = ""
    admissible: list[str] | None = None
    steps: int = 0
    segment: int = 0
    turns: int = 0
    compact: bool = False
    """Compact prompts (react, plan_execute, hipif): same fields, minimal wording — small models, fast tests."""

    def start(self, observation: str, info: Mapping[str, Any]) -> None:
        self.task = str(info.get("task") or "")
        self.task_info = str(info.get("task_info") or "")
        self.observation = observation
        self.admissible = admissible_list(info)

    def _call(self, messages: list[Message], role: str, acts: bool) -> ModelCall:
        return ModelCall(messages, adapter_for(self.adapters, role), role, self.observation, acts)

    def _open_segment(self, boundary: bool) -> int:
        """Segment index of this turn: turn 0 is segment 0, later boundaries increment it."""
        if boundary and self.turns > 0:
            self.segment += 1
        self.turns += 1
        return self.segment

    def _advance(self, observation: str, info: Mapping[str, Any]) -> None:
        self.steps += 1
        self.observation = observation
        self.admissible = admissible_list(info)


def unseen_task_info(task_info: str, *shown: str) -> str:
    """What a prompt adds after its task sentence: ``task_info`` (stripped) unless one of the texts the prompt
    already ``shown`` (its current observation, the observations of its history window) holds it; "" when there is
    nothing to add, so a prompt without task info stays as it was."""
    block = task_info.strip()
    return block if block and not any(block in text for text in shown) else ""


def admissible_list(info: Mapping[str, Any]) -> list[str] | None:
    """What the prompt lists: ``info["prompt_actions"]`` when the env provides it (ScienceWorld's action
    templates: its full valid list would overflow the context), else the admissible actions."""
    acts = info.get("prompt_actions", info.get("admissible_actions"))
    return None if acts is None else [str(a) for a in acts]
