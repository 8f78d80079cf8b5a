"""How an update's optimizer steps are laid out (pure: numpy only): the rows of each mini-batch and the learning
rate of each step while it warms up after the optimizer was reset.

``LearnerGroup.update`` takes its steps from ``update_steps``: rows shuffled one by one into equal mini-batches, or
(``learner.minibatches=groups``) whole episode groups shuffled into mini-batches, so that a step's rows share the
prompts a prefix-tree pass computes once (``learners.packing``)."""

from __future__ import annotations

import numpy as np


def minibatch_rows(order: np.ndarray, size: int) -> list[np.ndarray]:
    """``order`` (a permutation of the batch's rows) cut into ceil(n / size) mini-batches of equal size (±1 row).

    Cutting at every ``size`` rows left a remainder (8 episodes, 38 rows, mini-batch 32: a step on 32 rows, then one
    on 6) that took a full optimizer step on a handful of rows; equal parts give every step the same weight of
    evidence. 38 rows, size 32: two steps of 19."""
    if size < 1:
        raise ValueError(f"mini-batch size must be >= 1, got {size}")
    n = len(order)
    return np.array_split(order, -(-n // size)) if n else []


def balanced_cuts(sizes: np.ndarray, parts: int) -> list[int]:
    """Where to cut a sequence of items of ``sizes`` into ``parts`` non-empty contiguous parts whose largest total
    is smallest (the end index of each part; ties: the earliest cuts). Sizes 20, 20, 19, 19 into 3: 20 | 20 | 19 + 19
    (largest 38; 20 + 20 | 19 | 19 has 40, 20 | 20 + 19 | 19 has 39): ends [1, 2, 4]."""
    n = len(sizes)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot cut {n} items into {parts} non-empty parts")
    total = np.concatenate([[0], np.cumsum(sizes)])
    # best[j, i]: the smallest largest part of the first i items in j + 1 parts; cut[j, i]: where its last part starts
    best = np.full((parts, n + 1), np.inf)
    cut = np.zeros((parts, n + 1), dtype=np.int64)
    best[0, 1:] = total[1:]
    for j in range(1, parts):
        for i in range(j + 1, n + 1):
            starts = np.arange(j, i)
            cost = np.maximum(best[j - 1, starts], total[i] - total[starts])
            cut[j, i] = starts[int(np.argmin(cost))]
            best[j, i] = cost.min()
    ends, i = [n], n
    for j in range(parts - 1, 0, -1):
        i = int(cut[j, i])
        ends.append(i)
    return ends[::-1]


def group_minibatch_rows(groups: np.ndarray, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The rows of each mini-batch when whole episode groups are shuffled (``groups`` int[B]: each row's group):
    as many steps as ``minibatch_rows`` takes (ceil(n / size), at most one per group), the shuffled groups cut where
    the largest step is smallest (``balanced_cuts``). Rows of a group keep the batch's order. 4 groups of 20, 20, 19
    and 19 rows at size 32: 3 steps of 20, 20 and 38 rows (rows one by one: 26 each)."""
    if size < 1:
        raise ValueError(f"mini-batch size must be >= 1, got {size}")
    keys, group_of = np.unique(groups, return_inverse=True)
    if not len(keys):
        return []
    members = [np.flatnonzero(group_of == g) for g in rng.permutation(len(keys))]
    steps = min(len(members), -(-len(groups) // size))
    ends = balanced_cuts(np.array([m.size for m in members]), steps)
    return [np.concatenate(members[a:b]) for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def update_steps(
    n: int, size: int, epochs: int, seed: int, groups: np.ndarray | None = None
) -> list[np.ndarray]:
    """The rows of every optimizer step of an update of ``n`` rows: ``epochs`` passes, each shuffled afresh from
    one generator seeded with ``seed``; rows one by one (``minibatch_rows``) or, given ``groups`` (int[n], each row's
    episode group), whole groups (``group_minibatch_rows``)."""
    rng = np.random.default_rng(seed)
    if groups is not None and len(groups) != n:
        raise ValueError(f"{len(groups)} group keys for {n} rows")
    return [
        rows
        for _ in range(epochs)
        for rows in (
            minibatch_rows(rng.permutation(n), size)
            if groups is None
            else group_minibatch_rows(groups, size, rng)
        )
    ]


def warmup_lr(lr: float, step: int, steps: int) -> float:
    """The learning rate of step ``step`` (0-based) of a linear warm-up to ``lr`` over ``steps`` steps:
    lr · (step + 1) / steps, then ``lr`` (``steps`` <= 0: no warm-up). Step 0 of 4: lr/4; step 3: lr."""
    if steps <= 0 or step >= steps:
        return lr
    return lr * (step + 1) / steps
