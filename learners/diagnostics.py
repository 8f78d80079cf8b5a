"""What an update did, per kind of generated token (pure): the diagnostics that tell a hierarchical update apart.

A Plan–Execute response holds three decisions (``<switch>``, ``<subgoal>``, ``<action>``) and some text between
them; an update's size and its advantages are reported per token group so that one kind cannot hide behind the
others (a switch-token push looks small when averaged with every action token):

* ``switch``, ``action``, ``think``, ... : the tokens of that tag's block (``Turn.masks``);
* ``subgoal``: the ``<subgoal>`` block of a boundary turn (q_t = 1, or turn 0), a new subgoal;
* ``subgoal_keep``: the ``<subgoal>`` block of a KEEP turn, a copy of the previous one;
* ``other``: response tokens in no block (whitespace, EOS).

The KL of an update is measured on the batch it trained on: k3 = exp(d) − 1 − d, d = log π_new − log π_old per
sampled token (Schulman's low-variance estimator of KL(π_old ‖ π_new)), averaged over each group's tokens, so two
algorithms' updates compare on the same tokens whatever their loss masks cover.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        every |= m
        out[f"kl_update/{g}"] = float(k3[m].mean())
    out["kl_update"] = float(k3[every].mean()) if every.any() else 0.0
    return out
