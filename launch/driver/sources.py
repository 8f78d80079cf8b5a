"""Where an iteration's trajectories come from: one interface for the synchronous loop (with or without one
iteration prefetched: one-step-off), asynchronous streaming (``launch/driver/stream.py``) and stored data
(``launch/driver/offline_data.py``).

    source.take(k)        → IterationData (the trajectories iteration k trains on, and their statistics)
    source.before_push()  → wait for rollouts still in flight that must not queue behind the weight push
    source.pause()        → stop generating before an evaluation needs the workers (True if anything ran)
    source.close()        → the run is over
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from actors.trajectory import Trajectory
from common.errors import RunStopped
from launch.evaluation.episode_stats import trajectory_stats

if TYPE_CHECKING:  # annotations only: the module stays importable without Ray (``hierarl train --dry-run``)
    from launch.driver.rollout_pool import Collection, RolloutPool


@dataclass
class IterationData:
    """One iteration's trajectories and the statistics of the episodes the policy played in it."""

    trajectories: list[Trajectory]
    stats: dict[str, float] = field(default_factory=dict)
    played: list[Trajectory] | None = None
    """The episodes the policy played in this iteration, where they are not all of ``trajectories`` (stored data:
    only these have a policy lag)."""

    def policy_lag(self, version: int) -> int | None:
        """How many versions the oldest played turn lags ``version``; None when the policy played nothing."""
        played = self.trajectories if self.played is None else self.played
        versions = [turn.policy_version for t in played for turn in t.turns]
        return version - min(versions) if versions else None


class IterationSource(Protocol):
    def take(self, iteration: int) -> IterationData: ...

    def before_push(self) -> bool:
        """Wait for what must finish before the push; True if there was anything to wait for."""
        ...

    def pause(self) -> bool:
        """Stop generating (an evaluation needs the workers); True if anything was running."""
        ...

    def close(self) -> None: ...


def iteration_tasks(train_ids: Sequence[str], seed: int, batch: int, groups: int) -> tuple[list[str], int]:
    """The tasks and env seed of iteration (or asynchronous batch) ``batch``: a function of (seed, batch) only, so a
    resumed, one-step-off or asynchronous run draws what the uninterrupted synchronous one draws."""
    rng = random.Random(seed * 1_000_003 + batch)
    return rng.sample(list(train_ids), min(groups, len(train_ids))), seed * 7919 + batch


class SyncRollouts:
    """Fresh rollouts of iteration k's tasks. ``prefetch``: iteration k+1's are generated (from the adapter before
    iteration k's update) while iteration k updates: one-step-off, the policy lagging one version."""

    def __init__(
        self,
        pool: RolloutPool,
        rollout_cfg: Any,
        train_ids: Sequence[str],
        *,
        seed: int,
        last: int,
        prefetch: bool,
    ) -> None:
        self.pool, self.cfg, self.train_ids = pool, rollout_cfg, list(train_ids)
        self.seed, self.last, self.prefetch = seed, last, prefetch
        self.pending: list[Collection] = []

    def start(self, iteration: int) -> list[Collection]:
        tasks, seed = iteration_tasks(self.train_ids, self.seed, iteration, self.cfg.groups_per_iter)
        return self.pool.start(tasks, self.cfg.group_size, seed, temperature=self.cfg.temperature)

    def resume_in_flight(self, iteration: int, behaviour: dict[str, Any] | None, where: Any) -> None:
        """A resumed one-step-off run: iteration ``iteration``'s rollouts go in flight now from ``behaviour``, the
        adapter the uninterrupted run generated them with (saved with the checkpoint ``where``), under the version
        it had; then the current adapter is back. Without one, the iteration is on-policy (said in one line)."""
        if behaviour is None:
            print(
                f"[hierarl] {where} has no behaviour adapter: iteration {iteration} is on-policy", flush=True
            )
            return
        current = self.pool.weights.current()
        self.pool.weights.step_back()  # the behaviour adapter under its own version, then the current one again
        self.pool.push({None: behaviour})
        self.pending = self.start(iteration)
        self.pool.push(current)

    def take(self, iteration: int) -> IterationData:
        trajs = self.pool.gather(self.pending or self.start(iteration))
        self.pending = self.start(iteration + 1) if self.prefetch and iteration < self.last else []
        stats = trajectory_stats(trajs)
        stats["groups_dropped"] = self.cfg.groups_per_iter - len({t.group_id for t in trajs})
        return IterationData(trajs, stats)

    def before_push(self) -> bool:
        # the push would otherwise queue behind the next iteration's rollouts in the actors
        if self.pending:
            self.pool.wait(self.pending)
        return bool(self.pending)

    def pause(self) -> bool:
        """Nothing runs between iterations but a prefetch, which evaluation may queue behind."""
        return False

    def close(self) -> None:
        self.pending = []


@dataclass
class EmptyIterations:
    """Iterations without samples (every group dropped after its retries): each is logged ``empty`` and never
    trained on or checkpointed; ``limit`` of them in a row end the run with an error."""

    limit: int
    groups_per_iter: int
    in_a_row: int = 0

    def sampled(self) -> None:
        self.in_a_row = 0

    def empty(self, iteration: int, stats: dict[str, float]) -> dict[str, Any]:
        """The iteration's row; a warning line, and the error once ``limit`` empty iterations ran in a row."""
        self.in_a_row += 1
        print(
            f"[hierarl] WARNING iteration {iteration}: no samples ({stats.get('groups_dropped', 0):.0f} of "
            f"{self.groups_per_iter} groups dropped after their retries); nothing trained, nothing checkpointed "
            f"({self.in_a_row}/{self.limit} in a row)",
            flush=True,
        )
        if self.in_a_row >= self.limit:
            raise RunStopped(
                f"{self.limit} iterations in a row without samples (every group failed after "
                "rollout.max_group_retries); see the rollout workers' logs"
            )
        return {"iteration": iteration, "phase": "rl", "empty": 1, **stats}
