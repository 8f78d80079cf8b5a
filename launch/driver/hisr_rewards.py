"""HISR's reward models on the live pipeline: the stages before RL and the per-iteration annotation (driver side).

``algo=hisr`` (its stage kind, ``KIND``) gives the policy's learner group two more models on the policy's own
base (``reward_model_learners``): the hindsight model, a second trained LoRA adapter (``hindsight``), and the segment
process reward model (SPRM), a second value model (adapter ``sprm`` with HISR Eq. 2's MLP head). One copy of the base
serves policy, KL reference, critic, SPRM and hindsight model; the hindsight model's and the policy's log-probs of
the same action tokens (Eq. 5) come from the same workers. ``RewardModels`` is the run's driver stage
(``launch.driver.stages``): after behaviour cloning (π_ref), ``prepare`` runs, each stage cached under ``<run_dir>/hisr/``
so a killed run resumes where it stopped:

    collected.jsonl   N rollouts per training task with π_ref (App. B), filtered; each with its segment ids
    models/           the learner group's checkpoint after the SPRM stage, then after the hindsight stage
    stages.json       which stages finished, with their metrics

RL checkpoints hold both models with the rest of the learner (the online hindsight model's optimizer state too).

Every RL iteration, ``annotate`` segments the new trajectories, scores them with both models and writes
(1 − α) r^him into ``turn.shaped["segment"]`` (``learners.reward_models.segment_turn_rewards``). The pure half of
each step is in ``learners.reward_models`` and ``reward.segments``; this module only moves data through Ray.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actors.agents.parsing import render_prompt
from actors.protocols import AGENTS
from actors.trajectory import Trajectory, read_jsonl, to_jsonl
from common.errors import RunStopped
from launch.config import ConfigError, TrainConfig
from launch.driver.stages import DriverStage, StageInputs, StageKind, StageModels
from learners.algorithm import Algorithm
from learners.algos import hisr, sft
from learners.batch import LearnerBatch, TurnBatch, build_turn_batch
from learners.diagnostics import ranking_auc
from learners.learner_spec import CriticSpec
from learners.prepare import learner_batch
from learners.reward_models import (
    SprmBatch,
    hindsight_intro,
    hindsight_rows,
    keep_for_reward_models,
    one_outcome_warning,
    sprm_sequences,
    write_segment_rewards,
)
from learners.targets import sequences
from reward.segments import (
    entropy_segments,
    subgoal_segments,
    turn_entropies,
    turn_segments,
)

if TYPE_CHECKING:  # annotations only: the module stays importable without Ray (``hierarl train --dry-run``)
    pass

SEGMENTS_KEY = "hisr_segments"


"""``Trajectory.info`` key of a collected trajectory's segment ids (saved with it)."""
HINDSIGHT = "hindsight"
"""The hindsight model's LoRA adapter on the policy's base (Eq. 4)."""
SPRM = "sprm"
"""The SPRM's LoRA adapter and value head on the policy's base (Eq. 2)."""
REWARD_MODELS = (HINDSIGHT, SPRM)


def resolve_segmentation(segmentation: str, agent: str) -> str:
    """``auto``: the protocol's own subgoals where it states them, else entropy change points."""
    if segmentation != "auto":
        return segmentation
    return "subgoal" if AGENTS[agent].states_subgoals else "entropy"


def reward_model_learners(acfg: hisr.Config, model_path: str) -> StageModels:
    """The learner's extra trained adapter (the hindsight model, at ``hindsight_lr``) and extra value model (the
    SPRM: one output, Eq. 2's W₂·SiLU(W₁h) with W₁ as wide as the base's hidden state, at ``sprm_lr``)."""
    from transformers import AutoConfig

    hidden = AutoConfig.from_pretrained(model_path).hidden_size
    return StageModels(((HINDSIGHT, acfg.hindsight_lr),), (CriticSpec(SPRM, 1, hidden, acfg.sprm_lr),))


