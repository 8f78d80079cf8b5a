"""The run config turned into each part's spec. This module and ``build_run`` (``launch/driver/build.py``) are the only
readers of the whole ``TrainConfig``, so that every part of the driver, the driver stage included (its kind's
sections, ``StageInputs``), gets only its own sections and the records built here.

``learner_spec`` (the learner workers: LoRA, optimizer settings, the algorithm's critic and adapters),
``rollout_worker_config`` (the rollout workers: engine, protocol, env, sampling), ``expert_demonstrations`` (what
BC and the offline datasets start from), the evaluators, the loop's ``Schedule`` and its
iteration source.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from actors.agents.base import DEFAULT_ADAPTERS
from actors.demos import check_demos_fit, collect_demonstrations
from actors.rollout import WorkerConfig
from actors.trajectory import Trajectory
from cluster.ray_cluster import WorkerResources, node_cores
from common.errors import RunStopped
from common.lora import LoraSpec
from envs import success_reward
from launch.config import (
    LearnerConfig,
    TrainConfig,
    behaviour_is_cap,
    engine_old_logprobs,
    overlapping_loop,
)
from launch.driver.checkpoints import behaviour_adapter
from launch.driver.evaluator import PanelEvaluator
from launch.driver.parts import Schedule
from launch.driver.rollout_pool import RolloutPool
from launch.driver.sources import IterationSource, SyncRollouts
from launch.driver.stage_kinds import stage_kind
from launch.driver.stream import AsyncRollouts
from launch.driver.update_plan import UpdaterSettings
from launch.driver.updater import Updater
from launch.evaluation.scoring import EvalScope, Evaluation, scope
from launch.evaluation.tasks import stratified_draw
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


def torch_threads(cfg: TrainConfig, workers: int, cores: int, device: str) -> int:
    """Torch threads for each of ``workers`` workers of one kind (rollout or learner) on a node with ``cores`` cores
    (``cpu_threads``); 0 leaves the process's own setting (CUDA workers)."""
    if device != "cpu":
        return 0
    if cfg.cpu_threads:
        return cfg.cpu_threads
    if overlapping_loop(cfg):  # the rollout workers and the learner group compute at once
        workers = cfg.rollout.num_workers + cfg.learner.num_workers
    return max(1, cores // workers)


def reference_adapters(cfg: TrainConfig, algo: Algorithm, algo_cfg: Any) -> tuple[str, ...]:
    """The frozen copies the learner keeps as ``algo``'s KL reference (``Algorithm.reference_adapters``)."""
    return algo.reference_adapters(algo_cfg, cfg.learner.kl_reference, cfg.model.adapter_names)


def learner_resources(learner: LearnerConfig, device: str) -> WorkerResources:
    return WorkerResources(learner.cpus_per_worker, learner.gpus_per_worker if device == "cuda" else 0.0)


def updater_settings(
    cfg: TrainConfig, algo: Algorithm, algo_cfg: Any, device: str, pad_id: int
) -> UpdaterSettings:
    """What the run's updates keep: shaping in units of the env's success reward, the role adapters, the frozen
    reference copies, the off-policy weight's cap and π_old's source (for the learner's ``device``)."""
    return UpdaterSettings(
        cfg.learner,
        pad_id=pad_id,
        success_reward=success_reward(cfg.env.name, dict(cfg.env.options)),
        role_adapters=cfg.model.role_adapters,
        ref_adapters=reference_adapters(cfg, algo, algo_cfg),
        behaviour_is_cap=behaviour_is_cap(cfg, device),
        engine_old_logprobs=engine_old_logprobs(cfg, device),
    )


def updater(cfg: TrainConfig, algo: Algorithm, algo_cfg: Any, learner: LearnerGroup, pad_id: int) -> Updater:
    """The run's algorithm's updates over ``learner``, with the settings for the device its spec names."""
    return Updater(
        learner, algo, algo_cfg, updater_settings(cfg, algo, algo_cfg, learner.spec.device, pad_id)
    )


def learner_adapters(cfg: TrainConfig) -> tuple[tuple[str, float], ...]:
    """(name, lr) of every policy adapter the learner trains (empty: the one adapter ``default`` at ``actor_lr``)."""
    return tuple((n, cfg.learner.adapter_lr.get(n, cfg.learner.actor_lr)) for n in cfg.model.adapter_names)


def learner_spec(
    cfg: TrainConfig, algo: Algorithm, algo_cfg: Any, model_path: str, device: str
) -> LearnerSpec:
    """The learner workers' spec for a run: its LoRA, optimizer settings, the algorithm's critic and adapters, and
    the models its driver stage's kind needs beside the policy's (``StageKind.models``)."""
    adapters = learner_adapters(cfg)
    threads = torch_threads(cfg, cfg.learner.num_workers, node_cores(), device)
    frozen = reference_adapters(cfg, algo, algo_cfg)
    extra = stage_kind(algo).models(algo_cfg, model_path)
    if extra.adapters:  # beside the policy's adapters (its one adapter named)
        adapters = (*(adapters or (("default", cfg.learner.actor_lr),)), *extra.adapters)
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
        pack=cfg.learner.pack,
        pack_tokens=cfg.learner.pack_tokens,
        minibatches=cfg.learner.minibatches,
        gradient_checkpointing=cfg.learner.gradient_checkpointing,
        value_heads=algo.value_heads,
        critic_trunk=cfg.learner.critic_trunk,
        target_critic=algo.target_critic,
        adapters=adapters,
        extra_critics=extra.critics,
        frozen_adapters=frozen,
        seed=cfg.seed,
        torch_threads=threads,
    )


