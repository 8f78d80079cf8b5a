"""A scripted stand-in for the inference engine, for tests of the code around the engine (agents, the rollout
loop, workers), never of the engine itself: the engines have their own tests on real models."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.env_pool import EnvPool
from actors.episodes import EpisodeRequest, iter_episodes
from actors.inference import GenerationRequest, GenerationResult, InferenceEngine, SamplingParams
from actors.trajectory import Trajectory


@dataclass
class FakeEngine:
    """Deterministic engine for tests of code around the engine (not of the engine): answers each prompt with
    ``script(prompt_ids) -> str`` tokenised by ``tokenizer``; logprob -1.0 per token."""

    tokenizer: Any
    script: Any
    versions: dict[str, int] = field(default_factory=dict)

    def adapter_version(self, name: str | None) -> int:
        return 0 if name is None else self.versions.get(name, 0)

    def load_adapter(self, name: str, weights: dict[str, np.ndarray], version: int) -> bool:
        self.versions[name] = version
        return True

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[GenerationResult]:
        out = []
        for r in requests:
            text = self.script(r.prompt_ids)
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: params.max_tokens]
            out.append(
                GenerationResult(
                    ids, [-1.0] * len(ids), text, "stop", r.adapter, self.adapter_version(r.adapter)
                )
            )
        return out

    def close(self) -> None:
        return None


def run_episodes(
    engine: InferenceEngine,
    envs: EnvPool | Sequence[Any],
    requests: Iterable[EpisodeRequest],
    **kwargs: Any,
) -> list[Trajectory]:
    """All of ``iter_episodes`` in request order (same keyword arguments)."""
    requests = list(requests)
    order = {id(r): i for i, r in enumerate(requests)}
    got = list(iter_episodes(engine, envs, requests, **kwargs))
    if all(r.traj_id for r in requests):
        rank = {r.traj_id: order[id(r)] for r in requests}
        got.sort(key=lambda t: rank.get(t.traj_id, len(rank)))
    return got


def scripted(tok, replies: dict[str, list[str]] | list[str]) -> tuple[FakeEngine, list[str]]:
    """FakeEngine answering each role's calls with its next scripted reply; records the role of every prompt."""
    seen: list[str] = []
    queues = (
        {"agent": list(replies)} if isinstance(replies, list) else {k: list(v) for k, v in replies.items()}
    )

    def role_of(text: str) -> str:
        for key, role in (
            ("You are System 1", "planner"),
            ("You are System 2", "executor"),
            ("high-level planner", "high"),
            ("low-level action executor", "low"),
            ("updating local progress", "progress"),
        ):
            if key in text:
                return role
        return "agent"

    def script(prompt_ids: tuple[int, ...]) -> str:
        role = role_of(tok.decode(list(prompt_ids)))
        seen.append(role)
        return queues[role].pop(0) if queues.get(role) else "garbage without tags"

    return FakeEngine(tok, script), seen
