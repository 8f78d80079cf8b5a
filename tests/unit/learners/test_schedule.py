"""How an update's steps are laid out: equal mini-batches, whole groups, and the learning-rate warm-up
(``learners.schedule``)."""

import numpy as np
import pytest

from learners.schedule import (
    balanced_cuts,
    group_minibatch_rows,
    minibatch_rows,
    update_steps,
    warmup_lr,
)


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


def test_cuts_make_the_largest_part_smallest():
    """20, 20, 19, 19 into 3: 20 | 20 | 38 (largest 38; 40 | 19 | 19 has 40, 20 | 39 | 19 has 39). 2, 3, 4 into
    3: one each. 5, 1, 1, 1, 1, 5 into 2: 5 + 1 + 1 = 7 | 1 + 1 + 5 = 7. Into as many parts as items: one each."""
    assert balanced_cuts(np.array([20, 20, 19, 19]), 3) == [1, 2, 4]
    assert balanced_cuts(np.array([2, 3, 4]), 3) == [1, 2, 3]
    assert balanced_cuts(np.array([5, 1, 1, 1, 1, 5]), 2) == [3, 6]
    assert balanced_cuts(np.array([7]), 1) == [1]
    with pytest.raises(ValueError, match="non-empty"):
        balanced_cuts(np.array([1, 2]), 3)


def test_group_minibatches_hold_whole_groups_in_as_many_steps_as_rows_would():
    """Groups of 2, 3 and 4 rows (9 rows) at size 4: ceil(9 / 4) = 3 steps, one group each (rows one by one: 3, 3,
    3). Every row once; each step's rows are one group's, in the batch's order."""
    groups = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    steps = group_minibatch_rows(groups, 4, np.random.default_rng(0))
    assert sorted(len(s) for s in steps) == [2, 3, 4]
    assert sorted(np.concatenate(steps).tolist()) == list(range(9))
    for s in steps:
        assert len(set(groups[s].tolist())) == 1 and np.all(np.diff(s) > 0)
    # one group, whatever the size: one step; more steps than groups are never made
    assert [len(s) for s in group_minibatch_rows(np.zeros(9, np.int64), 2, np.random.default_rng(0))] == [9]
    assert group_minibatch_rows(np.zeros(0, np.int64), 4, np.random.default_rng(0)) == []


def test_the_main_jobs_groups_take_three_steps_the_largest_as_small_as_groups_allow():
    """4 groups of 20, 20, 19 and 19 rows (78, the main job's) at size 32: 3 steps (as rows one by one: 26 each);
    the shuffled order decides which two groups share a step, and the largest step is the smallest the order
    allows: 38 or 39 rows (two groups), never 40 + 19 + 19."""
    groups = np.repeat([0, 1, 2, 3], [20, 20, 19, 19])
    for seed in range(5):
        steps = group_minibatch_rows(groups, 32, np.random.default_rng(seed))
        sizes = sorted(len(s) for s in steps)
        assert len(steps) == 3 and sum(sizes) == 78 and sizes[-1] in (38, 39)


def test_update_steps_shuffle_rows_or_groups_afresh_each_epoch():
    """Rows: exactly ``minibatch_rows`` of one generator's permutations, epoch after epoch (38 rows, size 32: 19 +
    19 twice). Groups: each epoch a new order of the groups, every row once per epoch."""
    rng = np.random.default_rng(7)
    want = minibatch_rows(rng.permutation(38), 32) + minibatch_rows(rng.permutation(38), 32)
    got = update_steps(38, 32, 2, 7)
    assert len(got) == 4 and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    groups = np.repeat(np.arange(6), 3)
    steps = update_steps(18, 6, 2, 0, groups)
    assert len(steps) == 6 and all(len(s) == 6 for s in steps)
    for epoch in (steps[:3], steps[3:]):
        assert sorted(np.concatenate(epoch).tolist()) == list(range(18))
    assert [s.tolist() for s in steps[:3]] != [s.tolist() for s in steps[3:]]
    with pytest.raises(ValueError, match="group keys"):
        update_steps(5, 2, 1, 0, np.zeros(4, np.int64))
