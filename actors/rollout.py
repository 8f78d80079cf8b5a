"""The rollout worker: an inference engine and a pool of environments, playing groups of episodes
(``actors.episodes.iter_episodes``) for the driver.

``RolloutWorker`` is a plain class; ``cluster/`` wraps it with ``ray.remote``.  Two ways to play: ``collect``
plays a fixed set of groups and returns them whole (the synchronous loop, evaluation); ``serve`` is a Ray streaming
generator (``num_returns="streaming"``) that plays whatever ``enqueue`` adds across weight pushes, yielding each group
as it finishes (the asynchronous loop).  Both run the same ``_play``.  Weights sent with ``set_weights`` while a
collection runs (actor created with ``max_concurrency >= 2``) are applied between two generation rounds, never
inside one.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.agents.base import DEFAULT_ADAPTERS, adapter_for, adapter_names
from actors.env_pool import EnvPool
from actors.env_process import build_env
from actors.episodes import EpisodeRequest, iter_episodes, pack_group
from actors.inference import GenerationRequest, GenerationResult, InferenceEngine, SamplingParams
from actors.lora_weights import read_adapters, zero_lora_weights
from actors.protocols import AgentFactory
from actors.trajectory import Trajectory, TrajectoryGroup
from common.lora import LoraSpec
from common.progress import Ticker


@dataclass(frozen=True)
class WorkerConfig:
    """Everything one rollout worker needs. Built from a run config (``launch.config.TrainConfig``) by
    ``launch.driver.wiring.rollout_worker_config``: the fields the run config holds have no default here (the run config's
    dataclasses hold the one set of defaults); only the worker-specific ones do."""

    model_path: str
    """HF folder, or "smollm2" for the packaged SmolLM2-135M-Instruct (``model.path``)."""
    engine: str
    """"vllm", "hf" or "auto" (``rollout.engine``)."""
    weight_sync: str
    """"lora" or "merged" (``rollout.weight_sync``: the engine serves the adapter merged into its base weights)."""
    gpu_memory_utilization: float
    """vLLM's share of the GPU's memory (``rollout.gpu_memory_utilization``; CUDA only)."""
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
    adapters: Mapping[str, str | None] = field(default_factory=lambda: dict(DEFAULT_ADAPTERS))
    """Role → adapter name (``actors.protocols.make_agent``)."""


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
        from actors.engines import make_engine
        from actors.models import resolve_model_path

        self.config = config
        self.agents = AgentFactory(
            config.protocol,
            config.env_name,
            config.history_length,
            config.adapters,
            config.agent_options,
        )
        if config.torch_threads:
            import torch

            torch.set_num_threads(config.torch_threads)
        self.name = "rollout" if world_size == 1 else f"rollout {rank + 1}/{world_size}"
        self.model_path = resolve_model_path(config.model_path)
        lora = config.lora
        self.adapter_names = adapter_names(config.adapters)
        per_adapter: dict[str | None, dict[str, np.ndarray]] = {}
        if config.adapter_path:
            per_adapter, lora = read_adapters(config.adapter_path, self.adapter_names)
        initial = per_adapter.get(None)
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
                gpu_memory_utilization=config.gpu_memory_utilization,
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
            self.envs = [build_env(config.env_name, dict(config.env_options)) for _ in range(config.num_envs)]
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
                agent=self.agents,
                params=params,
                max_steps=self.config.max_steps,
                tokenizer=self.tokenizer,
                max_prompt_tokens=self.config.max_model_len - self.config.max_new_tokens,
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
        """One group per task id, in completion order: ``group_size`` episodes of the same task on the same env
        ``seed`` (or ``seeds[i]`` for task i, as an evaluation panel fixes them).  A group with a failed episode is
        replayed whole, up to ``max_group_retries`` times, then dropped (``stats["groups_dropped"]``): a partial group
        is never returned.  ``packed``: the ``pack_group`` dict (numpy arrays, for Ray); else a ``TrajectoryGroup``.
        ``temperature`` overrides the configured one for this call (evaluation at the validation temperature);
        ``sample_seed`` seeds torch's RNG first, which makes the HF engine's sampling reproducible (exact resume);
        vLLM ignores it."""
        if sample_seed is not None:
            import torch

            torch.manual_seed(sample_seed)
        if seeds is not None and len(seeds) != len(task_ids):
            raise ValueError(f"{len(seeds)} seeds for {len(task_ids)} tasks")
        groups = _Groups()
        for i, task_id in enumerate(task_ids):
            groups.submit(task_id, seed if seeds is None else int(seeds[i]), group_size)
        return list(self._play(groups, self._params(temperature), packed))

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
