"""Rollout: many episodes at once, one batched ``engine.generate`` per round, and the worker that owns it all.

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

``RolloutWorker`` is a plain class; ``cluster/`` wraps it with ``ray.remote``.  Streaming: ``collect_stream``
yields each group as soon as its G episodes are done (use it as a Ray streaming generator,
``num_returns="streaming"``), and ``collect`` is its list; a driver that prefers futures calls ``collect`` once per
group and ``ray.wait``s on them.  Weights sent with ``set_weights`` while a collection runs (actor created with
``max_concurrency >= 2``) are applied between two generation rounds, never inside one.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from actors.agent_loop import make_agent
from actors.agents.base import ModelCall, adapter_for
from actors.agents.parsing import masks_for_parse, normalize_ws, render_prompt, token_offsets_from_pieces
from actors.env_pool import EnvPool, EnvResult, _build_env
from actors.inference import GenerationRequest, GenerationResult, InferenceEngine, SamplingParams
from actors.trajectory import Trajectory, TrajectoryGroup, Turn, from_numpy_dict, to_numpy_dict
from common.lora import LoraSpec
from common.progress import Ticker


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
    protocol: str,
    env_name: str,
    params: SamplingParams,
    max_steps: int,
    tokenizer: Any = None,
    adapters: Mapping[str, str | None] | None = None,
    policy_version: int | None = None,
    history_length: int = 2,
    max_prompt_tokens: int | None = None,
    agent_options: Mapping[str, Any] | None = None,
    before_generate: Callable[[], None] | None = None,
) -> Iterator[Trajectory]:
    """Play ``requests`` on the env slots, yielding each trajectory when it ends (module docstring).

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
                    env_name=env_name,
                    task=str(res.info.get("task", "")),
                    info={
                        "seed": req.seed,
                        "task_type": str(res.info.get("task_type", "")),
                        "admissible_actions": res.info.get("admissible_actions"),
                    },
                )
                ep = _Episode(
                    make_agent(
                        protocol,
                        env_name=env_name,
                        history_length=history_length,
                        adapters=adapters,
                        **dict(agent_options or {}),
                    ),
                    traj,
                )
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


@dataclass(frozen=True)
class WorkerConfig:
    """Everything one rollout worker needs. Built from a run config (``launch.config.TrainConfig``) by
    ``launch.specs.rollout_worker_config``: the fields the run config holds have no default here (the run config's
    dataclasses hold the one set of defaults); only the worker-specific ones do."""

    model_path: str
    """HF folder, or "smollm2" for the packaged SmolLM2-135M-Instruct (``model.path``)."""
    engine: str
    """"vllm", "hf" or "auto" (``rollout.engine``)."""
    weight_sync: str
    """"lora" or "merged" (``rollout.weight_sync``: vLLM serves the adapter merged into its base weights)."""
    dtype: str
    lora: LoraSpec
    protocol: str
    env_name: str
    env_options: Mapping[str, Any]
    num_envs: int
    """Concurrent episodes (env slots; ``env.workers_per_rollout``)."""
    use_env_pool: bool
    """Subprocess EnvPool (crash isolation) or in-process envs (cheap envs, tests)."""
    step_timeout_s: float
    max_steps: int
    temperature: float
    top_p: float
    max_new_tokens: int
    max_model_len: int
    history_length: int
    max_group_retries: int
    seed: int
    agent_options: Mapping[str, Any]
    device: str = "cpu"
    torch_threads: int = 0
    """Torch threads of the worker process (``cpu_threads``, resolved by the driver); 0: as the process started."""
    adapter_path: str | None = None
    """PEFT folder whose weights every adapter starts from (its adapter_config.json overrides ``lora``), or a
    folder with one such subfolder per adapter name (a run with ``model.role_adapters``: PEFT saves each adapter
    under its name); None: zero LoRA B (the base model's outputs) until the learner's first ``set_weights``."""
    adapters: Mapping[str, str | None] = field(default_factory=lambda: {"policy": "policy"})
    """Role → adapter name (``actors.agent_loop.make_agent``)."""


def read_peft_adapter(path: str | Path) -> tuple[dict[str, np.ndarray], LoraSpec]:
    """Tensors and spec of a PEFT adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``)."""
    from safetensors.torch import load_file

    path = Path(path)
    cfg = json.loads((path / "adapter_config.json").read_text())
    targets = cfg["target_modules"]
    spec = LoraSpec(
        rank=int(cfg["r"]),
        alpha=int(cfg["lora_alpha"]),
        target_modules=tuple(sorted(targets) if isinstance(targets, list | set) else [targets]),
        dropout=float(cfg.get("lora_dropout", 0.0)),
    )
    # via torch: a bf16 learner saves bf16 tensors, which numpy cannot represent
    tensors = load_file(str(path / "adapter_model.safetensors"))
    return {k: v.float().numpy() for k, v in tensors.items()}, spec


