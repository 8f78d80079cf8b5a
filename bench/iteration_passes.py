"""The named learner passes of one update, from its batch alone (``bench_iteration.py``'s accounting): which rows
each pass reads and how the learner cuts them (padded micro-batches, or prefix-tree packs with
``learner.pack=tree``), costed by ``iteration_model``. One learner worker, one policy adapter."""

from __future__ import annotations

from typing import Any

import numpy as np
from iteration_model import (
    Pass,
    Shape,
    group_pass_micro,
    packed_pass_cost,
    pass_cost,
    sorted_micro_batches,
)

GROUP_CHUNK_MICRO = 4
"""``LearnerGroup._map_rows`` sends a forward pass in chunks of 4 micro-batches (or packs) per worker."""


def _packs(ids: np.ndarray, cols: np.ndarray, budget: int, rows: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """(rows, tree tokens) of the packs the worker cuts ``rows`` into, each row packed to its ``cols`` tokens
    (``learners.packing.plan_packs``)."""
    from learners.packing import packed_tokens, plan_packs

    if rows.size == 0:
        return []
    sub, n = ids[rows], cols[rows]
    attn = np.arange(ids.shape[1])[None, :] < n[:, None]
    return [(rows[p], packed_tokens(sub[p], n[p])) for p in plan_packs(sub, attn, budget, n)]


def _group_packs(
    ids: np.ndarray, cols: np.ndarray, budget: int, rows: np.ndarray
) -> list[tuple[np.ndarray, int]]:
    """A packed forward pass through the learner group: chunks of ``GROUP_CHUNK_MICRO`` packs' tokens, each packed
    again by the worker."""
    return [
        pack
        for chunk, _ in _packs(ids, cols, GROUP_CHUNK_MICRO * budget, rows)
        for pack in _packs(ids, cols, budget, chunk)
    ]


def learner_passes(
    cfg: Any,
    algo: Any,
    algo_cfg: Any,
    trajs: list[Any],
    shape: Shape,
    pad: int,
    *,
    seed: int,
    ref_is_policy: bool,
    ref_equals_policy: bool,
    critic_reach: bool,
    critic_trunk: bool = False,
) -> list[Pass]:
    """The named passes of one update of ``trajs`` under ``cfg``: ``ref_is_policy``, the updater skips the π_ref
    pass; ``ref_equals_policy``, a π_ref pass would compute π_old again (RL's first update); ``critic_trunk``, the
    critic's head reads the policy pass's hidden states (no decoder pass of its own in the update; its values pass
    stays). ``learner.pack=tree``: every pass is costed as the packs the learner computes."""
    from envs import success_reward
    from launch.config import engine_old_logprobs
    from launch.driver.update_plan import measure_sample
    from launch.driver.updater import ENGINE_CHECK_ROWS
    from learners.batch import row_lengths, value_reach
    from learners.packing import lexicographic_order
    from learners.prepare import shaped_turns
    from learners.schedule import update_steps
    from learners.targets import sequences

    lc = cfg.learner
    turns = shaped_turns(
        trajs,
        algo_cfg,
        success_reward=success_reward(cfg.env.name, dict(cfg.env.options)),
        max_len=lc.max_seq_len,
        pad_id=pad,
    )
    seqs = sequences(turns, algo.value_slots)
    ids, n, micro = seqs.input_ids, len(seqs), lc.micro_batch_size
    lengths = row_lengths(seqs.attention_mask)
    logits = seqs.response_mask[:, 1:].sum(axis=1)  # positions that predict a response token
    reach = value_reach(seqs) if critic_reach else lengths
    packed = lc.pack == "tree"

    def cost(cols: np.ndarray, out: np.ndarray, rows: np.ndarray, train: bool, chunked: bool) -> tuple:
        if packed:
            cut = _group_packs if chunked else _packs
            return packed_pass_cost(shape, cols, out, cut(ids, cols, lc.pack_tokens, rows), train=train)
        parts = (
            group_pass_micro(cols, micro, GROUP_CHUNK_MICRO * micro, rows)
            if chunked
            else sorted_micro_batches(cols, micro, rows)
        )
        return pass_cost(shape, lengths, out, parts, widths=cols, train=train)

    def forward(name: str, phase: str, rows: np.ndarray, needed: bool) -> Pass:
        return Pass(name, phase, int(rows.size), *cost(lengths, logits, rows, False, True), needed)

    everyone = np.arange(n)
    out = []
    engine = engine_old_logprobs(cfg, "cpu")
    out.append(forward("pi_old", "logprobs", everyone[:ENGINE_CHECK_ROWS] if engine else everyone, False))
    if algo.uses_reference(algo_cfg):
        out.append(forward("pi_ref", "logprobs", np.arange(0 if ref_is_policy else n), not ref_equals_policy))
    if algo.value_slots:
        out.append(Pass("values", "values", n, *cost(reach, 0 * logits, everyone, False, True), True))
    groups = seqs.group if lc.minibatches == "groups" else None
    steps = update_steps(n, lc.mini_batch_size, lc.ppo_epochs, seed, groups)
    if packed:  # the group hands each step's rows over in lexicographic order
        steps = [rows[lexicographic_order(ids[rows], lengths[rows])] for rows in steps]

    def update(cols: np.ndarray, out_positions: np.ndarray) -> tuple:
        parts = [cost(cols, out_positions, rows, True, False) for rows in steps]
        return tuple(sum(p[i] for p in parts) for i in range(3))

    out.append(Pass("policy", "update", n * lc.ppo_epochs, *update(lengths, logits), True))
    if algo.value_loss is not None and not critic_trunk:
        out.append(Pass("critic", "update", n * lc.ppo_epochs, *update(reach, 0 * logits), True))
    if lc.measure_update:
        out.append(forward("measure", "measure", measure_sample(n, lc.measure_rows, seed), False))
    return out
