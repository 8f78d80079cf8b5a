"""Expert demonstrations in the agent's own output format, for the behaviour-cloning warm start.

SmolLM2-135M zero-shot wins nothing on our benchmarks (docs/platform.md), so RL needs a BC start, as STEP-HRL (Sec. 3.2),
HISR and Multi2 do. A demonstration is the environment's expert plan — ``env.expert_plan()``: a list of
(subgoal text, [actions]) — written the way the protocol's model would write it: each protocol's ``expert``
(``actors/agents/<name>.py``, its ``AgentSpec``), e.g. Plan–Execute SWITCHes on a subgoal's first action and KEEPs
after (HiPER: subgoal boundaries = expert plan boundaries).

The episodes are played by the real rollout loop (``actors.episodes.iter_episodes``) with ``ExpertEngine`` standing in
for the model, so demonstration turns are built by the same code as RL turns (prompt token ids, masks, roles) —
only the response comes from the expert (tokenised text + EOS, logprobs 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.agents.base import PlanStep
from actors.inference import GenerationRequest, GenerationResult, SamplingParams
from actors.protocols import AGENTS, AgentFactory
from actors.trajectory import Trajectory


def flatten_plan(plan: Sequence[tuple[str, Sequence[str]]]) -> list[PlanStep]:
    steps = []
    for subgoal, actions in plan:
        for i, a in enumerate(actions):
            steps.append(PlanStep(subgoal, a, i == 0, i == len(actions) - 1, tuple(actions[:i])))
    return steps


def expert_text(protocol: str, role: str, step: PlanStep) -> str:
    """What a perfect model would write for ``role`` at ``step`` under ``protocol`` (its ``AgentSpec.expert``)."""
    return AGENTS[protocol].expert(role, step)


@dataclass
class ExpertEngine:
    """An ``InferenceEngine`` that answers with the expert plan of the one episode being played.

    Requests name their *role* as the adapter (the demo collector maps each role to an adapter of the same name);
    the cursor advances after each acting call. ``plan`` is set per episode by ``collect_demonstrations``."""

    tokenizer: Any
    protocol: str
    plan: list[PlanStep] = field(default_factory=list)
    cursor: int = 0

    def adapter_version(self, name: str | None) -> int:
        return 0

    def load_adapter(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
        return True

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[GenerationResult]:
        out = []
        for r in requests:
            role = r.adapter or "agent"
            step = self.plan[min(self.cursor, len(self.plan) - 1)]
            if role in AGENTS[self.protocol].acting_roles:
                self.cursor += 1
            text = expert_text(self.protocol, role, step)
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(GenerationResult(ids, [0.0] * len(ids), text, "stop", r.adapter, 0))
        return out

    def close(self) -> None:
        return None


def check_demos_fit(demos: Sequence[Trajectory], max_new_tokens: int, tokenizer: Any) -> None:
    """Refuse demonstrations the rollout engine could not write: a response cut at ``max_new_tokens`` loses its
    closing tags, so the env gets no command and the task is unwinnable however well the policy learns
    (``rollout.max_new_tokens`` 40 cut 9 of 104 depth-1 TextCraft train tasks). The EOS token may be cut: the text
    before it is complete. Raises ValueError in one line naming the longest response."""
    eos = tokenizer.eos_token_id
    lengths = [
        (len(t.response_ids) - int(len(t.response_ids) > 0 and t.response_ids[-1] == eos), d.task_id)
        for d in demos
        for t in d.turns
    ]
    too_long = [(n, task) for n, task in lengths if n > max_new_tokens]
    if too_long:
        n, task = max(too_long)
        raise ValueError(
            f"rollout.max_new_tokens {max_new_tokens} cuts {len(too_long)} of {len(lengths)} demonstration responses "
            f"(the longest, on task {task}, needs {n} tokens): raise it to at least {n}"
        )


def collect_demonstrations(
    env_name: str,
    protocol: str,
    task_ids: Sequence[str],
    *,
    tokenizer: Any,
    env_options: dict[str, Any] | None = None,
    max_steps: int = 50,
    history_length: int = 2,
    agent_options: dict[str, Any] | None = None,
) -> list[Trajectory]:
    """Play each task with the expert through the real rollout loop; keep the won episodes. Tasks without a
    demonstration (the expert has no plan for it, e.g. ALFWorld's expert gave up: ``env.expert_failure``) or whose
    replay did not win are skipped and counted in one printed line."""
    import envs
    from actors.episodes import EpisodeRequest, iter_episodes

    env = envs.make(env_name, **(env_options or {}))
    # the planner's own step limit is the run's: an expert that needs more steps gives no plan (ALFWorld)
    planner = envs.make(env_name, **{**(env_options or {}), "max_steps": max_steps})
    engine = ExpertEngine(tokenizer, protocol)
    adapters = {role: role for role in AGENTS[protocol].roles}
    demos: list[Trajectory] = []
    skipped: Counter[str] = Counter()
    try:
        for i, task_id in enumerate(task_ids):
            planner.reset(task_id=task_id, seed=i)
            engine.plan, engine.cursor = flatten_plan(planner.expert_plan()), 0
            if not engine.plan:
                skipped[getattr(planner, "expert_failure", "") or "no expert plan"] += 1
                continue
            (traj,) = iter_episodes(
                engine,
                [env],
                [EpisodeRequest(task_id, i, group_id=f"demo-{i}", traj_id=f"demo-{i}")],
                agent=AgentFactory(protocol, env_name, history_length, adapters, agent_options or {}),
                params=SamplingParams(),
                max_steps=max_steps,
                tokenizer=tokenizer,
            )
            if traj.won:
                demos.append(traj)
            else:
                skipped["replay not won"] += 1
    finally:
        env.close()
        planner.close()
    if skipped:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
        print(
            f"[hierarl] demonstrations: {len(demos)} of {len(task_ids)} {env_name} tasks; skipped {reasons}"
        )
    return demos
