"""A run built apart from running it: ``build_run`` turns the run config into the parts (``launch/driver/wiring.py`` builds
their specs) and returns them as one record, ``RunParts``, which ``launch/driver/train.py``'s ``Trainer`` runs without
reading the run config, so the loop can be driven by plain fakes in a unit test.

Each part takes its own config section and collaborators, never the run config or the ``Trainer``:

* ``RolloutPool`` (``launch/driver/rollout_pool.py``): the rollout workers, weight pushes, collections;
* an ``IterationSource`` (``launch/driver/sources.py``), built when the first iteration is known: synchronous rollouts
  (with one iteration prefetched: ``one_step_off``), asynchronous streaming (``launch/driver/stream.py``,
  ``max_staleness``) or the driver stage's stored data (``launch/driver/offline_data.py``, STEP-HRL and Multi2);
* ``Updater`` (``launch/driver/updater.py``) over the ``LearnerGroup``;
* the algorithm's driver stage (``launch/driver/stages.py``, ``Algorithm.driver_stage``): HISR's reward models
  (``launch/driver/hisr_rewards.py``), which annotate the update's trajectories before the targets, the stored data (then the
  iteration source, in place of the rollouts), or the null stage;
* ``Checkpointer`` (``launch/driver/checkpoints.py``), ``RunLog`` (``launch/driver/run_log.py``), ``PanelEvaluator``
  (``launch/driver/evaluator.py``), the warm starts' settings (``launch/driver/warm_start.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actors.demos import check_demos_fit
from actors.models import resolve_model_path
from actors.trajectory import Trajectory
from cluster.ray_cluster import WORKER_LOST, init_ray
from common.lora import LoraSpec
from launch.config import (
    BCConfig,
    LearnerConfig,
    TrainConfig,
    bc_eval_reusable,
    check_bc_source,
    resolve_algo_config,
    resolved_text,
    to_dict,
)
from launch.driver.algos import get_algo
from launch.driver.checkpoints import Checkpointer
from launch.driver.evaluator import PanelEvaluator
from launch.driver.kept_episodes import EpisodeKeeper
from launch.driver.rollout_pool import RolloutPool
from launch.driver.run_log import RunLog
from launch.driver.sources import EmptyIterations, IterationSource
from launch.driver.stages import DriverStage
from launch.driver.updater import Updater
from launch.driver.wiring import (
    StageInputs,
    env_task_ids,
    expert_demonstrations,
    iteration_source,
    learner_resources,
    learner_spec,
    lora_spec,
    rl_and_bc_tasks,
    rl_task_panel,
    rl_task_scope,
    rollout_pool,
    stage_builder,
    updater,
)
from launch.evaluation.panel_tasks import Panel
from launch.evaluation.scoring import Evaluation, scope
from learners.algorithm import Algorithm
from learners.group import LearnerGroup

EVAL_SEED = 10_000
"""Evaluation samples with ``seed + EVAL_SEED`` (the panel fixes tasks and env seeds; this seeds sampling)."""


@dataclass(frozen=True)
class Schedule:
    """The run config's settings that the loop reads, and nothing more of it."""

    run_dir: Path
    iterations: int
    seed: int
    eval_every: int
    """Evaluate after every ``eval_every``-th RL iteration (0: never)."""
    checkpoint_every: int
    """Checkpoint after every ``checkpoint_every``-th RL iteration (0: never); iteration 0 always."""
    eval_episodes: int
    train_tasks: int
    """``env.train_tasks``: how many RL tasks each evaluation also scores (0: none)."""
    eval_zero_shot: bool
    save_trajectories: bool
    one_step_off: bool
    resume: bool
    adapters: tuple[str, ...]
    """The policy adapters of ``model.role_adapters`` (empty: one adapter for every role)."""
    init_adapter: str
    """``model.init_adapter``: a saved PEFT adapter the policy starts from ("": none)."""
    lora: LoraSpec
    bc: BCConfig | None
    """The run's BC section where BC is on (``bc.enabled``), else None."""
    bc_source: Path | None
    """``bc.from_run``'s BC checkpoint (checked before Ray starts), else None: BC runs here."""
    bc_eval_reused: bool
    """Whether the evaluation after BC is ``bc.from_run``'s (``launch.config.bc_eval_reusable``), not played here."""
    learner: LearnerConfig
    """The learner section: ``critic_warmup_passes``, ``max_restarts`` and how RL starts its optimizer."""


@dataclass(frozen=True)
class RunParts:
    """Everything a run is made of, built; ``Trainer`` reads these and no run config. What the loop needs only
    later (the iteration source, BC's demonstrations) is a factory."""

    schedule: Schedule
    algo: Algorithm
    algo_cfg: Any
    pool: RolloutPool
    updater: Updater
    """The update's driver side; ``updater.learner`` is the run's learner group (``LearnerGroup.rebuild``)."""
    worker_lost: tuple[type[BaseException], ...]
    """The errors that mean a learner worker died (the group is rebuilt, not the run ended)."""
    checkpoints: Checkpointer
    keeper: EpisodeKeeper
    log: RunLog
    evaluator: PanelEvaluator
    rl_evaluator: PanelEvaluator | None
    """The RL tasks' evaluator (``env.train_tasks`` > 0), else None."""
    empty: EmptyIterations
    stage: DriverStage
    """The algorithm's driver stage (``Algorithm.driver_stage``; the null stage where it names none)."""
    source: Callable[[int, Path | None], IterationSource]
    """The run's rollouts as an iteration source, from the first iteration to run and the checkpoint a resume started
    from (the driver stage may replace them with data of its own: ``DriverStage.iteration_source``)."""
    demonstrations: Callable[[], list[Trajectory]]
    tokenizer: Any
    model_path: str
    train_ids: list[str]
    """The tasks RL plays."""
    bc_ids: list[str]
    """The tasks behaviour cloning may demonstrate."""
    rl_panel: Panel | None
    """``env.train_tasks`` > 0: the fixed tasks RL plays, evaluated beside the held-out panel; else None."""


