"""The offline dataset of ``Algorithm.offline`` methods (STEP-HRL, Multi2): built once per run, cached, resumable
(driver side).

STEP-HRL trains on D_r = D ∪ D̃ (Sec. 3.3): D the expert demonstrations behaviour cloning used, D̃ trajectories of
the behaviour-cloned policy, mixed 1:2 (App. A, "Offline RL Dataset"; ``algo.data_ratio``); Multi2's offline
phase trains on the same mixture (our reading: its datasets come from expert trajectories). The data are the run's
driver stage (``launch.driver.stages``): after BC the trainer calls ``prepare``, which builds both and writes them under
``<run_dir>/offline/``:

    dataset.jsonl    every trajectory of D_r (``actors.trajectory`` JSON lines; ``info["source"]`` expert/collected)
    manifest.json    env, split, seed, the counts per source, won, and transitions per role
    online_<k>.jsonl with ``algo.online_groups`` > 0: the groups collected with the policy of iteration k (iterations
                     after ``algo.offline_iterations``)
    anchor_<k>.jsonl Multi2's policy-anchored samples of iteration k (``Algorithm.anchor_role``): one response of the
                     current policy at each of a share ``algo.anchor_fraction`` of that role's dataset states

A re-run (``resume=true``, or the same ``run_dir``) reads the files instead of collecting again. Each RL iteration
trains on the dataset plus the online files up to that iteration, so a resumed run sees exactly the buffer the
uninterrupted one saw. To build the data alone: ``hierarl train <preset> iterations=0`` (BC, then the dataset).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from actors.inference import GenerationResult
from actors.trajectory import Trajectory, Turn, read_jsonl, to_jsonl
from launch.config import ConfigError, TrainConfig
from launch.config.validate import env_factory, expert_envs
from launch.driver.sources import IterationData, IterationSource
from launch.driver.stages import DriverStage, StageInputs, StageKind
from launch.driver.update_plan import UpdatePlan
from launch.evaluation.episode_stats import trajectory_stats
from learners.algorithm import Algorithm

OFFLINE_STEPS = "offline_steps"
"""``driver.pt``'s count of the optimizer steps a stored-data run took (its critic warm-up reads it)."""


def _write(trajs: Sequence[Trajectory], path: Any) -> None:
    tmp = path.with_suffix(".tmp")
    to_jsonl(trajs, tmp)
    tmp.replace(path)


def manifest(trajs: Sequence[Trajectory], **fields: Any) -> dict[str, Any]:
    """Counts of a dataset: trajectories and wins per source, transitions (turns) per role."""
    out: dict[str, Any] = dict(fields)
    for source in ("expert", "collected"):
        part = [t for t in trajs if t.info.get("source") == source]
        out[source] = len(part)
        out[f"{source}_won"] = sum(t.won for t in part)
    roles = sorted({turn.role for t in trajs for turn in t.turns})
    out["transitions"] = {r: sum(turn.role == r for t in trajs for turn in t.turns) for r in roles}
    return out


