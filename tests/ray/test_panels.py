"""Evaluation by panel through real Ray workers (issue 41): the same panel played by one rollout worker, by two,
and in shuffled order gives the same (task id, env seed) pairs, each episode starting from the state its panel
seed gives (TextCraft shuffles its recipe list by the env seed, so a seed taken from anywhere else shows)."""

from __future__ import annotations

import random

import pytest

from actors.agents.parsing import normalize_ws
from envs.textcraft import TextCraftEnv
from launch.config import resolve_config
from launch.train import Trainer

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
    "eval_episodes=6",
]


def test_one_worker_two_workers_and_a_shuffled_panel_play_the_same_pairs(ray_local, tmp_path):
    trainer = Trainer(resolve_config(None, [*TINY_TEXTCRAFT, f"run_dir={tmp_path}"]))
    try:
        panel = trainer.evaluation.panel(6)
        assert panel.label == "textcraft_test_depth1@1[:6]"
        pairs = sorted(t.key for t in panel.tasks)
        both = trainer.rollout
        shuffled = list(panel.tasks)
        random.Random(1).shuffle(shuffled)
        played = {"two workers": trainer.play_panel(panel.tasks, 7, temperature=1.0)}
        played["two workers, shuffled"] = trainer.play_panel(shuffled, 7, temperature=1.0)
        trainer.rollout = both[:1]
        try:
            played["one worker"] = trainer.play_panel(panel.tasks, 7, temperature=1.0)
        finally:
            trainer.rollout = both
        env = TextCraftEnv(depths=[1])
        for how, trajs in played.items():
            assert sorted((t.task_id, t.info["seed"]) for t in trajs) == pairs, how
            for t in trajs:  # the first prompt shows the state the panel's seed gives
                obs, _ = env.reset(task_id=t.task_id, seed=t.info["seed"])
                assert t.turns[0].anchor_key == normalize_ws(obs), how
        # and an evaluation scores exactly these pairs: one outcome per panel task
        ev = trainer.evaluate(6, 10_000)
        assert ev["panel"] == panel.label and len(ev["outcomes"]) == 6 and ev["dropped"] == 0
    finally:
        trainer.close()
