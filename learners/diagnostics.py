"""What an update did, per kind of generated token (pure): the diagnostics that tell a hierarchical update apart.

A Plan–Execute response holds three decisions (``<switch>``, ``<subgoal>``, ``<action>``) and some text between
them; an update's size and its advantages are reported per token group so that one kind cannot hide behind the
others (a switch-token push looks small when averaged with every action token):

* ``switch``, ``action``, ``think``, ... : the tokens of that tag's block (``Turn.masks``);
* ``subgoal``: the ``<subgoal>`` block of a boundary turn (q_t = 1, or turn 0), a new subgoal;
* ``subgoal_keep``: the ``<subgoal>`` block of a KEEP turn, a copy of the previous one;
* ``other``: response tokens in no block (whitespace, EOS).

A fixed probe of the env expert's decisions, teacher-forced, shows whether an update moved the policy toward them:
``probe_splits`` tells each expert turn's role, decision (turn 0, KEEP, SWITCH) and segment, ``block_logprobs`` sums
a turn's log-probs per block, ``probe_deltas`` averages the change per block and split, and per role where a
protocol has several (STEP-HRL's high / low / progress calls, Multi2's planner and executor;
``bench/bench_replay.py``).

The KL of an update is measured on the batch it trained on: k3 = exp(d) − 1 − d, d = log π_new − log π_old per
sampled token (Schulman's low-variance estimator of KL(π_old ‖ π_new)), averaged over each group's tokens, so two
algorithms' updates compare on the same tokens whatever their loss masks cover. On an offline algorithm's stored
data (expert and older policies' tokens, not π_old's samples) it is a size of the change on those tokens, not a KL
estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from actors.trajectory import Trajectory
from learners.batch import TurnBatch


def token_groups(trajectories: Sequence[Trajectory], turns: TurnBatch) -> dict[str, np.ndarray]:
    """{group: bool[B, L]} over the response tokens of ``turns`` (rows = turns of ``trajectories``); disjoint,
    their union is the response. Groups without a token are left out."""
    resp = turns.response_mask.numpy().astype(bool)
    boundary = np.array([bool(trajectories[i].switches()[j]) for i, j in turns.index], dtype=bool)
    out: dict[str, np.ndarray] = {}
    taken = np.zeros_like(resp)
    # a token in two blocks' masks (``><`` between ``</switch>`` and ``<subgoal>``) goes to the first, as in HiPER
    first = ("switch_mask", "subgoal_mask", "action_mask")
    for name in [*(n for n in first if n in turns.masks), *sorted(set(turns.masks) - set(first))]:
        m = turns.masks[name].numpy().astype(bool) & resp & ~taken
        taken |= m
        group = name.removesuffix("_mask")
        if group == "subgoal":
            out["subgoal"] = m & boundary[:, None]
            out["subgoal_keep"] = m & ~boundary[:, None]
        else:
            out[group] = m
    out["other"] = resp & ~taken
    return {k: v for k, v in out.items() if v.any()}


def group_rms(token_adv: np.ndarray, groups: dict[str, np.ndarray]) -> dict[str, float]:
    """``adv_rms/<group>``: root mean square of the advantages the loss gives each group's tokens."""
    return {f"adv_rms/{g}": float(np.sqrt(np.mean(token_adv[m] ** 2))) for g, m in groups.items()}


