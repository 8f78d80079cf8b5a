"""Trajectory segmentation for HISR's segment-level rewards, without GPT-4o (pure: numpy only).

HISR (Sec. 3.2, App. B) asks GPT-4o to split each trajectory into consecutive segments, one per subgoal, and names
"automatic segmentation of trajectory based on the change in entropy during the process of rollout" as its own future
work (Limitations 1). Offline, three segmentations are offered (``algo.segmentation``):

``subgoal``  the agent protocol's own subgoal boundaries: a segment is a run of turns under one subgoal (a new one
             starts where the agent switched, ``Trajectory.switches``). Only protocols that state subgoals have them
             (``plan_execute``, ``hipif``).
``entropy``  change points of the policy's token entropy: a segment starts at turn t when the mean entropy of
             turn t's response rises above turn t-1's by more than ``jump`` standard deviations of the
             trajectory's per-turn entropies (uncertainty rises where a new subgoal begins and falls while it is
             executed). The paper's future-work proposal; its threshold rule is ours.
``turn``     every turn its own segment (HISR's WebShop setting, where GPT-4o left 89.3 % unsegmented: Table 1's
             "w/o SPR" reading of turn-level process rewards).

A segmentation is an int array of segment ids per turn, starting at 0 and non-decreasing by steps of 0 or 1 (what
``learners.hindsight.segment_sum`` / ``segment_to_turn_rewards`` read).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory

SEGMENTATIONS = ("subgoal", "entropy", "turn")


def ids_from_starts(starts: np.ndarray) -> np.ndarray:
    """int64[T] segment ids from bool[T] segment starts (turn 0 always starts segment 0)."""
    starts = np.asarray(starts, dtype=bool).copy()
    if starts.size:
        starts[0] = True
    return (np.cumsum(starts) - 1).astype(np.int64)


def subgoal_segments(traj: Trajectory) -> np.ndarray:
    """int64[T]: a new segment wherever the agent switched subgoal (q_t = 1)."""
    return ids_from_starts(traj.switches())


def entropy_segments(turn_entropy: np.ndarray, jump: float = 1.5) -> np.ndarray:
    """int64[T]: a new segment at turn t when H_t − H_{t−1} > jump · std(H) (H: float[T] mean response entropy).

    A trajectory whose entropies do not vary (std 0) stays one segment."""
    h = np.asarray(turn_entropy, dtype=np.float64)
    starts = np.zeros(h.size, dtype=bool)
    if h.size > 1:
        sd = float(h.std())
        if sd > 0:
            starts[1:] = np.diff(h) > jump * sd
    return ids_from_starts(starts)


def turn_entropies(
    index: list[tuple[int, int]], row_entropy: np.ndarray, turns_per_traj: list[int]
) -> list[np.ndarray]:
    """float64[T] per trajectory from a batch's per-row mean entropies (row r is (trajectory, turn) =
    ``index[r]``); a turn without a row (no response) repeats the previous turn's value, so it opens no segment."""
    out = [np.full(n, np.nan) for n in turns_per_traj]
    for r, (i, k) in enumerate(index):
        out[i][k] = row_entropy[r]
    for h in out:
        for k in range(h.size):
            if np.isnan(h[k]):
                h[k] = h[k - 1] if k else 0.0
    return out


def turn_segments(num_turns: int) -> np.ndarray:
    """int64[T]: 0, 1, ..., T−1."""
    return np.arange(num_turns, dtype=np.int64)


@dataclass(frozen=True)
class Agreement:
    """Boundary agreement of a segmentation with a reference, over the turns after the first (turn 0 is a boundary
    in both by definition): counts and precision / recall / F1 (1.0 where nothing was to be found or claimed)."""

    true_pos: int
    false_pos: int
    false_neg: int

    @property
    def precision(self) -> float:
        claimed = self.true_pos + self.false_pos
        return self.true_pos / claimed if claimed else 1.0

    @property
    def recall(self) -> float:
        actual = self.true_pos + self.false_neg
        return self.true_pos / actual if actual else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def boundary_agreement(predicted: list[np.ndarray], reference: list[np.ndarray]) -> Agreement:
    """Pool the boundaries (segment starts after turn 0) of paired segmentations (lists of int[T] ids)."""
    tp = fp = fn = 0
    for pred, ref in zip(predicted, reference, strict=True):
        if len(pred) != len(ref):
            raise ValueError(f"segmentations of {len(pred)} and {len(ref)} turns cannot be compared")
        p = np.diff(np.asarray(pred)) > 0
        r = np.diff(np.asarray(ref)) > 0
        tp += int((p & r).sum())
        fp += int((p & ~r).sum())
        fn += int((~p & r).sum())
    return Agreement(tp, fp, fn)
