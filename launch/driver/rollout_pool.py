"""The rollout workers of one run, driver side: placement, replacement, weight pushes, collections.

Besides the asynchronous stream (``launch/driver/stream.py``), this is the only driver module that calls Ray on the rollout
workers. It mirrors ``learners/group.LearnerGroup``: the driver hands it tasks and adapter tensors and gets
``Trajectory`` records back; a worker that dies is replaced in its placement-group bundle with the newest adapter
and its share of the collection is collected again, whole (a dead worker's partial groups are never used).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
from ray.util.placement_group import remove_placement_group

from actors.episodes import unpack_group
from actors.rollout import RolloutWorker, WorkerConfig
from actors.trajectory import Trajectory
from cluster.ray_cluster import WORKER_LOST, WorkerResources, place_workers, spawn_in_bundle
from common.errors import RunStopped
from launch.driver.weights import AdapterSync, Weights
from launch.evaluation.panel_tasks import PanelTask
from launch.evaluation.panels import shards

CONTROL = "control"
"""The rollout workers' concurrency group for calls made while an asynchronous ``serve`` runs."""


@dataclass
class Collection:
    """One rollout worker's share of a collection: which worker, the call (to replay on a replacement) and its
    result's object ref."""

    worker: int
    ref: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class RolloutPool:
    """``num_workers`` rollout workers built from ``worker_cfg`` in one placement group (``resources`` each).

    ``weights`` (``launch/driver/weights.py``) owns the push counter and the last two pushes' tensors, this class only
    carries them to the workers; ``restarts`` counts replacements, at most ``max_restarts``."""

    def __init__(
        self, worker_cfg: WorkerConfig, num_workers: int, resources: WorkerResources, *, max_restarts: int
    ) -> None:
        self.worker_cfg = worker_cfg
        self.resources = resources
        self.max_restarts = max_restarts
        self.workers, self.pg = place_workers(RolloutWorker, num_workers, resources, worker_cfg)
        self.weights = AdapterSync()
        self.restarts = 0
        self._seen: dict[str, float] = {}  # the fault counters at the last ``fault_totals``
        self._streaming = False  # an asynchronous collection runs: calls go through the ``control`` group

    def __len__(self) -> int:
        return len(self.workers)

    def _call(self, index: int, method: str) -> Callable[..., Any]:
        """``worker.<method>.remote``, beside a running asynchronous collection when there is one."""
        fn = getattr(self.workers[index], method)
        return fn.options(concurrency_group=CONTROL).remote if self._streaming else fn.remote

    # -- weights ---------------------------------------------------------------------------------------------

    def _send(self, index: int, weights: Weights) -> bool:
        """Load every adapter of ``weights`` (tensors or object refs) into one rollout worker."""
        load = self._call(index, "set_weights")
        return all(ray.get([load(w, self.weights.version, n) for n, w in weights.items()]))

    def push(self, weights: Weights) -> float:
        """A new version: ``ray.put`` each adapter once, every worker loads it from the object ref (a dead worker is
        replaced with these weights). Returns the seconds it took."""
        t0 = time.perf_counter()
        self.weights.push(weights)
        refs = {n: ray.put(w) for n, w in weights.items()}
        ok = []
        for i in range(len(self.workers)):
            try:
                ok.append(self._send(i, refs))
            except WORKER_LOST as e:
                self.replace(i, e)
                ok.append(True)
        if not all(ok):
            print(f"[hierarl] warning: {ok.count(False)} rollout worker(s) kept the old adapter", flush=True)
        return time.perf_counter() - t0

    def load_everywhere(self, weights: Weights) -> None:
        """Load ``weights`` into every worker without a new version (a temporary swap, e.g. the base model)."""
        refs = {n: ray.put(w) for n, w in weights.items()}
        for i in range(len(self.workers)):
            try:
                self._send(i, refs)
            except WORKER_LOST as e:
                self.replace(i, e)

    # -- collections -----------------------------------------------------------------------------------------

    def start(
        self, task_ids: Sequence[str], group_size: int, seed: int, *, temperature: float
    ) -> list[Collection]:
        """Split the tasks over the workers (worker k plays ``task_ids[k::n]`` with env seed ``seed + k``); whole
        groups only (a group whose env failed is retried by the worker)."""
        n = len(self.workers)
        out = []
        for k in range(n):
            shard = list(task_ids[k::n])
            if shard:
                c = Collection(
                    k,
                    None,
                    (shard, group_size, seed + k),
                    {"temperature": temperature, "sample_seed": seed + k},
                )
                out.append(self.submit(c))
        return out

    def submit(self, c: Collection) -> Collection:
        c.ref = self.workers[c.worker].collect.remote(*c.args, **c.kwargs)
        return c

    def gather(self, collections: Sequence[Collection]) -> list[Trajectory]:
        """The groups of every collection; one whose worker died is collected again whole by its replacement."""
        packed = []
        for c in collections:
            while True:
                try:
                    packed.extend(ray.get(c.ref))
                    break
                except WORKER_LOST as e:
                    self.replace(c.worker, e)
                    self.submit(c)
        return [t for g in map(unpack_group, packed) for t in g.trajectories]

    def collect(
        self, task_ids: Sequence[str], group_size: int, seed: int, *, temperature: float
    ) -> list[Trajectory]:
        return self.gather(self.start(task_ids, group_size, seed, temperature=temperature))

    @staticmethod
    def wait(collections: Sequence[Collection]) -> None:
        """Until every collection is done (without fetching it)."""
        refs = [c.ref for c in collections]
        ray.wait(refs, num_returns=len(refs))

    def play(
        self, tasks: Sequence[PanelTask], sample_seed: int, *, temperature: float, samples: int = 1
    ) -> list[Trajectory]:
        """``samples`` episodes of each (task id, env seed) pair (one group), dealt over the workers with each pair's
        own env seed (the split changes nothing about what is played)."""
        collections = [
            self.submit(
                Collection(
                    k,
                    None,
                    ([p.task_id for p in shard], samples, None),
                    {
                        "temperature": temperature,
                        "sample_seed": sample_seed + k,
                        "seeds": [p.seed for p in shard],
                    },
                )
            )
            for k, shard in enumerate(shards(tasks, len(self.workers)))
            if shard
        ]
        return self.gather(collections)

    def sample(self, prompts: Sequence[np.ndarray], role: str, seed: int) -> list[Any]:
        """One response per prompt from ``role``'s adapter, spread over the workers, in prompt order."""
        n = len(self.workers)
        parts = [list(range(k, len(prompts), n)) for k in range(n)]
        refs = [
            self.workers[k].sample.remote([prompts[i].tolist() for i in idx], role, seed + k)
            for k, idx in enumerate(parts)
            if idx
        ]
        out: list[Any] = [None] * len(prompts)
        for idx, results in zip([p for p in parts if p], ray.get(refs), strict=True):
            for i, r in zip(idx, results, strict=True):
                out[i] = r
        return out

    # -- asynchronous serving (``launch/driver/stream.py``) -----------------------------------------------------------

    def serve(self, index: int, temperature: float) -> Any:
        """Start worker ``index``'s ``serve`` (a Ray streaming generator of its finished groups). From then until
        ``serving_ended`` every other call to the workers goes through their ``control`` concurrency group, beside
        the running ``serve``."""
        self._streaming = True
        worker = self.workers[index]
        return worker.serve.options(num_returns="streaming").remote(temperature=temperature)

    def enqueue(self, index: int, by_seed: dict[int, list[str]], group_size: int) -> None:
        """Queue groups of ``group_size`` episodes on worker ``index``'s ``serve``: one call per env seed, for its
        tasks."""
        enqueue = self._call(index, "enqueue")
        ray.get([enqueue(ids, group_size, seed) for seed, ids in by_seed.items()])

    def stop_serving(self, index: int, *, drop_queued: bool = False) -> None:
        """End worker ``index``'s ``serve`` once its queued groups are done; ``drop_queued``: once the episodes
        already playing end."""
        ray.get(self._call(index, "stop")(drop_queued=drop_queued))

    def serving_ended(self) -> None:
        """No ``serve`` runs any more: calls go to the workers' default slot again."""
        self._streaming = False

    def counters(self) -> dict[str, float]:
        """The workers' cumulative counters, summed, with ``rollout_restarts`` (a replacement's own start at 0)."""
        totals: dict[str, float] = {}
        for c in ray.get([self._call(i, "counters")() for i in range(len(self.workers))]):
            for k, v in c.items():
                totals[k] = totals.get(k, 0) + v
        totals["rollout_restarts"] = self.restarts
        return totals

    # -- faults and shutdown ---------------------------------------------------------------------------------

    def fault_totals(self, iteration: int, **extra: float) -> dict[str, float]:
        """``total_<name>`` of the workers' cumulative counters (group retries and drops, env-worker restarts,
        timeouts, crashes, worker replacements) and ``extra`` (the learner's rebuilds); a line when a fault counter
        grew since the last call."""
        totals = {**self.counters(), **extra}
        grew = {
            k: v - self._seen.get(k, 0)
            for k, v in totals.items()
            if k not in ("groups", "episodes", "env_recycles") and v > self._seen.get(k, 0)
        }
        if grew:
            text = ", ".join(f"{k} +{v:.0f}" for k, v in sorted(grew.items()))
            print(f"[hierarl] iteration {iteration}: rollout faults handled: {text}", flush=True)
        self._seen = totals
        return {f"total_{k}": v for k, v in totals.items()}

    def replace(self, index: int, error: Exception) -> None:
        """A new worker in the dead one's placement-group bundle, with the newest adapter loaded."""
        if self.restarts >= self.max_restarts:
            raise RunStopped(
                f"rollout worker {index} died ({type(error).__name__}) and rollout.max_restarts "
                f"({self.max_restarts}) replacements were used up"
            ) from error
        self.restarts += 1
        t0 = time.perf_counter()
        ray.kill(self.workers[index])
        n = len(self.workers)
        self.workers[index] = spawn_in_bundle(
            RolloutWorker, self.pg, index, n, self.resources, self.worker_cfg
        )
        if self.weights.history:
            self._send(index, self.weights.current())
        print(
            f"[hierarl] rollout worker {index} died ({type(error).__name__}); replaced in "
            f"{time.perf_counter() - t0:.1f}s with adapter v{self.weights.version} "
            f"({self.restarts}/{self.max_restarts} restarts); its groups are re-collected",
            flush=True,
        )

    def close(self) -> None:
        """Stop the env pools and engines, kill the actors, remove the placement group."""
        for w in self.workers:
            try:
                ray.get(w.close.remote(), timeout=60)
            except Exception as e:  # shutting down: report, don't mask the run's result
                print(f"[hierarl] rollout worker close failed: {e}")
            ray.kill(w)
        self.workers = []
        remove_placement_group(self.pg)
