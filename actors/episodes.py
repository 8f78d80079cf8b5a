"""Episodes: many at once, one batched ``engine.generate`` per round (``iter_episodes``), and the records a rollout
worker hands back (``pack_group`` / ``unpack_group``).

Round structure of ``iter_episodes`` (continuous batching over environment slots)::

    free slots ── reset(task, seed) ──► agent.start
    every active episode: agent.next_call() ─► render_prompt (chat template → token ids)
                          ALL prompts ─► engine.generate (one call) ─► response ids + logprobs
                          decode pieces → parse → masks → Turn ─► agent.on_output
    every acting episode: env actions of the round ─► EnvPool.step / env.step (together) ─► agent.observe
    finished episodes are yielded; their slots take the next queued request

Token in, token out: a ``Turn`` stores exactly the prompt ids the engine received and the response ids and
logprobs it returned.  The text is decoded from those ids, and the masks come from per-token decoded pieces of the
same ids, so masks and text can never disagree with the tokens the learner trains on.

Context overflow: histories are bounded by the protocols (ReAct/HiPER windows, STEP-HRL's step-level prompts), so
a prompt longer than ``max_prompt_tokens`` (model context minus ``max_tokens``) ends the episode as *truncated*
(``Trajectory.info["truncated_by"] = "context"``; its last turn gets ``truncated=True`` and bootstraps) instead of
silently cutting text the protocol put there.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from actors.agents.base import ModelCall
from actors.agents.parsing import masks_for_parse, normalize_ws, render_prompt, token_offsets_from_pieces
from actors.env_pool import EnvPool, EnvResult
from actors.inference import GenerationRequest, InferenceEngine, SamplingParams
from actors.protocols import AgentFactory
from actors.trajectory import Trajectory, TrajectoryGroup, Turn, from_numpy_dict, to_numpy_dict


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to play: the env is reset with ``(task_id, seed)``."""

    task_id: str | None
    seed: int | None
    group_id: str = ""
    traj_id: str = ""


# ---------------------------------------------------------------------------------------------------------------
# Tokens → text pieces, anchor keys
# ---------------------------------------------------------------------------------------------------------------


