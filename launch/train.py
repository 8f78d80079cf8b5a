"""The training driver: the composition root of a run, and its loop (single controller, as in verl).

    source.take(k) → updater.update → pool.push → evaluate every k → checkpoint → log

``Trainer.__init__`` turns the run config into the parts (``launch/specs.py`` builds their specs); each part takes
its own config section and collaborators, never the run config or the ``Trainer``:

* ``RolloutPool`` (``launch/rollout_pool.py``): the rollout workers, weight pushes, collections;
* an ``IterationSource`` (``launch/sources.py``): synchronous rollouts (with one iteration prefetched:
  ``one_step_off``), asynchronous streaming (``launch/stream.py``, ``max_staleness``) or stored data
  (``launch/offline.py``, STEP-HRL and Multi2);
* ``Updater`` (``launch/updater.py``) over the ``LearnerGroup``; HISR's reward models (``launch/hisr.py``) annotate
  its trajectories before the targets;
* ``Checkpointer`` (``launch/checkpoints.py``), ``RunLog`` (``launch/run_log.py``), ``Evaluation``
  (``launch/evaluation.py``), the warm starts (``launch/warm_start.py``).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actors.demos import check_demos_fit
from actors.models import resolve_model_path
from actors.trajectory import Trajectory, to_jsonl
from cluster.ray_cluster import WORKER_LOST, init_ray
from common.rng import restore_process_rngs
from launch.algos import get_algo
from launch.checkpoints import Checkpointer
from launch.config import (
    TrainConfig,
    check_bc_source,
    resolve_algo_config,
    resolved_text,
    to_dict,
)
from launch.evaluation import Evaluation, scope
from launch.evaluator import PanelEvaluator
from launch.kept_episodes import EpisodeKeeper
from launch.rollout_pool import Weights
from launch.run_log import RunLog, eval_fields, eval_text, final_table, iteration_line
from launch.sources import EmptyIterations
from launch.specs import (
    env_task_ids,
    expert_demonstrations,
    iteration_source,
    learner_resources,
    learner_spec,
    lora_spec,
    offline_data,
    reward_models,
    rl_and_bc_tasks,
    rl_task_panel,
    rl_task_scope,
    rollout_pool,
    updater,
)
from launch.updater import timed
from launch.warm_start import bc_from_run, behaviour_cloning, load_init_adapter, start_rl
from learners.algorithm import Algorithm
from learners.group import LearnerGroup

EVAL_SEED = 10_000
"""Evaluation samples with ``seed + EVAL_SEED`` (the panel fixes tasks and env seeds; this seeds sampling)."""


class Trainer:
    """The parts of one run; ``run()`` is the loop in the module docstring."""

    def __init__(self, cfg: TrainConfig, device: str | None = None) -> None:
        """``device``: "cuda" or "cpu" for the workers (default: what this process sees; a sweep's cells run in Ray
        tasks without a GPU of their own and are told)."""
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.algo = get_algo(cfg.algo)
        self.algo_cfg = resolve_algo_config(self.algo.Config, cfg.algo_overrides)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        text = resolved_text(cfg, self.algo_cfg, device=self.device)
        print("[hierarl] resolved config:\n" + text, flush=True)
        (self.run_dir / "config.yaml").write_text(text)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.bc_source = check_bc_source(cfg) if cfg.bc.enabled and cfg.bc.from_run else None
        init_ray(cfg.ray_address, device=self.device)
        self.model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.pad_id = pad_id = self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        self.rl_panel = rl_task_panel(cfg)
        """``env.train_tasks`` > 0: the fixed tasks RL plays, evaluated beside the held-out panel; else None."""
        all_train = env_task_ids(cfg, cfg.env.train_split)
        self.train_ids, self.bc_ids = rl_and_bc_tasks(all_train, self.rl_panel, cfg.bc.episodes)
        self.pool = rollout_pool(cfg, self.model_path, self.device)
        self.learner_spec = learner_spec(cfg, self.algo, self.algo_cfg, self.model_path, self.device)
        self.learner_resources = learner_resources(cfg.learner, self.device)
        self.learner = LearnerGroup(self.learner_spec, cfg.learner.num_workers, self.learner_resources)
        self.updater = updater(cfg, self.algo, self.algo_cfg, self.learner, pad_id)
        self.adapters = cfg.model.adapter_names
        """The policy adapters of ``model.role_adapters`` (empty: one adapter for every role)."""
        self.checkpoints = Checkpointer(self.run_dir / "checkpoints", cfg.checkpoint_keep_last)
        slots = [s.name for s in self.algo.value_slots]
        self.keeper = EpisodeKeeper(self.run_dir, self.tokenizer, cfg.keep_episodes, slots)
        self.log = RunLog(self.run_dir, cfg.log, algo=cfg.algo, env=cfg.env.name, config=to_dict(cfg))
        self.evaluator = PanelEvaluator(
            self.pool,
            Evaluation(scope(cfg), self.model_path),
            cfg.rollout.eval_temperature,
            cfg.seed + EVAL_SEED,
            cfg.eval_samples,
        )
        self.rl_evaluator = (
            None
            if self.rl_panel is None
            else PanelEvaluator(
                self.pool,
                Evaluation(rl_task_scope(cfg), self.model_path),
                cfg.rollout.eval_temperature,
                cfg.seed + EVAL_SEED,
                cfg.eval_train_samples,
            )
        )
        self.learner_restarts = 0  # learner groups rebuilt after a worker died (``learner.max_restarts``)
        self.empty = EmptyIterations(cfg.rollout.max_empty_iterations, cfg.rollout.groups_per_iter)
        self.resumed_from: Path | None = None
        self.hisr = reward_models(
            cfg,
            self.algo_cfg,
            self.tokenizer,
            pad_id,
            self.pool.collect,
            self.train_ids,
            lambda: self.learner,
            self.log.log,
        )
        self.offline = offline_data(
            cfg,
            self.algo,
            self.algo_cfg,
            self.pool,
            self.train_ids,
            self.demonstrations,
            self.log.log,
            self.updater,
        )

    # -- the loop --------------------------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]]:
        cfg = self.cfg
        first = self.resume() or self.warm_start()
        if self.hisr is not None:
            self.hisr.prepare(in_learner=first > 1)  # RL checkpoints hold the reward models
        source = iteration_source(self.cfg, self.pool, self.train_ids, first, self.offline, self.resumed_from)
        for it in range(first, cfg.iterations + 1):
            timings: dict[str, float] = {}
            t0 = time.perf_counter()
            with timed(timings, "rollout"):
                data = source.take(it)
            if not any(t.turns for t in data.trajectories):
                self.log.log(self.empty.empty(it, data.stats))
                continue
            self.empty.sampled()
            lag = data.policy_lag(self.pool.version)
            if lag is not None:
                data.stats["policy_lag"] = lag
            if cfg.save_trajectories:  # before the update writes its shaping into the turns
                to_jsonl(data.trajectories, self.run_dir / "trajectories" / f"iter_{it}.jsonl")
            metrics, update_timings = self.update_recovering(data.trajectories, it)
            timings.update(update_timings)
            with timed(timings, "rollout_wait"):
                waited = source.before_push()
            if not waited:  # nothing was in flight
                timings.pop("rollout_wait")
            with timed(timings, "push"):
                self.push()
            record = {"iteration": it, "phase": "rl", "version": self.pool.version, **data.stats, **metrics}
            record.update(self.pool.fault_totals(it, learner_restarts=self.learner_restarts))
            if cfg.eval_every and it % cfg.eval_every == 0:
                with timed(timings, "rollout_pause"):
                    paused = source.pause()  # evaluation needs the workers
                if not paused:
                    timings.pop("rollout_pause")
                with timed(timings, "eval"):
                    record.update(self.eval_record(it)[0])
            if cfg.checkpoint_every and it % cfg.checkpoint_every == 0:
                with timed(timings, "checkpoint"):
                    self.checkpoint(it, record)
            timings["iteration"] = time.perf_counter() - t0
            self.log.log({**record, **{f"time_{k}": v for k, v in timings.items()}})
            print(iteration_line(self.log.history[-1]), flush=True)
        source.close()
        print(final_table(self.log.history), flush=True)
        print(
            f"[hierarl] curves, episodes and the eval grid as one page: hierarl view {self.run_dir}",
            flush=True,
        )
        return self.log.history

    # -- starting: a warm start, or a resume -----------------------------------------------------------------

    def warm_start(self) -> int:
        """A fresh run: the initial push, zero-shot eval, BC (or another run's BC, or a saved adapter), its eval,
        the KL reference frozen, checkpoint 0. Returns the first RL iteration (1)."""
        cfg = self.cfg
        self.log.restart([])
        if cfg.model.init_adapter:
            load_init_adapter(self.learner, cfg.model.init_adapter, lora_spec(cfg))
        self.push()
        if cfg.eval_zero_shot:
            fields, text = self.eval_record(-1)
            self.log.log({"iteration": -1, "phase": "zero-shot", **fields})
            print(f"[hierarl] zero-shot eval {text}", flush=True)
        if cfg.bc.enabled:
            if self.bc_source is None:
                bc = behaviour_cloning(self.updater, self.demonstrations(), cfg.bc, seed=cfg.seed)
            else:
                bc = bc_from_run(self.learner, self.bc_source, self.adapters or ["default"])
            push_s = self.push()
            fields, text = self.eval_record(0)
            self.log.log({"iteration": 0, "phase": "bc", **bc, "push_s": push_s, **fields})
            source = f" (taken from {bc['bc_from_run']})" if "bc_from_run" in bc else ""
            print(
                f"[hierarl] BC on {bc['demos']} demos ({bc['turns']} turns) in {bc['wall_s']:.1f}s{source}; "
                f"eval after BC {text}",
                flush=True,
            )
        if self.updater.ref_adapters and self.offline is None:
            self.updater.freeze_reference()  # π_ref: the policy RL starts from (after BC)
        start_rl(self.learner, cfg.learner, self.adapters or ["default"])
        self.checkpoint(0)
        return 1

    def resume(self) -> int:
        """``resume=true``: the newest readable checkpoint's learner and driver state, the logs cut back to it, the
        adapter pushed. Returns the first iteration to run (0: nothing to resume)."""
        if not (self.cfg.resume and self.checkpoints.has_latest):
            return 0
        loaded = self.checkpoints.load_newest(self.learner)
        if loaded is None:
            raise RuntimeError(f"resume=true but no readable checkpoint under {self.checkpoints.root}")
        path, state = loaded
        self.resumed_from = path
        restore_process_rngs(state["rng"])
        if self.offline is not None:
            self.offline.critic_steps = int(state.get("offline_steps", 0))
        self.pool.version = state["version"] - 1
        self.push()
        self.log.resume_at(state["iteration"], state.get("record"))
        print(f"[hierarl] resumed from {path} at iteration {state['iteration'] + 1}", flush=True)
        return state["iteration"] + 1

    def demonstrations(self) -> list[Trajectory]:
        """The env expert's won episodes on the run's training tasks: what BC trains on, and STEP-HRL's data D."""
        demos = expert_demonstrations(self.cfg, self.tokenizer, self.bc_ids)
        if not demos:
            raise RuntimeError(f"the {self.cfg.env.name} expert produced no winning demonstration")
        check_demos_fit(demos, self.cfg.rollout.max_new_tokens, self.tokenizer)
        return demos

    # -- the parts of an iteration ---------------------------------------------------------------------------

    def push(self, weights: Weights | None = None) -> float:
        """Each policy adapter's tensors (by name; None: the one adapter every role uses) to every rollout worker."""
        if weights is None:
            names = self.adapters or [None]
            weights = {n: self.learner.adapter_weights(n) for n in names}
        return self.pool.push(weights)

    def update(
        self,
        trajs: list[Trajectory],
        algo: Algorithm,
        algo_cfg: Any,
        *,
        seed: int,
        iteration: int = 0,
        **kw: Any,
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """``Updater.update`` with this run's stored-data and reward-model hooks; returns (metrics, timings)."""
        offline = self.offline if algo is self.algo else None
        metrics, timings = self.updater.update(
            trajs,
            algo,
            algo_cfg,
            seed=seed,
            observe=self.keeper.observer(iteration),
            reference=offline is None or offline.online(iteration),
            annotate=self.hisr.annotate if algo.reward_models and self.hisr is not None else None,
            warmup_left=0 if offline is None else offline.warmup_left(),
            **kw,
        )
        if offline is not None:
            offline.critic_steps += int(metrics["optimizer_steps"])
        return metrics, timings

    def update_recovering(self, trajs: list[Trajectory], it: int) -> tuple[dict[str, Any], dict[str, float]]:
        """``update`` on iteration ``it``'s rollouts (the first RL iteration's critic warmed up first,
        ``learner.critic_warmup_passes``); if a learner worker dies, the group is rebuilt from the newest readable
        checkpoint and the update redone on the same rollouts."""
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
        self.learner = LearnerGroup(self.learner_spec, self.cfg.learner.num_workers, self.learner_resources)
        self.updater.learner = self.learner
        loaded = self.checkpoints.load_newest(self.learner)
        if loaded is None:
            raise RuntimeError(
                f"a learner worker died ({type(error).__name__}) and there is no checkpoint to rebuild from"
            ) from error
        path, state = loaded
        if self.offline is not None:
            self.offline.critic_steps = int(state.get("offline_steps", 0))
        if self.hisr is not None:
            self.hisr.prepare(in_learner=state["iteration"] >= 1)
        self.learner_restarts += 1
        print(
            f"[hierarl] a learner worker died ({type(error).__name__}); group rebuilt from {path} in "
            f"{time.perf_counter() - t0:.1f}s ({self.learner_restarts}/{limit}); the update is redone on the "
            "iteration's rollouts",
            flush=True,
        )

    def evaluate(self, n: int) -> dict[str, Any]:
        """The policy on the first ``n`` tasks of the eval panel (``PanelEvaluator``); the policy is the base model
        before the first push after a warm start (a zero adapter: its eval is the base model's). Nothing pushed yet:
        the learner's adapter is pushed first, so the workers and the base-model column have one to return to."""
        if self.pool.version == 0:
            self.push()
        return self.evaluator.evaluate(n, is_base=self.serves_base())

    def serves_base(self) -> bool:
        """Whether the rollout workers serve the base model: the first push of a fresh run (a zero adapter)."""
        return self.pool.version == 1 and not self.cfg.model.init_adapter and self.resumed_from is None

    def eval_record(self, iteration: int) -> tuple[dict[str, Any], str]:
        """The eval panel's first ``eval_episodes`` tasks and, with ``env.train_tasks``, the RL tasks: their metric
        fields (``eval_*``, ``train_eval_*``) and a line of text; their episodes kept for ``hierarl view``."""
        ev = self.evaluate(self.cfg.eval_episodes)
        fields, text = eval_fields(ev), eval_text(ev)
        self.keeper.keep_eval(iteration, "eval", ev["episodes"])
        if self.rl_evaluator is not None:
            rl = self.rl_evaluator.evaluate(self.cfg.env.train_tasks, is_base=self.serves_base())
            fields.update(eval_fields(rl, prefix="train_eval_"))
            text += f"\n[hierarl]   on the {rl['n']} tasks RL trains on: {eval_text(rl)}"
            self.keeper.keep_eval(iteration, "eval RL tasks", rl["episodes"])
        return fields, text

    def checkpoint(self, iteration: int, record: dict[str, Any] | None = None) -> None:
        """``checkpoints/iter_<k>`` (``Checkpointer``); ``record``: the iteration's metrics row, logged after the
        checkpoint, which a resume restores if the run died in between. One-step-off: also the adapter the next
        iteration's in-flight rollouts come from, so an exact resume regenerates them."""
        state = {
            "version": self.pool.version,
            "record": record,
            "offline_steps": self.offline.critic_steps if self.offline is not None else 0,
        }
        behaviour = (
            self.pool.pushed[0][None] if self.cfg.one_step_off and len(self.pool.pushed) == 2 else None
        )
        self.checkpoints.save(iteration, self.learner, state, behaviour)

    def close(self) -> None:
        """Stop the env pools and engines, kill the actors (frees DeepSpeed's port), close the log's backends."""
        self.pool.close()
        self.learner.shutdown()
        self.log.close()


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    trainer = Trainer(cfg)
    try:
        return trainer.run()
    finally:
        trainer.close()
