"""One update, as named phases around the learner group's passes (``learners.prepare`` is its pure half):

    inputs    shaped turns, sequences, each adapter's rows                       (timed ``advantage``)
    forward   π_old (and π_ref) log-probs, the measured rows' "before", the stage's annotation, the critic's
              warm-up, values                      (``logprobs``, ``measure``, ``reward_models``, ``critic_warmup``,
                                                   ``values``)
    targets   ``learner_batch``: advantages and targets, the kept episodes' observer (``advantage``)
    steps     the optimizer steps, unless the batch carries no outcome signal (``update``)
    measure   what the update did to the policy, per token group (``learners.diagnostics``; ``measure``)

An ``Updater`` is built with its algorithm, its config and the run's ``UpdaterSettings``, and takes one
``UpdatePlan`` per update (``launch.driver.update_plan``), so the training driver, behaviour cloning (its own
``Updater`` over the same learner group: ``with_algorithm``) and the update replay (``bench/bench_replay.py``) run
exactly the same update.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from actors.trajectory import Trajectory
from launch.driver.update_plan import (
    ForwardPasses,
    UpdateInputs,
    UpdatePlan,
    UpdateResult,
    UpdaterSettings,
    measure_sample,
    restrict_rows,
    update_arguments,
    warmup_arguments,
)
from learners.algorithm import Algorithm
from learners.batch import LearnerBatch, Sequences, TurnBatch
from learners.diagnostics import token_groups, update_kl
from learners.group import LearnerGroup
from learners.prepare import learner_batch, shaped_turns, takes_policy_step
from learners.targets import sequences

ENGINE_CHECK_ROWS = 4
"""Rows of each batch whose engine log-probs are checked against the learner's (``Updater.old_logprobs``)."""
ENGINE_TOLERANCE = 1e-3
"""Nats by which the engine's π_old may differ from the learner's on a checked token (fp32 HF: 2e-7)."""


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0


