"""The chance baseline every success rate is reported beside: a uniformly random policy over the commands a task
makes available, played on the same tasks (pure Python; no model, no Ray).

Available commands are ``info["admissible_actions"]`` where the env lists them (ALFWorld, ScienceWorld, WebShop,
VirtualHome, synthetic); where it does not (TextCraft), the env's ``candidate_actions(observation)`` derives them
from what the observation offers (the recipes shown, ``get`` of their ingredients, ``inventory``). Formatting is
never at stake here: the random policy always emits a well-formed command, so compare it with the model's success,
and read the model's valid-format rate separately.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChanceBaseline:
    """Success (and mean score) of the uniformly random policy over ``episodes`` plays of the task set."""

    success: float
    score: float
    episodes: int


def _choices(env: Any, first_obs: str, info: dict[str, Any]) -> list[str]:
    listed = info.get("admissible_actions")
    if listed:
        return list(listed)
    derive = getattr(env, "candidate_actions", None)
    return list(derive(first_obs)) if derive is not None else []


def random_policy_success(
    env: Any, task_ids: Sequence[str], *, max_steps: int, seed: int = 0, repeats: int = 4
) -> ChanceBaseline | None:
    """Play every task ``repeats`` times with uniformly random available commands; None if the env offers none."""
    rng = random.Random(seed)
    wins, scores, n = 0, 0.0, 0
    for r in range(repeats):
        for i, task_id in enumerate(task_ids):
            obs, info = env.reset(task_id=task_id, seed=seed + r * len(task_ids) + i)
            first = obs
            for _ in range(max_steps):
                choices = _choices(env, first, info)
                if not choices:
                    if n == 0:
                        return None
                    break
                obs, _, terminated, truncated, info = env.step(rng.choice(choices))
                if terminated or truncated:
                    break
            wins += bool(info.get("won", False))
            scores += float(info.get("score", 0.0) or 0.0)
            n += 1
    return ChanceBaseline(wins / max(1, n), scores / max(1, n), n)
