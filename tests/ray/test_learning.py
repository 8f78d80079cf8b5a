"""What the pipeline demonstrably learns at CI scale: a small pretrained model (SmolLM2-135M cut to 4 layers, built
locally from the packaged weights) on the synthetic hierarchical env, through the real driver (Ray, HF engine,
DeepSpeed), BC warm start then HiPER.

Zero-shot the model cannot write the Plan–Execute format (0% valid turns, 0% success). Asserted: after BC + RL the
rollouts are well-formed (>= 80% valid turns) and eval success did not fall below zero-shot. NOT yet shown (issue 5
stays open): success up by a clear margin — measured on this setting: 0.00 zero-shot, 0.06 after BC, 0.06 after 2
HiPER iterations (the KL to the base model after BC is ~26 nats/token, which dominates the sparse reward).
"""

from __future__ import annotations

import pytest

from launch.config import resolve_config
from launch.train import Trainer

LEARN = [
    "model.path=smollm2-layers4",
    "model.lora_rank=16",
    "model.lora_alpha=32",
    "model.max_model_len=768",
    "env.name=synthetic",
    "env.max_steps=4",
    "env.workers_per_rollout=8",
    'env.options={"stages": [1, 2], "actions_per_stage": 1, "distractors": 1}',
    "rollout.engine=hf",
    "rollout.group_size=4",
    "rollout.groups_per_iter=4",
    "rollout.max_new_tokens=32",
    "learner.micro_batch_size=16",
    "learner.mini_batch_size=16",
    "learner.actor_lr=1e-4",
    "learner.critic_lr=1e-4",
    "bc.episodes=32",
    "bc.epochs=10",
    "bc.mini_batch_size=16",
    "bc.lr=2e-3",
    "iterations=2",
    "eval_every=2",
    "eval_episodes=16",
    "eval_zero_shot=true",
]


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "agent"), [("hiper", "plan_execute")])
def test_small_model_learns_the_format_through_bc_and_rl(ray_local, tmp_path, algo, agent):
    cfg = resolve_config(None, [*LEARN, f"algo={algo}", f"rollout.agent={agent}", f"run_dir={tmp_path}"])
    trainer = Trainer(cfg)
    try:
        history = trainer.run()
    finally:
        trainer.close()
    by_phase = {r["phase"]: r for r in history if r.get("phase") in ("zero-shot", "bc")}
    final = [r for r in history if r.get("phase") == "rl"][-1]
    zero, after_bc, end = (
        by_phase["zero-shot"]["eval_success"],
        by_phase["bc"]["eval_success"],
        final["eval_success"],
    )
    print(f"{algo}: zero-shot {zero:.2f}, after BC {after_bc:.2f}, after RL {end:.2f}")
    assert zero == 0.0 and final["valid_format"] >= 0.8
    assert end >= zero
