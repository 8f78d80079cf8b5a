"""One iteration's update: the pure half (``learners.prepare``) around the learner group's forward passes and steps.

    shaped turns → π_old (and π_ref) log-probs → [reward-model annotation] → [critic warm-up] → values
        → ``learner_batch`` → optimizer steps → what the update did (``learners.diagnostics``)

The ``Updater`` takes the learner group and the learner's config section, nothing of the run beyond them, so the
training driver and the update replay (``bench/bench_replay.py``) run exactly the same update.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from actors.trajectory import Trajectory
from learners.algorithm import Algorithm
from learners.batch import LearnerBatch, Sequences, TurnBatch
from learners.diagnostics import token_groups, update_kl
from learners.group import LearnerGroup
from learners.prepare import learner_batch, shaped_turns, takes_policy_step
from learners.targets import sequences

Annotate = Callable[[list[Trajectory], TurnBatch, np.ndarray], dict[str, float]]
"""A stage that writes model rewards into the turns before the targets (HISR's reward models), returning stats."""


ALL_STEPS = 1 << 62
"""``critic_only_steps`` that covers every optimizer step of an update."""

ENGINE_CHECK_ROWS = 4
"""Rows of each batch whose engine log-probs are checked against the learner's (``learner.old_logprobs``)."""
ENGINE_TOLERANCE = 1e-3
"""Nats by which the engine's π_old may differ from the learner's on a checked token (fp32 HF: 2e-7)."""


def measure_sample(n: int, rows: int, seed: int) -> np.ndarray:
    """The sorted rows of an n-row batch the update's KL is measured on: ``rows`` of them drawn from ``seed``, or
    all (``rows`` 0 or >= n). Pure."""
    if rows <= 0 or rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed + 4099).choice(n, rows, replace=False))


def _restrict(rows_of: dict[str | None, np.ndarray], sample: np.ndarray) -> dict[str | None, np.ndarray]:
    """``rows_of`` (batch rows per adapter) for the batch cut to ``sample``: positions within the sample."""
    where = {int(r): i for i, r in enumerate(sample)}
    out = {k: np.array([where[int(r)] for r in v if int(r) in where], np.int64) for k, v in rows_of.items()}
    return {k: v for k, v in out.items() if v.size}


def update_arguments(
    algo: Algorithm,
    algo_cfg: Any,
    learner_cfg: Any,
    *,
    seed: int,
    mini_batch_size: int | None,
    warmup_left: int,
    epochs: int | None = None,
) -> dict[str, Any]:
    """The keyword arguments of the learner group's ``update`` calls of one update (pure): ``mini_batch_size`` and
    ``epochs`` (passes over the batch) override the learner's ``mini_batch_size`` and ``ppo_epochs`` when given.

    ``warmup_left`` > 0 (critic steps still owed to the warm-up of a ``target_critic`` algorithm): the whole update
    trains the critic alone. STEP-HRL's warm-up runs in whole passes: A is computed at the start of a pass, so the
    actor joins at the first pass that starts with a warmed-up critic (else it trains on A from an untrained one).
    ``target_tau``: the algorithm's Polyak rate for a ``target_critic`` algorithm, else 0 (no target copy)."""
    return {
        "loss_cfg": algo_cfg,
        "agg": algo_cfg.agg,
        "mini_batch_size": mini_batch_size or learner_cfg.mini_batch_size,
        "epochs": epochs or learner_cfg.ppo_epochs,
        "seed": seed,
        "critic_only_steps": ALL_STEPS if warmup_left > 0 else 0,
        "target_tau": algo_cfg.target_tau if algo.target_critic else 0.0,
    }


def warmup_arguments(algo: Algorithm, algo_cfg: Any, learner_cfg: Any, *, seed: int) -> dict[str, Any]:
    """The learner group's ``update`` arguments of one critic-only warm-up pass (``Updater.warm_up_critic``, pure):
    one epoch, with an update's Polyak rate. Without ``target_tau`` STEP-HRL's and Multi2's target copy would stay
    at its zero start through the warm-up: V's targets (Q_target) all 0, so V is never fitted, and Q's TD targets
    read V_target = 0."""
    return update_arguments(
        algo, algo_cfg, learner_cfg, seed=seed, mini_batch_size=None, warmup_left=0, epochs=1
    )


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0


