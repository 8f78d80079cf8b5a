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
from typing import Any


def _choices(env: Any, first_obs: str, info: dict[str, Any]) -> list[str]:
    listed = info.get("admissible_actions")
    if listed:
        return list(listed)
    derive = getattr(env, "candidate_actions", None)
    return list(derive(first_obs)) if derive is not None else []


def _play(
    env: Any, task_id: str, env_seed: int, rng: random.Random, max_steps: int
) -> tuple[bool, float] | None:
    """One episode of uniformly random available commands: (won, score); None if the env offers no command."""
    obs, info = env.reset(task_id=task_id, seed=env_seed)
    first = obs
    for step in range(max_steps):
        choices = _choices(env, first, info)
        if not choices:
            if step == 0:
                return None
            break
        obs, _, terminated, truncated, info = env.step(rng.choice(choices))
        if terminated or truncated:
            break
    return bool(info.get("won", False)), float(info.get("score", 0.0) or 0.0)


def random_policy_wins(
    env: Any, tasks: Sequence[tuple[str, int]], *, max_steps: int, seed: int = 0, repeats: int = 4
) -> list[int] | None:
    """Wins of the random policy in ``repeats`` plays of each (task id, env seed) pair, every play from the pair's
    own initial state (an evaluation panel's). Each play draws from its own RNG, seeded by (``seed``, pair, play),
    so a pair's wins do not depend on the other pairs or their order. None if the env offers no command."""
    wins = [0] * len(tasks)
    for i, (task_id, env_seed) in enumerate(tasks):
        for r in range(repeats):
            played = _play(
                env, task_id, env_seed, random.Random(f"{seed}:{task_id}:{env_seed}:{r}"), max_steps
            )
            if played is None:
                return None
            wins[i] += played[0]
    return wins
