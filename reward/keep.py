"""HiPER's KEEP penalty and the KEEP-consistency penalty.

HiPER App. C: "we incur a small penalty c_t = c_KEEP (1 − q_t) to each turn where the agent decides to KEEP, so as
to encourage exploration at the high-level and prevent degenerate behavior, such as committing to a single subgoal
for an entire episode"; c_KEEP = 0.3 against R = 10 is the best value of the sensitivity study (App. D.2, Table 4);
the constants here are in units of R (``reward.shaping``).

KEEP means o_t = o_{t−1} (Sec. 4.1, Eq. 2: the subgoal is copied as-is), and the Plan–Execute prompt lists "If you
KEEP, copy the exact current subgoal into <subgoal>" among its format requirements (App. C.3).  A KEEP whose
subgoal text differs from the previous one therefore breaks the format; the HiPER authors' code charges it (0.3
against R = 10: 0.03 R), recorded as its own component, so a parser that flags it must not also set
``Decision.valid`` False for it.
"""

from __future__ import annotations

import numpy as np

from actors.trajectory import Trajectory


def keep_penalty(traj: Trajectory, c_keep: float, *, normalized: bool = False) -> np.ndarray:
    """float64[T]: −c_KEEP·(1 − q_t) with q_t = ``traj.switches()``, the same q_t the HAE advantages use;
    ``normalized``: −c_KEEP·(1 − q_t)/T, so a whole episode costs at most c_KEEP (the HiPER authors' default mode).

    Turn 0 is always a boundary (q_0 = 1, HiPER Sec. 4.3: b_0 = 0), so a KEEP there is not charged; an unreadable
    switch (``decision.switch`` None) counts as KEEP, as it does for the segment boundaries. Enable only for
    protocols that emit a switch (Plan–Execute), otherwise every turn after the first would be charged."""
    q = traj.switches().astype(np.float64)
    per_turn = -c_keep * (1.0 - q)
    return per_turn / max(1, q.size) if normalized else per_turn


def _same_text(a: str, b: str) -> bool:
    """Exact copy up to whitespace layout (the prompt asks for the exact subgoal)."""
    return " ".join(a.split()) == " ".join(b.split())


def keep_changed_subgoal(traj: Trajectory) -> np.ndarray:
    """bool[T]: the turn chose KEEP explicitly but its subgoal differs from the previous turn's subgoal.

    The parser's verdict ``decision.extra["keep_changed_subgoal"]`` wins when present (it saw the subgoal shown in
    the prompt); otherwise the subgoal texts of turns t−1 and t are compared. Turn 0 has nothing to keep, and a
    missing subgoal on either side is a format error rather than a change, so both give False."""
    out = np.zeros(len(traj.turns), dtype=bool)
    for t in range(1, len(traj.turns)):
        d = traj.turns[t].decision
        if d.switch is not False:
            continue
        flag = d.extra.get("keep_changed_subgoal")
        if flag is not None:
            out[t] = bool(flag)
            continue
        prev = traj.turns[t - 1].decision.subgoal
        out[t] = d.subgoal is not None and prev is not None and not _same_text(d.subgoal, prev)
    return out


def keep_consistency_penalty(traj: Trajectory, penalty: float) -> np.ndarray:
    """float64[T]: −penalty on each KEEP turn that changed the subgoal text (see ``keep_changed_subgoal``)."""
    return -penalty * keep_changed_subgoal(traj).astype(np.float64)
