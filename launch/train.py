"""The training driver: one readable loop over coarse worker calls (single controller, as in verl).

    collect groups (rollout workers) → shaping + advantages (pure, here) → update (learner group)
        → push weights (object store) → evaluate every k → checkpoint

With ``one_step_off=true`` iteration k+1's rollouts are generated (from the adapter before iteration k's update)
while iteration k computes advantages and updates, so the rollout workers and the learner group overlap; the
policy then lags one version (``policy_lag`` in the metrics), and the PPO ratio is taken against the learner's
recomputed log-probs of the current adapter (the rollout engine's are only used for ``logprob_gap``).

Before RL, an optional behaviour-cloning warm start: expert demonstrations in the agent's own format
(``actors.demos``) trained with ``learners.algos.sft`` through the same learner group.
Every phase is timed; metrics go to ``<run_dir>/metrics.jsonl`` and TensorBoard; the resolved config is printed and
saved as ``<run_dir>/config.yaml``; checkpoints under ``<run_dir>/checkpoints/iter_<k>`` make a killed run resume
exactly (``resume=true``).
"""

from __future__ import annotations

import errno
import json
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from ray.util.placement_group import remove_placement_group

from actors.demos import collect_demonstrations
from actors.inference import LoraSpec
from actors.models import resolve_model_path
from actors.rollout import RolloutWorker, WorkerConfig, read_peft_adapter, unpack_group
from actors.trajectory import Trajectory, to_jsonl
from cluster.metrics import RunMetrics
from cluster.ray_cluster import (
    WORKER_LOST,
    WorkerResources,
    init_ray,
    node_cores,
    place_workers,
    spawn_in_bundle,
)
from envs import success_reward
from launch.algos import get_algo
from launch.baselines import BASE_SEED
from launch.config import (
    TrainConfig,
    behaviour_is_cap,
    check_bc_source,
    reference_adapters,
    resolve_algo_config,
    resolved_text,
    torch_threads,
)
from launch.episode_stats import trajectory_stats
from launch.evaluation import Evaluation
from launch.hisr import RewardModels, reward_model_learners
from launch.offline import OfflineData
from launch.panels import Panel, PanelTask, shards
from launch.stream import AsyncRollouts, iteration_tasks
from launch.updater import Updater, timed
from learners.algorithm import Algorithm
from learners.group import LearnerGroup
from learners.worker import LearnerSpec


def learner_adapters(cfg: TrainConfig) -> tuple[tuple[str, float], ...]:
    """(name, lr) of every policy adapter the learner trains (empty: the one adapter ``default`` at ``actor_lr``)."""
    return tuple((n, cfg.learner.adapter_lr.get(n, cfg.learner.actor_lr)) for n in cfg.model.adapter_names)


def learner_spec(
    cfg: TrainConfig, algo: Algorithm, algo_cfg: Any, model_path: str, device: str
) -> LearnerSpec:
    """The learner workers' spec for a run: its LoRA, optimizer settings, the algorithm's critic and adapters (HISR:
    the hindsight model's adapter and the SPRM beside the policy's)."""
    adapters, extra_critics = learner_adapters(cfg), ()
    if algo.reward_models:
        hindsight, sprm = reward_model_learners(algo_cfg, model_path)
        adapters, extra_critics = (*(adapters or (("default", cfg.learner.actor_lr),)), hindsight), (sprm,)
    return LearnerSpec(
        model_path=model_path,
        lora=lora_spec(cfg),
        dtype=cfg.learner.dtype,
        device=device,
        zero_stage=cfg.learner.zero_stage,
        actor_lr=cfg.learner.actor_lr,
        critic_lr=cfg.learner.critic_lr,
        max_grad_norm=cfg.learner.max_grad_norm,
        micro_batch_size=cfg.learner.micro_batch_size,
        gradient_checkpointing=cfg.learner.gradient_checkpointing,
        value_heads=algo.value_heads,
        target_critic=algo.target_critic,
        adapters=adapters,
        extra_critics=extra_critics,
        frozen_adapters=reference_adapters(cfg, algo, algo_cfg),
        seed=cfg.seed,
        torch_threads=torch_threads(cfg, cfg.learner.num_workers, node_cores(), device),
    )


def bc_loss_config(cfg: TrainConfig) -> Any:
    """The SFT config of the behaviour-cloning warm start: its NLL aggregated by ``bc.agg``."""
    return get_algo("sft").Config(agg=cfg.bc.agg)


def env_task_ids(cfg: TrainConfig, split: str) -> list[str]:
    """The run's env's task ids of ``split`` (one env built and closed)."""
    import envs

    env = envs.make(cfg.env.name, **dict(cfg.env.options))
    try:
        return list(env.task_ids(split))
    finally:
        env.close()


def expert_demonstrations(cfg: TrainConfig, tokenizer: Any, task_ids: Sequence[str]) -> list[Trajectory]:
    """The env expert's won episodes on ``bc.episodes`` of ``task_ids`` (drawn from the run's seed), in the agent's
    format and with its prompts."""
    ids = random.Random(cfg.seed).sample(list(task_ids), min(cfg.bc.episodes, len(task_ids)))
    return collect_demonstrations(
        cfg.env.name,
        cfg.rollout.agent,
        ids,
        tokenizer=tokenizer,
        env_options=dict(cfg.env.options),
        max_steps=cfg.env.max_steps,
        history_length=cfg.rollout.history_length,
        agent_options=dict(cfg.rollout.agent_options),
    )


def lora_spec(cfg: TrainConfig) -> LoraSpec:
    m = cfg.model
    return LoraSpec(m.lora_rank, m.lora_alpha, m.lora_targets, m.lora_dropout)


