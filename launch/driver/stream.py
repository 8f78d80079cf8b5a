"""Asynchronous rollouts (``max_staleness=k``), driver side: the rollout workers never wait for the learner.

Each rollout worker runs one long ``RolloutWorker.serve`` call (a Ray streaming generator) that plays whatever groups
the driver queues with ``enqueue``, continuously batched over its env slots, and yields every group as it finishes.
The driver keeps the groups of k iterations queued ahead of the one it trains, takes each iteration's
``groups_per_iter`` groups in the order they finish (``ray.wait`` over the workers' streams, so one slow group
never holds up the rest), and drops a group in which any turn is more than k adapter versions older than the
learner's. Weight pushes, requests and counters go through the workers' ``control`` concurrency group, beside the
running ``serve``; a worker applies a pushed adapter between two generation rounds.

With k = 1 this is one-step-off without its barrier: the push after iteration i's update no longer waits for
iteration i+1's rollouts, which continue on the new adapter. Evaluation pauses the streams (the groups they still
finish are kept for the next iteration, staleness permitting).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ray

from actors.episodes import unpack_group
from actors.trajectory import TrajectoryGroup
from cluster.ray_cluster import WORKER_LOST
from launch.driver.rollout_pool import RolloutPool
from launch.driver.sources import IterationData, iteration_tasks
from launch.evaluation.episode_stats import trajectory_stats


def staleness(group: TrajectoryGroup, version: int) -> int:
    """How many adapter versions the oldest turn of ``group`` is behind ``version`` (0: all on the newest)."""
    versions = [turn.policy_version for t in group.trajectories for turn in t.turns]
    return version - min(versions, default=version)


@dataclass
class _Stream:
    """One worker's running ``serve``: its generator and the (task, env seed) groups queued and not yet back."""

    gen: Any
    outstanding: Counter[tuple[str, int]] = field(default_factory=Counter)


class AsyncRollouts:
    """The queue of asynchronous rollout groups (module docstring) for one run: ``pool``'s workers, the run's
    ``rollout`` config section, its ``max_staleness`` k, training tasks and seed; batches from ``first_batch`` on."""

    def __init__(
        self,
        pool: RolloutPool,
        rollout_cfg: Any,
        *,
        max_staleness: int,
        train_ids: Sequence[str],
        seed: int,
        first_batch: int,
    ) -> None:
        self.pool, self.cfg, self.train_ids, self.seed = pool, rollout_cfg, list(train_ids), seed
        self.k = max_staleness
        self.next_batch = first_batch
        self.streams: dict[int, _Stream] = {}
        self.ready: list[TrajectoryGroup] = []  # finished, not yet taken, in the order they finished
        self.stale = 0  # groups dropped for staleness since the last ``take``
        self.dropped = 0  # groups the workers dropped after their retries, since the last ``take``
        self.stopping = False  # ``pause`` is draining the streams

    # -- the workers' streams ------------------------------------------------------------------------------

    def _start(self, w: int) -> None:
        self.streams[w] = _Stream(self.pool.serve(w, self.cfg.temperature))

    def _enqueue(self, w: int, tasks: list[tuple[str, int]]) -> None:
        """Queue (task, env seed) groups on worker ``w``'s stream, one ``enqueue`` call per env seed."""
        by_seed: dict[int, list[str]] = {}
        for task, seed in tasks:
            by_seed.setdefault(seed, []).append(task)
        self.pool.enqueue(w, by_seed, self.cfg.group_size)
        self.streams[w].outstanding.update(tasks)

    def queue_batch(self) -> None:
        """Queue the next batch's groups, split over the workers as ``RolloutPool.start`` splits them."""
        tasks, seed = iteration_tasks(self.train_ids, self.seed, self.next_batch, self.cfg.groups_per_iter)
        self.next_batch += 1
        n = len(self.pool)
        for w in range(n):
            if w not in self.streams:
                self._start(w)
            shard = tasks[w::n]
            if shard:
                self._enqueue(w, [(task, seed + w) for task in shard])

    def _receive(self) -> None:
        """Wait for the next group from any stream and file it in ``ready``; a worker that died is replaced and
        its outstanding groups are queued again on the replacement."""
        live = {s.gen: w for w, s in self.streams.items()}
        done, _ = ray.wait(list(live), num_returns=1)
        for gen in done:
            w = live[gen]
            try:
                item = ray.get(next(gen))
            except StopIteration:  # stopped (``pause``) and drained
                del self.streams[w]
                continue
            except WORKER_LOST as e:
                lost = list(self.streams.pop(w).outstanding.elements())
                self.pool.replace(w, e)
                self._start(w)
                self._enqueue(w, lost)
                if self.stopping:  # ``pause`` waits for this stream to end as well
                    self.pool.stop_serving(w)
                continue
            stream = self.streams[w]
            if "dropped_group" in item:  # failed after its retries: never comes
                stream.outstanding[(item["dropped_group"], item["seed"])] -= 1
                self.dropped += 1
                continue
            group = unpack_group(item)
            stream.outstanding[(group.task_id, item["seed"])] -= 1
            self.ready.append(group)

    def outstanding(self) -> int:
        return sum(s.outstanding.total() for s in self.streams.values())

    # -- the driver's calls --------------------------------------------------------------------------------

    def take(self, iteration: int) -> IterationData:
        """Iteration ``iteration``'s trajectories: the first ``groups_per_iter`` groups to finish within k versions
        of the learner's adapter (groups for iterations up to ``iteration + k - 1`` are queued first); then the batch
        k iterations ahead is queued, to generate during this iteration's update."""
        groups, stats = self.take_groups(iteration)
        trajs = [t for g in groups for t in g.trajectories]
        return IterationData(trajs, {**stats, **trajectory_stats(trajs)})

    def take_groups(self, iteration: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        """``take``'s groups and the queue's counters."""
        need = self.cfg.groups_per_iter
        while self.next_batch <= iteration + self.k - 1:
            self.queue_batch()
        taken: list[TrajectoryGroup] = []
        while len(taken) < need:
            if self.ready:
                group = self.ready.pop(0)
                if staleness(group, self.pool.weights.version) > self.k:
                    self.stale += 1
                else:
                    taken.append(group)
                continue
            if self.outstanding() < need - len(taken):  # drops and stale groups used up the queue
                self.queue_batch()
            self._receive()
        while self.next_batch <= iteration + self.k:
            self.queue_batch()
        stats = {
            "groups_stale": float(self.stale),
            "groups_dropped": float(self.dropped),
            "groups_ready": float(len(self.ready)),
        }
        self.stale = self.dropped = 0
        return taken, stats

    def pause(self) -> bool:
        """End every stream once its queued groups are done, keeping them in ``ready`` (before an evaluation, which
        needs the workers' default call slot)."""
        self.stopping = True
        try:
            for w in list(self.streams):
                self.pool.stop_serving(w)
            while self.streams:
                self._receive()
        finally:  # a failed drain must not leave later replacements told to stop
            self.stopping = False
        return True

    def before_push(self) -> bool:
        """A push lands between two generation rounds of the running streams: nothing to wait for."""
        return False

    def close(self) -> None:
        """End every stream once the episodes already playing end; the groups still queued are dropped (the run
        is over)."""
        for w in list(self.streams):
            self.pool.stop_serving(w, drop_queued=True)
        for s in self.streams.values():
            try:
                for _ in s.gen:  # drain: the last finished groups are not needed
                    pass
            except WORKER_LOST:
                pass  # the run is over either way
        self.streams.clear()
        self.pool.serving_ended()
