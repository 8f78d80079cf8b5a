"""What the episodes of a batch achieved, shaping left out, and whether that carries a learning signal (pure).

An update whose episodes all ended the same way (every one lost, or every one won with the same env return) holds
no outcome signal: the returns differ only by shaping terms (format penalties, HiPER's KEEP charge), and an
advantage whitened over the batch or the group turns that residue into unit-strength pushes. Replayed from the main
job's BC start on an all-lost batch, such a step was the run's largest update (docs/results/no_signal_batches.md).
GRPO's ``equal_outcome_groups`` zeroes such groups; ``no_outcome_batch`` (``learners.algo_config.RLConfig``) skips
the policy's step on such a batch for every algorithm whose signal is the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from actors.trajectory import Trajectory
from learners.advantages import equal_outcome_mask

NO_OUTCOME_BATCH = ("skip", "train")
"""``algo.no_outcome_batch``: "skip" no policy step on a batch without outcome signal (the critic still trains: its
targets do carry the outcome); "train" a step anyway (algorithms whose rewards tell lost episodes apart: HIPIF's
rule-based subgoal rewards, HISR's learned segment rewards, behaviour cloning)."""


def outcomes(trajectories: Sequence[Trajectory]) -> np.ndarray:
    """float64[N, 2]: what each trajectory achieved, shaping left out: won (0/1) and the env return (the sum of the
    env's rewards). A binary-success env's two columns agree; a partial-credit env (WebShop's score, ScienceWorld's
    increments) tells lost trajectories apart by the second."""
    return np.array(
        [[float(t.won), float(sum(turn.env_reward for turn in t.turns))] for t in trajectories],
        dtype=np.float64,
    ).reshape(-1, 2)


def equal_outcome_share(groups: Sequence[object], equal: np.ndarray) -> float:
    """The share of the batch's groups whose outcomes were all equal (``Targets.stats["groups_equal_outcome"]``)."""
    equal_groups = {g for g, e in zip(groups, equal, strict=True) if e}
    return len(equal_groups) / len(set(groups)) if groups else 0.0


def outcome_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """``groups_mixed_outcome``: the share of the batch's groups whose episodes ended differently (what a group
    baseline can learn from); ``batch_outcome_varies``: 1 when any two episodes of the batch ended differently."""
    if not trajectories:
        return {"groups_mixed_outcome": 0.0, "batch_outcome_varies": 0.0}
    groups = [t.group_id for t in trajectories]
    equal = equal_outcome_mask(outcomes(trajectories), groups).numpy()
    return {
        "groups_mixed_outcome": 1.0 - equal_outcome_share(groups, equal),
        "batch_outcome_varies": float(outcome_varies(trajectories)),
    }


def outcome_varies(trajectories: Sequence[Trajectory]) -> bool:
    """Whether any two episodes ended differently (won, or the env return), across groups."""
    x = outcomes(trajectories)
    return bool(len(x) and (np.ptp(x, axis=0) > 1e-9).any())