def rollout_worker_config(cfg: TrainConfig, model_path: str, device: str, **overrides: Any) -> WorkerConfig:
    """The rollout workers' config from a run config (training and ``hierarl eval`` build it the same way)."""
    fields: dict[str, Any] = {
        "model_path": model_path,
        "engine": cfg.rollout.engine,
        "weight_sync": cfg.rollout.weight_sync,
        "dtype": cfg.model.dtype,
        "device": device,
        "lora": lora_spec(cfg),
        "protocol": cfg.rollout.agent,
        "env_name": cfg.env.name,
        "env_options": dict(cfg.env.options),
        "num_envs": cfg.env.workers_per_rollout,
        "use_env_pool": cfg.env.use_pool,
        "step_timeout_s": cfg.env.step_timeout_s,
        "max_steps": cfg.env.max_steps,
        "temperature": cfg.rollout.temperature,
        "top_p": cfg.rollout.top_p,
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "max_model_len": cfg.model.max_model_len,
        "history_length": cfg.rollout.history_length,
        "max_group_retries": cfg.rollout.max_group_retries,
        "seed": cfg.seed,
        "agent_options": dict(cfg.rollout.agent_options),
        "adapters": dict(cfg.model.role_adapters) or {"policy": "policy"},
        "torch_threads": torch_threads(cfg, cfg.rollout.num_workers, node_cores(), device),
    }
    return WorkerConfig(**{**fields, **overrides})