def demonstrations(cfg: TrainConfig, tokenizer: Any, bc_ids: Sequence[str]) -> list[Trajectory]:
    """The env expert's won episodes on the run's training tasks: what BC trains on, and STEP-HRL's data D."""
    demos = expert_demonstrations(cfg, tokenizer, bc_ids)
    if not demos:
        raise RuntimeError(f"the {cfg.env.name} expert produced no winning demonstration")
    check_demos_fit(demos, cfg.rollout.max_new_tokens, tokenizer)
    return demos


def schedule(cfg: TrainConfig, bc_source: Path | None) -> Schedule:
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
        bc_eval_reused=bc_source is not None and bc_eval_reusable(cfg),
        learner=cfg.learner,
    )


def panel_evaluator(
    cfg: TrainConfig, pool: RolloutPool, evaluation: Evaluation, samples: int
) -> PanelEvaluator:
    """An evaluator of ``pool``'s policy on ``evaluation``'s panel at the run's evaluation temperature and sampling
    seed: the run's own evaluations and ``hierarl eval``'s of its checkpoint play the same episodes."""
    return PanelEvaluator(pool, evaluation, cfg.rollout.eval_temperature, cfg.seed + EVAL_SEED, samples)


def build_run(cfg: TrainConfig, device: str | None = None) -> RunParts:
    """The run's parts, in the order a run starts them: the resolved config printed and saved to ``config.yaml``,
    the process seeded, Ray started, then the workers and the driver's parts. ``device``: "cuda" or "cpu" for the
    workers (default: what this process sees; a sweep's cells run in Ray tasks without a GPU of their own and are
    told)."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    build_stage = stage_builder(algo)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    text = resolved_text(cfg, algo_cfg, device=device)
    print("[hierarl] resolved config:\n" + text, flush=True)
    (run_dir / "config.yaml").write_text(text)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    bc_source = check_bc_source(cfg) if cfg.bc.enabled and cfg.bc.from_run else None
    init_ray(cfg.ray_address, device=device)
    model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pad_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    rl_panel = rl_task_panel(cfg)
    train_ids, bc_ids = rl_and_bc_tasks(env_task_ids(cfg, cfg.env.train_split), rl_panel, cfg.bc.episodes)
    pool = rollout_pool(cfg, model_path, device)
    learner = LearnerGroup(
        learner_spec(cfg, algo, algo_cfg, model_path, device),
        cfg.learner.num_workers,
        learner_resources(cfg.learner, device),
    )
    upd = updater(cfg, algo, algo_cfg, learner, pad_id)
    checkpoints = Checkpointer(run_dir / "checkpoints", cfg.checkpoint_keep_last)
    keeper = EpisodeKeeper(run_dir, tokenizer, cfg.keep_episodes, [s.name for s in algo.value_slots])
    log = RunLog(run_dir, cfg.log, algo=cfg.algo, env=cfg.env.name, config=to_dict(cfg))
    evaluator = panel_evaluator(cfg, pool, Evaluation(scope(cfg), model_path), cfg.eval_samples)
    rl_evaluator = (
        None
        if rl_panel is None
        else panel_evaluator(cfg, pool, Evaluation(rl_task_scope(cfg), model_path), cfg.eval_train_samples)
    )
    empty = EmptyIterations(cfg.rollout.max_empty_iterations, cfg.rollout.groups_per_iter)
    demos = partial(demonstrations, cfg, tokenizer, bc_ids)
    stage = build_stage(
        StageInputs(
            cfg=cfg,
            algo=algo,
            algo_cfg=algo_cfg,
            tokenizer=tokenizer,
            pad_id=pad_id,
            train_ids=train_ids,
            learner=learner,
            collect=pool.collect,
            sample=pool.sample,
            demonstrations=demos,
            log=log.log,
            freeze_reference=upd.freeze_reference,
        )
    )

    return RunParts(
        schedule=schedule(cfg, bc_source),
        algo=algo,
        algo_cfg=algo_cfg,
        pool=pool,
        updater=upd,
        worker_lost=WORKER_LOST,
        checkpoints=checkpoints,
        keeper=keeper,
        log=log,
        evaluator=evaluator,
        rl_evaluator=rl_evaluator,
        empty=empty,
        stage=stage,
        source=partial(iteration_source, cfg, pool, train_ids),
        demonstrations=demos,
        tokenizer=tokenizer,
        model_path=model_path,
        train_ids=train_ids,
        bc_ids=bc_ids,
        rl_panel=rl_panel,
    )
