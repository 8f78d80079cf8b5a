"""Playing a run's evaluation panel through the rollout pool: the policy's episodes, and the zero-shot base
model's where its cache lacks them (``launch.evaluation.scoring`` holds the panel, the baselines and the result, no Ray)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actors.trajectory import Trajectory
from launch.driver.rollout_pool import RolloutPool
from launch.evaluation.baselines import BASE_SEED
from launch.evaluation.episode_stats import evaluation_stats
from launch.evaluation.panel_tasks import Panel, PanelTask
from launch.evaluation.scoring import Evaluation


class PanelEvaluator:
    """Evaluates the pool's current policy on ``evaluation``'s panel at ``temperature``, ``samples`` episodes a task,
    sampling with ``sample_seed`` (the panel fixes the tasks and their env seeds); ``greedy``: each task also played
    once at temperature 0 (where ``temperature`` > 0), its result under the key "greedy"."""

    def __init__(
        self,
        pool: RolloutPool,
        evaluation: Evaluation,
        temperature: float,
        sample_seed: int,
        samples: int = 1,
        greedy: bool = False,
    ) -> None:
        self.pool, self.evaluation = pool, evaluation
        self.temperature, self.sample_seed, self.samples = temperature, sample_seed, samples
        self.greedy = greedy and temperature > 0

    def evaluate(self, n: int, *, is_base: bool = False) -> dict[str, Any]:
        """Success on the panel's first ``n`` tasks (0: all) at the validation temperature (HiPER C.1: 0.4) with its
        Wilson interval, per task type, beside the random policy and the zero-shot base model on the same (task,
        seed) pairs, and the model's valid-format rate. ``is_base``: the pool serves the base model itself."""
        panel = self.evaluation.panel(n)
        missing = self.evaluation.base_missing(panel)
        if missing and not is_base:
            self.base_model_episodes(panel, missing)
        trajs = self.pool.play(
            panel.tasks, self.sample_seed, temperature=self.temperature, samples=self.samples
        )
        out = self.evaluation.result(
            panel, trajs, evaluation_stats(trajs), is_base=is_base, samples=self.samples
        )
        if self.greedy:
            greedy = self.pool.play(panel.tasks, self.sample_seed, temperature=0.0, samples=1)
            g = self.evaluation.result(panel, greedy, evaluation_stats(greedy), is_base=is_base, samples=1)
            out["greedy"] = {**g, "temperature": 0.0}
        return {**out, "temperature": self.temperature, "episodes": trajs}

    def base_model_episodes(self, panel: Panel, tasks: Sequence[PanelTask]) -> list[Trajectory]:
        """The zero-shot base model's episode on each of ``tasks``, cached: every rollout worker gets a zero adapter
        (LoRA with B = 0 is exactly the base model), plays them, and gets the run's adapters back. Not cached if a
        worker was replaced meanwhile (its replacement holds the run's adapter)."""
        current, zero = self.pool.weights.current(), self.pool.weights.zero()
        restarts = self.pool.restarts
        self.pool.load_everywhere(zero)
        try:
            trajs = self.pool.play(tasks, BASE_SEED, temperature=self.temperature)
        finally:
            self.pool.load_everywhere(current)
        if self.pool.restarts == restarts:
            self.evaluation.store_base(panel, trajs)
        return trajs
