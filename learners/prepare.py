"""The pure half of an update: trajectories → shaped rewards → padded turns → targets → ``LearnerBatch``.

The driver (``launch.driver.updater.Updater.update``) runs it around the learner group's forward passes::

    turns = shaped_turns(trajs, algo_cfg, success_reward=R, max_len, pad_id)   # pure
    seqs = learners.targets.sequences(turns, algo.value_slots)         # pure
    logprobs, ref_logprobs, values = learner forward passes on seqs    # Ray / DeepSpeed
    batch, stats = learner_batch(algo, algo_cfg, trajs, turns, seqs, logprobs, ref_logprobs, values)  # pure
    learner group update on batch, one ``minibatch(batch, rows, agg)`` per step   # Ray / DeepSpeed

so everything that decides what the learner trains on is unit-tested here without Ray (``tests/unit/learners/test_prepare.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.algorithm import Algorithm
from learners.batch import LearnerBatch, Sequences, TurnBatch, build_turn_batch
from learners.diagnostics import group_rms, outcome_advantage, position_advantage, token_groups
from learners.losses import aggregation_weights, behaviour_weights, episode_row_weights
from learners.outcomes import outcome_stats, outcome_varies
from reward.shaping import apply_shaping, shaping_for


def shaped_turns(
    trajectories: Sequence[Trajectory], algo_cfg: Any, *, success_reward: float, max_len: int, pad_id: int
) -> TurnBatch:
    """Write the algorithm's shaping terms into every turn (in place, idempotent), then pad the turns.
    ``success_reward``: the env's R (``envs.success_reward``), the unit of every shaping amount."""
    shaping = shaping_for(algo_cfg, success_reward)
    for t in trajectories:
        apply_shaping(t, shaping)
    return build_turn_batch(trajectories, max_len=max_len, pad_id=pad_id)


def learner_batch(
    algo: Algorithm,
    algo_cfg: Any,
    trajectories: Sequence[Trajectory],
    turns: TurnBatch,
    seqs: Sequences,
    logprobs: np.ndarray,
    ref_logprobs: np.ndarray | None,
    values: np.ndarray | None,
    *,
    advantage_scale: float = 1.0,
    behaviour_is_cap: float = 0.0,
) -> tuple[LearnerBatch, dict[str, float]]:
    """The batch the learner trains on, and the scalar diagnostics of the step.

    ``logprobs`` float32[B, L] are the learner's recomputation under the current adapter; they replace the engine's
    in ``turns`` before the targets, so HiPER's β_t and the PPO ratio read the same numbers (``logprob_gap`` is the
    mean |engine − learner| over response tokens, for algorithms that read π_old).
    ``ref_logprobs`` float32[B, L] when ``algo.uses_reference(algo_cfg)``; ``values`` float32[B, K] when the
    algorithm has a critic. ``advantage_scale``: the benchmark controls (−1: train on −A; 0: on no advantage).
    ``behaviour_is_cap`` > 0 (algorithms that read π_old): each token's decoupled-PPO weight
    min(π_learner / π_engine, cap) (``learners.losses.behaviour_weights``) goes into the batch."""
    if algo.uses_reference(algo_cfg) and ref_logprobs is None and not algo.offline:
        raise ValueError(f"{algo.name} with this config needs the reference policy's log-probs")
    if algo.value_slots and values is None:
        raise ValueError(f"{algo.name} needs critic values for its {len(algo.value_slots)} value slots")
    resp = seqs.response_mask
    k = len(algo.value_slots)
    for name, arr, shape in (
        ("logprobs", logprobs, resp.shape),
        ("ref_logprobs", ref_logprobs, resp.shape),
        ("values", values, (len(seqs), k)),
    ):
        if arr is not None and tuple(arr.shape) != tuple(shape):
            raise ValueError(f"{name} {tuple(arr.shape)} do not fit the batch {tuple(shape)}")
    stats: dict[str, float] = {}
    weight = None
    if algo.uses_old_logprobs:
        engine = turns.old_logprobs.numpy()
        stats["logprob_gap"] = float(np.abs(logprobs - engine)[resp].mean()) if resp.any() else 0.0
        if behaviour_is_cap > 0:
            w, w_stats = behaviour_weights(
                torch.from_numpy(logprobs), turns.old_logprobs, torch.from_numpy(resp), behaviour_is_cap
            )
            weight = w.numpy().astype(np.float32)
            stats.update(w_stats)
    targets = algo.compute_targets(trajectories, turns.with_logprobs(logprobs), values, algo_cfg)
    loss_mask = targets.loss_mask.astype(bool)
    stats.update(targets.stats)
    stats.update(group_rms(targets.token_adv, token_groups(trajectories, turns)))
    batch = LearnerBatch(
        seqs=seqs,
        old_logprobs=logprobs.astype(np.float32),
        ref_logprobs=None if ref_logprobs is None else ref_logprobs.astype(np.float32),
        token_adv=(advantage_scale * targets.token_adv).astype(np.float32),
        loss_mask=loss_mask,
        value_target=targets.value_target.astype(np.float32),
        value_valid=targets.value_valid.astype(bool),
        old_values=(np.zeros((len(seqs), k)) if values is None else values).astype(np.float32),
        behaviour_weight=weight,
        episode_weight=episode_row_weights([i for i, _ in turns.index], torch.from_numpy(loss_mask))
        .numpy()
        .astype(np.float32),
    )
    stats.update(outcome_stats(trajectories))
    stats.update(outcome_advantage(trajectories, turns, batch.token_adv, batch.loss_mask))
    stats.update(position_advantage(turns, batch.token_adv, batch.loss_mask))
    return batch, stats


def takes_policy_step(algo_cfg: Any, trajectories: Sequence[Trajectory], batch: LearnerBatch) -> bool:
    """Whether the policy steps on this batch: not when no token is under its loss (an AdamW step on a zero
    gradient still moves the adapter by its moments), nor, with ``algo.no_outcome_batch="skip"``, when every
    episode ended alike (``learners.outcomes``: the advantages would be whitened shaping residue)."""
    if not batch.loss_mask.any():
        return False
    return algo_cfg.no_outcome_batch == "train" or outcome_varies(trajectories)


def minibatch(batch: LearnerBatch, rows: np.ndarray, agg: str) -> LearnerBatch:
    """The rows of one optimizer step with their aggregation weights, computed over the whole mini-batch before it
    is split over data-parallel ranks (so N ranks take the single-process step): ``loss_weight`` per token
    (``learners.losses.aggregation_weights``, e.g. 1 / loss tokens for token-mean; ``episode-mean`` reads the
    rows' ``episode_weight``) and ``value_weight`` =
    valid / the number of valid targets (the critic-loss convention of ``learners.targets``)."""
    mb = batch.rows(rows)
    valid = mb.value_valid.astype(np.float32)
    return dataclasses.replace(
        mb,
        loss_weight=aggregation_weights(
            torch.from_numpy(mb.loss_mask),
            agg,
            None if mb.episode_weight is None else torch.from_numpy(mb.episode_weight),
        )
        .numpy()
        .astype(np.float32),
        value_weight=valid / max(1.0, float(valid.sum())),
    )