class OfflineData(DriverStage):
    """The stored data of an offline algorithm (``acfg``: its config; ``anchor_role``: ``Algorithm.anchor_role``),
    cached under ``root``: the run's driver stage and its iteration source (``take``). Collaborators:
    ``demonstrations()`` (BC's expert episodes), ``collect`` and ``sample`` (the rollout pool's), ``log`` (the run
    log), ``freeze_reference`` (copy the policy as the online phase's KL reference; None: no KL term). The rest are
    the run's seed, env and rollout settings."""

    reference_at_warm_start = False  # the online phase's reference is the policy it starts from (``take``)
    critic_warmup_in_passes = False  # the target critic's warm-up counts optimizer steps (``warmup_left``)

    def __init__(self, inputs: StageInputs) -> None:
        """Built from its kind's inputs (``KIND``): the algorithm and its config, the run folder's ``offline/``, the
        env and rollout sections, and the run's rollouts, demonstrations, log and the reference's freeze."""
        env, rollout, algo = inputs.section("env"), inputs.section("rollout"), inputs.algo
        self.acfg, self.root, self.anchor_role = inputs.algo_cfg, inputs.run_dir / "offline", algo.anchor_role
        self.root.mkdir(parents=True, exist_ok=True)
        self.seed, self.env_name, self.train_split = inputs.seed, env.name, env.train_split
        self.group_size, self.temperature = rollout.group_size, rollout.temperature
        self.train_ids, self.demonstrations = list(inputs.train_ids), inputs.demonstrations
        self.collect, self.sample, self.log = inputs.collect, inputs.sample, inputs.log
        self.freeze_reference = inputs.freeze_reference if algo.uses_reference(self.acfg) else None
        self.dataset: list[Trajectory] = []
        self.critic_steps = 0
        """Optimizer steps taken so far (the critic warm-up counts them); saved with every checkpoint."""

    # -- the iteration source --------------------------------------------------------------------------------

    def take(self, it: int) -> IterationData:
        """Iteration ``it``'s buffer; its statistics are those of the episodes the policy played in it (the stored
        data's are not the policy's: train success is NaN in an iteration that plays none). At the first online
        iteration the policy becomes the KL term's reference (π_off)."""
        trajs, new = self.iteration_data(it)
        if it == self.first_online() and self.freeze_reference is not None:
            self.freeze_reference()
        episodes = [t for t in trajs if not t.info.get("anchor")]
        stats = {**trajectory_stats(new or episodes), "buffer_trajectories": float(len(episodes))}
        if not new:
            stats["success"] = float("nan")
        return IterationData(trajs, stats, played=new)

    def before_push(self) -> bool:
        return False

    def pause(self) -> bool:
        """Nothing generates between iterations."""
        return False

    def close(self) -> None:
        """Nothing to stop."""

    # -- the driver stage ------------------------------------------------------------------------------------

    def prepare(self, checkpoint: int) -> None:
        """Load ``dataset.jsonl`` or build it: the expert demonstrations of BC's tasks, then ``data_ratio`` times
        as many rollouts of the current (behaviour-cloned) policy on training tasks. Once: the data are the
        driver's, so a rebuilt learner group (whatever ``checkpoint`` it loaded) needs nothing."""
        if self.dataset:
            return
        path, meta = self.root / "dataset.jsonl", self.root / "manifest.json"
        if path.exists() and meta.exists():
            self.dataset = list(read_jsonl(path))
            print(f"[hierarl] offline data loaded from {path}: {meta.read_text().strip()}", flush=True)
            return
        t0 = time.perf_counter()
        expert = self.demonstrations()
        n = round(self.acfg.data_ratio * len(expert))
        ids = random.Random(self.seed + 31).choices(self.train_ids, k=n) if n else []
        collected = (
            self.collect(ids, 1, self.seed + 30_000, temperature=self.acfg.collect_temperature) if ids else []
        )
        collected = [c for c in collected if c.turns]
        for tr in expert:
            tr.info["source"] = "expert"
        for tr in collected:
            tr.info["source"] = "collected"
        self.dataset = [*expert, *collected]
        _write(self.dataset, path)
        counts = manifest(
            self.dataset,
            env=self.env_name,
            split=self.train_split,
            seed=self.seed,
            data_ratio=self.acfg.data_ratio,
        )
        meta.write_text(json.dumps(counts, indent=1))
        self.log(
            {"iteration": 0, "phase": "data", **_flat_counts(counts), "wall_s": time.perf_counter() - t0}
        )
        print(
            f"[hierarl] offline data: {counts['expert']} expert + {counts['collected']} collected trajectories "
            f"({counts['collected_won']} won), transitions {counts['transitions']} -> {path}",
            flush=True,
        )

    def iteration_source(self, rollouts: Callable[[], IterationSource]) -> IterationSource:
        """The stored data replace the rollouts."""
        return self

    def update_plan(self, plan: UpdatePlan, iteration: int) -> UpdatePlan:
        """The KL term's reference only in the online phase; the critic-only steps its warm-up still owes."""
        return replace(plan, reference=self.online(iteration), warmup_left=self.warmup_left())

    def after_update(self, metrics: Mapping[str, Any]) -> None:
        self.critic_steps += int(metrics["optimizer_steps"])

    def state(self) -> dict[str, Any]:
        return {OFFLINE_STEPS: self.critic_steps}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.critic_steps = int(state.get(OFFLINE_STEPS, 0))

    # -- the data ----------------------------------------------------------------------------------------------

    def iteration_data(self, it: int) -> tuple[list[Trajectory], list[Trajectory]]:
        """(the buffer iteration ``it`` trains on, the trajectories new in it). With ``online_groups`` the new
        ones are collected with the current policy (or read back when resuming) and kept for later iterations.
        Offline iterations of an ``anchor_role`` algorithm also get that iteration's anchor samples."""
        online: list[Trajectory] = []
        if not self.online(it):
            return [*self.dataset, *self.anchors(it)], []
        if self.acfg.online_groups:
            for k in range(self.first_online(), it):
                online += list(read_jsonl(self.root / f"online_{k}.jsonl"))
            path = self.root / f"online_{it}.jsonl"
            if path.exists():
                new = list(read_jsonl(path))
            else:
                rng = random.Random(self.seed * 1_000_003 + it)
                tasks = rng.sample(self.train_ids, min(self.acfg.online_groups, len(self.train_ids)))
                new = self.collect(
                    tasks, self.group_size, self.seed * 7919 + it, temperature=self.temperature
                )
                for tr in new:
                    tr.info["source"] = "online"
                _write(new, path)
            return [*self.dataset, *online, *new], new
        return list(self.dataset), []

    def online(self, it: int) -> bool:
        return self.acfg.online(it)

    def first_online(self) -> int:
        return self.acfg.offline_iterations + 1

    def anchors(self, it: int) -> list[Trajectory]:
        """Iteration ``it``'s one-turn anchor trajectories (``Algorithm.anchor_role``; none for other algorithms, nor
        in a critic warm-up pass):
        the states drawn from (seed, it), the responses sampled from the current policy, cached for resumes."""
        role = self.anchor_role
        if not role or self.acfg.anchor_fraction <= 0 or self.warmup_left() > 0:
            return []  # a warm-up pass trains the critic alone: the anchor term would read nothing
        path = self.root / f"anchor_{it}.jsonl"
        if path.exists():
            return list(read_jsonl(path))
        states = [(t, turn) for t in self.dataset for turn in t.turns if turn.role == role]
        rng = random.Random(self.seed * 1_000_033 + it)
        k = min(len(states), max(1, round(self.acfg.anchor_fraction * len(states))))
        chosen = rng.sample(states, k) if states else []
        responses = self.sample([turn.prompt_ids for _, turn in chosen], role, self.seed * 7927 + it)
        pairs = zip(chosen, responses, strict=True)
        out = [
            anchor_trajectory(t, turn, resp, f"anchor-{it}-{n}") for n, ((t, turn), resp) in enumerate(pairs)
        ]
        _write(out, path)
        return out

    def warmup_left(self) -> int:
        return self.acfg.warmup_left(self.critic_steps)


