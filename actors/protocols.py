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

Each protocol declares its agent, its expert rendering and its roles beside its prompts and parser
(``actors/agents/<name>.py``, an ``AgentSpec``); ``AGENTS`` collects them. Pure module: imports no ray, vllm,
deepspeed or torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.agents import hipif, multi2, plan_execute, react, step_hrl
from actors.agents.base import DEFAULT_ADAPTERS, AgentSpec, EpisodeAgent
from common.registry import register

AGENTS: dict[str, AgentSpec] = {
    s.name: s for s in (react.SPEC, plan_execute.SPEC, hipif.SPEC, step_hrl.SPEC, multi2.SPEC)
}
"""Every agent protocol by name (``rollout.agent``)."""
PROTOCOLS: tuple[str, ...] = tuple(AGENTS)
"""The protocols of this tree (``AGENTS`` also holds those added by ``register_agent``)."""


def register_agent(spec: AgentSpec) -> AgentSpec:
    """Add a protocol to this process's ``AGENTS``: validation, ``make_agent`` and the rollout loop run here
    (``actors.episodes.iter_episodes``, BC demonstrations) find it. A training run's rollout workers import
    this module afresh, so a protocol they play is a line of ``AGENTS`` above. A taken name is refused."""
    expected = "an AgentSpec (a protocol module's SPEC)"
    return register(
        AGENTS, spec, kind="agent protocol", expected=expected, record=AgentSpec, caller="register_agent"
    )


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
    if protocol not in AGENTS:
        raise ValueError(f"unknown agent protocol {protocol!r}; known: {', '.join(AGENTS)}")
    cls = AGENTS[protocol].agent
    return cls(  # type: ignore[return-value]
        env_name=env_name,
        adapters=dict(DEFAULT_ADAPTERS if adapters is None else adapters),
        history_length=history_length,
        **options,
    )


@dataclass(frozen=True)
class AgentFactory:
    """How a collection makes each episode's agent (``make_agent``): one record instead of five loop parameters, so
    the episode loop does not change when a protocol gains a field."""

    protocol: str
    env_name: str
    history_length: int = 2
    adapters: Mapping[str, str | None] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """Protocol fields (``make_agent``'s ``options``)."""

    def __call__(self) -> EpisodeAgent:
        return make_agent(
            self.protocol,
            env_name=self.env_name,
            history_length=self.history_length,
            adapters=self.adapters,
            **dict(self.options),
        )
