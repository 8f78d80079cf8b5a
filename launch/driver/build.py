"""A run built apart from running it: ``build_run`` turns the run config into the parts (``launch/driver/wiring.py`` builds
their specs) and returns them as one record, ``RunParts`` (``launch/driver/parts.py``), which ``launch/driver/train.py``'s ``Trainer`` runs without
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
from functools import partial
from pathlib import Path

import numpy as np
import torch

from actors.models import resolve_model_path
from cluster.ray_cluster import WORKER_LOST, init_ray
from launch.config import (
    TrainConfig,
    bc_eval_reusable,
    check_bc_source,
    resolve_algo_config,
    resolved_text,
    to_dict,
)
from launch.driver.checkpoints import Checkpointer
from launch.driver.kept_episodes import EpisodeKeeper
from launch.driver.parts import RunParts
from launch.driver.run_log import RunLog
from launch.driver.sources import EmptyIterations
from launch.driver.stage_kinds import stage_kind
from launch.driver.stages import StageInputs
from launch.driver.wiring import (
    demonstrations,
    iteration_source,
    learner_resources,
    learner_spec,
    panel_evaluator,
    rl_task_scope,
    rollout_pool,
    schedule,
    updater,
)
from launch.evaluation.scoring import Evaluation, scope
from launch.evaluation.tasks import task_split
from learners.algos.registry import get_algo
from learners.group import LearnerGroup


def build_run(cfg: TrainConfig, device: str | None = None) -> RunParts:
    """The run's parts, in the order a run starts them: the resolved config printed and saved to ``config.yaml``,
    the process seeded, Ray started, then the workers and the driver's parts. ``device``: "cuda" or "cpu" for the
    workers (default: what this process sees; a sweep's cells run in Ray tasks without a GPU of their own and are
    told). The run config is read here and in ``launch/driver/wiring.py`` only."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    kind = stage_kind(algo)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    text = resolved_text(cfg, algo_cfg, device=device)
    print("[hierarl] resolved config:\n" + text, flush=True)
    (run_dir / "config.yaml").write_text(text)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    bc_source = check_bc_source(cfg) if cfg.bc.enabled and cfg.bc.from_run else None
    bc_eval_reused = bc_source is not None and bc_eval_reusable(cfg)
    init_ray(cfg.ray_address, device=device)
    model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pad_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    # the parts' specs and the workers, from the run config
    rl_panel, train_ids, bc_ids = task_split(cfg)
    pool = rollout_pool(cfg, model_path, device)
    learner = LearnerGroup(
        learner_spec(cfg, algo, algo_cfg, model_path, device),
        cfg.learner.num_workers,
        learner_resources(cfg.learner, device),
    )
    demos = partial(demonstrations, cfg, tokenizer, bc_ids, train_ids if rl_panel is not None else ())
    rl_scope = None if rl_panel is None else rl_task_scope(cfg)
    held_out = Evaluation(scope(cfg), model_path)
    evaluator = panel_evaluator(cfg, pool, held_out, cfg.eval_samples)
    rl_evaluator = (
        None
        if rl_scope is None
        else panel_evaluator(cfg, pool, Evaluation(rl_scope, model_path), cfg.eval_train_samples)
    )
    upd = updater(cfg, algo, algo_cfg, learner, pad_id)
    log = RunLog(run_dir, cfg.log, algo=cfg.algo, env=cfg.env.name, config=to_dict(cfg))
    stage = kind.build(
        StageInputs(
            algo=algo,
            algo_cfg=algo_cfg,
            run_dir=run_dir,
            seed=cfg.seed,
            sections=kind.sections_of(cfg),
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
    checkpoints = Checkpointer(run_dir / "checkpoints", cfg.checkpoint_keep_last)
    keeper = EpisodeKeeper(run_dir, tokenizer, cfg.keep_episodes, [s.name for s in algo.value_slots])
    source = partial(iteration_source, cfg, pool, train_ids)
    empty = EmptyIterations(cfg.rollout.max_empty_iterations, cfg.rollout.groups_per_iter)
    return RunParts(
        schedule=schedule(cfg, bc_source, bc_eval_reused),
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
        source=source,
        demonstrations=demos,
        tokenizer=tokenizer,
        model_path=model_path,
        train_ids=train_ids,
        bc_ids=bc_ids,
        rl_panel=rl_panel,
    )
