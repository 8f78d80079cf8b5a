"""The one name → algorithm table, beside the algorithms (pure: the config layer and the driver both read it, so it
sits below both). Each entry is the ``learners.algorithm.Algorithm`` record its file ends with
(``learners/algos/<name>.py``: ``Config``, value slots, ``compute_targets``, the policy and critic losses, whether
it needs the reference policy, the smallest group it works with). An algorithm in this tree is one line of the
tuple below; ``register_algo`` adds one from elsewhere (a test's, a script's) to this process's table."""

from __future__ import annotations

from common.registry import register
from learners.algorithm import Algorithm
from learners.algos import gigpo, grpo, hiper, hipif, hipif_gigpo, hisr, multi2, ppo, rft, rloo, sft, step_hrl

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
        rft.ALGORITHM,
    )
}


def get_algo(name: str) -> Algorithm:
    if name not in ALGOS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGOS))}")
    return ALGOS[name]


def register_algo(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` under its name to this process's table: ``get_algo``, validation and ``hierarl
    train`` (``launch.cli.main.main``) called in this process find it; its module must be importable where the
    learner workers run (they unpickle its loss functions). A taken name is refused; returns the record."""
    expected = "an Algorithm record (a module's ALGORITHM)"
    return register(
        ALGOS, algorithm, kind="algorithm", expected=expected, record=Algorithm, caller="register_algo"
    )
