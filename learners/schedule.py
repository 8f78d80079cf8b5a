"""How an update's optimizer steps are laid out (pure: numpy only): the rows of each mini-batch and the learning
rate of each step while it warms up after the optimizer was reset."""

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


def warmup_lr(lr: float, step: int, steps: int) -> float:
    """The learning rate of step ``step`` (0-based) of a linear warm-up to ``lr`` over ``steps`` steps:
    lr · (step + 1) / steps, then ``lr`` (``steps`` <= 0: no warm-up). Step 0 of 4: lr/4; step 3: lr."""
    if steps <= 0 or step >= steps:
        return lr
    return lr * (step + 1) / steps