class RewardModels(DriverStage):
    """The stages and the per-iteration scoring of HISR (``acfg``: its algorithm config), cached under ``root``,
    through the run's learner group (``learner``, which rebuilds itself when a worker dies). ``collect``
    plays π_ref on ``train_ids``; ``log`` writes the stages' metrics row. The run's driver stage: ``prepare`` and
    ``annotate`` are its hooks; the others do nothing (the models live in the learner's checkpoints)."""

    def __init__(self, inputs: StageInputs) -> None:
        """Built from its kind's inputs (``KIND``): the algorithm config, the run folder's ``hisr/``, the tokenizer,
        the env, rollout and learner sections, and the run's learner group, rollouts and log."""
        rollout, learner = inputs.section("rollout"), inputs.section("learner")
        self.acfg, self.root = inputs.algo_cfg, inputs.run_dir / "hisr"
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_seq_len, self.pad_id, self.seed = learner.max_seq_len, inputs.pad_id, inputs.seed
        self.learner, self.collect_fn, self.log = inputs.learner, inputs.collect, inputs.log
        self.train_ids = list(inputs.train_ids)
        self.segmentation = resolve_segmentation(self.acfg.segmentation, rollout.agent)
        self.intro = hindsight_intro(inputs.section("env").name)
        tokenizer = inputs.tokenizer
        self.encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
        self.render = lambda text: render_prompt(tokenizer, [{"role": "user", "content": text}])

    # -- shared pieces ---------------------------------------------------------------------------------------

    def _turns(self, trajs: Sequence[Trajectory]) -> TurnBatch:
        return build_turn_batch(trajs, max_len=self.max_seq_len, pad_id=self.pad_id)

    def segment(self, trajs: Sequence[Trajectory], turns: TurnBatch) -> list[np.ndarray]:
        """Segment ids per trajectory; entropy segmentation reads the current policy's entropies of ``turns``."""
        if self.segmentation == "subgoal":
            return [subgoal_segments(t) for t in trajs]
        if self.segmentation == "turn":
            return [turn_segments(len(t.turns)) for t in trajs]
        ent = self.learner.entropies(sequences(turns, ()))
        per_turn = turn_entropies(turns.index, ent, [len(t.turns) for t in trajs])
        return [entropy_segments(h, self.acfg.entropy_jump) for h in per_turn]

    def _sprm_batch(self, trajs: Sequence[Trajectory], seg: list[np.ndarray]) -> SprmBatch:
        return sprm_sequences(trajs, seg, self.encode, max_len=self.max_seq_len, pad_id=self.pad_id)

    def _sprm_scores(self, trajs: Sequence[Trajectory], seg: list[np.ndarray]) -> np.ndarray:
        """float[B, S]: R̂ per segment, NaN where a row has no such (readable) segment."""
        batch = self._sprm_batch(trajs, seg)
        values = self.learner.values(batch.seqs, critic=SPRM)
        return np.where(batch.segment_valid, values, np.nan)

    # -- per RL iteration ------------------------------------------------------------------------------------

    def annotate(
        self, trajs: Sequence[Trajectory], turns: TurnBatch, logprobs: np.ndarray
    ) -> dict[str, float]:
        """Write (1 − α) r^him into every turn's ``shaped["segment"]``; ``logprobs`` float32[B, L] are the policy's
        log-probs of ``turns`` (the learner's recomputation, π_policy of Eq. 5). Returns diagnostics."""
        # a trajectory without turns (an env that ended at reset) has no rows: leave it out, renumber the rows
        keep = [i for i, t in enumerate(trajs) if t.turns]
        remap = {old: new for new, old in enumerate(keep)}
        trajs = [trajs[i] for i in keep]
        turns = dataclasses.replace(turns, index=[(remap[i], k) for i, k in turns.index])
        seg = self.segment(trajs, turns)
        rows, index = hindsight_rows(trajs, self.render, self.intro)
        hturns = dataclasses.replace(self._turns(rows), index=index)  # rows -> (trajectory, turn)
        stats = write_segment_rewards(
            trajs,
            seg,
            self._sprm_scores(trajs, seg),
            policy=(turns, logprobs),
            hindsight=(hturns, self.learner.logprobs(sequences(hturns, ()), adapter=HINDSIGHT)),
            beta=self.acfg.beta,
            alpha=self.acfg.shaping.grounding_alpha,
            keep_sprm_scale=self.acfg.keep_sprm_scale,
        )
        if self.acfg.online_hindsight:
            stats["hisr_online_nll"] = self._train_hindsight(rows, epochs=1)
        return stats

    # -- stages before RL ------------------------------------------------------------------------------------

    def _stages(self) -> dict[str, Any]:
        path = self.root / "stages.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def _mark(self, stages: dict[str, Any], name: str, metrics: dict[str, Any]) -> None:
        stages[name] = metrics
        tmp = self.root / "stages.json.tmp"
        tmp.write_text(json.dumps(stages, indent=1))
        tmp.replace(self.root / "stages.json")

    def save(self, path: Path) -> None:
        """The learner group's state (every adapter and head, optimizer state; ``prepare`` reads back the reward
        models'), written whole or not at all."""
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.learner.save_checkpoint(str(tmp))
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)

    def collect(self) -> list[Trajectory]:
        """D_ct: ``collect_per_task`` rollouts of π_ref per training task at ``collect_temperature``, wrong-format
        and repetitive ones dropped, each with its segment ids; cached in ``collected.jsonl``."""
        path = self.root / "collected.jsonl"
        if path.exists():
            return list(read_jsonl(path))
        ids = list(self.train_ids)
        if self.acfg.collect_tasks:
            ids = random.Random(self.seed + 17).sample(ids, min(self.acfg.collect_tasks, len(ids)))
        trajs = self.collect_fn(
            ids, self.acfg.collect_per_task, self.seed + 20_000, temperature=self.acfg.collect_temperature
        )
        kept = [
            tr for tr in trajs if tr.turns and (keep_for_reward_models(tr) or not self.acfg.collect_filter)
        ]
        if not kept:
            raise RunStopped(
                f"HISR: none of the {len(trajs)} trajectories collected with π_ref kept the format without "
                "repeating an action; warm-start the policy better (bc.*) before the reward models"
            )
        for tr, seg in zip(kept, self.segment(kept, self._turns(kept)), strict=True):
            tr.info[SEGMENTS_KEY] = seg.tolist()
        tmp = path.with_suffix(".tmp")
        to_jsonl(kept, tmp)
        tmp.replace(path)
        won = sum(tr.won for tr in kept)
        print(
            f"[hierarl] HISR: collected {len(trajs)} trajectories with π_ref, kept {len(kept)} ({won} won), "
            f"segmented by {self.segmentation}",
            flush=True,
        )
        warning = one_outcome_warning(won, len(kept))
        if warning:
            print(f"[hierarl] HISR warning: {warning}", flush=True)
        return kept

    def _train_sprm(self, trajs: Sequence[Trajectory], seed: int) -> dict[str, float]:
        seg = [np.asarray(tr.info[SEGMENTS_KEY], dtype=np.int64) for tr in trajs]
        b = self._sprm_batch(trajs, seg)
        shape = b.seqs.input_ids.shape
        batch = LearnerBatch(
            seqs=b.seqs,
            old_logprobs=np.zeros(shape, np.float32),
            ref_logprobs=None,
            token_adv=np.zeros(shape, np.float32),
            loss_mask=np.zeros(shape, bool),
            value_target=np.where(b.segment_valid, b.outcome[:, None], 0.0).astype(np.float32),
            value_valid=b.segment_valid,
            old_values=np.zeros(b.segment_valid.shape, np.float32),
        )
        m = self.learner.update(
            batch,
            policy_loss=None,
            value_loss=hisr.sprm_value_loss,
            critic=SPRM,
            loss_cfg=self.acfg,
            agg=self.acfg.agg,
            mini_batch_size=self.acfg.sprm_batch,
            epochs=self.acfg.sprm_epochs,
            seed=seed,
        )
        total = np.nansum(self._sprm_scores(trajs, seg), axis=1)
        won = b.outcome > 0.5
        return {
            "sprm_loss": m.get("value_loss", float("nan")),
            "sprm_total_won": float(total[won].mean()) if won.any() else float("nan"),
            "sprm_total_lost": float(total[~won].mean()) if (~won).any() else float("nan"),
            "sprm_auc": ranking_auc(total, won),  # on its own training trajectories
        }

    def _train_hindsight(self, rows: Sequence[Trajectory], epochs: int) -> float:
        """Eq. 4 = the SFT loss on the cloze rows; returns the last epoch's NLL."""
        algo, cfg = sft.ALGORITHM, sft.Config()
        turns = self._turns(rows)
        seqs = sequences(turns, ())
        batch, _ = learner_batch(
            algo, cfg, rows, turns, seqs, np.zeros(seqs.input_ids.shape, np.float32), None, None
        )
        nll = float("nan")
        for e in range(epochs):
            m = self.learner.update(
                batch,
                policy_loss=algo.policy_loss,
                adapter=HINDSIGHT,
                value_loss=None,
                loss_cfg=cfg,
                agg=cfg.agg,
                mini_batch_size=self.acfg.hindsight_batch,
                epochs=1,
                seed=self.seed + 300 + e,
            )
            nll = m.get("nll", float("nan"))
        return nll

    def prepare(self, checkpoint: int) -> None:
        """Run the stages, or load the reward models they cached, into a learner group holding ``iter_<checkpoint>``.
        An RL checkpoint (``checkpoint`` >= 1) holds the models as they were at that iteration: nothing to do."""
        if checkpoint >= 1:
            return
        learner, stages, models = self.learner, self._stages(), self.root / "models"
        if "hindsight" in stages:
            learner.load_checkpoint(str(models), only=REWARD_MODELS)
            print(f"[hierarl] HISR: reward models loaded from {models}", flush=True)
            return
        t0 = time.perf_counter()
        trajs = self.collect()
        if "sprm" in stages:
            learner.load_checkpoint(str(models), only=(SPRM,))
        else:
            m = self._train_sprm(trajs, self.seed + 200)
            self.save(models)
            self._mark(stages, "sprm", m)
            print(
                f"[hierarl] HISR: SPRM trained on {len(trajs)} trajectories: loss {m['sprm_loss']:.4f}, "
                f"predicted outcome won {m['sprm_total_won']:.3f} / lost {m['sprm_total_lost']:.3f} "
                f"(ranking AUC {m['sprm_auc']:.2f})",
                flush=True,
            )
        # the hindsight model is π_ref continued (Eq. 4): start from the policy after behaviour cloning
        learner.load_adapter_weights(learner.adapter_weights(), adapter=HINDSIGHT)
        rows, _ = hindsight_rows(trajs, self.render, self.intro)
        nll = self._train_hindsight(rows, self.acfg.hindsight_epochs)
        self.save(models)
        won = sum(t.won for t in trajs)
        metrics = {"hindsight_nll": nll, "hindsight_rows": len(rows)}
        self._mark(stages, "hindsight", metrics)
        self.log(
            {
                "iteration": 0,
                "phase": "hisr",
                "collected": len(trajs),
                "collected_won": won,
                **stages["sprm"],
                **metrics,
                "wall_s": time.perf_counter() - t0,
            }
        )
        print(f"[hierarl] HISR: hindsight model trained on {len(rows)} cloze rows: nll {nll:.3f}", flush=True)


def check(cfg: TrainConfig, algo: Algorithm, algo_cfg: hisr.Config) -> None:
    """Subgoal segmentation needs a protocol that states subgoals; ZeRO-3 would partition the base the SPRM shares
    with the policy."""
    stating = [name for name, spec in AGENTS.items() if spec.states_subgoals]
    if algo_cfg.segmentation == "subgoal" and cfg.rollout.agent not in stating:
        raise ConfigError(
            f"algo.segmentation: 'subgoal' needs a protocol that states subgoals, not rollout.agent="
            f"{cfg.rollout.agent!r}; allowed: rollout.agent in {', '.join(stating)}, or segmentation "
            "entropy / turn / auto"
        )
    if cfg.learner.zero_stage == 3:
        raise ConfigError(
            f"learner.zero_stage: algo={cfg.algo}'s SPRM shares the policy's base, which ZeRO-3 would partition per "
            "engine; allowed: 0, 1, 2"
        )


KIND = StageKind(
    build=RewardModels, sections=("env", "rollout", "learner"), models=reward_model_learners, check=check
)
"""``driver_stage="reward_models"`` (HISR)."""
