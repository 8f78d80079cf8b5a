"""Segmentation (``reward.segments``): HISR's stand-ins for the paper's GPT-4o step, against hand values."""

import numpy as np
import pytest

from reward.segments import (
    boundary_agreement,
    entropy_segments,
    ids_from_starts,
    subgoal_segments,
    turn_entropies,
    turn_segments,
)
from tests.unit.hisr_turns import make_traj, make_turn

# -- segmentation ------------------------------------------------------------------------------------------------


def test_ids_from_starts_and_turn_segments():
    assert ids_from_starts(np.array([False, False, True, True, False])).tolist() == [0, 0, 1, 2, 2]
    assert turn_segments(3).tolist() == [0, 1, 2]


def test_subgoal_segments_follow_the_switches():
    trajs = make_traj([make_turn([5], switch=s) for s in (True, False, True, False, False)])
    assert subgoal_segments(trajs).tolist() == [0, 0, 1, 1, 1]


def test_entropy_segments_golden():
    # H = [1.0, 0.2, 0.3, 1.5, 0.4]: mean 0.68, var (0.1024 + 0.2304 + 0.1444 + 0.6724 + 0.0784) / 5 = 0.2456,
    # std 0.4956; jump 0.5 -> threshold 0.2478. Rises: 0.2->0.3 (+0.1, no), 0.3->1.5 (+1.2, yes). Falls never cut.
    # Mutation caught: |diff| instead of the rise (1.0->0.2 and 1.5->0.4 would cut too).
    h = np.array([1.0, 0.2, 0.3, 1.5, 0.4])
    assert entropy_segments(h, 0.5).tolist() == [0, 0, 0, 1, 1]
    assert entropy_segments(h, 3.0).tolist() == [0] * 5  # 1.2 < 3 * 0.4956
    assert entropy_segments(np.ones(4)).tolist() == [0] * 4  # no variation, no cut


def test_turn_entropies_scatter_rows_and_fill_turns_without_one():
    # rows (1, 0), (0, 1), (1, 2) -> traj 0: [nan -> 0.0, 0.5]; traj 1: [0.7, nan -> 0.7, 0.9]
    out = turn_entropies([(1, 0), (0, 1), (1, 2)], np.array([0.7, 0.5, 0.9]), [2, 3])
    assert [h.tolist() for h in out] == [[0.0, 0.5], [0.7, 0.7, 0.9]]


def test_boundary_agreement_counts_boundaries_after_the_firstmake_turn():
    # boundaries (starts after turn 0): predicted {2, 3}, reference {2, 4} -> tp 1, fp 1, fn 1
    a = boundary_agreement([np.array([0, 0, 1, 2, 2])], [np.array([0, 0, 1, 1, 2])])
    assert (a.true_pos, a.false_pos, a.false_neg) == (1, 1, 1)
    assert a.precision == a.recall == a.f1 == 0.5
    with pytest.raises(ValueError, match="cannot be compared"):
        boundary_agreement([np.array([0])], [np.array([0, 1])])
