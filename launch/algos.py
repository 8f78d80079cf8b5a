"""The one name → algorithm table. Each entry is the ``learners.algorithm.Algorithm`` record its file ends with
(``learners/algos/<name>.py``: ``Config``, value slots, ``compute_targets``, the policy and critic losses, whether
it needs the reference policy, the smallest group it works with)."""

from __future__ import annotations

from learners.algorithm import Algorithm
from learners.algos import gigpo, grpo, hiper, hipif, hipif_gigpo, hisr, multi2, ppo, rloo, sft, step_hrl

ALGOS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        ppo.ALGORITHM,
        grpo.ALGORITHM,
        rloo.ALGORITHM,
        gigpo.ALGORITHM,
        hiper.ALGORITHM,
        hipif.ALGORITHM,
        hipif_gigpo.ALGORITHM,
        hisr.ALGORITHM,
        step_hrl.ALGORITHM,
        multi2.ALGORITHM,
        sft.ALGORITHM,
    )
}


def get_algo(name: str) -> Algorithm:
    if name not in ALGOS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGOS))}")
    return ALGOS[name]