def response_pieces(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[str]]:
    """The decoded response text and one piece per token with ``"".join(pieces) == text``.

    Piece i is what decoding ``ids[:i+1]`` adds to the text (longest common prefix with the full decode, kept
    monotone), so a byte-fallback token that only completes a multi-byte character later gets ``""`` and the
    character lands on the token that completes it; special tokens (EOS) decode to ``""``.
    """
    ids = [int(i) for i in ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    pieces: list[str] = []
    done = 0
    for i in range(len(ids)):
        prefix = tokenizer.decode(ids[: i + 1], skip_special_tokens=True) if i + 1 < len(ids) else text
        n = done
        limit = min(len(prefix), len(text))
        while n < limit and prefix[n] == text[n]:
            n += 1
        pieces.append(text[done:n])
        done = n
    if pieces:
        pieces[-1] += text[done:]
    return text, pieces


def anchor_key(observation: str) -> str:
    """GiGPO anchor-state key: the observation with whitespace collapsed (identical states in a group share it)."""
    return normalize_ws(observation)


# ---------------------------------------------------------------------------------------------------------------
# Environment slots: an EnvPool, or in-process envs behind the same batched calls
# ---------------------------------------------------------------------------------------------------------------


class _LocalSlots:
    """A list of in-process ``TextEnv`` with EnvPool's batched ``reset``/``step``; exceptions become failures."""

    def __init__(self, envs: Sequence[Any]) -> None:
        self.envs = list(envs)

    @property
    def num_slots(self) -> int:
        return len(self.envs)

    def reset(self, requests: Iterable[tuple[int, str | None, int | None]]) -> list[EnvResult]:
        out = []
        for slot, task_id, seed in requests:
            try:
                obs, info = self.envs[slot].reset(task_id=task_id, seed=seed)
                out.append(EnvResult(slot, obs, 0.0, False, False, info, op="reset"))
            except Exception as e:  # a broken env fails its episode (the group is retried), never the loop
                out.append(
                    EnvResult(slot, "", 0.0, False, False, {}, True, f"exception in reset: {e!r}", "reset")
                )
        return out

    def step(self, actions: Mapping[int, str]) -> dict[int, EnvResult]:
        out = {}
        for slot, action in actions.items():
            try:
                obs, r, term, trunc, info = self.envs[slot].step(action)
                out[slot] = EnvResult(slot, obs, float(r), bool(term), bool(trunc), info)
            except Exception as e:
                out[slot] = EnvResult(slot, "", 0.0, False, False, {}, True, f"exception in step: {e!r}")
        return out


def _slots(envs: EnvPool | Sequence[Any]) -> EnvPool | _LocalSlots:
    return envs if isinstance(envs, EnvPool) else _LocalSlots(envs)


# ---------------------------------------------------------------------------------------------------------------
# The episode loop
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _Episode:
    agent: Any
    traj: Trajectory
    steps: int = 0


def _finish(
    ep: _Episode, status: str, *, reason: str = "", info: Mapping[str, Any] | None = None
) -> Trajectory:
    traj = ep.traj
    traj.status = status  # type: ignore[assignment]
    if status == "failed":
        traj.failure = reason
    if status != "finished" and traj.turns:
        traj.turns[-1].truncated = True  # cut, not an MDP end: the value bootstraps here
    if info is not None:
        traj.won = bool(info.get("won", False))
        traj.score = float(info.get("score", 0.0) or 0.0)
    traj.info["env_steps"] = ep.steps
    if status == "truncated":
        traj.info["truncated_by"] = reason or "max_steps"
    return traj


def iter_episodes(
    engine: InferenceEngine,
    envs: EnvPool | Sequence[Any],
    requests: deque[EpisodeRequest] | Iterable[EpisodeRequest],
    *,
    agent: AgentFactory,
    params: SamplingParams,
    max_steps: int,
    tokenizer: Any = None,
    policy_version: int | None = None,
    max_prompt_tokens: int | None = None,
    before_generate: Callable[[], None] | None = None,
) -> Iterator[Trajectory]:
    """Play ``requests`` on the env slots, yielding each trajectory when it ends (module docstring); ``agent`` makes
    each episode's agent.

    ``requests`` may be a ``deque`` the caller appends to while iterating (group retries).  ``policy_version``
    None records the engine's reported adapter version on every turn (the weights that really generated it);
    an int overrides it (e.g. for base-model evaluation).  ``before_generate`` runs before every batched
    generation (where staged weights are applied).  A fixed ``params.seed`` makes vLLM sample identical replies
    for identical prompts, which collapses a group: leave it None for training.
    """
    tokenizer = tokenizer if tokenizer is not None else engine.tokenizer
    queue = requests if isinstance(requests, deque) else deque(requests)
    slots = _slots(envs)
    free = list(range(slots.num_slots))
    active: dict[int, _Episode] = {}
    while queue or active:
        done: list[Trajectory] = []
        starts = [(free.pop(0), queue.popleft()) for _ in range(min(len(free), len(queue)))]
        if starts:
            for (slot, req), res in zip(
                starts, slots.reset([(s, r.task_id, r.seed) for s, r in starts]), strict=True
            ):
                traj = Trajectory(
                    traj_id=req.traj_id or uuid.uuid4().hex[:12],
                    group_id=req.group_id,
                    task_id=req.task_id or str(res.info.get("task_id", "")),
                    env_name=agent.env_name,
                    task=str(res.info.get("task", "")),
                    info={
                        "seed": req.seed,
                        "task_type": str(res.info.get("task_type", "")),
                        "admissible_actions": res.info.get("admissible_actions"),
                    },
                )
                ep = _Episode(agent(), traj)
                if res.failed:
                    done.append(_finish(ep, "failed", reason=res.failure))
                    free.append(slot)
                    continue
                ep.agent.start(res.observation, res.info)
                active[slot] = ep

        calls: list[tuple[int, ModelCall, list[int]]] = []
        for slot, ep in list(active.items()):
            call = ep.agent.next_call()
            prompt = render_prompt(tokenizer, call.messages)
            if max_prompt_tokens is not None and len(prompt) > max_prompt_tokens:
                done.append(_finish(active.pop(slot), "truncated", reason="context"))
                free.append(slot)
                continue
            calls.append((slot, call, prompt))

        if calls:
            if before_generate is not None:
                before_generate()
            results = engine.generate([GenerationRequest(tuple(p), c.adapter) for _, c, p in calls], params)
            actions: dict[int, str] = {}
            for (slot, call, prompt), res in zip(calls, results, strict=True):
                ep = active[slot]
                text, pieces = response_pieces(tokenizer, res.response_ids)
                step = ep.agent.on_output(call, text)
                n = len(res.response_ids)
                version = policy_version if policy_version is not None else res.adapter_version
                ep.traj.turns.append(
                    Turn(
                        prompt_ids=np.asarray(prompt, dtype=np.int64),
                        response_ids=np.asarray(res.response_ids, dtype=np.int64),
                        logprobs=np.asarray(res.logprobs, dtype=np.float32),
                        masks=masks_for_parse(step.parse, token_offsets_from_pieces(pieces), n),
                        decision=step.decision,
                        observation=call.observation,
                        response_text=text,
                        policy_version=int(version),
                        adapter=call.adapter or "",
                        role=call.role,
                        anchor_key=anchor_key(call.observation) if call.acts else "",
                        segment_index=step.segment_index,
                        info={
                            "prompt_tokens": len(prompt),
                            "response_tokens": n,
                            "finish_reason": res.finish_reason,
                            "num_admissible": None
                            if ep.agent.admissible is None
                            else len(ep.agent.admissible),
                        },
                    )
                )
                if step.action is not None:
                    actions[slot] = step.action
            if actions:
                for slot, r in slots.step(actions).items():
                    ep = active[slot]
                    turn = ep.traj.turns[-1]
                    if r.failed:
                        done.append(_finish(active.pop(slot), "failed", reason=r.failure))
                        free.append(slot)
                        continue
                    ep.steps += 1
                    turn.env_reward = float(r.reward)
                    turn.terminated = bool(r.terminated)
                    turn.info["valid_action"] = bool(r.info.get("valid_action", True))
                    turn.info["score"] = float(
                        r.info.get("score", 0.0) or 0.0
                    )  # the env's progress after the step
                    turn.info["next_observation"] = r.observation
                    if "subgoals_done" in r.info:  # the env's progress: the expert's switch points
                        turn.info["subgoals_done"] = int(r.info["subgoals_done"])
                    ep.agent.observe(r.observation, r.reward, r.terminated, r.truncated, r.info)
                    if r.terminated or r.truncated or ep.steps >= max_steps:
                        status = "finished" if r.terminated else "truncated"
                        done.append(_finish(active.pop(slot), status, info=r.info))
                        free.append(slot)
        yield from done


# ---------------------------------------------------------------------------------------------------------------
# Groups in wire form
# ---------------------------------------------------------------------------------------------------------------


def pack_group(group: TrajectoryGroup, *, seed: int | None, attempts: int) -> dict[str, Any]:
    """A group for the object store: metadata plus ``to_numpy_dict`` of its trajectories under ``"data"``."""
    versions = sorted({t.policy_version for tr in group.trajectories for t in tr.turns})
    return {
        "group_id": group.group_id,
        "task_id": group.task_id,
        "seed": seed,
        "attempts": attempts,
        "policy_versions": versions,
        "data": to_numpy_dict(group.trajectories),
    }


def unpack_group(packed: Mapping[str, Any]) -> TrajectoryGroup:
    return TrajectoryGroup(packed["group_id"], packed["task_id"], from_numpy_dict(packed["data"]))


# ---------------------------------------------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------------------------------------------
