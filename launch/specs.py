"""The run config turned into each part's spec: the one module besides the driver that reads the whole
``TrainConfig``, so that every part of the driver gets only its own section and the records built here.

``learner_spec`` (the learner workers: LoRA, optimizer settings, the algorithm's critic and adapters),
``rollout_worker_config`` (the rollout workers: engine, protocol, env, sampling), ``expert_demonstrations`` (what
BC and the offline datasets start from), ``env_task_ids``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from actors.demos import collect_demonstrations
from actors.rollout import WorkerConfig
from actors.trajectory import Trajectory
from cluster.ray_cluster import WorkerResources, node_cores
from common.lora import LoraSpec
from envs import success_reward
from launch.algos import get_algo
from launch.checkpoints import behaviour_adapter
from launch.config import (
    LearnerConfig,
    TrainConfig,
    behaviour_is_cap,
    engine_old_logprobs,
    reference_adapters,
    torch_threads,
)
from launch.evaluation import EvalScope, scope
from launch.hisr import Collect, RewardModels, reward_model_learners
from launch.offline import OfflineData
from launch.panels import AUTO, Panel, resolve_panel
from launch.rollout_pool import RolloutPool
from launch.sources import IterationSource, SyncRollouts
from launch.stream import AsyncRollouts
from launch.updater import Updater
from learners.algorithm import Algorithm
from learners.group import LearnerGroup
from learners.learner_spec import LearnerSpec


def rollout_pool(cfg: TrainConfig, model_path: str, device: str) -> RolloutPool:
    """The rollout workers, one placement-group bundle each (asynchronous runs: a ``control`` concurrency group, so
    pushes and counters reach a worker beside its running collection)."""
    control = (("control", 1),) if cfg.max_staleness else ()
    gpus = cfg.rollout.gpus_per_worker if device == "cuda" else 0.0
    return RolloutPool(
        rollout_worker_config(cfg, model_path, device),
        cfg.rollout.num_workers,
        WorkerResources(cfg.rollout.cpus_per_worker, gpus, control),
        max_restarts=cfg.rollout.max_restarts,
    )


def learner_resources(learner: LearnerConfig, device: str) -> WorkerResources:
    return WorkerResources(learner.cpus_per_worker, learner.gpus_per_worker if device == "cuda" else 0.0)


def updater(cfg: TrainConfig, algo: Algorithm, algo_cfg: Any, learner: LearnerGroup, pad_id: int) -> Updater:
    """The update's driver side over ``learner``: shaping in units of the env's success reward, the role adapters,
    the frozen reference copies, the off-policy weight's cap (for the device the learner's spec names)."""
    return Updater(
        learner,
        cfg.learner,
        pad_id=pad_id,
        success_reward=success_reward(cfg.env.name, dict(cfg.env.options)),
        role_adapters=cfg.model.role_adapters,
        ref_adapters=reference_adapters(cfg, algo, algo_cfg),
        behaviour_is_cap=behaviour_is_cap(cfg, learner.spec.device),
        engine_old_logprobs=engine_old_logprobs(cfg, learner.spec.device),
    )


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


def env_task_ids(cfg: TrainConfig, split: str) -> list[str]:
    """The run's env's task ids of ``split`` (one env built and closed)."""
    import envs

    env = envs.make(cfg.env.name, **dict(cfg.env.options))
    try:
        return list(env.task_ids(split))
    finally:
        env.close()


def rl_task_panel(cfg: TrainConfig) -> Panel | None:
    """``env.train_tasks`` > 0: the fixed tasks RL plays, the first N of the train split's panel (the same for every
    seed); None: RL draws from every train task."""
    if not cfg.env.train_tasks:
        return None
    e = cfg.env
    return resolve_panel(e.name, dict(e.options), e.train_split, AUTO, e.train_tasks)


def rl_task_scope(cfg: TrainConfig) -> EvalScope:
    """What an evaluation of the RL tasks depends on: the run's, with the train split as the panel's split."""
    env = replace(cfg.env, eval_split=cfg.env.train_split)
    return replace(scope(cfg), env=env, eval_panel=AUTO, eval_episodes=cfg.env.train_tasks)


def rl_and_bc_tasks(
    train_ids: Sequence[str], panel: Panel | None, bc_episodes: int
) -> tuple[list[str], list[str]]:
    """(the tasks RL plays, the tasks behaviour cloning may demonstrate): with a fixed RL task set (``panel``), BC
    demonstrates the other train tasks, so the RL tasks start as unseen as the held-out ones."""
    if panel is None:
        return list(train_ids), list(train_ids)
    rl = [t.task_id for t in panel.tasks]
    chosen = set(rl)
    bc = [i for i in train_ids if i not in chosen]
    if len(bc) < bc_episodes:
        raise ValueError(
            f"env.train_tasks {len(rl)} leaves {len(bc)} of the {len(train_ids)} train tasks for bc.episodes "
            f"{bc_episodes}; allowed: at most {len(train_ids) - bc_episodes}"
        )
    return rl, bc


def expert_demonstrations(cfg: TrainConfig, tokenizer: Any, task_ids: Sequence[str]) -> list[Trajectory]:
    """The env expert's won episodes on ``bc.episodes`` of ``task_ids`` (drawn from the run's seed), in the agent's
    format and with its prompts."""
    ids = random.Random(cfg.seed).sample(list(task_ids), min(cfg.bc.episodes, len(task_ids)))
    return demonstrations_on(cfg, tokenizer, ids)


def demonstrations_on(cfg: TrainConfig, tokenizer: Any, task_ids: Sequence[str]) -> list[Trajectory]:
    """The env expert's won episodes on exactly ``task_ids``, in the run's agent format and with its prompts."""
    return collect_demonstrations(
        cfg.env.name,
        cfg.rollout.agent,
        list(task_ids),
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


def reward_models(
    cfg: TrainConfig,
    algo_cfg: Any,
    tokenizer: Any,
    pad_id: int,
    collect: Collect,
    train_ids: Sequence[str],
    learner: Callable[[], LearnerGroup],
    log: Callable[[dict[str, Any]], None],
) -> RewardModels | None:
    """HISR's reward models for a run whose algorithm trains them (else None), on the learner group ``learner()``
    returns (asked at every call: a rebuilt group replaces it), playing π_ref through ``collect`` (the rollout
    pool's), logging through ``log``."""
    if not get_algo(cfg.algo).reward_models:
        return None
    return RewardModels(
        algo_cfg,
        Path(cfg.run_dir) / "hisr",
        tokenizer,
        agent=cfg.rollout.agent,
        env_name=cfg.env.name,
        max_seq_len=cfg.learner.max_seq_len,
        pad_id=pad_id,
        seed=cfg.seed,
        learner=learner,
        collect=collect,
        train_ids=train_ids,
        log=log,
    )


def offline_data(
    cfg: TrainConfig,
    algo: Algorithm,
    algo_cfg: Any,
    pool: RolloutPool,
    train_ids: Sequence[str],
    demonstrations: Callable[[], list[Trajectory]],
    log: Callable[[dict[str, Any]], None],
    updater: Updater,
) -> OfflineData | None:
    """The stored data of an offline algorithm (else None): BC's ``demonstrations()`` and the pool's rollouts; the
    online phase's KL reference frozen by ``updater``."""
    if not algo.offline:
        return None
    return OfflineData(
        algo_cfg,
        Path(cfg.run_dir) / "offline",
        anchor_role=algo.anchor_role,
        seed=cfg.seed,
        env_name=cfg.env.name,
        train_split=cfg.env.train_split,
        group_size=cfg.rollout.group_size,
        temperature=cfg.rollout.temperature,
        train_ids=train_ids,
        demonstrations=demonstrations,
        collect=pool.collect,
        sample=pool.sample,
        log=log,
        freeze_reference=updater.freeze_reference if algo.uses_reference(algo_cfg) else None,
    )


def iteration_source(
    cfg: TrainConfig,
    pool: RolloutPool,
    train_ids: Sequence[str],
    first: int,
    offline: OfflineData | None,
    resumed_from: Path | None,
) -> IterationSource:
    """Where iterations ``first``.. take their trajectories from: the stored data of an offline algorithm, the
    asynchronous stream (``max_staleness``), or synchronous rollouts with one iteration prefetched or none
    (``one_step_off``; a resumed one regenerates its in-flight rollouts with the saved behaviour adapter)."""
    if offline is not None:
        offline.prepare()
        return offline
    if cfg.max_staleness:
        return AsyncRollouts(
            pool,
            cfg.rollout,
            max_staleness=cfg.max_staleness,
            train_ids=train_ids,
            seed=cfg.seed,
            first_batch=first,
        )
    sync = SyncRollouts(
        pool, cfg.rollout, train_ids, seed=cfg.seed, last=cfg.iterations, prefetch=cfg.one_step_off
    )
    if cfg.one_step_off and resumed_from is not None and 1 < first <= cfg.iterations:
        sync.resume_in_flight(first, behaviour_adapter(resumed_from), resumed_from)
    return sync
