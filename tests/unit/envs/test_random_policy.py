"""The chance baseline every eval is reported beside (envs.random_policy)."""

from __future__ import annotations

from typing import Any

import pytest

from envs.random_policy import random_policy_wins
from envs.synthetic import SyntheticHierEnv
from envs.textcraft import commands_from_intro


def test_one_choice_in_two_wins_half_the_time():
    # stages 1, acts 1, 1 distractor: admissible = ['craft X', 'take D']; one step → P(win) = 1/2.
    env = SyntheticHierEnv(stages=[1], actions_per_stage=1, distractors=1, max_steps=1)
    ids = env.task_ids("test")  # 13 task contents exist at this size
    wins = random_policy_wins(env, [(i, 0) for i in ids], max_steps=1, seed=0, repeats=30)
    assert len(wins) == len(ids) == 13 and all(0 <= w <= 30 for w in wins)
    assert sum(wins) / 390 == pytest.approx(
        0.5, abs=0.076
    )  # 3 standard errors of 390 coin flips (0.0253 each)


def test_multi_action_segments_are_near_zero_for_chance():
    # stages 2, acts 2, 2 distractors, 4 steps: go to home(X) 1/4 · take X 1/4 · go to workbench 1/3 · craft 1/4
    # = 1/192 ≈ 0.005 on the only 4-step path; the learning test's setting relies on this being ~0.
    env = SyntheticHierEnv(stages=[2], actions_per_stage=2, distractors=2, max_steps=4)
    wins = random_policy_wins(
        env, [(i, 0) for i in env.task_ids("test")[:50]], max_steps=4, seed=0, repeats=8
    )
    assert sum(wins) / 400 < 0.02


def test_more_steps_never_hurt_chance():
    env = SyntheticHierEnv(stages=[2], actions_per_stage=2, distractors=1, max_steps=12)
    tasks = [(i, 0) for i in env.task_ids("test")[:40]]
    short = sum(random_policy_wins(env, tasks, max_steps=4, seed=1, repeats=5))
    long = sum(random_policy_wins(env, tasks, max_steps=12, seed=1, repeats=5))
    assert long > short


class _Silent:
    """An env that lists no commands and derives none: there is no chance baseline to report."""

    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "obs", {"admissible_actions": None}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        raise AssertionError("never stepped")


def test_no_commands_no_baseline():
    assert random_policy_wins(_Silent(), [("a", 0)], max_steps=3) is None


def test_a_pairs_wins_do_not_depend_on_the_other_pairs():
    env = SyntheticHierEnv(stages=[1], actions_per_stage=1, distractors=1, max_steps=2)
    a, b, c = env.task_ids("test")[:3]
    both = random_policy_wins(env, [(a, 0), (b, 0)], max_steps=2, seed=3, repeats=6)
    assert random_policy_wins(env, [(c, 1), (b, 0)], max_steps=2, seed=3, repeats=6)[1] == both[1]


def test_textcraft_commands_come_from_the_recipes_shown():
    intro = (
        "Crafting commands:\ncraft 4 oak planks using 1 oak logs\ncraft 1 stick using 2 oak planks, 1 iron ingot\n\n"
        "Goal: craft stick."
    )
    assert commands_from_intro(intro) == [
        "craft 1 stick using 2 oak planks, 1 iron ingot",
        "craft 4 oak planks using 1 oak logs",
        "get 1 iron ingot",
        "get 1 oak logs",
        "get 2 oak planks",
        "inventory",
    ]
