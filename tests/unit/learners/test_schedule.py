"""How an update's steps are laid out: equal mini-batches and the learning-rate warm-up (``learners.schedule``)."""

import numpy as np
import pytest

from learners.schedule import minibatch_rows, warmup_lr


def test_minibatches_are_equal_not_a_full_one_and_a_remainder():
    """38 rows at size 32: ceil(38 / 32) = 2 steps of 19 rows, not 32 + 6 (the remainder step took a full Adam
    step on 6 rows); every row once, in the shuffled order."""
    order = np.random.default_rng(0).permutation(38)
    parts = minibatch_rows(order, 32)
    assert [len(p) for p in parts] == [19, 19]
    np.testing.assert_array_equal(np.concatenate(parts), order)
    # 43 rows: 22 + 21; 64 rows: 32 + 32; 5 rows: one step; none: no step
    assert [len(p) for p in minibatch_rows(np.arange(43), 32)] == [22, 21]
    assert [len(p) for p in minibatch_rows(np.arange(64), 32)] == [32, 32]
    assert [len(p) for p in minibatch_rows(np.arange(5), 32)] == [5]
    assert minibatch_rows(np.arange(0), 32) == []
    with pytest.raises(ValueError, match=">= 1"):
        minibatch_rows(np.arange(3), 0)


def test_warmup_rises_linearly_to_the_learning_rate():
    """Over 4 steps: lr/4, lr/2, 3lr/4, lr, then lr; no warm-up (0 steps): lr from the first step."""
    assert [warmup_lr(1e-4, k, 4) for k in range(6)] == pytest.approx(
        [2.5e-5, 5e-5, 7.5e-5, 1e-4, 1e-4, 1e-4]
    )
    assert warmup_lr(1e-4, 0, 0) == 1e-4
