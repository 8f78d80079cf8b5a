"""Evaluation of a run's policy on its eval panel (``launch.evaluation.panels``): which pairs, the baselines, the result.

Every evaluation of a run scores the same (task id, env seed) pairs: the panel's first ``eval_episodes`` tasks
(all of them for 0). The pairs are dealt over the rollout workers with each task's own env seed, so neither the
number of workers nor the order of the tasks changes what is played; outcomes are matched back to the panel by
(task id, seed), never by position. The driver plays the pairs (``launch.driver.evaluator.PanelEvaluator``); this
module holds no Ray.

A result carries its success with the Wilson 95 % interval (``launch.evaluation.intervals``), beside the random policy and the
zero-shot base model on the same pairs (``launch.evaluation.baselines``, cached on disk), per task type too, and the per-task
outcomes that paired comparisons of two runs read (``eval_outcomes`` in the metrics).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actors.trajectory import Trajectory
from launch.config import EnvConfig, ModelConfig, RolloutConfig, TrainConfig
from launch.evaluation.baselines import base_cache, random_rates
from launch.evaluation.intervals import wilson
from launch.evaluation.metrics import eval_metrics
from launch.evaluation.panel_tasks import Panel, PanelTask
from launch.evaluation.panels import run_panel


def outcome_string(panel: Panel, trajs: Sequence[Trajectory]) -> str:
    """One character per panel task, in panel order: ``1`` won, ``0`` lost, ``-`` not played (its group was
    dropped after its retries). With several samples of a task, its first episode's outcome."""
    won: dict[tuple[str, Any], bool] = {}
    for t in trajs:
        won.setdefault((t.task_id, t.info.get("seed")), t.won)
    return "".join("-" if t.key not in won else "1" if won[t.key] else "0" for t in panel.tasks)


def task_wins(panel: Panel, trajs: Sequence[Trajectory]) -> list[int]:
    """Wins per panel task over its sampled episodes, in panel order (0 for a task not played)."""
    wins = {t.key: 0 for t in panel.tasks}
    for t in trajs:
        key = (t.task_id, t.info.get("seed"))
        if key in wins:
            wins[key] += int(t.won)
    return [wins[t.key] for t in panel.tasks]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values and not any(v != v for v in values) else math.nan


def per_type(panel: Panel, values: Sequence[float]) -> dict[str, float]:
    """The mean of a per-task value over each task type's tasks (types sorted)."""
    groups: dict[str, list[float]] = {}
    for task, v in zip(panel.tasks, values, strict=True):
        groups.setdefault(task.task_type, []).append(v)
    return {k: _mean(v) for k, v in sorted(groups.items())}


def summary(
    panel: Panel,
    outcomes: str,
    chance: Sequence[float] | None,
    base: Sequence[float] | None,
    wins_per_task: Sequence[int] | None = None,
    samples: int = 1,
) -> dict[str, Any]:
    """Success (a dropped task counts as lost: the denominator is always the panel's size × ``samples``) with its
    Wilson 95 % interval over those episodes, the random policy's and the base model's success on the same pairs
    (nan where not computed), per task type too. ``wins_per_task``: wins of each task over its ``samples``
    episodes (default: ``outcomes``, one episode a task); ``task_rates`` are what paired gains read."""
    nan = [math.nan] * len(panel.tasks)
    if wins_per_task is None:
        wins_per_task = [int(o == "1") for o in outcomes]
    rates = [w / samples for w in wins_per_task]
    wins = sum(wins_per_task)
    n = len(panel.tasks) * samples
    lo, hi = wilson(wins, n)
    return {
        "success": wins / n,
        "wins": wins,
        "n": len(panel.tasks),
        "samples": samples,
        "task_rates": rates,
        "ci_low": lo,
        "ci_high": hi,
        "random": _mean(chance or nan),
        "base": _mean(base or nan),
        "per_type": per_type(panel, rates),
        "random_per_type": per_type(panel, chance or nan),
        "base_per_type": per_type(panel, base or nan),
        "dropped": outcomes.count("-"),
        "panel": panel.label,
        "outcomes": outcomes,
        "task_ids": [t.task_id for t in panel.tasks],
    }