def zero_lora_weights(model_path: str, spec: LoraSpec) -> dict[str, np.ndarray]:
    """All-zero LoRA tensors in PEFT's state-dict naming for ``model_path`` (shapes from a meta-device model):
    B = 0 makes the adapter an exact no-op, which vLLM needs as a starting adapter to serve requests by name."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
        model = get_peft_model(
            base, LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=list(spec.target_modules))
        )
    return {k: np.zeros(tuple(v.shape), np.float32) for k, v in get_peft_model_state_dict(model).items()}


@dataclass
class _Group:
    """One group being played: its task, env seed, size, replay attempt and finished episodes."""

    task_id: str | None
    seed: int | None
    size: int
    attempt: int
    trajs: list[Trajectory] = field(default_factory=list)


@dataclass
class _Groups:
    """The groups one collection plays: the episode queue ``iter_episodes`` draws from (it may grow while that
    runs: retries, ``RolloutWorker.enqueue``) and each unfinished group by id."""

    queue: deque[EpisodeRequest] = field(default_factory=deque)
    pending: dict[str, _Group] = field(default_factory=dict)
    ticker: Ticker | None = None

    def submit(self, task_id: str | None, seed: int | None, size: int, attempt: int = 0) -> None:
        gid = f"{task_id}|s{seed}|{uuid.uuid4().hex[:8]}"
        self.pending[gid] = _Group(task_id, seed, size, attempt)
        self.queue.extend(EpisodeRequest(task_id, seed, gid, f"{gid}/{i}") for i in range(size))
        if self.ticker is not None:
            self.ticker.total += size


class RolloutWorker:
    """Owns an inference engine and the env slots; collects whole groups (module docstring for streaming)."""

    def __init__(
        self,
        config: WorkerConfig,
        engine: InferenceEngine | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        """``engine``: an already built engine to use instead of building one from ``config`` (tests, or an
        engine shared with an evaluator); its ``tokenizer`` then renders the prompts. ``rank`` of ``world_size``
        rollout workers names this one in its progress lines."""
        from actors.inference import make_engine
        from actors.models import resolve_model_path

        self.config = config
        if config.torch_threads:
            import torch

            torch.set_num_threads(config.torch_threads)
        self.name = "rollout" if world_size == 1 else f"rollout {rank + 1}/{world_size}"
        self.model_path = resolve_model_path(config.model_path)
        lora, initial = config.lora, None
        self.adapter_names = sorted({a for a in config.adapters.values() if a is not None})
        per_adapter: dict[str, dict[str, np.ndarray]] = {}
        if config.adapter_path:
            root = Path(config.adapter_path)
            if all((root / n / "adapter_config.json").exists() for n in self.adapter_names):
                for n in self.adapter_names:
                    per_adapter[n], lora = read_peft_adapter(root / n)
            else:
                initial, lora = read_peft_adapter(root)
        if engine is None:
            from transformers import AutoTokenizer

            engine = make_engine(
                config.engine,
                self.model_path,
                lora,
                dtype=config.dtype,
                device=config.device,
                max_model_len=config.max_model_len,
                seed=config.seed,
                merged=config.weight_sync == "merged",
            )
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            weights = initial if initial is not None else zero_lora_weights(self.model_path, lora)
        else:
            self.tokenizer = engine.tokenizer
            weights = initial if initial is not None else {}
        self.engine = engine
        for name in self.adapter_names:
            if not self.engine.load_adapter(name, per_adapter.get(name, weights), 0):
                raise RuntimeError(f"initial adapter {name!r} could not be loaded")
        self.envs: EnvPool | list[Any]
        if config.use_env_pool:
            self.envs = EnvPool(
                config.env_name,
                config.num_envs,
                dict(config.env_options),
                step_timeout_s=config.step_timeout_s,
            )
        else:
            self.envs = [
                _build_env(config.env_name, dict(config.env_options)) for _ in range(config.num_envs)
            ]
        self.params = SamplingParams(config.temperature, config.top_p, config.max_new_tokens, seed=None)
        self._version = 0
        self._lock = threading.Condition()
        self._collecting = False
        self._staged: list[dict[str, Any]] = []
        self._serving = _Groups()  # what ``serve`` plays
        self._stop = False  # ``stop`` was called and ``serve`` has not ended since
        self.stats: dict[str, int] = {"groups": 0, "group_retries": 0, "groups_dropped": 0, "episodes": 0}

    # ------------------------------------------------------------------ weights

    def version(self) -> int:
        return self._version

    def set_weights(self, weights: dict[str, np.ndarray], version: int, adapter: str | None = None) -> bool:
        """Load LoRA ``weights`` as ``version`` into ``adapter`` (None: every adapter the roles use).  During a
        collection the load waits for the gap between two generation rounds; on failure the old adapter stays
        and False is returned."""
        names = self.adapter_names if adapter is None else [adapter]
        with self._lock:
            if not self._collecting:
                return self._load(weights, version, names)
            entry: dict[str, Any] = {"args": (weights, version, names), "ok": None}
            self._staged.append(entry)
            while entry["ok"] is None:
                self._lock.wait()
            return bool(entry["ok"])

    def _load(self, weights: dict[str, np.ndarray], version: int, names: Sequence[str]) -> bool:
        ok = all([self.engine.load_adapter(n, weights, version) for n in names])
        if ok:
            self._version = version
        return ok

    def _apply_staged(self) -> None:
        with self._lock:
            for entry in self._staged:
                entry["ok"] = self._load(*entry["args"])
            self._staged = []
            self._lock.notify_all()

    # ------------------------------------------------------------------ collection

    def collect_stream(
        self,
        task_ids: Sequence[str | None],
        group_size: int,
        seed: int | None = None,
        *,
        packed: bool = True,
        temperature: float | None = None,
        sample_seed: int | None = None,
        seeds: Sequence[int] | None = None,
    ) -> Iterator[dict[str, Any] | TrajectoryGroup]:
        """Yield one group per task id as soon as its ``group_size`` episodes (same task, same env ``seed``; or
        ``seeds[i]`` for task i, as an evaluation panel fixes them) are all done.  A group with a failed episode is replayed whole, up to ``max_group_retries`` times, then
        dropped (``stats["groups_dropped"]``): a partial group is never returned.  ``packed``: the
        ``pack_group`` dict (numpy arrays, for Ray); else a ``TrajectoryGroup``.  ``temperature`` overrides the
        configured one for this call (evaluation at the validation temperature); ``sample_seed`` seeds torch's
        RNG first, which makes the HF engine's sampling reproducible (exact resume); vLLM ignores it."""
        if sample_seed is not None:
            import torch

            torch.manual_seed(sample_seed)
        groups = _Groups()
        if seeds is not None and len(seeds) != len(task_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(task_ids)} tasks")
        for i, task_id in enumerate(task_ids):
            groups.submit(task_id, seed if seeds is None else int(seeds[i]), group_size)
        yield from self._play(groups, self._params(temperature), packed)

    def serve(
        self, *, temperature: float | None = None, packed: bool = True
    ) -> Iterator[dict[str, Any] | TrajectoryGroup]:
        """Asynchronous rollouts (``max_staleness``): play the groups that ``enqueue`` adds, across weight pushes
        (each applied between two generation rounds; every turn records the version that sampled it), yielding
        each group as it finishes, until ``stop`` and the groups queued before it are done.  New groups join the
        running batch as env slots free up.  Call ``enqueue``, ``stop``, ``set_weights`` and ``counters`` in the
        actor's ``control`` concurrency group while this runs in the default one (either may come first)."""
        params = self._params(temperature)
        while True:
            with self._lock:
                while not self._serving.queue and not self._stop:
                    self._lock.wait()
                if not self._serving.queue:  # stopped, and everything queued is done (or dropped)
                    self._serving, self._stop = _Groups(), False
                    return
            yield from self._play(self._serving, params, packed, report_drops=True)

    def enqueue(self, task_ids: Sequence[str | None], group_size: int, seed: int | None = None) -> None:
        """Queue one group per task for ``serve`` (the running one, or the next to start)."""
        with self._lock:
            for task_id in task_ids:
                self._serving.submit(task_id, seed, group_size)
            self._lock.notify_all()

    def stop(self, drop_queued: bool = False) -> None:
        """End ``serve`` (the running one, or the next to start) once the groups queued so far are done;
        ``drop_queued``: once the episodes already playing end (the rest of the queue, and so their unfinished
        groups, are dropped)."""
        with self._lock:
            self._stop = True
            if drop_queued:
                self._serving.queue.clear()
            self._lock.notify_all()

    def _params(self, temperature: float | None) -> SamplingParams:
        return (
            self.params if temperature is None else dataclasses.replace(self.params, temperature=temperature)
        )

    def _play(
        self, groups: _Groups, params: SamplingParams, packed: bool, report_drops: bool = False
    ) -> Iterator[dict[str, Any] | TrajectoryGroup]:
        """Play ``groups``' queue (which may grow while this runs), yielding each whole group (module docstring);
        ``report_drops``: also yield ``{"dropped_group": task_id, "seed": seed}`` for a group dropped after its
        retries (``serve``: the driver counts what it queued)."""
        ticker = Ticker(self.name, len(groups.queue), "episodes")
        groups.ticker = ticker
        steps = 0
        with self._lock:
            self._collecting = True
        try:
            for traj in iter_episodes(
                self.engine,
                self.envs,
                groups.queue,
                protocol=self.config.protocol,
                env_name=self.config.env_name,
                params=params,
                max_steps=self.config.max_steps,
                tokenizer=self.tokenizer,
                adapters=self.config.adapters,
                history_length=self.config.history_length,
                max_prompt_tokens=self.config.max_model_len - self.config.max_new_tokens,
                agent_options=self.config.agent_options,
                before_generate=self._apply_staged,
            ):
                self.stats["episodes"] += 1
                steps += traj.info.get(
                    "env_steps", len(traj.turns)
                )  # not model calls: STEP-HRL makes 2-3 a step
                ticker.advance(1, f"{steps} env steps in finished episodes")
                with self._lock:
                    g = groups.pending[traj.group_id]
                    g.trajs.append(traj)
                    if len(g.trajs) < g.size:
                        continue
                    del groups.pending[traj.group_id]
                    if any(t.status == "failed" for t in g.trajs):
                        if g.attempt < self.config.max_group_retries:
                            self.stats["group_retries"] += 1
                            groups.submit(g.task_id, g.seed, g.size, g.attempt + 1)
                        else:
                            self.stats["groups_dropped"] += 1
                            if report_drops:
                                yield {"dropped_group": str(g.task_id), "seed": g.seed}
                        continue
                g.trajs.sort(key=lambda t: int(t.traj_id.rsplit("/", 1)[1]))
                group = TrajectoryGroup(traj.group_id, str(g.task_id or g.trajs[0].task_id), g.trajs)
                self.stats["groups"] += 1
                yield pack_group(group, seed=g.seed, attempts=g.attempt + 1) if packed else group
        finally:
            groups.ticker = None
            ticker.close(f"{steps} env steps, {steps / max(ticker.elapsed, 1e-9):.1f}/s")
            with self._lock:
                self._collecting = False
            self._apply_staged()

    def collect(
        self,
        task_ids: Sequence[str | None],
        group_size: int,
        seed: int | None = None,
        *,
        packed: bool = True,
        temperature: float | None = None,
        sample_seed: int | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[dict[str, Any] | TrajectoryGroup]:
        """``list(collect_stream(...))``: whole groups only, in completion order."""
        return list(
            self.collect_stream(
                task_ids,
                group_size,
                seed,
                packed=packed,
                temperature=temperature,
                sample_seed=sample_seed,
                seeds=seeds,
            )
        )

    def sample(
        self, prompts: Sequence[Sequence[int]], role: str, seed: int, *, temperature: float | None = None
    ) -> list[GenerationResult]:
        """One response per prompt (token ids) from the adapter serving ``role``, with no env step (Multi2's
        policy-anchored samples at stored states)."""
        params = dataclasses.replace(
            self.params,
            seed=seed,
            temperature=self.params.temperature if temperature is None else temperature,
        )
        adapter = adapter_for(self.config.adapters, role)
        with self._lock:
            return self.engine.generate([GenerationRequest(tuple(p), adapter) for p in prompts], params)

    def counters(self) -> dict[str, int]:
        """Cumulative counts since the worker started: groups returned, retried and dropped, episodes, and (with
        an env pool) env-worker restarts, recycles, timeouts, crashes and exceptions as ``env_<name>``."""
        out = dict(self.stats)
        if isinstance(self.envs, EnvPool):
            out.update({f"env_{k}": v for k, v in self.envs.stats.items()})
        return out

    def close(self) -> None:
        if isinstance(self.envs, EnvPool):
            self.envs.close()
        else:
            for env in self.envs:
                env.close()
        self.engine.close()