def ranking_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting 1/2 (the Mann-Whitney AUC): 0.5 is a score (a
    reward model's, an advantage) that does not tell won from lost trajectories, below 0.5 one that prefers the
    lost; NaN without both."""
    pos, neg = scores[positive], scores[~positive]
    if not (pos.size and neg.size):
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def _row_sums(token_adv: np.ndarray, loss_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ A, token count) over each row's trained tokens: the per-turn inputs of the advantage diagnostics."""
    trained = loss_mask.astype(bool)
    return np.where(trained, token_adv, 0.0).sum(1), trained.sum(1)


def outcome_advantage(
    trajectories: Sequence[Trajectory], turns: TurnBatch, token_adv: np.ndarray, loss_mask: np.ndarray
) -> dict[str, float]:
    """Whether an update pushes toward winning: ``adv_mean/won`` and ``adv_mean/lost``, the mean advantage on the
    trained tokens of won and of lost episodes; ``adv_mean/won_last`` and ``adv_mean/lost_last``, the same on each
    episode's last turn alone (the winning move, or the one the episode was cut after); and ``adv_auc``, the
    probability that a won episode's mean advantage exceeds a lost one's (``ranking_auc``: 0.5 when the advantages
    do not tell them apart, NaN without both)."""
    episode = np.array([i for i, _ in turns.index], dtype=np.int64)
    last = np.array([j == len(trajectories[i].turns) - 1 for i, j in turns.index], dtype=bool)
    won = np.array([bool(t.won) for t in trajectories], dtype=bool)
    n = len(trajectories)
    row_total, row_count = _row_sums(token_adv, loss_mask)
    total = np.bincount(episode, row_total, minlength=n)  # per episode
    count = np.bincount(episode, row_count, minlength=n)
    out: dict[str, float] = {}
    for name, keep in (("won", won), ("lost", ~won)):
        if count[keep].sum():
            out[f"adv_mean/{name}"] = float(total[keep].sum() / count[keep].sum())
        rows = last & keep[episode]
        if row_count[rows].sum():
            out[f"adv_mean/{name}_last"] = float(row_total[rows].sum() / row_count[rows].sum())
    has = count > 0
    out["adv_auc"] = ranking_auc(total[has] / count[has], won[has])
    return out


def position_advantage(turns: TurnBatch, token_adv: np.ndarray, loss_mask: np.ndarray) -> dict[str, float]:
    """``adv_turn_corr``: the correlation of a turn's mean advantage (over its trained tokens) with its index in its
    episode, both centred on their episode's means, so that outcomes (a won episode's turns all high) do not enter.
    Near 0 when A does not depend on where a turn stands; far below 0 when a dense per-turn reward meets a critic
    that has not learnt its return-to-go (early turns are paid for the turns after them). NaN without two trained
    turns in an episode."""
    total, count = _row_sums(token_adv, loss_mask)
    rows = count > 0
    a = total[rows] / count[rows]
    episode = np.array([i for i, _ in turns.index], dtype=np.int64)[rows]
    x = np.array([j for _, j in turns.index], dtype=np.float64)[rows]
    n = np.maximum(np.bincount(episode), 1)
    ac = a - (np.bincount(episode, a) / n)[episode]
    xc = x - (np.bincount(episode, x) / n)[episode]
    den = float(np.sqrt((ac**2).sum() * (xc**2).sum()))
    return {"adv_turn_corr": float((ac * xc).sum()) / den if den > 0 else float("nan")}


def update_kl(
    old_logprobs: np.ndarray, new_logprobs: np.ndarray, groups: dict[str, np.ndarray]
) -> dict[str, float]:
    """``kl_update`` over every group's tokens and ``kl_update/<group>`` per group: mean k3 (module docstring) of
    float[B, L] log-probs before and after the update."""
    d = new_logprobs.astype(np.float64) - old_logprobs.astype(np.float64)
    k3 = np.expm1(d) - d
    every = np.zeros(d.shape, bool)
    out: dict[str, float] = {}
    for g, m in groups.items():
        if not m.any():  # a measured sample of rows may hold no token of a group
            continue
        every |= m
        out[f"kl_update/{g}"] = float(k3[m].mean())
    out["kl_update"] = float(k3[every].mean()) if every.any() else 0.0
    return out


def probe_splits(trajs: Sequence[Trajectory]) -> list[dict[str, Any]]:
    """Per expert turn: its ``role``, which decision the expert made there (``turn0``, ``keep``, ``switch``) and
    whether the turn is in its episode's final segment (pure)."""
    out = []
    for traj in trajs:
        q = traj.switches()
        segment = np.cumsum(q) - 1
        last = segment[-1] if segment.size else 0
        for t, turn in enumerate(traj.turns):
            kind = "turn0" if t == 0 else ("switch" if q[t] else "keep")
            out.append({"role": turn.role, "kind": kind, "final_segment": bool(segment[t] == last)})
    return out


def block_logprobs(turns: TurnBatch, logprobs: np.ndarray) -> dict[str, np.ndarray]:
    """{block: float[B]}: the sum of each row's log-probs over that block's tokens, NaN where a row has none (a
    STEP-HRL high-level call writes no action); ``response``: over the whole response."""
    resp = turns.response_mask.numpy().astype(bool)
    out = {"response": np.where(resp, logprobs, 0.0).sum(axis=1)}
    for name in sorted(turns.masks):
        mask = turns.masks[name].numpy().astype(bool) & resp
        out[name.removesuffix("_mask")] = np.where(
            mask.any(axis=1), np.where(mask, logprobs, 0.0).sum(axis=1), np.nan
        )
    return out


def probe_deltas(
    splits: list[dict[str, Any]], before: dict[str, np.ndarray], after: dict[str, np.ndarray]
) -> dict[str, float]:
    """Mean Δ log P per block over the probe states of each split that have the block (``<block>/<split>``); the
    subgoal only where the expert writes a new one (turn 0 and SWITCH states). Splits that carry ``start_greedy``
    (the start policy's greedy reply is the expert's) add ``greedy_right`` / ``greedy_wrong``: an update can only
    lose probability where the start policy is already right. With roles other than the
    single-call ``agent``, also per role over all its states (``<role>.<block>/all``). Pure."""
    kinds = np.array([s["kind"] for s in splits])
    final = np.array([s["final_segment"] for s in splits])
    roles = np.array([s.get("role", "agent") for s in splits])
    groups = {
        "all": np.ones(len(splits), bool),
        "turn0": kinds == "turn0",
        "keep": kinds == "keep",
        "switch": kinds == "switch",
        "final": final,
        "nonfinal": ~final,
    }
    if all(
        "start_greedy" in s for s in splits
    ):  # whether the start policy's greedy reply is already the expert's
        greedy = np.array([s["start_greedy"] for s in splits], bool)
        groups.update({"greedy_right": greedy, "greedy_wrong": ~greedy})
    per_role = {f"{r}.": roles == r for r in sorted(set(roles.tolist()) - {"agent"})}
    out: dict[str, float] = {}
    for part in before:
        d = after[part] - before[part]
        has = ~np.isnan(d)
        if part == "subgoal":
            has &= kinds != "keep"
        for g, rows in groups.items():
            if (rows & has).any():
                out[f"{part}/{g}"] = float(d[rows & has].mean())
        for prefix, rows in per_role.items():
            if (rows & has).any():
                out[f"{prefix}{part}/all"] = float(d[rows & has].mean())
    return out


def turn_annotations(
    trajectories: Sequence[Trajectory], turns: TurnBatch, batch: Any, slots: Sequence[str]
) -> dict[tuple[int, int], dict[str, Any]]:
    """Per turn, keyed (trajectory index, turn index): each response token's group (``token_groups``: switch,
    subgoal, subgoal_keep, action, other, ...), the advantage it was trained with (``batch.token_adv``, the controls'
    scale included), whether the loss covered it, and the critic's value at each value slot (``slots``, its names;
    none without a critic): what ``hierarl view`` colours a kept episode's tokens by. ``batch``: the
    ``LearnerBatch`` built from ``turns``."""
    names = np.full(batch.token_adv.shape, "", dtype=object)
    for group, mask in token_groups(trajectories, turns).items():
        names[mask] = group
    resp = turns.response_mask.numpy().astype(bool)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for b, key in enumerate(turns.index):
        m = resp[b]
        out[key] = {
            "groups": names[b][m].tolist(),
            "token_adv": [round(float(x), 5) for x in batch.token_adv[b][m]],
            "in_loss": batch.loss_mask[b][m].tolist(),
            "values": {s: round(float(v), 5) for s, v in zip(slots, batch.old_values[b], strict=False)},
        }
    return out
