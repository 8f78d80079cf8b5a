"""Learner group: fan a batch out over N data-parallel LearnerWorker actors and gather the results (no math).

Mini-batches are cut here; each is split row-wise across the workers, which take one DeepSpeed step on their shard
together (gradients are all-reduced by DeepSpeed). Aggregation weights are computed over the whole mini-batch
(``learners.losses.aggregation_weights``) before the split, so the update equals the single-process update.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import torch
from ray.util.placement_group import remove_placement_group

from cluster.ray_cluster import WorkerResources, place_workers
from learners.losses import aggregation_weights
from learners.worker import LearnerSpec, LearnerWorker

Batch = dict[str, np.ndarray]


def _split(batch: Batch, parts: int) -> list[Batch]:
    n = len(batch["input_ids"])
    idx = np.array_split(np.arange(n), parts)
    return [{k: (v if k == "value_head" else v[i]) for k, v in batch.items()} for i in idx]


def _pad_empty_shards(shards: list[Batch], mb: Batch) -> list[Batch]:
    """Every rank must take part in the step (gradients are all-reduced): a rank without rows gets row 0 with
    zero loss and value weights, which contributes nothing."""
    out = []
    for s in shards:
        if len(s["input_ids"]):
            out.append(s)
            continue
        dummy = _take(mb, np.array([0]))
        dummy["loss_weight"] = np.zeros_like(dummy["loss_weight"])
        if "value_weight" in dummy:
            dummy["value_weight"] = np.zeros_like(dummy["value_weight"])
        out.append(dummy)
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _take(batch: Batch, rows: np.ndarray) -> Batch:
    return {k: (v if k == "value_head" else v[rows]) for k, v in batch.items()}


class LearnerGroup:
    """N ``ray.remote(LearnerWorker)`` actors in one placement group."""

    def __init__(self, spec: LearnerSpec, num_workers: int, resources: WorkerResources) -> None:
        if spec.master_port == 0:
            spec = dataclasses.replace(spec, master_port=_free_port())
        self.spec = spec
        self.workers, self.placement_group = place_workers(LearnerWorker, num_workers, resources, spec)
        ray.get([w.ping.remote() for w in self.workers])

    def _map_rows(self, method: str, batch: Batch, **kwargs: Any) -> np.ndarray:
        shards = _split(batch, len(self.workers))
        refs = [
            getattr(w, method).remote(s, **kwargs)
            for w, s in zip(self.workers, shards, strict=True)
            if len(s["input_ids"])
        ]
        outs = ray.get(refs)
        return np.concatenate(outs) if outs else np.zeros((0,))

    def logprobs(self, batch: Batch, *, reference: bool = False) -> np.ndarray:
        return self._map_rows("logprobs", batch, reference=reference)

    def values(self, batch: Batch) -> np.ndarray:
        return self._map_rows("values", batch)

    def update(
        self,
        batch: Batch,
        *,
        loss_fn: Callable,
        loss_cfg: Any,
        agg: str,
        mini_batch_size: int,
        epochs: int,
        seed: int,
        train_critic: bool,
        value_clip: float | None = None,
    ) -> dict[str, float]:
        """``epochs`` passes over ``batch`` in shuffled mini-batches; returns mean metrics over the steps."""
        n = len(batch["input_ids"])
        rng = np.random.default_rng(seed)
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(epochs):
            order = rng.permutation(n)
            for start in range(0, n, mini_batch_size):
                rows = order[start : start + mini_batch_size]
                mb = _take(batch, rows)
                mb["loss_weight"] = (
                    aggregation_weights(torch.from_numpy(mb["loss_mask"]), agg).numpy().astype(np.float32)
                )
                if train_critic:
                    valid = mb["value_valid"].astype(np.float32)
                    mb["value_weight"] = valid / max(1.0, float(valid.sum()))
                shards = _pad_empty_shards(_split(mb, len(self.workers)), mb)
                refs = [
                    w.update_policy.remote(s, loss_fn, loss_cfg)
                    for w, s in zip(self.workers, shards, strict=True)
                ]
                if train_critic:
                    refs += [
                        w.update_critic.remote(s, clip_range=value_clip)
                        for w, s in zip(self.workers, shards, strict=True)
                    ]
                results = ray.get(refs)
                merged: dict[str, float] = {}
                for r in results[: len(self.workers)]:
                    for k, v in r.items():
                        merged[k] = merged.get(k, 0.0) + v / len(self.workers)
                for r in results[len(self.workers) :]:
                    merged["value_loss"] = merged.get("value_loss", 0.0) + r["value_loss"]
                for k, v in merged.items():
                    sums[k] = sums.get(k, 0.0) + v
                steps += 1
        return {k: v / max(1, steps) for k, v in sums.items()}

    def set_lr(self, lr: float) -> None:
        ray.get([w.set_lr.remote(lr) for w in self.workers])

    def load_adapter_weights(self, weights: dict[str, np.ndarray]) -> None:
        ref = ray.put(weights)
        ray.get([w.load_adapter_weights.remote(ref) for w in self.workers])

    def adapter_weights(self) -> dict[str, np.ndarray]:
        return ray.get(self.workers[0].adapter_weights.remote())

    def shutdown(self) -> None:
        """Kill the workers (frees their DeepSpeed process group and port) and release the placement group."""
        for w in self.workers:
            ray.kill(w)
        self.workers = []
        if self.placement_group is not None:
            remove_placement_group(self.placement_group)
            self.placement_group = None

    def save_checkpoint(self, path: str) -> None:
        ray.get([w.save_checkpoint.remote(path) for w in self.workers])

    def load_checkpoint(self, path: str) -> None:
        ray.get([w.load_checkpoint.remote(path) for w in self.workers])