def anchor_trajectory(source: Trajectory, turn: Turn, response: GenerationResult, traj_id: str) -> Trajectory:
    """``turn``'s state (its prompt) with ``response`` in place of the recorded one, as a one-turn trajectory
    marked ``info["anchor"]``: no reward, no env step, read only by the anchor term."""
    new = Turn(
        prompt_ids=turn.prompt_ids,
        response_ids=np.asarray(response.response_ids, dtype=np.int64),
        logprobs=np.asarray(response.logprobs, dtype=np.float32),
        observation=turn.observation,
        response_text=response.text,
        policy_version=response.adapter_version,
        adapter=response.adapter or "",
        role=turn.role,
    )
    return Trajectory(
        traj_id=traj_id,
        group_id=traj_id,
        task_id=source.task_id,
        env_name=source.env_name,
        turns=[new],
        task=source.task,
        status="truncated",
        info={"anchor": True, "source": "anchor"},
    )


def _flat_counts(counts: dict[str, Any]) -> dict[str, float]:
    flat = {k: v for k, v in counts.items() if isinstance(v, int | float)}
    flat.update({f"transitions_{r}": v for r, v in counts["transitions"].items()})
    return flat


def check(cfg: TrainConfig, algo: Algorithm, algo_cfg: Any) -> None:
    """A stored-data run's rules: its KL term is to π_off (never the base model), there are no rollouts to
    overlap, and its dataset starts from the env expert's demonstrations."""
    if algo.uses_reference(algo_cfg) and cfg.learner.kl_reference == "base":
        raise ConfigError(
            f"learner.kl_reference: algo={cfg.algo}'s KL term is to π_off, the policy its offline phase ended "
            "with; allowed: start"
        )
    for key, value in (("one_step_off", cfg.one_step_off), ("max_staleness", cfg.max_staleness)):
        if value:
            raise ConfigError(
                f"{key}: algo={cfg.algo} trains on a stored dataset, there are no rollouts to overlap; "
                f"allowed: {key}={'false' if key == 'one_step_off' else 0}"
            )
    factory = env_factory(cfg.env.name)
    if factory is not None and not hasattr(factory, "expert_plan"):
        raise ConfigError(
            f"env.name: algo={cfg.algo}'s dataset starts from expert demonstrations and env {cfg.env.name!r} has "
            f"no expert plan (actors/demos.py); allowed: an env with one: {', '.join(expert_envs())}"
        )


KIND = StageKind(build=OfflineData, sections=("env", "rollout"), check=check)
"""``driver_stage="offline_data"`` (STEP-HRL, Multi2)."""
