"""The training driver's loop (single controller, as in verl), over the parts ``launch/driver/build.py`` builds:

    source.take(k) → staged_update (updater.update) → pool.push → evaluate every k → checkpoint → log

``Trainer`` reads the run's ``RunParts`` and its ``Schedule``, never the run config, so a unit test drives the loop
with fakes of the parts (``tests/unit/launch/test_loop.py``); ``train`` builds a run and runs it. What an algorithm
needs of the driver beyond that is its driver stage's (``launch/driver/stages.py``), whose hooks the loop calls for every
run.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

from actors.trajectory import Trajectory, to_jsonl
from common.errors import RunStopped
from common.rng import restore_process_rngs
from launch.config import TrainConfig
from launch.driver.build import build_run
from launch.driver.parts import RunParts
from launch.driver.run_log import eval_fields, eval_text, final_table, iteration_line, logged_eval_text
from launch.driver.stages import staged_update
from launch.driver.update_plan import UpdatePlan, UpdateResult
from launch.driver.updater import timed
from launch.driver.warm_start import bc_from_run, behaviour_cloning, load_init_adapter, start_rl
from launch.driver.weights import Weights
from learners.group import LearnerGroup


class Trainer:
    """A built run (``parts``) and the loop's own state; ``run()`` is the loop in the module docstring."""

    def __init__(self, parts: RunParts) -> None:
        self.parts = parts
        self.learner_restarts = 0  # learner groups rebuilt after a worker died (``learner.max_restarts``)
        self.resumed_from: Path | None = None  # the checkpoint a resume started from (None: a fresh run)
        self.base_version: int | None = None
        """The adapter version that is a fresh run's untrained adapter (the base model), where one was pushed."""

    @property
    def learner(self) -> LearnerGroup:
        """The run's learner group (the updater's)."""
        return self.parts.updater.learner

    # -- the loop --------------------------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]]:
        """A resume or a warm start, then the RL iterations up to ``iterations``; returns the run's metrics rows."""
        p, s = self.parts, self.parts.schedule
        first = self.resume() or self.warm_start()
        p.stage.prepare(first - 1)  # the learner holds the checkpoint of the iteration before the first
        source = p.stage.iteration_source(partial(p.source, first, self.resumed_from))
        for it in range(first, s.iterations + 1):
            timings: dict[str, float] = {}
            t0 = time.perf_counter()
            with timed(timings, "rollout"):
                data = source.take(it)
            if not any(t.turns for t in data.trajectories):
                p.log.log(p.empty.empty(it, data.stats))
                continue
            p.empty.sampled()
            lag = data.policy_lag(p.pool.weights.version)
            if lag is not None:
                data.stats["policy_lag"] = lag
            if s.save_trajectories:  # before the update writes its shaping into the turns
                to_jsonl(data.trajectories, s.run_dir / "trajectories" / f"iter_{it}.jsonl")
            metrics, update_timings = self.update_recovering(data.trajectories, it)
            timings.update(update_timings)
            with timed(timings, "rollout_wait"):
                waited = source.before_push()
            if not waited:  # nothing was in flight
                timings.pop("rollout_wait")
            with timed(timings, "push"):
                self.push()
            record = {
                "iteration": it,
                "phase": "rl",
                "version": p.pool.weights.version,
                **data.stats,
                **metrics,
            }
            record.update(p.pool.fault_totals(it, learner_restarts=self.learner_restarts))
            if s.eval_every and it % s.eval_every == 0:
                with timed(timings, "rollout_pause"):
                    paused = source.pause()  # evaluation needs the workers
                if not paused:
                    timings.pop("rollout_pause")
                with timed(timings, "eval"):
                    record.update(self.eval_record(it)[0])
            if s.checkpoint_every and it % s.checkpoint_every == 0:
                with timed(timings, "checkpoint"):
                    self.checkpoint(it, record)
            timings["iteration"] = time.perf_counter() - t0
            p.log.log({**record, **{f"time_{k}": v for k, v in timings.items()}})
            print(iteration_line(p.log.history[-1]), flush=True)
        source.close()
        print(final_table(p.log.history), flush=True)
        print(
            f"[hierarl] curves, episodes and the eval grid as one page: hierarl view {s.run_dir}", flush=True
        )
        return p.log.history

    # -- starting: a warm start, or a resume -----------------------------------------------------------------

    def warm_start(self) -> int:
        """A fresh run: the initial push, zero-shot eval, BC (or another run's BC, or a saved adapter), its eval,
        the KL reference frozen (unless the driver stage freezes it later), checkpoint 0. Returns the first RL
        iteration (1)."""
        p, s = self.parts, self.parts.schedule
        p.log.restart([])
        if s.init_adapter:
            load_init_adapter(self.learner, s.init_adapter, s.lora)
        if s.eval_zero_shot or s.bc is None:
            # the zero-shot eval, or RL without BC, needs it now; else BC's push is the first, so the rollout
            # workers' engines start (vLLM: about a minute) while BC runs instead of before it
            self.push()
            if not s.init_adapter:
                self.base_version = self.parts.pool.weights.version
        if s.eval_zero_shot:
            fields, text = self.eval_record(-1)
            p.log.log({"iteration": -1, "phase": "zero-shot", **fields})
            print(f"[hierarl] zero-shot eval {text}", flush=True)
        if s.bc is not None:
            if s.bc_source is None:
                bc = behaviour_cloning(
                    p.updater, p.demonstrations(), s.bc, seed=s.seed, after_epoch=self.eval_bc_epoch
                )
            else:
                bc = bc_from_run(
                    self.learner, s.bc_source, s.adapters or ["default"], with_eval=s.bc_eval_reused
                )
            push_s = self.push()  # the first push of most runs: it waits for the engines to be up
            t0 = time.perf_counter()
            if "eval_success" in bc:  # the source run's evaluation of this state, at this run's settings
                fields, text, whose = {}, logged_eval_text(bc), " (that run's: same state and settings)"
            else:
                (fields, text), whose = self.eval_record(0), ""
            eval_s = time.perf_counter() - t0
            p.log.log({"iteration": 0, "phase": "bc", **bc, "push_s": push_s, "time_eval": eval_s, **fields})
            source = f" (taken from {bc['bc_from_run']})" if "bc_from_run" in bc else ""
            print(
                f"[hierarl] BC on {bc['demos']} demos ({bc['turns']} turns) in {bc['wall_s']:.1f}s{source}; "
                f"eval after BC{whose or f' ({eval_s:.0f}s)'} {text}",
                flush=True,
            )
        if p.updater.ref_adapters and p.stage.reference_at_warm_start:
            p.updater.freeze_reference()  # π_ref: the policy RL starts from (after BC)
        start_rl(self.learner, s.learner, s.adapters or ["default"])
        self.checkpoint(0)
        return 1

    def eval_bc_epoch(self, epoch: int) -> None:
        """``bc.eval_epochs``: the BC policy after ``epoch`` passes, pushed and evaluated, a ``bc_epoch`` row."""
        self.push()
        fields, text = self.eval_record(0)
        self.parts.log.log({"iteration": 0, "phase": "bc_epoch", "bc_epoch": epoch, **fields})
        print(f"[hierarl] eval after BC pass {epoch} {text}", flush=True)

    def resume(self) -> int:
        """``resume=true``: the newest readable checkpoint's learner and driver state (the driver stage's too), the
        logs cut back to it, the adapter pushed. Returns the first iteration to run (0: nothing to resume)."""
        p = self.parts
        if not (p.schedule.resume and p.checkpoints.has_latest):
            return 0
        loaded = p.checkpoints.load_newest(self.learner)
        if loaded is None:
            raise RunStopped(f"resume=true but no readable checkpoint under {p.checkpoints.root}")
        path, state = loaded
        self.resumed_from = path
        restore_process_rngs(state["rng"])
        p.stage.restore(state)
        p.pool.weights.restore(state["version"])  # the push below is numbered as the checkpoint's
        self.push()
        p.log.resume_at(state["iteration"], state.get("record"))
        print(f"[hierarl] resumed from {path} at iteration {state['iteration'] + 1}", flush=True)
        return state["iteration"] + 1

    # -- the parts of an iteration ---------------------------------------------------------------------------

    def push(self, weights: Weights | None = None) -> float:
        """Each policy adapter's tensors (by name; None: the one adapter every role uses) to every rollout worker."""
        if weights is None:
            names = self.parts.schedule.adapters or [None]
            weights = {n: self.learner.adapter_weights(n) for n in names}
        return self.parts.pool.push(weights)

    def update_recovering(self, trajs: list[Trajectory], it: int) -> UpdateResult:
        """Iteration ``it``'s update through its driver stage (``staged_update``) on its rollouts, the updated turns
        kept for ``hierarl view``, the first RL iteration's critic warmed up first (``learner.critic_warmup_passes``,
        unless the driver stage warms it up its own way); if a learner worker dies, the group is rebuilt from the
        newest readable checkpoint and the update redone on the same rollouts."""
        p, s = self.parts, self.parts.schedule
        warmup = s.learner.critic_warmup_passes if it == 1 and p.stage.critic_warmup_in_passes else 0
        plan = UpdatePlan(seed=s.seed + it, critic_warmup=warmup, observe=p.keeper.observer(it))
        while True:
            try:
                return staged_update(p.updater, p.stage, trajs, plan, it)
            except p.worker_lost as e:
                self.rebuild_learner(e)

    def rebuild_learner(self, error: Exception) -> None:
        """The learner group rebuilt (new workers, placement group and rendezvous) and loaded from the newest readable
        checkpoint, the driver stage restored to it and prepared on the new workers."""
        p = self.parts
        limit = p.schedule.learner.max_restarts
        if self.learner_restarts >= limit:
            raise RunStopped(
                f"a learner worker died ({type(error).__name__}) and learner.max_restarts ({limit}) rebuilds were "
                "used up"
            ) from error
        t0 = time.perf_counter()
        self.learner.rebuild()
        loaded = p.checkpoints.load_newest(self.learner)
        if loaded is None:
            raise RunStopped(
                f"a learner worker died ({type(error).__name__}) and there is no checkpoint to rebuild from"
            ) from error
        path, state = loaded
        p.stage.restore(state)
        p.stage.prepare(state["iteration"])
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
        if self.parts.pool.weights.version == 0:
            self.push()
        return self.parts.evaluator.evaluate(n, is_base=self.serves_base())

    def serves_base(self) -> bool:
        """Whether the rollout workers serve the base model: a fresh run's untrained adapter, pushed first."""
        return self.parts.pool.weights.version == self.base_version

    def eval_record(self, iteration: int) -> tuple[dict[str, Any], str]:
        """The eval panel's first ``eval_episodes`` tasks and, with ``env.train_tasks``, the RL tasks: their metric
        fields (``eval_*``, ``train_eval_*``) and a line of text; their episodes kept for ``hierarl view``."""
        p, s = self.parts, self.parts.schedule
        ev = self.evaluate(s.eval_episodes)
        fields, text = eval_fields(ev), eval_text(ev)
        p.keeper.keep_eval(iteration, "eval", ev["episodes"])
        if p.rl_evaluator is not None:
            rl = p.rl_evaluator.evaluate(s.train_tasks, is_base=self.serves_base())
            fields.update(eval_fields(rl, prefix="train_eval_"))
            text += f"\n[hierarl]   on the {rl['n']} tasks RL trains on: {eval_text(rl)}"
            p.keeper.keep_eval(iteration, "eval RL tasks", rl["episodes"])
        return fields, text

    def checkpoint(self, iteration: int, record: dict[str, Any] | None = None) -> None:
        """``checkpoints/iter_<k>`` (``Checkpointer``); ``record``: the iteration's metrics row, logged after the
        checkpoint, which a resume restores if the run died in between. One-step-off: also the adapter the next
        iteration's in-flight rollouts come from, so an exact resume regenerates them. The driver stage's state
        goes with it."""
        p = self.parts
        weights = p.pool.weights
        state = {"version": weights.version, "record": record, **p.stage.state()}
        older = weights.behaviour() if p.schedule.one_step_off else None
        behaviour = None if older is None else older[None]
        p.checkpoints.save(iteration, self.learner, state, behaviour)

    def close(self) -> None:
        """Stop the env pools and engines, kill the actors (frees DeepSpeed's port), close the log's backends."""
        self.parts.pool.close()
        self.learner.shutdown()
        self.parts.log.close()


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    """``hierarl train``: the run built, run, and its workers and log closed whatever happens in the loop."""
    trainer = Trainer(build_run(cfg))
    try:
        return trainer.run()
    finally:
        trainer.close()
