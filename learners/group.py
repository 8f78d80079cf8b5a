"""Learner group: fan a batch out over N data-parallel LearnerWorker actors and gather the results (no math).

Mini-batches are cut here (``learners.schedule.update_steps``: rows one by one, or whole episode groups); each is
split row-wise across the workers, which take one DeepSpeed step on their shard together (gradients are all-reduced
by DeepSpeed). Aggregation weights are computed over the whole mini-batch (``learners.prepare.minibatch``) before the
split, so the update equals the single-process update.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayActorError
from ray.util.placement_group import remove_placement_group

from cluster.ray_cluster import WorkerResources, place_workers
from common.progress import Ticker, small_text
from learners.algorithm import PolicyLossFn, ValueLossFn
from learners.batch import LearnerBatch, Sequences, micro_batches, row_lengths
from learners.learner_spec import LearnerSpec
from learners.packing import lexicographic_order, plan_packs
from learners.prepare import minibatch
from learners.schedule import update_steps
from learners.worker import LearnerWorker


def _shards(n: int, parts: int) -> list[np.ndarray]:
    return np.array_split(np.arange(n), parts)


def _pad_empty_shards(shards: list[LearnerBatch], mb: LearnerBatch) -> list[LearnerBatch]:
    """Every rank must take part in the step (gradients are all-reduced): a rank without rows gets row 0 with
    zero loss and value weights, which contributes nothing."""
    out = []
    for s in shards:
        if len(s):
            out.append(s)
            continue
        dummy = mb.rows(np.array([0]))
        out.append(
            dataclasses.replace(
                dummy,
                loss_weight=np.zeros_like(dummy.loss_weight),
                value_weight=np.zeros_like(dummy.value_weight),
            )
        )
    return out


def _loss_note(sums: dict[str, float], counts: dict[str, int]) -> str:
    """A running mean for a progress line: NLL for behaviour cloning, the approx. KL of the ratio, else the
    critic loss."""
    key = next((k for k in ("nll", "approx_kl", "value_loss") if k in sums), "")
    return f"{key} {small_text(sums[key] / counts[key])}" if key else ""


PORT_TRIES = 3
CHUNK_PASSES = 4
"""A forward pass goes to the workers in chunks of this many of their micro-batches (or packs) each."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LearnerGroup:
    """N ``ray.remote(LearnerWorker)`` actors in one placement group."""

    def __init__(self, spec: LearnerSpec, num_workers: int, resources: WorkerResources) -> None:
        """``spec.master_port`` 0: a free port is picked (again at every ``rebuild``)."""
        self.spec, self.num_workers, self.resources = spec, num_workers, resources
        self.pick_port = spec.master_port == 0
        self.workers: list[Any] = []
        self.placement_group: Any = None
        self._start()

    def rebuild(self) -> None:
        """New workers in a new placement group and rendezvous, after one died (``learner.max_restarts``). They hold
        the spec's starting state: the caller loads a checkpoint next."""
        self.shutdown()
        self._start()

    def _start(self) -> None:
        """Place the workers and wait for them. A picked port may be bound by another process between the pick and
        rank 0's bind (seen beside a second Ray cluster on the machine): the group is then placed again on a fresh
        port, up to ``PORT_TRIES`` times."""
        picked = self.pick_port
        for attempt in range(PORT_TRIES if picked else 1):
            if picked:
                self.spec = dataclasses.replace(self.spec, master_port=_free_port())
            spec = self.spec
            self.workers, self.placement_group = place_workers(
                LearnerWorker, self.num_workers, self.resources, spec
            )
            try:
                ray.get([w.ping.remote() for w in self.workers])
                return
            except RayActorError as e:
                self.shutdown()
                if not picked or "Address already in use" not in str(e) or attempt == PORT_TRIES - 1:
                    raise
                print(
                    f"[hierarl] learner rendezvous port {spec.master_port} was taken before rank 0 bound it; "
                    "retrying on another",
                    flush=True,
                )

    def _chunks(self, seqs: Sequences) -> list[tuple[np.ndarray, int]]:
        """(rows, width) of each chunk of a forward pass, ``CHUNK_PASSES`` of each worker's passes: padded,
        ``learners.batch.micro_batches`` of that many rows (longest first, each cut to its longest row: no result
        changes); packed, ``learners.packing.plan_packs`` of that many tree tokens (rows that share prefixes
        together, so that each worker's packs find them)."""
        scale = CHUNK_PASSES * len(self.workers)
        if self.spec.pack != "tree":
            return micro_batches(seqs.attention_mask, scale * self.spec.micro_batch_size)
        lengths = row_lengths(seqs.attention_mask)
        packs = plan_packs(seqs.input_ids, seqs.attention_mask, scale * self.spec.pack_tokens, lengths)
        return [(rows, int(lengths[rows].max())) for rows in packs]

    def _map_rows(
        self, method: str, seqs: Sequences, label: str, *, per_token: bool, **kwargs: Any
    ) -> np.ndarray:
        """``method`` over all rows, split across the workers, in chunks (``_chunks``) so that progress can be
        shown (the workers run their micro-batches either way); results come back in the batch's order;
        ``per_token`` outputs are float32[B, L], the others [B, ...]."""
        ticker = Ticker(label, len(seqs), "rows")
        out: np.ndarray | None = np.zeros(seqs.input_ids.shape, np.float32) if per_token else None
        for idx, width in self._chunks(seqs):
            part = seqs.rows(idx).narrow(width)
            shards = [rows for rows in _shards(len(part), len(self.workers)) if rows.size]
            results = ray.get(
                [
                    getattr(w, method).remote(part.rows(r), **kwargs)
                    for w, r in zip(self.workers[: len(shards)], shards, strict=True)
                ]
            )
            for rows, res in zip(shards, results, strict=True):
                if out is None:
                    out = np.zeros((len(seqs), *res.shape[1:]), res.dtype)
                if per_token:
                    out[idx[rows], : res.shape[1]] = res
                else:
                    out[idx[rows]] = res
            ticker.advance(len(part))
        ticker.close()
        return out if out is not None else np.zeros((0,))

    def logprobs(self, seqs: Sequences, *, reference: bool = False, adapter: str | None = None) -> np.ndarray:
        """Under policy adapter ``adapter`` (None: the first), or the reference (adapters disabled)."""
        label = "reference log-probs" if reference else f"log-probs{'' if adapter is None else ' ' + adapter}"
        return self._map_rows("logprobs", seqs, label, per_token=True, reference=reference, adapter=adapter)

    def values(self, seqs: Sequences, critic: str | None = None) -> np.ndarray:
        """Of critic ``critic`` (None: the critic)."""
        label = "values" if critic is None else f"values {critic}"
        return self._map_rows("values", seqs, label, per_token=False, critic=critic)

    def greedy_match(self, seqs: Sequences, *, adapter: str | None = None) -> np.ndarray:
        """float32[B, L]: 1 where a response token is the policy's argmax (``LearnerWorker.greedy_match``)."""
        return self._map_rows("greedy_match", seqs, "greedy match", per_token=True, adapter=adapter)

    def entropies(self, seqs: Sequences) -> np.ndarray:
        return self._map_rows("entropies", seqs, "entropies", per_token=False)

    def update(
        self,
        batch: LearnerBatch,
        *,
        policy_loss: PolicyLossFn | None,
        value_loss: ValueLossFn | None,
        loss_cfg: Any,
        agg: str,
        mini_batch_size: int,
        epochs: int,
        seed: int,
        critic_only_steps: int = 0,
        target_tau: float = 0.0,
        adapter: str | None = None,
        critic: str | None = None,
    ) -> dict[str, float]:
        """``epochs`` passes over ``batch`` in shuffled mini-batches; the policy takes a step on each mini-batch
        when ``policy_loss`` is given, the critic when ``value_loss`` is (HISR's SPRM trains its critic alone).
        The first ``critic_only_steps`` mini-batches step the critic alone (STEP-HRL's critic warm-up);
        ``target_tau`` > 0 soft-updates the target critic after every critic step. The policy steps are those of
        adapter ``adapter`` (None: the first; Multi2 trains its planner and executor in separate calls), the critic
        steps those of critic ``critic`` (None: the critic; HISR's SPRM is another). The mini-batches hold whole
        episode groups with ``learner.minibatches=groups`` where the batch knows its rows' groups, else rows
        shuffled one by one (``learners.schedule.update_steps``). Returns mean metrics over the steps,
        ``optimizer_steps``, and the rows of its smallest and largest step (``minibatch_rows_min`` / ``_max``)."""
        if policy_loss is None and value_loss is None:
            raise ValueError("an update needs a policy loss, a value loss or both")
        groups = batch.seqs.group if self.spec.minibatches == "groups" else None
        plan = update_steps(len(batch), mini_batch_size, epochs, seed, groups)
        lengths = row_lengths(batch.seqs.attention_mask)
        sums: dict[str, float] = {}
        counts: dict[
            str, int
        ] = {}  # steps that reported each metric (critic-only steps report no policy metric)
        steps, sizes = 0, []
        ticker = Ticker("update", len(plan), "optimizer steps")
        for rows in plan:
            if self.spec.pack == "tree":  # rows that share prefixes on one worker, in one pack
                rows = rows[lexicographic_order(batch.seqs.input_ids[rows], lengths[rows])]
            mb = minibatch(batch, rows, agg)
            sizes.append(len(mb))
            shards = _pad_empty_shards([mb.rows(r) for r in _shards(len(mb), len(self.workers))], mb)
            # each shard travels cut to its longest row (the workers cut their micro-batches again)
            shards = [s.narrow(int(row_lengths(s.seqs.attention_mask).max())) for s in shards]
            policy_step = policy_loss is not None and steps >= critic_only_steps
            # a critic on the policy's trunk steps inside the policy's pass (one decoder pass for both)
            joint = (
                policy_step
                and value_loss is not None
                and critic is None
                and self.spec.critic_trunk == "policy"
            )
            joint_args = (value_loss, target_tau) if joint else ()
            refs = (
                [
                    w.update_policy.remote(s, policy_loss, loss_cfg, adapter, *joint_args)
                    for w, s in zip(self.workers, shards, strict=True)
                ]
                if policy_step
                else []
            )
            n_policy = len(refs)
            if value_loss is not None and not joint:
                refs += [
                    w.update_critic.remote(s, value_loss, loss_cfg, target_tau, critic)
                    for w, s in zip(self.workers, shards, strict=True)
                ]
            results = ray.get(refs)
            merged: dict[str, float] = {}
            for r in results[:n_policy]:
                for k, v in r.items():
                    if k != "value_loss":
                        merged[k] = merged.get(k, 0.0) + v / len(self.workers)
            for r in results if joint else results[n_policy:]:
                merged["value_loss"] = merged.get("value_loss", 0.0) + r["value_loss"]
            for k, v in merged.items():
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
            steps += 1
            ticker.advance(1, _loss_note(sums, counts))
        ticker.close(_loss_note(sums, counts))
        return {
            **{k: v / counts[k] for k, v in sums.items()},
            "optimizer_steps": float(steps),
            "minibatch_rows_min": float(min(sizes, default=0)),
            "minibatch_rows_max": float(max(sizes, default=0)),
        }

    def set_lr(self, lr: float, adapter: str | None = None) -> None:
        ray.get([w.set_lr.remote(lr, adapter) for w in self.workers])

    def start_rl(self, adapter: str | None = None, *, fresh: bool, warmup_steps: int) -> None:
        """Every rank starts RL for adapter ``adapter``: fresh AdamW moments, a learning-rate warm-up
        (``LearnerWorker.start_rl``)."""
        ray.get([w.start_rl.remote(adapter, fresh=fresh, warmup_steps=warmup_steps) for w in self.workers])

    def load_adapter_weights(self, weights: dict[str, np.ndarray], adapter: str | None = None) -> None:
        ref = ray.put(weights)
        ray.get([w.load_adapter_weights.remote(ref, adapter) for w in self.workers])

    def adapter_weights(self, adapter: str | None = None) -> dict[str, np.ndarray]:
        return ray.get(self.workers[0].adapter_weights.remote(adapter))

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

    def load_checkpoint(self, path: str, *, only: Sequence[str] | None = None) -> None:
        """``only``: those adapters' and critics' engines (``LearnerWorker.load_checkpoint``)."""
        ray.get([w.load_checkpoint.remote(path, only=only) for w in self.workers])
