"""Evaluation by panel through real Ray workers: the same panel played by one rollout worker, by two,
and in shuffled order gives the same (task id, env seed) pairs, each episode starting from the state its panel
seed gives (TextCraft shuffles its recipe list by the env seed, so a seed taken from anywhere else shows)."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from actors.agents.parsing import normalize_ws
from envs.textcraft import TextCraftEnv
from launch.cli.eval import CheckpointEval
from launch.cli.main import main
from launch.config import resolve_config
from launch.driver.build import build_run
from launch.driver.train import Trainer

pytestmark = pytest.mark.slow

TINY_TEXTCRAFT = [
    "model.path=tiny",
    "model.dtype=float32",
    "model.lora_rank=4",
    "model.lora_alpha=8",
    "model.max_model_len=1024",
    "env.name=textcraft",
    'env.options={"depths": [1]}',
    "env.max_steps=1",
    "env.workers_per_rollout=4",
    "rollout.engine=hf",
    "rollout.num_workers=2",
    "rollout.max_new_tokens=4",
    "learner.dtype=float32",
    "bc.enabled=false",
    "env.train_tasks=0",  # the main job's own: a fixed RL task set, merged pushes, several samples a task
    "rollout.weight_sync=lora",
    "eval_samples=1",
    "eval_episodes=6",
]


def test_one_worker_two_workers_and_a_shuffled_panel_play_the_same_pairs(
    ray_local, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("HIERARL_CACHE", str(tmp_path / "cache"))
    cfg = resolve_config(None, [*TINY_TEXTCRAFT, "rollout.eval_temperature=1.0", f"run_dir={tmp_path}"])
    trainer = Trainer(build_run(cfg))
    try:
        pool = trainer.parts.pool
        panel = trainer.parts.evaluator.evaluation.panel(6)
        assert panel.label == "textcraft_test_depth1@1[:6]"
        pairs = sorted(t.key for t in panel.tasks)
        both = pool.workers
        shuffled = list(panel.tasks)
        random.Random(1).shuffle(shuffled)
        played = {"two workers": pool.play(panel.tasks, 7, temperature=1.0)}
        played["two workers, shuffled"] = pool.play(shuffled, 7, temperature=1.0)
        pool.workers = both[:1]
        try:
            played["one worker"] = pool.play(panel.tasks, 7, temperature=1.0)
        finally:
            pool.workers = both
        env = TextCraftEnv(depths=[1])
        for how, trajs in played.items():
            assert sorted((t.task_id, t.info["seed"]) for t in trajs) == pairs, how
            for t in trajs:  # the first prompt shows the state the panel's seed gives
                obs, _ = env.reset(task_id=t.task_id, seed=t.info["seed"])
                assert t.turns[0].anchor_key == normalize_ws(obs), how
        # and an evaluation scores exactly these pairs: one outcome per panel task (of a trained adapter: here a
        # random one, B != 0, whose sampled replies differ)
        rng = np.random.default_rng(0)
        weights = trainer.learner.adapter_weights()
        trainer.learner.load_adapter_weights(
            {
                k: rng.normal(0, 0.5, v.shape).astype(v.dtype) if "lora_B" in k else v
                for k, v in weights.items()
            }
        )
        trainer.push()
        ev = trainer.evaluate(6)
        assert ev["panel"] == panel.label and len(ev["outcomes"]) == 6 and ev["dropped"] == 0
        trainer.checkpoint(0)
    finally:
        trainer.close()
    # ``hierarl eval RUN`` plays through the run's own evaluator: on the run's panel, the episodes of the run's
    # evaluation of that checkpoint (same workers, temperature, sampling seeds), reply for sampled reply
    [(_, again, _)] = list(CheckpointEval(tmp_path, [], 6, random=False, base=False).play())

    def replies(trajs):
        return sorted((t.task_id, t.info["seed"], t.turns[0].response_text) for t in trajs)

    assert again["panel"] == ev["panel"] and replies(again["episodes"]) == replies(ev["episodes"])
    assert len({r for *_, r in replies(ev["episodes"])}) > 1  # sampled replies that a wrong seed would change
    # on two panels' first 3 tasks: tables with both baselines, outcomes saved
    assert (
        main(["eval", str(tmp_path), "--panel", "textcraft_test_depth1,textcraft_test", "--episodes", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "panel textcraft_test_depth1@1[:3] (3 tasks × 1 at T = 1.0" in out
        and "| panel | depth1 | depth2 | depth3 | all |" in out
    )
    saved = json.loads((tmp_path / "eval_textcraft_test_depth1.json").read_text())
    assert saved["panel"] == "textcraft_test_depth1@1[:3]" and len(saved["outcomes"]) == 3
    assert not math.isnan(saved["rows"][-1]["random"]) and not math.isnan(saved["rows"][-1]["base"])


def test_the_base_model_column_is_played_with_a_zero_adapter_and_the_runs_adapter_comes_back(
    ray_local, tmp_path, monkeypatch
):
    """With a trained (here: random, B != 0) adapter pushed, the base model's episodes are the base model's (the
    same greedy replies as a worker that never had an adapter), they are cached, and afterwards the workers reply
    with the run's adapter again."""
    from actors.rollout import RolloutWorker
    from launch.driver.wiring import rollout_worker_config

    monkeypatch.setenv("HIERARL_CACHE", str(tmp_path / "cache"))
    cfg = resolve_config(None, [*TINY_TEXTCRAFT, "rollout.eval_temperature=0", f"run_dir={tmp_path / 'run'}"])
    trainer = Trainer(build_run(cfg))
    try:
        trainer.push()
        rng = np.random.default_rng(0)
        trained = {
            n: {
                k: (rng.normal(0, 0.5, v.shape).astype(v.dtype) if "lora_B" in k else v) for k, v in w.items()
            }
            for n, w in trainer.parts.pool.weights.current().items()
        }
        trainer.push(trained)
        pool, evaluator = trainer.parts.pool, trainer.parts.evaluator
        panel = evaluator.evaluation.panel(6)

        def replies(trajs):
            return {(t.task_id, t.info["seed"]): t.turns[0].response_ids.tolist() for t in trajs}

        before = replies(pool.play(panel.tasks, 0, temperature=0.0))
        base = replies(evaluator.base_model_episodes(panel, panel.tasks))
        after = replies(pool.play(panel.tasks, 0, temperature=0.0))
        assert after == before and base != before
        assert evaluator.evaluation.base_missing(panel) == []  # cached for every later run on this setting
        plain = RolloutWorker(rollout_worker_config(cfg, trainer.parts.model_path, "cpu", temperature=0.0))
        try:
            ids, seeds = [t.task_id for t in panel.tasks], [t.seed for t in panel.tasks]
            groups = plain.collect(ids, 1, packed=False, seeds=seeds)
            assert replies([t for g in groups for t in g.trajectories]) == base
        finally:
            plain.close()
    finally:
        trainer.close()
