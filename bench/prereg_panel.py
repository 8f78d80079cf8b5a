"""The pre-registered held-out panel of the RL-vs-imitation study (docs/results/rl_vs_imitation.md), and its rule.

    python bench/prereg_panel.py            # writes launch/panels/textcraft_depth1_heldout32.json
    python bench/prereg_panel.py --pilot    # and the two halves of the other 72 train goals (the RL-task pilot)

32 TextCraft depth-1 goals of the *train* split, none of them among the 8 tasks the main job trained RL on before
this study (the first 8 of the train split's panel) or in the test split (the panel every earlier setting was
tuned on). Stratified like the split by how many different items the goal needs (``TextCraftEnv.task_stratum``):
6 of the 18 several-ingredient goals and 26 of the 86 one-ingredient goals. Within each kind the goals are taken
in the order of a salted hash of their id (the salt names the study and the day the panel was frozen), so the
selection is fixed by the rule, not by looking at any run. Runs that evaluate on it exclude every one of its tasks
from behaviour cloning's draw and from RL (``launch.evaluation.tasks.task_split``).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from _env import setup

setup()

from launch.evaluation.panels import LISTED, derive, save_panel  # noqa: E402

NAME = "textcraft_depth1_heldout32"
OPTIONS = {"depths": [1], "distractors": 4}
SALT = "hierarl rl-vs-imitation 2026-12-07"
EARLIER_RL_TASKS = 8
SHARES = {"several ingredients": 6, "one ingredient": 26}


def selected(env) -> list[str]:
    """The panel's task ids in panel order: each kind's share, by salted hash, interleaved (one several-ingredient
    goal after every four or five one-ingredient goals, so that every prefix keeps the kinds' shares)."""
    train = derive("textcraft", OPTIONS, "train", env=env)
    earlier = {t.task_id for t in train.tasks[:EARLIER_RL_TASKS]}
    pool = [i for i in env.task_ids("train") if i not in earlier]
    by_kind = {
        kind: sorted(
            (i for i in pool if env.task_stratum(i) == kind),
            key=lambda i: hashlib.sha256(f"{SALT}:{i}".encode()).hexdigest(),
        )[:n]
        for kind, n in SHARES.items()
    }
    total = sum(SHARES.values())
    placed = sorted(
        (k * total / len(ids), kind, i) for kind, ids in by_kind.items() for k, i in enumerate(ids)
    )
    return [i for _, _, i in placed]


def pilot_halves(env) -> tuple[list[str], list[str]]:
    """The 72 train goals outside the panel in two halves of 36 (18 + 18 of each kind as far as the kinds allow:
    alternate goals of each kind in salted-hash order). BC cloned on one half is scored on the other, so every
    candidate RL task gets outcomes from a policy that never saw its demonstration."""
    held = set(selected(env))
    pool = [i for i in env.task_ids("train") if i not in held]
    halves: tuple[list[str], list[str]] = ([], [])
    for kind in SHARES:
        ids = sorted(
            (i for i in pool if env.task_stratum(i) == kind),
            key=lambda i: hashlib.sha256(f"{SALT}:pilot:{i}".encode()).hexdigest(),
        )
        for k, i in enumerate(ids):
            halves[k % 2].append(i)
    return halves


def listed(env, name: str, ids: list[str], description: str):
    """A listed panel of the train split (``LISTED``) holding ``ids`` in that order."""
    train = derive("textcraft", OPTIONS, "train", env=env)
    by_id = {t.task_id: t for t in train.tasks}
    return replace(
        train, name=name, tasks=tuple(by_id[i] for i in ids), order=LISTED, description=description
    )


def make(env):
    return listed(
        env,
        NAME,
        selected(env),
        "32 TextCraft depth-1 goals of the train split held out from BC and RL, pre-registered 2026-12-07 for the "
        "RL-vs-imitation study (rule: bench/prereg_panel.py).",
    )


if __name__ == "__main__":
    import sys

    import envs

    env = envs.make("textcraft", **OPTIONS)
    print(save_panel(make(env)))
    if "--pilot" in sys.argv:
        for half, ids in zip("ab", pilot_halves(env), strict=True):
            text = f"Half {half} of the 72 train goals outside {NAME} (the RL-task pilot, bench/prereg_panel.py)."
            print(save_panel(listed(env, f"textcraft_depth1_pilot_{half}", ids, text)))