@dataclass(frozen=True)
class EvalScope:
    """What an evaluation depends on, out of a run config (``scope``): the env, model and rollout sections (the
    env and the base model's cache key) and the run's evaluation keys, under their run-config names."""

    env: EnvConfig
    model: ModelConfig
    rollout: RolloutConfig
    eval_panel: str
    eval_episodes: int
    eval_baselines: bool
    eval_base_model: bool = True
    eval_random: bool = True
    """The random policy's column with ``eval_baselines`` (``hierarl eval --no-random`` skips it: slow envs)."""


def scope(cfg: TrainConfig) -> EvalScope:
    return EvalScope(
        cfg.env,
        cfg.model,
        cfg.rollout,
        cfg.eval_panel,
        cfg.eval_episodes,
        cfg.eval_baselines,
        cfg.eval_base_model,
    )


class Evaluation:
    """The eval panel of one run, its baselines, and the result of a policy's episodes on it."""

    def __init__(self, cfg: EvalScope, model_path: str) -> None:
        """``cfg``: the run's ``EvalScope``; ``model_path``: the resolved model folder (the base model's cache
        entries are tied to its files)."""
        self.cfg = cfg
        self._panels: dict[int, Panel] = {}
        self.base_cache = base_cache(cfg, model_path)

    def panel(self, n: int) -> Panel:
        """The run's panel, its first ``n`` tasks (0: all); resolved and checked once per ``n``."""
        if n not in self._panels:
            self._panels[n] = run_panel(dataclasses.replace(self.cfg, eval_episodes=n))
        return self._panels[n]

    def chance(self, panel: Panel) -> list[float] | None:
        """The random policy's success rate per panel task (cached on disk), None with ``eval_baselines=false``
        or ``eval_random=false``."""
        return (
            random_rates(self.cfg, panel.tasks) if self.cfg.eval_baselines and self.cfg.eval_random else None
        )

    def base_missing(self, panel: Panel) -> list[PanelTask]:
        """The panel tasks the base model has not played yet in this setting (none with ``eval_baselines=false`` or
        ``eval_base_model=false``)."""
        return self.base_cache.missing(panel.tasks) if self._with_base else []

    @property
    def _with_base(self) -> bool:
        return self.cfg.eval_baselines and self.cfg.eval_base_model

    def store_base(self, panel: Panel, trajs: Sequence[Trajectory]) -> None:
        """Cache the base model's outcome on each task it played (a dropped task is not stored: played again)."""
        won = {(t.task_id, t.info.get("seed")): float(t.won) for t in trajs}
        self.base_cache.put({t: won[t.key] for t in panel.tasks if t.key in won})

    def result(
        self,
        panel: Panel,
        trajs: Sequence[Trajectory],
        stats: dict[str, float],
        *,
        is_base: bool = False,
        samples: int = 1,
    ) -> dict[str, Any]:
        """``summary`` of the policy's episodes on ``panel`` with the schema's figures of its episodes
        (``launch.evaluation.metrics``: ``from_episodes``; ``stats``: ``evaluation_stats`` of ``trajs``) and each
        role's valid-format rate. ``is_base``: the policy is the base model (a zero adapter), whose
        outcomes are cached as the base model's. ``samples``: episodes played per task."""
        if is_base and self._with_base:
            self.store_base(panel, trajs)
        base = self.base_cache.values(panel.tasks) if self._with_base else None
        out = summary(
            panel, outcome_string(panel, trajs), self.chance(panel), base, task_wins(panel, trajs), samples
        )
        out.update({m.key: stats[m.key] for m in eval_metrics() if m.from_episodes and m.key in stats})
        out["valid_roles"] = {
            k[len("valid_format_") :]: v for k, v in stats.items() if k.startswith("valid_format_")
        }
        out["episodes"] = len(trajs)
        return out