class Updater:
    """Updates the learner group's policy (and critic) on one batch of trajectories.

    ``cfg``: the run's ``LearnerConfig``; ``role_adapters``: role → policy adapter (empty: one adapter for every
    role); ``ref_adapters``: the frozen copies the KL term reads (empty: the base model with adapters disabled);
    ``success_reward``: the env's R, the unit of every shaping amount; ``behaviour_is_cap``: decoupled PPO's cap
    (0: off); ``engine_old_logprobs``: π_old is the engine's reported log-probs (checked on the first rows of each
    batch, ``old_logprobs``), not a learner pass. ``learner`` may be replaced (a rebuilt group) between updates."""

    def __init__(
        self,
        learner: LearnerGroup,
        cfg: Any,
        *,
        pad_id: int,
        success_reward: float,
        role_adapters: dict[str, str],
        ref_adapters: Sequence[str],
        behaviour_is_cap: float,
        engine_old_logprobs: bool = False,
    ) -> None:
        self.learner = learner
        self.cfg = cfg
        self.pad_id = pad_id
        self.success_reward = success_reward
        self.role_adapters = dict(role_adapters)
        self.adapters = sorted(set(self.role_adapters.values()))
        self.ref_adapters = tuple(ref_adapters)
        self.behaviour_is_cap = behaviour_is_cap
        self.engine_old_logprobs = engine_old_logprobs
        self.reference_is_policy = False
        """True from ``freeze_reference`` until the policy's next step: π_ref's log-probs are π_old's, no pass."""

    def update(
        self,
        trajs: list[Trajectory],
        algo: Algorithm,
        algo_cfg: Any,
        *,
        seed: int,
        lr: float | None = None,
        mini_batch_size: int | None = None,
        reference: bool = True,
        annotate: Annotate | None = None,
        warmup_left: int = 0,
        critic_warmup: int = 0,
        measure: bool = True,
        epochs: int | None = None,
        observe: Callable[[list[Trajectory], TurnBatch, LearnerBatch], None] | None = None,
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """Returns (metrics, timings). ``reference``: the KL term's reference is read when the algorithm has one
        (an offline phase has none); ``annotate``: HISR's model rewards; ``warmup_left``: critic steps still owed to a
        target-critic algorithm's warm-up (STEP-HRL: the update trains the critic alone); ``critic_warmup``
        critic-only passes come first
        (``warm_up_critic``); ``lr``: this update's policy learning rate (BC), restored after; ``epochs``: passes
        over the batch (None: ``learner.ppo_epochs``; BC: 1, its epochs counted by ``bc.epochs``); ``measure`` (and
        ``learner.measure_update``): log the update's KL per token group (``kl_update/<group>``), which costs an
        algorithm without π_old (STEP-HRL, Multi2) a log-prob pass before the update as well as the one after;
        ``observe``: called with the shaped turns and the batch before the policy steps (the run's kept episodes,
        ``launch.driver.kept_episodes``)."""
        timings: dict[str, float] = {}
        with timed(timings, "advantage"):
            turns = shaped_turns(
                trajs,
                algo_cfg,
                success_reward=self.success_reward,
                max_len=self.cfg.max_seq_len,
                pad_id=self.pad_id,
            )
            seqs = sequences(turns, algo.value_slots)
        rows_of = self.adapter_rows(trajs, turns)
        with timed(timings, "logprobs"):
            # behaviour cloning reads no π_old: its pass is skipped (zeros stand in)
            logprobs = np.zeros(seqs.input_ids.shape, np.float32)
            if algo.uses_old_logprobs:
                logprobs = self.old_logprobs(seqs, rows_of, turns)
            ref = None
            if algo.uses_reference(algo_cfg) and reference:
                ref = (
                    logprobs
                    if self.reference_is_policy and algo.uses_old_logprobs
                    else self.reference_logprobs(seqs, rows_of)
                )
        measure = measure and self.cfg.measure_update
        sample = measure_sample(len(seqs), self.cfg.measure_rows, seed)
        before = logprobs[sample]
        if measure and not algo.uses_old_logprobs:
            with timed(timings, "measure"):
                before = self.policy_logprobs(seqs.rows(sample), _restrict(rows_of, sample))
        model_stats: dict[str, float] = {}
        if annotate is not None:
            with timed(timings, "reward_models"):
                model_stats = annotate(trajs, turns, logprobs)
        if algo.value_slots and critic_warmup:
            with timed(timings, "critic_warmup"):
                model_stats.update(
                    self.warm_up_critic(
                        algo, algo_cfg, trajs, turns, seqs, (logprobs, ref), critic_warmup, seed
                    )
                )
        values = None
        if algo.value_slots:
            with timed(timings, "values"):
                values = self.learner.values(seqs)
        with timed(timings, "advantage"):
            batch, metrics = learner_batch(
                algo,
                algo_cfg,
                trajs,
                turns,
                seqs,
                logprobs,
                ref,
                values,
                advantage_scale=self.cfg.advantage_scale,
                behaviour_is_cap=self.behaviour_is_cap,
            )
            metrics.update(model_stats)
            if observe is not None:
                observe(trajs, turns, batch)
        step = takes_policy_step(algo_cfg, trajs, batch)
        metrics["policy_step"] = float(step)
        if not step:
            print(
                f"[hierarl] the policy takes no step on this batch: its {len(trajs)} episodes all ended alike "
                "(no outcome signal; algo.no_outcome_batch=skip)",
                flush=True,
            )
        with timed(timings, "update"):
            common = update_arguments(
                algo,
                algo_cfg,
                self.cfg,
                seed=seed,
                mini_batch_size=mini_batch_size,
                warmup_left=warmup_left,
                epochs=epochs,
            )
            policy_loss = algo.policy_loss if step else None
            if None not in rows_of:
                metrics.update(self._update_adapters(batch, algo, rows_of, lr, common, policy_loss))
            elif policy_loss is not None or algo.value_loss is not None:
                # one adapter: policy and critic step together on every mini-batch
                if lr is not None:
                    self.learner.set_lr(lr)
                metrics.update(
                    self.learner.update(batch, policy_loss=policy_loss, value_loss=algo.value_loss, **common)
                )
                if lr is not None:
                    self.learner.set_lr(self.cfg.actor_lr)
        self.reference_is_policy = self.reference_is_policy and not step
        if measure:
            with timed(timings, "measure"):  # what the update did to the policy, per token group
                after = (
                    self.policy_logprobs(seqs.rows(sample), _restrict(rows_of, sample)) if step else before
                )
                groups = {k: v[sample] for k, v in token_groups(trajs, turns).items()}
                metrics.update(update_kl(before, after, groups))
        return metrics, timings

    def old_logprobs(
        self, seqs: Sequences, rows_of: dict[str | None, np.ndarray], turns: TurnBatch
    ) -> np.ndarray:
        """π_old of every row: the learner's recomputation, or (``engine_old_logprobs``) the engine's own log-probs,
        checked against a recomputation of the first ``ENGINE_CHECK_ROWS`` rows: a gap above ``ENGINE_TOLERANCE``
        nats recomputes them all (printed once per update)."""
        if not self.engine_old_logprobs:
            return self.policy_logprobs(seqs, rows_of)
        engine = turns.old_logprobs.numpy()
        head = np.arange(min(ENGINE_CHECK_ROWS, len(seqs)))
        check = self.policy_logprobs(seqs.rows(head), _restrict(rows_of, head))
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
        self,
        algo: Algorithm,
        algo_cfg: Any,
        trajs: list[Trajectory],
        turns: TurnBatch,
        seqs: Sequences,
        logprobs: tuple[np.ndarray, np.ndarray | None],
        passes: int,
        seed: int,
    ) -> dict[str, float]:
        """``passes`` critic-only epochs over this batch (at RL iteration 1: the BC policy's rollouts), each on
        targets recomputed from the critic as the previous pass left it (fitted value iteration), so the first
        policy update reads advantages from a critic that has seen the outcomes instead of one that is 0
        everywhere. Returns the value loss of the first and the last pass."""
        losses = []
        for k in range(passes):
            batch, _ = learner_batch(
                algo, algo_cfg, trajs, turns, seqs, logprobs[0], logprobs[1], self.learner.values(seqs)
            )
            m = self.learner.update(
                batch,
                policy_loss=None,
                value_loss=algo.value_loss,
                **warmup_arguments(algo, algo_cfg, self.cfg, seed=seed + 7919 * (k + 1)),
            )
            losses.append(m["value_loss"])
        return {"critic_warmup_loss_first": losses[0], "critic_warmup_loss_last": losses[-1]}

    def adapter_rows(self, trajs: Sequence[Trajectory], turns: TurnBatch) -> dict[str | None, np.ndarray]:
        """Batch rows per policy adapter (the adapter of each row's role); {None: every row} with one adapter."""
        if not self.adapters:
            return {None: np.arange(len(turns))}
        names = np.array([self.role_adapters[trajs[i].turns[j].role] for i, j in turns.index])
        return {n: np.flatnonzero(names == n) for n in self.adapters if (names == n).any()}

    def _update_adapters(
        self,
        batch: Any,
        algo: Algorithm,
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
                self.learner.set_lr(self.cfg.adapter_lr.get(name, self.cfg.actor_lr), adapter=name)
            steps = max(steps, m.pop("optimizer_steps"))
            share = rows.size / len(batch)
            for k, v in m.items():
                out[f"{name}/{k}"] = v
                out[k] = out.get(k, 0.0) + share * v
        if algo.value_loss is not None:
            m = self.learner.update(batch, policy_loss=None, value_loss=algo.value_loss, **common)
            steps = max(steps, m.pop("optimizer_steps"))
            out.update(m)
        out["optimizer_steps"] = steps
        return out
