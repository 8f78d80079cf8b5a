"""Per-protocol episode agents: the decision logic of one episode as a small state machine, with no I/O.

Every protocol answers the same four questions, so one rollout loop (``actors.rollout``) drives them all::

    agent.start(observation, info)          # reset result
    loop:
        call = agent.next_call()            # ModelCall: chat messages, adapter, role, does it act?
        step = agent.on_output(call, text)  # AgentStep: Decision, ParseResult, env action or None
        if step.action is not None:         # acting call: the runner steps the env with step.action
            agent.observe(obs, reward, terminated, truncated, info)

Calls per environment step (roles are ``Turn.role``):

* ``react``         agent                                   (one call per step, recent-history window)
* ``plan_execute``  agent                                   (HiPER 001 Eq. 4: KEEP copies o_{t-1})
* ``hipif``         agent                                   (002 Eq. 5-6: reflection, z_t, folded history)
* ``step_hrl``      [high] low progress                     (000 Eq. 3-5: high only at start / after completion)
* ``multi2``        [planner] executor                      (004 App. C.1: planner only at start / after done)

Segments (``AgentStep.segment_index``, HiPER's option boundaries): turn 0 opens segment 0; a SWITCH (plan_execute),
a new subgoal (hipif, z_t = 1) or a high-level/planner call after the first one opens the next segment.
Malformed model output never raises: the protocol parser's fallback action is sent and ``Decision.valid`` is False.

Pure module: imports no ray, vllm, deepspeed or torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from actors.agents import hipif, multi2, plan_execute, react, step_hrl
from actors.agents.parsing import Message, ParseResult
from actors.trajectory import Decision

PROTOCOLS: tuple[str, ...] = ("react", "plan_execute", "hipif", "step_hrl", "multi2")
ROLES: dict[str, tuple[str, ...]] = {
    "react": ("agent",),
    "plan_execute": ("agent",),
    "hipif": ("agent",),
    "step_hrl": ("high", "low", "progress"),
    "multi2": ("planner", "executor"),
}
"""The ``Turn.role`` values each protocol emits."""

OPTIONS: dict[str, tuple[str, ...]] = {
    "react": ("compact",),
    "plan_execute": ("compact",),
    "hipif": ("compact", "current_window"),
    "step_hrl": ("compact", "show_admissible"),
    "multi2": ("compact", "show_admissible", "max_actions"),
}
"""The protocol options each agent accepts (``rollout.agent_options``, the ``**options`` of ``make_agent``)."""

DEFAULT_ADAPTERS: dict[str, str | None] = {"policy": "policy"}
"""Role → LoRA adapter name; ``"policy"`` is the fallback for every role not named (None = the base model)."""


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


def _adapter_for(adapters: Mapping[str, str | None], role: str) -> str | None:
    return adapters[role] if role in adapters else adapters.get("policy")


@dataclass
class _Base:
    """State every protocol keeps: task, current observation and admissible list, steps taken, segment."""

    env_name: str
    adapters: Mapping[str, str | None]
    history_length: int = 2
    task: str = ""
    observation: str = ""
    admissible: list[str] | None = None
    steps: int = 0
    segment: int = 0
    turns: int = 0
    compact: bool = False
    """Compact prompts (react, plan_execute, hipif): same fields, minimal wording — small models, fast tests."""

    def start(self, observation: str, info: Mapping[str, Any]) -> None:
        self.task = str(info.get("task") or "")
        self.observation = observation
        self.admissible = _admissible(info)

    def _call(self, messages: list[Message], role: str, acts: bool) -> ModelCall:
        return ModelCall(messages, _adapter_for(self.adapters, role), role, self.observation, acts)

    def _open_segment(self, boundary: bool) -> int:
        """Segment index of this turn: turn 0 is segment 0, later boundaries increment it."""
        if boundary and self.turns > 0:
            self.segment += 1
        self.turns += 1
        return self.segment

    def _advance(self, observation: str, info: Mapping[str, Any]) -> None:
        self.steps += 1
        self.observation = observation
        self.admissible = _admissible(info)


def _admissible(info: Mapping[str, Any]) -> list[str] | None:
    """What the prompt lists: ``info["prompt_actions"]`` when the env provides it (ScienceWorld's action
    templates: its full valid list would overflow the context), else the admissible actions."""
    acts = info.get("prompt_actions", info.get("admissible_actions"))
    return None if acts is None else [str(a) for a in acts]


@dataclass
class ReactAgent(_Base):
    """ReAct baseline: one call per env step over a bounded window of recent (observation, action) pairs."""

    protocol: str = "react"
    history: list[react.Pair] = field(default_factory=list)
    _action: str = ""

    def next_call(self) -> ModelCall:
        msgs = react.build_react_messages(
            self.task,
            self.observation,
            self.admissible,
            self.history,
            env=self.env_name,
            history_window=self.history_length,
            step_count=self.steps,
            compact=self.compact,
        )
        return self._call(msgs, "agent", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        res = react.parse_react(text)
        d = react.react_decision(res)
        self._action = d.action
        return AgentStep(d, res, d.action, self._open_segment(False))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        # only the window the prompt shows is kept: memory stays bounded on long episodes
        keep = max(self.history_length, 0)
        self.history = [*self.history, (self.observation, self._action)][-keep:] if keep else []
        self._advance(observation, info)


@dataclass
class PlanExecuteAgent(_Base):
    """HiPER Plan–Execute (001 Eq. 4): q_t = SWITCH takes the written subgoal, KEEP copies o_{t-1}."""

    protocol: str = "plan_execute"
    history: list[react.Pair] = field(default_factory=list)
    subgoal: str | None = None
    _action: str = ""

    def next_call(self) -> ModelCall:
        msgs = plan_execute.build_plan_execute_messages(
            self.task,
            self.observation,
            self.admissible,
            self.history,
            self.subgoal,
            env=self.env_name,
            history_window=self.history_length,
            step_count=self.steps,
            compact=self.compact,
        )
        return self._call(msgs, "agent", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        res = plan_execute.parse_plan_execute(text)
        d = plan_execute.plan_execute_decision(res, self.subgoal)
        self.subgoal = d.subgoal
        self._action = d.action
        return AgentStep(d, res, d.action, self._open_segment(bool(d.switch)))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        keep = max(self.history_length, 0)
        self.history = [*self.history, (self.observation, self._action)][-keep:] if keep else []
        self._advance(observation, info)


@dataclass
class HipifAgent(_Base):
    """HIPIF (002 Sec. 3): reflection + completion judgment z_t each turn; finished subgoals are folded into
    [g_k, o_k^end] records (``FoldedHistory``, Eq. 2) so the prompt holds H_{<k}, g_k and T_{k,j} only."""

    protocol: str = "hipif"
    folded: hipif.FoldedHistory = field(default_factory=hipif.FoldedHistory)
    current_window: int | None = None
    _decision: Decision | None = None

    def start(self, observation: str, info: Mapping[str, Any]) -> None:
        super().start(observation, info)
        self.folded = hipif.FoldedHistory(origin_observation=observation)

    def next_call(self) -> ModelCall:
        msgs = hipif.build_hipif_messages(
            self.task,
            self.observation,
            self.folded,
            env=self.env_name,
            admissible_actions=self.admissible,
            current_window=self.current_window,
            compact=self.compact,
        )
        return self._call(msgs, "agent", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        res = hipif.parse_hipif(text)
        d = hipif.hipif_decision(res, self.folded.current_subgoal)
        self._decision = d
        return AgentStep(d, res, d.action, self._open_segment(bool(d.switch)))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        if self._decision is not None:
            self.folded.apply(self._decision, observation)  # Alg. 1 lines 13-22: fold on z_t = 1, then record
        self._advance(observation, info)


@dataclass
class StepHrlAgent(_Base):
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
            msgs = step_hrl.build_high_messages(
                self.task, self.observation, self.completed, self.last_progress
            )
            return self._call(msgs, "high", acts=False)
        if self.phase == "progress":
            msgs = step_hrl.build_progress_messages(
                self.subtask, self._action, self.observation, self.progress
            )
            return self._call(msgs, "progress", acts=False)
        shown = self.admissible if self.show_admissible else None
        msgs = step_hrl.build_low_messages(self.subtask, self.observation, self.progress, shown)
        return self._call(msgs, "low", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        if call.role == "high":
            res = step_hrl.parse_high(text)
            d = step_hrl.high_decision(res)
            self.subtask, self.progress, self.phase = d.subgoal or "", None, "low"
            return AgentStep(d, res, None, self._open_segment(True))
        if call.role == "progress":
            res = step_hrl.parse_progress(text)
            d = step_hrl.progress_decision(res, self.subtask)
            self.progress = d.extra["progress"]
            if self._completion:  # subtask g_k ended: p̂_k goes to the high level with G_k
                self.completed.append(self.subtask)
                self.last_progress, self.phase = self.progress, "high"
            else:
                self.phase = "low"
            return AgentStep(d, res, None, self._open_segment(False))
        res = step_hrl.parse_low(text)
        d = step_hrl.low_decision(res, self.subtask)
        self._action, self._completion = d.action, bool(d.extra["completion"])
        return AgentStep(d, res, d.action, self._open_segment(False))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        self._advance(observation, info)
        self.phase = "progress"


@dataclass
class Multi2Agent(_Base):
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
            msgs = multi2.build_planner_messages(
                self.task,
                self.observation,
                self.group_action,
                env=self.env_name,
                max_actions=self.max_actions,
            )
            return self._call(msgs, "planner", acts=False)
        shown = self.admissible if self.show_admissible else None
        msgs = multi2.build_executor_messages(self.subgoal, self.observation, shown, env=self.env_name)
        return self._call(msgs, "executor", acts=True)

    def on_output(self, call: ModelCall, text: str) -> AgentStep:
        if call.role == "planner":
            res = multi2.parse_planner(text)
            d = multi2.planner_decision(res)
            self.subgoal, self.phase = d.subgoal or "", "executor"
            return AgentStep(d, res, None, self._open_segment(True))
        res = multi2.parse_executor(text)
        d = multi2.executor_decision(res, self.subgoal)
        self._completion = bool(d.extra["completion"])
        self.group_action.append(d.action)
        return AgentStep(d, res, d.action, self._open_segment(False))

    def observe(
        self, observation: str, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        self._advance(observation, info)
        if self._completion:
            self.phase = "planner"


_AGENTS: dict[str, type[_Base]] = {
    "react": ReactAgent,
    "plan_execute": PlanExecuteAgent,
    "hipif": HipifAgent,
    "step_hrl": StepHrlAgent,
    "multi2": Multi2Agent,
}


def make_agent(
    protocol: str,
    *,
    env_name: str,
    history_length: int = 2,
    adapters: Mapping[str, str | None] | None = None,
    **options: Any,
) -> EpisodeAgent:
    """A fresh agent for one episode.  ``adapters`` maps role → adapter (``"policy"`` covers unnamed roles);
    ``options`` are protocol fields (``show_admissible`` for step_hrl/multi2, ``current_window`` for hipif,
    ``max_actions`` for multi2)."""
    if protocol not in _AGENTS:
        raise ValueError(f"unknown agent protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    cls = _AGENTS[protocol]
    return cls(  # type: ignore[return-value]
        env_name=env_name,
        adapters=dict(DEFAULT_ADAPTERS if adapters is None else adapters),
        history_length=history_length,
        **options,
    )