class Updater:
    """Updates the learner group's policy (and critic) under ``algo`` (with config ``algo_cfg``) on one batch of
    trajectories at a time. ``learner`` is the run's group for the whole run (``LearnerGroup.rebuild`` rebuilds it
    in place)."""

    def __init__(
        self, learner: LearnerGroup, algo: Algorithm, algo_cfg: Any, settings: UpdaterSettings
    ) -> None:
        self.learner, self.algo, self.algo_cfg, self.settings = learner, algo, algo_cfg, settings
        self.adapters = sorted(set(settings.role_adapters.values()))
        self.reference_is_policy = False
        """True from ``freeze_reference`` until the policy's next step: π_ref's log-probs are π_old's, no pass."""

    @property
    def ref_adapters(self) -> tuple[str, ...]:
        return self.settings.ref_adapters

    def with_algorithm(self, algo: Algorithm, algo_cfg: Any) -> Updater:
        """An updater of another algorithm over the same learner group and settings (behaviour cloning's SFT)."""
        return Updater(self.learner, algo, algo_cfg, self.settings)

    def update(self, trajs: list[Trajectory], plan: UpdatePlan) -> UpdateResult:
        """The phases of the module docstring on ``trajs`` as ``plan`` says; the policy takes no step on a batch
        without outcome signal (``learners.prepare.takes_policy_step``: metric ``policy_step``)."""
        timings: dict[str, float] = {}
        inputs = self.inputs(trajs, timings)
        passes = self.forward(inputs, plan, timings)
        batch, metrics = self.targets(inputs, passes, plan, timings)
        step = self.takes_step(trajs, batch, metrics)
        with timed(timings, "update"):
            metrics.update(self.steps(batch, inputs.rows_of, plan, step))
        self.reference_is_policy = self.reference_is_policy and not step
        metrics.update(self.measure(inputs, passes, step, timings))
        return UpdateResult(metrics, timings)

    # -- the phases ------------------------------------------------------------------------------------------

    def inputs(self, trajs: list[Trajectory], timings: dict[str, float]) -> UpdateInputs:
        """The algorithm's shaping written into the turns, the padded turns, their sequences, the adapters' rows."""
        s = self.settings
        with timed(timings, "advantage"):
            turns = shaped_turns(
                trajs,
                self.algo_cfg,
                success_reward=s.success_reward,
                max_len=s.learner.max_seq_len,
                pad_id=s.pad_id,
            )
            seqs = sequences(turns, self.algo.value_slots)
        return UpdateInputs(trajs, turns, seqs, self.adapter_rows(trajs, turns))

    def forward(self, inputs: UpdateInputs, plan: UpdatePlan, timings: dict[str, float]) -> ForwardPasses:
        """Every pass before the targets. ``plan.measure`` (and ``learner.measure_update``) costs an algorithm
        without π_old (STEP-HRL, Multi2) a log-prob pass of the measured rows before the update."""
        with timed(timings, "logprobs"):
            logprobs, ref = self.policy_passes(inputs, plan)
        lc = self.settings.learner
        measured = plan.measure and lc.measure_update
        sample = measure_sample(len(inputs.seqs), lc.measure_rows, plan.seed)
        before = logprobs[sample]
        if measured and not self.algo.uses_old_logprobs:
            with timed(timings, "measure"):
                before = self.policy_logprobs(inputs.seqs.rows(sample), restrict_rows(inputs.rows_of, sample))
        stats: dict[str, float] = {}
        if plan.annotate is not None:
            with timed(timings, "reward_models"):
                stats = plan.annotate(inputs.trajs, inputs.turns, logprobs)
        if self.algo.value_slots and plan.critic_warmup:
            with timed(timings, "critic_warmup"):
                stats.update(self.warm_up_critic(inputs, (logprobs, ref), plan.critic_warmup, plan.seed))
        values = None
        if self.algo.value_slots:
            with timed(timings, "values"):
                values = self.learner.values(inputs.seqs)
        return ForwardPasses(logprobs, ref, values, stats, sample if measured else None, before)

    def targets(
        self, inputs: UpdateInputs, passes: ForwardPasses, plan: UpdatePlan, timings: dict[str, float]
    ) -> tuple[LearnerBatch, dict[str, Any]]:
        """The batch the learner trains on and its diagnostics (``learners.prepare.learner_batch``), shown to the
        plan's observer before any step."""
        with timed(timings, "advantage"):
            batch, metrics = learner_batch(
                self.algo,
                self.algo_cfg,
                inputs.trajs,
                inputs.turns,
                inputs.seqs,
                passes.logprobs,
                passes.ref,
                passes.values,
                advantage_scale=self.settings.learner.advantage_scale,
                behaviour_is_cap=self.settings.behaviour_is_cap,
            )
            metrics.update(passes.stats)
            if plan.observe is not None:
                plan.observe(inputs.trajs, inputs.turns, batch)
        return batch, metrics

    def takes_step(self, trajs: list[Trajectory], batch: LearnerBatch, metrics: dict[str, Any]) -> bool:
        """Whether the policy steps on ``batch`` (metric ``policy_step``; a skipped batch is said in one line)."""
        step = takes_policy_step(self.algo_cfg, trajs, batch)
        metrics["policy_step"] = float(step)
        if not step:
            print(
                f"[hierarl] the policy takes no step on this batch: its {len(trajs)} episodes all ended alike "
                "(no outcome signal; algo.no_outcome_batch=skip)",
                flush=True,
            )
        return step

    def steps(
        self, batch: LearnerBatch, rows_of: dict[str | None, np.ndarray], plan: UpdatePlan, step: bool
    ) -> dict[str, float]:
        """The optimizer steps: each adapter's on its rows (several adapters), else policy and critic together on
        every mini-batch; ``step`` False: the critic's alone."""
        common = update_arguments(self.algo, self.algo_cfg, self.settings.learner, plan)
        policy_loss = self.algo.policy_loss if step else None
        if None not in rows_of:
            return self._update_adapters(batch, rows_of, plan.lr, common, policy_loss)
        if policy_loss is None and self.algo.value_loss is None:
            return {}
        if plan.lr is not None:
            self.learner.set_lr(plan.lr)
        out = self.learner.update(batch, policy_loss=policy_loss, value_loss=self.algo.value_loss, **common)
        if plan.lr is not None:
            self.learner.set_lr(self.settings.learner.actor_lr)
        return out

    def measure(
        self, inputs: UpdateInputs, passes: ForwardPasses, step: bool, timings: dict[str, float]
    ) -> dict[str, float]:
        """What the update did to the policy on the measured rows, per token group (``kl_update/<group>``)."""
        if passes.sample is None:
            return {}
        sample = passes.sample
        with timed(timings, "measure"):
            rows_of = restrict_rows(inputs.rows_of, sample)
            after = self.policy_logprobs(inputs.seqs.rows(sample), rows_of) if step else passes.before
            groups = {k: v[sample] for k, v in token_groups(inputs.trajs, inputs.turns).items()}
            return update_kl(passes.before, after, groups)

    # -- the passes ------------------------------------------------------------------------------------------

    def policy_passes(self, inputs: UpdateInputs, plan: UpdatePlan) -> tuple[np.ndarray, np.ndarray | None]:
        """(π_old, π_ref) of every row. Behaviour cloning reads no π_old: its pass is skipped (zeros stand in); π_ref
        is π_old itself while the reference is the unstepped policy (``reference_is_policy``)."""
        seqs, rows_of = inputs.seqs, inputs.rows_of
        logprobs = np.zeros(seqs.input_ids.shape, np.float32)
        if self.algo.uses_old_logprobs:
            logprobs = self.old_logprobs(seqs, rows_of, inputs.turns)
        if not (self.algo.uses_reference(self.algo_cfg) and plan.reference):
            return logprobs, None
        if self.reference_is_policy and self.algo.uses_old_logprobs:
            return logprobs, logprobs
        return logprobs, self.reference_logprobs(seqs, rows_of)

    def old_logprobs(
        self, seqs: Sequences, rows_of: dict[str | None, np.ndarray], turns: TurnBatch
    ) -> np.ndarray:
        """π_old of every row: the learner's recomputation, or (``engine_old_logprobs``) the engine's own log-probs,
        checked against a recomputation of the first ``ENGINE_CHECK_ROWS`` rows: a gap above ``ENGINE_TOLERANCE``
        nats recomputes them all (printed once per update)."""
        if not self.settings.engine_old_logprobs:
            return self.policy_logprobs(seqs, rows_of)
        engine = turns.old_logprobs.numpy()
        head = np.arange(min(ENGINE_CHECK_ROWS, len(seqs)))
        check = self.policy_logprobs(seqs.rows(head), restrict_rows(rows_of, head))
        resp = seqs.response_mask[head].astype(bool)
        gap = float(np.abs(check - engine[head])[resp].max()) if resp.any() else 0.0
        if gap <= ENGINE_TOLERANCE:
            return engine.astype(np.float32)
        print(
            f"[hierarl] the engine's log-probs differ from the learner's by up to {gap:.2g} nats "
            f"(> {ENGINE_TOLERANCE}): π_old recomputed for every row",
            flush=True,
        )
        return self.policy_logprobs(seqs, rows_of)

    def policy_logprobs(self, seqs: Sequences, rows_of: dict[str | None, np.ndarray]) -> np.ndarray:
        """float32[B, L]: each row's log-probs under the adapter of its turn's role (``adapter_rows``)."""
        out = np.zeros(seqs.input_ids.shape, np.float32)
        for name, rows in rows_of.items():
            out[rows] = self.learner.logprobs(seqs.rows(rows), adapter=name)
        return out

    def reference_logprobs(self, seqs: Sequences, rows_of: dict[str | None, np.ndarray]) -> np.ndarray:
        """The reference policy's log-probs of every row: each row under the frozen copy of its role's adapter, or
        with every adapter disabled where the run keeps no copy (``learner.kl_reference=base``)."""
        if not self.ref_adapters:
            return self.learner.logprobs(seqs, reference=True)
        ref = np.zeros(seqs.input_ids.shape, np.float32)
        for name, rows in rows_of.items():
            ref[rows] = self.learner.logprobs(seqs.rows(rows), adapter=f"ref_{name or 'default'}")
        return ref

    def freeze_reference(self) -> None:
        """Copy each policy adapter into its frozen ``ref_<name>``: the KL term's reference from here on (RL's start:
        the BC policy; an offline algorithm's first online iteration: π_off). Until the policy's next step their
        log-probs are equal, and the reference's pass is skipped."""
        for name in self.adapters or ["default"]:
            self.learner.load_adapter_weights(self.learner.adapter_weights(name), adapter=f"ref_{name}")
        self.reference_is_policy = True

    def warm_up_critic(
        self, inputs: UpdateInputs, logprobs: tuple[np.ndarray, np.ndarray | None], passes: int, seed: int
    ) -> dict[str, float]:
        """``passes`` critic-only epochs over this batch (at RL iteration 1: the BC policy's rollouts), each on
        targets recomputed from the critic as the previous pass left it (fitted value iteration), so the first
        policy update reads advantages from a critic that has seen the outcomes instead of one that is 0
        everywhere. Returns the value loss of the first and the last pass."""
        losses = []
        for k in range(passes):
            values = self.learner.values(inputs.seqs)
            batch, _ = learner_batch(
                self.algo,
                self.algo_cfg,
                inputs.trajs,
                inputs.turns,
                inputs.seqs,
                logprobs[0],
                logprobs[1],
                values,
            )
            arguments = warmup_arguments(
                self.algo, self.algo_cfg, self.settings.learner, seed=seed + 7919 * (k + 1)
            )
            m = self.learner.update(batch, policy_loss=None, value_loss=self.algo.value_loss, **arguments)
            losses.append(m["value_loss"])
        return {"critic_warmup_loss_first": losses[0], "critic_warmup_loss_last": losses[-1]}

    # -- several adapters -----------------------------------------------------------------------------------

    def adapter_rows(self, trajs: Sequence[Trajectory], turns: TurnBatch) -> dict[str | None, np.ndarray]:
        """Batch rows per policy adapter (the adapter of each row's role); {None: every row} with one adapter."""
        if not self.adapters:
            return {None: np.arange(len(turns))}
        names = np.array([self.settings.role_adapters[trajs[i].turns[j].role] for i, j in turns.index])
        return {n: np.flatnonzero(names == n) for n in self.adapters if (names == n).any()}

    def _update_adapters(
        self,
        batch: LearnerBatch,
        rows_of: dict[str | None, np.ndarray],
        lr: float | None,
        common: dict[str, Any],
        policy_loss: Any,
    ) -> dict[str, float]:
        """Several adapters: each adapter's policy steps on its roles' rows (its own optimizer; the first
        ``critic_only_steps`` skip them all; none when ``policy_loss`` is None), then the critic on every row.
        Metrics: the policy's per adapter (``<name>/<metric>``) and their row-weighted mean under the plain name."""
        out: dict[str, float] = {}
        steps = 0.0
        for name, rows in rows_of.items() if policy_loss is not None else ():
            if not batch.loss_mask[rows].any():
                # nothing to train (an algorithm that keeps this role fixed): no step at all, since AdamW's moments
                # would still move the adapter on a zero gradient
                continue
            if lr is not None:
                self.learner.set_lr(lr, adapter=name)
            m = self.learner.update(
                batch.rows(rows), policy_loss=policy_loss, value_loss=None, adapter=name, **common
            )
            if lr is not None:
                lc = self.settings.learner
                self.learner.set_lr(lc.adapter_lr.get(name, lc.actor_lr), adapter=name)
            steps = max(steps, m.pop("optimizer_steps"))
            share = rows.size / len(batch)
            for k, v in m.items():
                out[f"{name}/{k}"] = v
                out[k] = out.get(k, 0.0) + share * v
        if self.algo.value_loss is not None:
            m = self.learner.update(batch, policy_loss=None, value_loss=self.algo.value_loss, **common)
            steps = max(steps, m.pop("optimizer_steps"))
            out.update(m)
        out["optimizer_steps"] = steps
        return out
