"""Format penalty: a malformed model output costs a fixed amount on its turn.

HiPER App. C ("we incur a 0.1 penalty to r_t" when the <think>/<action> or <switch>/<subgoal>/<action> format is
broken) and HIPIF App. B ("a penalty of −0.1 when the model fails to produce the required structured tags", its
r^fmt_t in Eq. 7) use the same rule. Which outputs are malformed is the parser's call, recorded as
``Decision.valid``; this module only prices it, so every protocol shares one definition.
"""

from __future__ import annotations

import numpy as np

from actors.trajectory import Trajectory


def format_penalty(traj: Trajectory, penalty: float) -> np.ndarray:
    """float64[T]: −penalty on every turn whose decision is malformed (``decision.valid`` False), else 0."""
    return np.array([0.0 if t.decision.valid else -penalty for t in traj.turns], dtype=np.float64)