def rl_task_scope(cfg: TrainConfig) -> EvalScope:
    """What an evaluation of the RL tasks depends on: the run's, with the RL tasks' panel (``env.train_panel`` of
    the train split) as its panel."""
    env = replace(cfg.env, eval_split=cfg.env.train_split)
    return replace(scope(cfg), env=env, eval_panel=cfg.env.train_panel, eval_episodes=cfg.env.train_tasks)


def expert_demonstrations(
    cfg: TrainConfig, tokenizer: Any, task_ids: Sequence[str], rl_ids: Sequence[str] = ()
) -> list[Trajectory]:
    """The env expert's won episodes on ``bc.episodes`` of ``task_ids`` (drawn from the run's seed), and with
    ``bc.rl_tasks`` on every one of ``rl_ids`` too, in the agent's format and with its prompts."""
    rng = random.Random(cfg.seed)
    if not cfg.bc.stratify:
        ids = rng.sample(list(task_ids), min(cfg.bc.episodes, len(task_ids)))
    else:
        import envs

        env = envs.make(cfg.env.name, **dict(cfg.env.options))
        try:
            ids = stratified_draw(task_ids, [env.task_stratum(i) for i in task_ids], cfg.bc.episodes, rng)
        finally:
            env.close()
    return demonstrations_on(cfg, tokenizer, [*ids, *(rl_ids if cfg.bc.rl_tasks else ())])


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


def demonstrations(
    cfg: TrainConfig, tokenizer: Any, bc_ids: Sequence[str], rl_ids: Sequence[str] = ()
) -> list[Trajectory]:
    """The env expert's won episodes on the run's training tasks: what BC trains on, and STEP-HRL's data D."""
    demos = expert_demonstrations(cfg, tokenizer, bc_ids, rl_ids)
    if not demos:
        raise RunStopped(f"the {cfg.env.name} expert produced no winning demonstration")
    check_demos_fit(demos, cfg.rollout.max_new_tokens, tokenizer)
    return demos


def lora_spec(cfg: TrainConfig) -> LoraSpec:
    m = cfg.model
    return LoraSpec(m.lora_rank, m.lora_alpha, m.lora_targets, m.lora_dropout)


def role_adapters(cfg: TrainConfig) -> dict[str, str | None]:
    """Role → adapter name the run's rollout workers serve: ``model.role_adapters``, else one adapter for all."""
    return dict(cfg.model.role_adapters) or dict(DEFAULT_ADAPTERS)


def rollout_worker_config(cfg: TrainConfig, model_path: str, device: str, **overrides: Any) -> WorkerConfig:
    """The rollout workers' config from a run config (training and ``hierarl eval`` build it the same way)."""
    fields: dict[str, Any] = {
        "model_path": model_path,
        "engine": cfg.rollout.engine,
        "weight_sync": cfg.rollout.weight_sync,
        "gpu_memory_utilization": cfg.rollout.gpu_memory_utilization,
        "dtype": cfg.model.dtype,
        "device": device,
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
        "adapters": role_adapters(cfg),
        "torch_threads": torch_threads(cfg, cfg.rollout.num_workers, node_cores(), device),
        "lora": lora_spec(cfg),
    }
    return WorkerConfig(**{**fields, **overrides})


EVAL_SEED = 10_000
"""Evaluation samples with ``seed + EVAL_SEED`` (the panel fixes tasks and env seeds; this seeds sampling)."""


def schedule(cfg: TrainConfig, bc_source: Path | None, bc_eval_reused: bool) -> Schedule:
    """The settings the loop reads (``bc_source``, ``bc_eval_reused``: ``launch.config.check_bc_source``'s and
    ``bc_eval_reusable``'s answers, checked before Ray starts)."""
    return Schedule(
        run_dir=Path(cfg.run_dir),
        iterations=cfg.iterations,
        seed=cfg.seed,
        eval_every=cfg.eval_every,
        checkpoint_every=cfg.checkpoint_every,
        eval_episodes=cfg.eval_episodes,
        train_tasks=cfg.env.train_tasks,
        eval_zero_shot=cfg.eval_zero_shot,
        save_trajectories=cfg.save_trajectories,
        one_step_off=cfg.one_step_off,
        resume=cfg.resume,
        adapters=tuple(cfg.model.adapter_names),
        init_adapter=cfg.model.init_adapter,
        lora=lora_spec(cfg),
        bc=cfg.bc if cfg.bc.enabled else None,
        bc_source=bc_source,
        bc_eval_reused=bc_eval_reused,
        learner=cfg.learner,
    )


def panel_evaluator(
    cfg: TrainConfig, pool: RolloutPool, evaluation: Evaluation, samples: int
) -> PanelEvaluator:
    """An evaluator of ``pool``'s policy on ``evaluation``'s panel at the run's evaluation temperature and sampling
    seed: the run's own evaluations and ``hierarl eval``'s of its checkpoint play the same episodes."""
    return PanelEvaluator(
        pool, evaluation, cfg.rollout.eval_temperature, cfg.seed + EVAL_SEED, samples, greedy=cfg.eval_greedy
    )


def iteration_source(
    cfg: TrainConfig,
    pool: RolloutPool,
    train_ids: Sequence[str],
    first: int,
    resumed_from: Path | None,
) -> IterationSource:
    """The rollouts iterations ``first``.. take their trajectories from (where the run's driver stage has no data of
    its own): the asynchronous stream (``max_staleness``), or synchronous rollouts with one iteration prefetched or
    none (``one_step_off``; a resumed one regenerates its in-flight rollouts with the saved behaviour adapter)."""
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
