"""The one name → algorithm dict. An algorithm is a module in ``learners/algos/`` exposing ``Config`` (frozen
dataclass; an RL algorithm's has a ``shaping: reward.shaping.ShapingConstants`` field, so every shaping constant
is an ``algo.shaping.<name>`` key), ``VALUE_HEADS``, ``VALUE_SLOTS``, ``compute_targets(trajectories, batch, values, cfg)`` and
``policy_loss(new_logprobs, micro, cfg)``; optionally ``MIN_GROUP_SIZE`` (checked at start by
``launch.config.validate``)."""

from __future__ import annotations

import importlib
from types import ModuleType

ALGOS: dict[str, str] = {
    "ppo": "learners.algos.ppo",
    "grpo": "learners.algos.grpo",
    "rloo": "learners.algos.rloo",
    "gigpo": "learners.algos.gigpo",
    "hiper": "learners.algos.hiper",
    "sft": "learners.algos.sft",
}

# The agent protocol each algorithm trains by default (HiPER uses Plan–Execute; the baselines use ReAct).
DEFAULT_AGENT: dict[str, str] = {"hiper": "plan_execute"}


def get_algo(name: str) -> ModuleType:
    if name not in ALGOS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGOS))}")
    return importlib.import_module(ALGOS[name])
