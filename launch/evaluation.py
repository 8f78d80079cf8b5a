"""Evaluation of a run's policy on its eval panel (``launch.panels``): which pairs, the baselines, the result.

Every evaluation of a run scores the same (task id, env seed) pairs: the panel's first ``eval_episodes`` tasks
(all of them for 0). The pairs are dealt over the rollout workers with each task's own env seed, so neither the
number of workers nor the order of the tasks changes what is played; outcomes are matched back to the panel by
(task id, seed), never by position. The driver plays the pairs (``Trainer.play_panel``); this module holds no
Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from actors.trajectory import Trajectory
from launch.config import TrainConfig
from launch.panels import Panel, run_panel

RANDOM_SEED = 0
"""The random policy's draws: the same for every run on a panel."""


def outcome_string(panel: Panel, trajs: Sequence[Trajectory]) -> str:
    """One character per panel task, in panel order: ``1`` won, ``0`` lost, ``-`` not played (its group was
    dropped after its retries)."""
    won = {(t.task_id, t.info.get("seed")): t.won for t in trajs}
    return "".join("-" if t.key not in won else "1" if won[t.key] else "0" for t in panel.tasks)


def random_baseline(
    env_name: str, options: dict[str, Any], max_steps: int, panel: Panel, repeats: int = 4
) -> list[float] | None:
    """The uniformly random policy's success rate per panel task (``repeats`` plays each from the task's own
    initial state, draws seeded by ``RANDOM_SEED``; pure Python, in this process); None where the env offers no
    command list. The one chance baseline every success rate is reported beside."""
    import envs
    from envs.random_policy import random_policy_wins

    env = envs.make(env_name, **options)
    try:
        pairs = [t.key for t in panel.tasks]
        wins = random_policy_wins(env, pairs, max_steps=max_steps, seed=RANDOM_SEED, repeats=repeats)
    finally:
        env.close()
    return None if wins is None else [w / repeats for w in wins]


class Evaluation:
    """The eval panel of one run, its random-policy baseline, and the result of a policy's episodes on it."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self._panels: dict[int, Panel] = {}
        self._chance: dict[str, list[float] | None] = {}

    def panel(self, n: int) -> Panel:
        """The run's panel, its first ``n`` tasks (0: all); resolved and checked once per ``n``."""
        if n not in self._panels:
            self._panels[n] = run_panel(dataclasses.replace(self.cfg, eval_episodes=n))
        return self._panels[n]

    def chance(self, panel: Panel) -> list[float] | None:
        """``random_baseline`` on ``panel`` with the run's env (once per panel)."""
        if panel.digest not in self._chance:
            self._chance[panel.digest] = random_baseline(
                self.cfg.env.name, dict(self.cfg.env.options), self.cfg.env.max_steps, panel
            )
        return self._chance[panel.digest]

    def result(self, panel: Panel, trajs: Sequence[Trajectory], stats: dict[str, float]) -> dict[str, Any]:
        """Success on the panel, per task type, beside the random policy on the same pairs, and the model's
        valid-format rate (``stats``: ``trajectory_stats`` of ``trajs``). A task whose group was dropped counts as
        lost: the denominator is always the panel's size."""
        outcomes = outcome_string(panel, trajs)
        per_type: dict[str, list[bool]] = {}
        for task, o in zip(panel.tasks, outcomes, strict=True):
            per_type.setdefault(task.task_type, []).append(o == "1")
        chance = self.chance(panel)
        return {
            "success": outcomes.count("1") / len(panel.tasks),
            "random": float("nan") if chance is None else sum(chance) / len(chance),
            "valid_format": stats["valid_format"],
            "valid_roles": {
                k[len("valid_format_") :]: v for k, v in stats.items() if k.startswith("valid_format_")
            },
            "per_type": {k: sum(v) / len(v) for k, v in sorted(per_type.items())},
            "episodes": len(trajs),
            "dropped": outcomes.count("-"),
            "panel": panel.label,
            "outcomes": outcomes,
            **({"subgoal_completion": stats["subgoal_completion"]} if "subgoal_completion" in stats else {}),
        }