@dataclass
class Collection:
    """One rollout worker's share of a collection: which worker, the call (to replay on a replacement) and its
    result's object ref."""

    worker: int
    ref: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Trainer:
    """Holds the workers of one run; ``run()`` is the loop in the module docstring."""

    def __init__(self, cfg: TrainConfig, device: str | None = None) -> None:
        """``device``: "cuda" or "cpu" for the workers (default: what this process sees; a sweep's cells run in Ray
        tasks without a GPU of their own and are told)."""
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.algo = get_algo(cfg.algo)
        self.algo_cfg = resolve_algo_config(self.algo.Config, cfg.algo_overrides)
        text = resolved_text(cfg, self.algo_cfg)
        print("[hierarl] resolved config:\n" + text, flush=True)
        (self.run_dir / "config.yaml").write_text(text)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.bc_source = check_bc_source(cfg) if cfg.bc.enabled and cfg.bc.from_run else None
        init_ray(cfg.ray_address, device=self.device)
        self.metrics = RunMetrics(run=self.run_dir.name, algo=cfg.algo, env=cfg.env.name)
        self.model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.pad_id = self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        self.lora = lora_spec(cfg)
        self.adapters = cfg.model.adapter_names
        """The policy adapters of ``model.role_adapters`` (empty: one adapter for every role)."""
        self.ref_adapters = reference_adapters(cfg, self.algo, self.algo_cfg)
        """The learner's frozen copies that serve as the KL reference (empty: adapters disabled, or no KL term)."""
        on_gpu = self.device == "cuda"
        self.rollout_gpus = cfg.rollout.gpus_per_worker if on_gpu else 0.0
        self.learner_gpus = cfg.learner.gpus_per_worker if on_gpu else 0.0
        self.rollout_cfg = rollout_worker_config(cfg, self.model_path, self.device)
        # asynchronous rollouts take weights and requests beside their running collection
        control = (("control", 1),) if cfg.max_staleness else ()
        self.rollout_resources = WorkerResources(cfg.rollout.cpus_per_worker, self.rollout_gpus, control)
        self.rollout, self.rollout_pg = place_workers(
            RolloutWorker, cfg.rollout.num_workers, self.rollout_resources, self.rollout_cfg
        )
        self.learner_spec = learner_spec(cfg, self.algo, self.algo_cfg, self.model_path, self.device)
        self.learner = LearnerGroup(
            self.learner_spec,
            cfg.learner.num_workers,
            WorkerResources(cfg.learner.cpus_per_worker, self.learner_gpus),
        )
        self.updater = Updater(
            self.learner,
            cfg.learner,
            pad_id=self.pad_id,
            success_reward=success_reward(cfg.env.name, dict(cfg.env.options)),
            role_adapters=cfg.model.role_adapters,
            ref_adapters=self.ref_adapters,
            behaviour_is_cap=behaviour_is_cap(cfg),
        )
        self.version = 0
        # the last two pushes (adapter name, None for the one adapter of most runs → its tensors): a one-step-off
        # checkpoint saves the older (its in-flight rollouts' adapter)
        self._pushed: list[dict[str | None, dict[str, np.ndarray]]] = []
        self._pending: list[Collection] = []  # the next iteration's rollouts, in flight (one-step-off)
        # the asynchronous rollouts (``max_staleness``), once RL starts
        self.stream: AsyncRollouts | None = None
        self.rollout_restarts = 0  # rollout workers replaced after dying (``rollout.max_restarts``)
        self.learner_restarts = 0  # learner groups rebuilt after a worker died (``learner.max_restarts``)
        self._empty_in_a_row = 0  # consecutive iterations without samples
        self._counters: dict[str, float] = {}  # the rollout workers' cumulative fault counters, last seen
        self.train_ids: list[str] = []
        self.start_iter = 0
        self.history: list[dict[str, Any]] = []
        self.evaluation = Evaluation(cfg, self.model_path)  # the eval panel, its baselines, and results on it
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self._tb = None
        self.resumed_from: Path | None = None
        # HISR's segment reward model and hindsight model (on the learner group's base), trained before RL
        self.hisr = RewardModels(self) if self.algo.reward_models else None
        # STEP-HRL's and Multi2's offline dataset (expert demonstrations + BC-policy rollouts), built after BC
        self.offline = OfflineData(self) if self.algo.offline else None

    # -- pieces ----------------------------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        return env_task_ids(self.cfg, split)

    def sample(self, prompts: Sequence[np.ndarray], role: str, seed: int) -> list[Any]:
        """One response per prompt from ``role``'s adapter, spread over the rollout workers, in prompt order."""
        n = len(self.rollout)
        shards = [list(range(k, len(prompts), n)) for k in range(n)]
        refs = [
            self.rollout[k].sample.remote([prompts[i].tolist() for i in idx], role, seed + k)
            for k, idx in enumerate(shards)
            if idx
        ]
        out: list[Any] = [None] * len(prompts)
        for idx, results in zip([s for s in shards if s], ray.get(refs), strict=True):
            for i, r in zip(idx, results, strict=True):
                out[i] = r
        return out

    def export_weights(self) -> dict[str | None, dict[str, np.ndarray]]:
        """The policy adapters' tensors by adapter name (None: the one adapter every role uses)."""
        if not self.adapters:
            return {None: self.learner.adapter_weights()}
        return {n: self.learner.adapter_weights(n) for n in self.adapters}

    def _call(self, worker: Any, method: str) -> Any:
        """``worker.<method>.remote``, beside a running asynchronous collection when there is one."""
        return self.stream.call(worker, method) if self.stream is not None else getattr(worker, method).remote

    def _send(self, worker: Any, weights: dict[str | None, Any]) -> bool:
        """Load every adapter of ``weights`` (tensors or object refs) into one rollout worker."""
        load = self._call(worker, "set_weights")
        return all(ray.get([load(w, self.version, n) for n, w in weights.items()]))

    def push_weights(self, weights: dict[str | None, dict[str, np.ndarray]] | None = None) -> float:
        """Export each adapter once (or take ``weights``), ``ray.put`` each once, every rollout worker loads them
        from the object refs."""
        t0 = time.perf_counter()
        self.version += 1
        weights = self.export_weights() if weights is None else weights
        self._pushed = [*self._pushed[-1:], weights]
        refs = {n: ray.put(w) for n, w in weights.items()}
        ok = []
        for i in range(len(self.rollout)):
            try:
                ok.append(self._send(self.rollout[i], refs))
            except WORKER_LOST as e:  # a dead worker is replaced with these weights
                self.replace_rollout_worker(i, e)
                ok.append(True)
        if not all(ok):
            print(f"[hierarl] warning: {ok.count(False)} rollout worker(s) kept the old adapter", flush=True)
        return time.perf_counter() - t0

    def start_collect(
        self, task_ids: Sequence[str], group_size: int, seed: int, *, temperature: float
    ) -> list[Collection]:
        """Split the tasks over the rollout workers; whole groups only (failed groups are retried by the worker)."""
        shards = [list(task_ids[i :: len(self.rollout)]) for i in range(len(self.rollout))]
        out = []
        for k, shard in enumerate(shards):
            if shard:
                c = Collection(
                    k,
                    None,
                    (shard, group_size, seed + k),
                    {"temperature": temperature, "sample_seed": seed + k},
                )
                out.append(self.submit(c))
        return out

    def submit(self, c: Collection) -> Collection:
        c.ref = self.rollout[c.worker].collect.remote(*c.args, **c.kwargs)
        return c

    def gather(self, collections: list[Collection]) -> list[Trajectory]:
        """The groups of every collection; one whose worker died is re-collected whole by its replacement (the
        dead worker's partial groups are never used)."""
        packed = []
        for c in collections:
            while True:
                try:
                    packed.extend(ray.get(c.ref))
                    break
                except WORKER_LOST as e:
                    self.replace_rollout_worker(c.worker, e)
                    self.submit(c)
        groups = [unpack_group(g) for g in packed]
        return [t for g in groups for t in g.trajectories]

    def update_recovering(self, trajs: list[Trajectory], it: int) -> tuple[dict[str, Any], dict[str, float]]:
        """``update`` on iteration ``it``'s rollouts; if a learner worker dies, the group is rebuilt from the newest
        readable checkpoint and the update redone on the same rollouts. The first RL iteration's critic is warmed
        up first (``learner.critic_warmup_passes``)."""
        warmup = self.cfg.learner.critic_warmup_passes if it == 1 and self.offline is None else 0
        while True:
            try:
                return self.update(
                    trajs,
                    self.algo,
                    self.algo_cfg,
                    seed=self.cfg.seed + it,
                    iteration=it,
                    critic_warmup=warmup,
                )
            except WORKER_LOST as e:
                self.rebuild_learner(e)

    def rebuild_learner(self, error: Exception) -> None:
        """A new learner group (new placement group and rendezvous) loaded from the newest readable checkpoint."""
        limit = self.cfg.learner.max_restarts
        if self.learner_restarts >= limit:
            raise RuntimeError(
                f"a learner worker died ({type(error).__name__}) and learner.max_restarts ({limit}) rebuilds were "
                "used up"
            ) from error
        t0 = time.perf_counter()
        self.learner.shutdown()
        self.learner = LearnerGroup(
            self.learner_spec,
            self.cfg.learner.num_workers,
            WorkerResources(self.cfg.learner.cpus_per_worker, self.learner_gpus),
        )
        self.updater.learner = self.learner
        loaded = self.load_newest_checkpoint()
        if loaded is None:
            raise RuntimeError(
                f"a learner worker died ({type(error).__name__}) and there is no checkpoint to rebuild from"
            ) from error
        path = loaded[0]
        if self.offline is not None:
            self.offline.critic_steps = int(loaded[1].get("offline_steps", 0))
        if self.hisr is not None:
            self.hisr.prepare(in_learner=loaded[1]["iteration"] >= 1)
        self.learner_restarts += 1
        print(
            f"[hierarl] a learner worker died ({type(error).__name__}); group rebuilt from {path} in "
            f"{time.perf_counter() - t0:.1f}s ({self.learner_restarts}/{limit}); the update is redone on the "
            "iteration's rollouts",
            flush=True,
        )

    def replace_rollout_worker(self, index: int, error: Exception) -> None:
        """A new rollout worker in the dead one's placement-group bundle, with the newest adapter pushed."""
        if self.rollout_restarts >= self.cfg.rollout.max_restarts:
            raise RuntimeError(
                f"rollout worker {index} died ({type(error).__name__}) and rollout.max_restarts "
                f"({self.cfg.rollout.max_restarts}) replacements were used up"
            ) from error
        self.rollout_restarts += 1
        t0 = time.perf_counter()
        ray.kill(self.rollout[index])
        n = len(self.rollout)
        self.rollout[index] = spawn_in_bundle(
            RolloutWorker,
            self.rollout_pg,
            index,
            n,
            self.rollout_resources,
            self.rollout_cfg,
        )
        if self._pushed:
            self._send(self.rollout[index], self._pushed[-1])
        print(
            f"[hierarl] rollout worker {index} died ({type(error).__name__}); replaced in "
            f"{time.perf_counter() - t0:.1f}s with adapter v{self.version} "
            f"({self.rollout_restarts}/{self.cfg.rollout.max_restarts} restarts); its groups are re-collected",
            flush=True,
        )

    def collect(
        self, task_ids: Sequence[str], group_size: int, seed: int, *, temperature: float
    ) -> list[Trajectory]:
        return self.gather(self.start_collect(task_ids, group_size, seed, temperature=temperature))

    def start_rl_rollouts(self, iteration: int) -> list[Collection]:
        """Iteration ``iteration``'s training groups: tasks and sampling seeds depend on (seed, iteration) only,
        so a resumed or one-step-off run draws exactly what the uninterrupted synchronous one draws."""
        cfg = self.cfg
        tasks, seed = iteration_tasks(self.train_ids, cfg.seed, iteration, cfg.rollout.groups_per_iter)
        return self.start_collect(tasks, cfg.rollout.group_size, seed, temperature=cfg.rollout.temperature)

    def evaluate(self, n: int, seed: int) -> dict[str, Any]:
        """Success on the run's eval panel (``eval_panel``, its first ``n`` tasks; ``launch.evaluation``) at the
        validation temperature (HiPER C.1: 0.4) with its Wilson interval, per task type, beside the random policy and
        the zero-shot base model on the same (task, seed) pairs, and the model's valid-format rate. ``seed`` seeds
        the sampling only."""
        panel = self.evaluation.panel(n)
        # the policy is still the base model (zero adapter) before BC and any warm start: its eval is the base's
        is_base = self.version == 1 and not self.cfg.model.init_adapter and self.resumed_from is None
        missing = self.evaluation.base_missing(panel)
        if missing and not is_base:
            self.base_model_episodes(panel, missing)
        trajs = self.play_panel(panel.tasks, seed, temperature=self.cfg.rollout.eval_temperature)
        return self.evaluation.result(panel, trajs, trajectory_stats(trajs), is_base=is_base)

    def base_model_episodes(self, panel: Panel, tasks: Sequence[PanelTask]) -> list[Trajectory]:
        """The zero-shot base model's episode on each of ``tasks`` (not in its cache yet), cached: every rollout
        worker gets a zero adapter (LoRA with B = 0 is exactly the base model), plays them, and gets the run's
        adapters back. Not cached if a worker was replaced meanwhile (its replacement holds the run's adapter)."""
        current = self._pushed[-1] if self._pushed else self.export_weights()
        zero = {name: {k: np.zeros_like(v) for k, v in w.items()} for name, w in current.items()}
        restarts = self.rollout_restarts
        self._load_everywhere(zero)
        try:
            trajs = self.play_panel(tasks, BASE_SEED, temperature=self.cfg.rollout.eval_temperature)
        finally:
            self._load_everywhere(current)
        if self.rollout_restarts == restarts:
            self.evaluation.store_base(panel, trajs)
        return trajs

    def _load_everywhere(self, weights: dict[str | None, dict[str, np.ndarray]]) -> None:
        """Load ``weights`` into every rollout worker without a new version (a temporary swap, e.g. the base model)."""
        refs = {n: ray.put(w) for n, w in weights.items()}
        for i in range(len(self.rollout)):
            try:
                self._send(self.rollout[i], refs)
            except WORKER_LOST as e:
                self.replace_rollout_worker(i, e)

    def play_panel(
        self, tasks: Sequence[PanelTask], sample_seed: int, *, temperature: float
    ) -> list[Trajectory]:
        """One episode of each (task id, env seed) pair, dealt over the rollout workers with each pair's own seed
        (the split changes nothing about what is played); a worker that dies is replaced and its share replayed."""
        collections = [
            self.submit(
                Collection(
                    k,
                    None,
                    ([p.task_id for p in shard], 1, None),
                    {
                        "temperature": temperature,
                        "sample_seed": sample_seed + k,
                        "seeds": [p.seed for p in shard],
                    },
                )
            )
            for k, shard in enumerate(shards(tasks, len(self.rollout)))
            if shard
        ]
        return self.gather(collections)

    def update(
        self,
        trajs: list[Trajectory],
        algo: Algorithm,
        algo_cfg: Any,
        *,
        seed: int,
        lr: float | None = None,
        mini_batch_size: int | None = None,
        iteration: int = 0,
        critic_warmup: int = 0,
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """``Updater.update`` with this run's offline-data and reward-model hooks; returns (metrics, timings)."""
        offline = self.offline if algo is self.algo else None
        metrics, timings = self.updater.update(
            trajs,
            algo,
            algo_cfg,
            seed=seed,
            lr=lr,
            mini_batch_size=mini_batch_size,
            reference=offline is None or offline.online(iteration),
            annotate=self.hisr.annotate if algo.reward_models and self.hisr is not None else None,
            warmup_left=0 if offline is None else offline.warmup_left(),
            critic_warmup=critic_warmup,
        )
        if offline is not None:
            offline.critic_steps += int(metrics["optimizer_steps"])
        return metrics, timings

    def demonstrations(self) -> list[Trajectory]:
        """``expert_demonstrations`` on the run's training tasks: what behaviour cloning trains on, and STEP-HRL's
        expert data D."""
        demos = expert_demonstrations(self.cfg, self.tokenizer, self.task_ids(self.cfg.env.train_split))
        if not demos:
            raise RuntimeError(f"the {self.cfg.env.name} expert produced no winning demonstration")
        return demos

    def behaviour_cloning(self) -> dict[str, Any]:
        """Demonstrations from the env's expert in the agent's format, then SFT epochs."""
        cfg = self.cfg
        t0 = time.perf_counter()
        demos = self.demonstrations()
        sft = get_algo("sft")
        out: dict[str, Any] = {"demos": len(demos), "turns": sum(len(d.turns) for d in demos)}
        for epoch in range(cfg.bc.epochs):
            m, _ = self.update(
                demos,
                sft,
                bc_loss_config(cfg),
                seed=cfg.seed + epoch,
                lr=cfg.bc.lr,
                mini_batch_size=cfg.bc.mini_batch_size,
            )
            out[f"nll_epoch{epoch}"] = m.get("nll", float("nan"))
            print(
                f"[hierarl] BC epoch {epoch + 1}/{cfg.bc.epochs}: nll {out[f'nll_epoch{epoch}']:.3f} "
                f"({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
        out["wall_s"] = time.perf_counter() - t0
        return out

    def bc_from_run(self, ckpt: Path) -> dict[str, Any]:
        """``bc.from_run``: the policy (adapter + optimizer state) after another run's BC, and that run's BC row."""
        self.learner.load_checkpoint(str(ckpt), only=self.adapters or ["default"])
        rows = (json.loads(r) for r in (ckpt.parent.parent / "metrics.jsonl").read_text().splitlines() if r)
        bc = next((r for r in rows if r.get("phase") == "bc"), {})
        keep = {k: v for k, v in bc.items() if k in ("demos", "turns", "wall_s") or k.startswith("nll_epoch")}
        print(f"[hierarl] BC warm start taken from {ckpt}", flush=True)
        return {"demos": 0, "turns": 0, "wall_s": 0.0, **keep, "bc_from_run": str(ckpt.parent.parent)}

    # -- bookkeeping -----------------------------------------------------------------------------------------

    def log(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        self._tensorboard(record)
        self.metrics.record(record)

    def _tensorboard(self, record: dict[str, Any]) -> None:
        """One scalar per numeric metric at step ``iteration``, flushed at once (a killed run keeps its last row)."""
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tb"))
            except ImportError:
                self._tb = False
        if self._tb:
            step = int(record.get("iteration", 0))
            for k, v in record.items():
                if isinstance(v, int | float) and k != "iteration":
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def restart_logs(self) -> None:
        """Make metrics.jsonl and TensorBoard hold exactly ``self.history``: TensorBoard has no way to drop events,
        so ``tb/`` is written anew from the history (a resume would otherwise show the rows after the checkpoint
        twice)."""
        self.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in self.history))
        if self._tb:
            self._tb.close()
        self._tb = None
        shutil.rmtree(self.run_dir / "tb", ignore_errors=True)
        for record in self.history:
            self._tensorboard(record)

    def checkpoint(self, iteration: int, record: dict[str, Any] | None = None) -> None:
        """``checkpoints/iter_<k>``: written to a temporary folder and renamed, so a folder under its final name is
        complete; then ``latest`` points at it and older RL checkpoints beyond ``checkpoint_keep_last`` go.
        ``record``: the iteration's metrics row, logged after the checkpoint; a resume restores it if the run
        died in between."""
        root = self.run_dir / "checkpoints"
        path, tmp = root / f"iter_{iteration}", root / f".iter_{iteration}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            self.learner.save_checkpoint(str(tmp))
            state = {
                "iteration": iteration,
                "version": self.version,
                "python_rng": random.getstate(),
                "numpy_rng": np.random.get_state(),
                "torch_rng": torch.get_rng_state(),
                "record": record,
                "offline_steps": self.offline.critic_steps if self.offline is not None else 0,
            }
            torch.save(state, tmp / "driver.pt")
            if self.cfg.one_step_off and len(self._pushed) == 2:
                # the adapter the next iteration's in-flight rollouts come from: an exact resume regenerates them
                np.savez(tmp / "behaviour_adapter.npz", **self._pushed[0][None])  # one adapter (validated)
        except Exception as e:
            shutil.rmtree(tmp, ignore_errors=True)
            free = shutil.disk_usage(root).free
            if free < 256 * 2**20 or getattr(e, "errno", None) == errno.ENOSPC:
                raise RuntimeError(
                    f"checkpoint {path}: no space left on device ({free / 2**20:.0f} MiB free under {root})"
                ) from e
            raise
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        (root / "latest.tmp").write_text(path.name)
        (root / "latest.tmp").replace(root / "latest")
        for old in checkpoints_to_prune(_checkpoint_iterations(root), self.cfg.checkpoint_keep_last):
            shutil.rmtree(root / f"iter_{old}", ignore_errors=True)

    def load_init_adapter(self, path: str) -> None:
        """Warm start from a saved PEFT adapter (e.g. another run's BC checkpoint), checked against the run's LoRA."""
        weights, spec = read_peft_adapter(Path(path).expanduser())
        mine = self.lora
        if (spec.rank, spec.alpha, tuple(sorted(spec.target_modules))) != (
            mine.rank,
            mine.alpha,
            tuple(sorted(mine.target_modules)),
        ):
            raise ValueError(
                f"model.init_adapter {path}: rank/alpha/targets {spec.rank}/{spec.alpha}/{spec.target_modules} "
                f"differ from the run's {mine.rank}/{mine.alpha}/{mine.target_modules}"
            )
        self.learner.load_adapter_weights(weights)
        print(f"[hierarl] policy initialised from {path}", flush=True)

    def load_newest_checkpoint(self) -> tuple[Path, dict[str, Any]] | None:
        """Load the learner state of the newest readable checkpoint and return (its folder, its driver state); an
        unreadable one (truncated, corrupted) is named in one line and the previous one tried. None: none readable."""
        for path in checkpoint_candidates(self.run_dir / "checkpoints"):
            try:
                self.learner.load_checkpoint(str(path))
                return path, torch.load(path / "driver.pt", weights_only=False)
            except Exception as e:
                print(
                    f"[hierarl] checkpoint {path} is unreadable ({type(e).__name__}: {e}); trying an older one"
                )
        return None

    def try_resume(self) -> bool:
        """Load ``latest``; if it is unreadable, say so in one line and fall back to the next older checkpoint."""
        root = self.run_dir / "checkpoints"
        latest = root / "latest"
        if not (self.cfg.resume and latest.exists()):
            return False
        loaded = self.load_newest_checkpoint()
        if loaded is None:
            raise RuntimeError(f"resume=true but no readable checkpoint under {root}")
        path, state = loaded
        self.resumed_from = path
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        self.start_iter = state["iteration"] + 1
        self.version = state["version"] - 1
        if self.offline is not None:
            self.offline.critic_steps = int(state.get("offline_steps", 0))
        behaviour = path / "behaviour_adapter.npz"
        if self.cfg.one_step_off and state["iteration"] >= 1 and self.start_iter <= self.cfg.iterations:
            if behaviour.exists():
                # as in the uninterrupted run: the next rollouts come from the adapter before the last update
                self.version -= 1
                with np.load(behaviour) as z:
                    self.push_weights({None: {k: z[k] for k in z.files}})
                self._pending = self.start_rl_rollouts(self.start_iter)
            else:
                print(f"[hierarl] {path} has no behaviour adapter: iteration {self.start_iter} is on-policy")
        self.push_weights()
        if self.metrics_path.exists():
            # rows logged after the checkpoint (a killed iteration, or checkpoints older than the last iteration)
            # are dropped: the resumed run logs them again, exactly once
            rows = [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line]
            self.history = [r for r in rows if int(r.get("iteration", 0)) <= state["iteration"]]
            last = state.get("record")
            if last is not None and not any(r.get("iteration") == last["iteration"] for r in self.history):
                self.history.append(last)  # killed between this checkpoint and its metrics row
        self.restart_logs()
        print(f"[hierarl] resumed from {path} at iteration {self.start_iter}", flush=True)
        return True

    # -- the loop --------------------------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]]:
        cfg = self.cfg
        self.train_ids = self.task_ids(cfg.env.train_split)
        if not self.try_resume():
            self.history = []
            self.restart_logs()
            if cfg.model.init_adapter:
                self.load_init_adapter(cfg.model.init_adapter)
            self.push_weights()
            if cfg.eval_zero_shot:
                ev = self.evaluate(cfg.eval_episodes, cfg.seed + 10_000)
                self.log({"iteration": -1, "phase": "zero-shot", **_flat(ev)})
                print(f"[hierarl] zero-shot eval {_eval_text(ev)}", flush=True)
            if cfg.bc.enabled:
                bc = self.behaviour_cloning() if self.bc_source is None else self.bc_from_run(self.bc_source)
                push_s = self.push_weights()
                ev = self.evaluate(cfg.eval_episodes, cfg.seed + 10_000)
                self.log({"iteration": 0, "phase": "bc", **bc, "push_s": push_s, **_flat(ev)})
                print(
                    f"[hierarl] BC on {bc['demos']} demos ({bc['turns']} turns) in {bc['wall_s']:.1f}s"
                    f"{' (taken from ' + bc['bc_from_run'] + ')' if 'bc_from_run' in bc else ''}; "
                    f"eval after BC {_eval_text(ev)}",
                    flush=True,
                )
            if self.ref_adapters and self.offline is None:
                self.updater.freeze_reference()  # π_ref: the policy RL starts from (after BC)
            self.checkpoint(0)
            self.start_iter = 1
        if self.hisr is not None:
            self.hisr.prepare(in_learner=self.start_iter > 1)  # RL checkpoints hold the reward models
        if self.offline is not None:
            self.offline.prepare()
        if cfg.max_staleness:
            self.stream = AsyncRollouts(self, first_batch=self.start_iter)
        for it in range(self.start_iter, cfg.iterations + 1):
            timings: dict[str, float] = {}
            t_iter = time.perf_counter()
            if self.offline is not None:
                with timed(timings, "rollout"):
                    trajs, new = self.offline.iteration_data(it)
                if it == self.offline.first_online() and self.algo.uses_reference(self.algo_cfg):
                    self.updater.freeze_reference()  # π_off: the policy the offline phase ended with
                episodes = [t for t in trajs if not t.info.get("anchor")]
                # train success is that of the iteration's own rollouts; the stored data's is not the policy's
                stats = {**trajectory_stats(new or episodes), "buffer_trajectories": float(len(episodes))}
                if not new:
                    stats["success"] = float("nan")
            elif self.stream is not None:
                with timed(timings, "rollout"):
                    groups, stats = self.stream.take(it)
                trajs = [t for g in groups for t in g.trajectories]
                stats.update(trajectory_stats(trajs))
            else:
                with timed(timings, "rollout"):
                    trajs = self.gather(self._pending or self.start_rl_rollouts(it))
                self._pending = []
                if cfg.one_step_off and it < cfg.iterations:
                    self._pending = self.start_rl_rollouts(it + 1)  # generates while this iteration updates
                stats = trajectory_stats(trajs)
                stats["groups_dropped"] = cfg.rollout.groups_per_iter - len({t.group_id for t in trajs})
            if not any(t.turns for t in trajs):
                self._check_empty(it, stats)
                continue
            self._empty_in_a_row = 0
            stats["policy_lag"] = self.version - min(
                (turn.policy_version for t in trajs for turn in t.turns), default=self.version
            )
            if cfg.save_trajectories:  # before the update writes its shaping into the turns
                to_jsonl(trajs, self.run_dir / "trajectories" / f"iter_{it}.jsonl")
            metrics, t_upd = self.update_recovering(trajs, it)
            timings.update(t_upd)
            if self._pending:
                # timed apart: the push below would otherwise queue behind these rollouts in the actors
                with timed(timings, "rollout_wait"):
                    refs = [c.ref for c in self._pending]
                    ray.wait(refs, num_returns=len(refs))
            with timed(timings, "push"):
                self.push_weights()
            record: dict[str, Any] = {
                "iteration": it,
                "phase": "rl",
                "version": self.version,
                **stats,
                **metrics,
                **self.fault_counters(it),
            }
            if cfg.eval_every and it % cfg.eval_every == 0:
                if self.stream is not None:
                    with timed(timings, "rollout_pause"):
                        self.stream.pause()  # evaluation needs the workers' call slot
                with timed(timings, "eval"):
                    ev = self.evaluate(cfg.eval_episodes, cfg.seed + 10_000)
                record.update(_flat(ev))
            if cfg.checkpoint_every and it % cfg.checkpoint_every == 0:
                with timed(timings, "checkpoint"):
                    self.checkpoint(it, record)
            timings["iteration"] = time.perf_counter() - t_iter
            record.update({f"time_{k}": v for k, v in timings.items()})
            self.log(record)
            print(_iteration_line(record), flush=True)
        if self.stream is not None:
            self.stream.abandon()
        print(_final_table(self.history), flush=True)
        return self.history

    def fault_counters(self, it: int) -> dict[str, float]:
        """The rollout workers' cumulative counters (``total_<name>``: group retries and drops, env-worker restarts,
        timeouts, crashes); a line when a fault counter grew since the last iteration. Asked after the weight push,
        when the workers are idle in the synchronous loop (in one-step-off, the next iteration's in-flight
        collection may already count)."""
        totals: dict[str, float] = {}
        for c in ray.get([self._call(w, "counters")() for w in self.rollout]):
            for k, v in c.items():
                totals[k] = totals.get(k, 0) + v
        totals["rollout_restarts"] = (
            self.rollout_restarts
        )  # a replaced worker's own counters start again at 0
        totals["learner_restarts"] = self.learner_restarts
        grew = {
            k: v - self._counters.get(k, 0)
            for k, v in totals.items()
            if k not in ("groups", "episodes", "env_recycles") and v > self._counters.get(k, 0)
        }
        if grew:
            text = ", ".join(f"{k} +{v:.0f}" for k, v in sorted(grew.items()))
            print(f"[hierarl] iteration {it}: rollout faults handled: {text}", flush=True)
        self._counters = totals
        return {f"total_{k}": v for k, v in totals.items()}

    def _check_empty(self, it: int, stats: dict[str, float]) -> None:
        """An iteration without samples: logged (``empty``), never trained on or checkpointed; an error after
        ``rollout.max_empty_iterations`` in a row."""
        self._empty_in_a_row += 1
        limit = self.cfg.rollout.max_empty_iterations
        self.log({"iteration": it, "phase": "rl", "empty": 1, **stats})
        print(
            f"[hierarl] WARNING iteration {it}: no samples ({stats['groups_dropped']:.0f} of "
            f"{self.cfg.rollout.groups_per_iter} groups dropped after their retries); nothing trained, nothing "
            f"checkpointed ({self._empty_in_a_row}/{limit} in a row)",
            flush=True,
        )
        if self._empty_in_a_row >= limit:
            raise RuntimeError(
                f"{limit} iterations in a row without samples (every group failed after "
                f"rollout.max_group_retries); see the rollout workers' logs"
            )

    def close(self) -> None:
        """Stop the env pools and engines, kill the actors (frees DeepSpeed's port), close TensorBoard."""
        for w in self.rollout:
            try:
                ray.get(w.close.remote(), timeout=60)
            except Exception as e:  # shutting down: report, don't mask the run's result
                print(f"[hierarl] rollout worker close failed: {e}")
            ray.kill(w)
        self.rollout = []
        remove_placement_group(self.rollout_pg)
        self.learner.shutdown()
        if self._tb:
            self._tb.close()


def _checkpoint_iterations(root: Path) -> list[int]:
    """Iterations with a complete checkpoint folder (``iter_<k>``; temporary ``.iter_<k>.tmp`` ones are not)."""
    return sorted(int(p.name[5:]) for p in root.glob("iter_*") if p.is_dir() and p.name[5:].isdigit())


def checkpoint_candidates(root: Path) -> list[Path]:
    """The checkpoints to try, newest first: ``latest``'s target, then every complete ``iter_<k>`` downwards."""
    latest = root / "latest"
    first = [latest.read_text().strip()] if latest.exists() else []
    names = first + [f"iter_{k}" for k in sorted(_checkpoint_iterations(root), reverse=True)]
    return [root / name for name in dict.fromkeys(names)]


def checkpoints_to_prune(iterations: Sequence[int], keep_last: int) -> list[int]:
    """The RL iterations whose checkpoints go: all but the newest ``keep_last`` (0: none go); iteration 0, the
    BC checkpoint, always stays."""
    rl = sorted(k for k in iterations if k > 0)
    return rl[:-keep_last] if keep_last and len(rl) > keep_last else []


def _flat(ev: dict[str, Any]) -> dict[str, Any]:
    """An eval result as metric keys: eval_success with its Wilson 95 % interval (eval_ci_low, eval_ci_high, over
    eval_n tasks), eval_random, eval_base (the zero-shot base model), eval_valid_format, eval_<task type>..., and
    the panel's label and per-task outcomes (``eval_panel``, ``eval_outcomes``: one character per task, in panel
    order), which paired comparisons of two runs read."""
    keys = (
        "success",
        "ci_low",
        "ci_high",
        "n",
        "random",
        "base",
        "valid_format",
        "subgoal_completion",
        "dropped",
    )
    out: dict[str, Any] = {f"eval_{k}": ev[k] for k in (*keys, "panel", "outcomes") if k in ev}
    out.update({f"eval_valid_format_{role}": v for role, v in ev.get("valid_roles", {}).items()})
    out.update({f"eval_{k}": v for k, v in ev.get("per_type", {}).items()})
    return out


def _eval_text(ev: dict[str, Any]) -> str:
    dropped = f" ({ev['dropped']} dropped, counted lost)" if ev.get("dropped") else ""
    types = ", ".join(f"{k} {v:.2f}" for k, v in ev["per_type"].items()) if len(ev["per_type"]) > 1 else ""
    return (
        f"success {ev['success']:.3f} [{ev['ci_low']:.3f}, {ev['ci_high']:.3f}] (Wilson 95 %) on {ev['n']} tasks "
        f"of panel {ev['panel']}{dropped} · random policy {ev['random']:.3f} · base model {ev['base']:.3f} · "
        f"valid format {ev['valid_format']:.2f}" + (f" · per type: {types}" if types else "")
    )


def _iteration_line(r: dict[str, Any]) -> str:
    parts = [
        f"iter {r['iteration']:>3}",
        f"success {r['success']:.2f}",
        f"return {r['return']:+.2f}",
        f"valid {r['valid_format']:.2f}",
        f"kl {r.get('kl', 0.0):.4f}",
        f"update kl {r.get('kl_update', 0.0):.4f}",
        f"entropy {r.get('entropy', 0.0):.2f}",
        f"switch {r['switch_rate']:.2f}",
        f"seglen {r['segment_len']:.1f}",
        f"tok {r['prompt_tokens']:.0f}+{r['response_tokens']:.0f}",
        f"gap {r.get('logprob_gap', 0.0):.3f}",
    ]
    if "switch_agreement" in r:
        parts.append(f"expert-switch agreement {r['switch_agreement']:.2f}")
    if r.get("policy_lag"):
        parts.append(f"lag {r['policy_lag']}")
    if "eval_success" in r:
        parts.append(_eval_short(r))
    parts.append(
        "time "
        + " ".join(
            f"{k[5:]}={v:.1f}s" for k, v in r.items() if k.startswith("time_") and k != "time_iteration"
        )
    )
    return " | ".join(parts)


def _eval_short(r: dict[str, Any]) -> str:
    """``EVAL 0.33 [0.18,0.53] (random 0.02, base 0.00)``: a metrics row's eval with its Wilson 95 % interval."""
    nan = float("nan")
    return (
        f"EVAL {r['eval_success']:.2f} [{r.get('eval_ci_low', nan):.2f},{r.get('eval_ci_high', nan):.2f}] "
        f"(random {r.get('eval_random', nan):.2f}, base {r.get('eval_base', nan):.2f})"
    )


def _final_table(history: list[dict[str, Any]]) -> str:
    """The run's rows: train success, eval success with its Wilson 95 % interval beside the random policy and the
    zero-shot base model on the same panel pairs, eval format validity, return, iteration time."""
    nan = float("nan")
    rows = [
        "",
        "phase      iter  train_success  eval_success  [95% Wilson]   eval_random  eval_base  eval_valid  return   "
        "iter_time_s",
    ]
    for r in history:
        ci = f"[{r['eval_ci_low']:.3f}, {r['eval_ci_high']:.3f}]" if "eval_ci_low" in r else ""
        rows.append(
            f"{r.get('phase', ''):<10} {r.get('iteration', ''):>4}  "
            f"{r.get('success', nan):>13.3f}  {r.get('eval_success', nan):>12.3f}  {ci:<14} "
            f"{r.get('eval_random', nan):>11.3f}  {r.get('eval_base', nan):>9.3f}  "
            f"{r.get('eval_valid_format', nan):>10.2f}  "
            f"{r.get('return', nan):>+7.2f}  {r.get('time_iteration', nan):>11.1f}"
        )
    panels = sorted({f"{r['eval_panel']} ({r['eval_n']} tasks)" for r in history if "eval_n" in r})
    if panels:
        rows.append(
            f"eval panel: {', '.join(panels)}; random / base: the random policy / the zero-shot base model"
        )
    return "\n".join(rows)


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    trainer = Trainer(cfg)
    try:
        return trainer.run()
    finally:
        trainer.close()
