"""Evidence that RL learns, at CI scale: the packaged SmolLM2-135M-Instruct on the synthetic env's two-stage tasks
("collect X, then craft Y"), through the real driver (Ray, HF engine, DeepSpeed, LoRA, critic).

Each algorithm runs a deliberately short behaviour-cloning warm start (16 demos, 1 epoch: identical for both, same
seed) and then one RL iteration of 16 episodes. Both use the Plan–Execute agent: PPO is flat (one GAE advantage per
turn for all its tokens), HiPER splits the turn into switch / subgoal / action advantages (HAE). Asserted: eval
success on the same 24 held-out tasks rises by >= 0.2 over the BC policy after that one iteration.

Measured on this setting (eval at the validation temperature 0.4): zero-shot 0/8 (an earlier run: the model cannot
write the format); after BC 0.00 with 60% of rollout turns well-formed; HiPER after RL iterations 1/2/3: 0.42 / 0.54 /
0.42 (docs/results). Train success at temperature 1.0 stayed at 0.00-0.06: the first gains come from the format
penalty (every method's shaping, HiPER App. C), which makes the malformed BC policy write parseable actions.

Why BC and RL share one Trainer here rather than a shared BC adapter (``model.init_adapter``): RL then continues with
BC's AdamW moments. From a fresh optimizer the same first update at lr 3e-4 moved the policy far more (approx. KL 1.59
vs 0.30, entropy 1.34 vs 0.28) and eval success stayed at 0.00 (measured).
"""

from __future__ import annotations

import pytest

from launch.config import resolve_config
from launch.train import Trainer

LEARN = [
    "model.path=smollm2",
    "env.name=synthetic",
    "env.max_steps=3",
    "env.workers_per_rollout=8",
    'env.options={"stages": [2], "actions_per_stage": 1, "distractors": 1}',
    "rollout.engine=hf",
    "rollout.agent=plan_execute",
    "rollout.group_size=4",
    "rollout.groups_per_iter=4",
    "rollout.max_new_tokens=32",
    "learner.micro_batch_size=8",
    "learner.mini_batch_size=16",
    "learner.ppo_epochs=2",
    "learner.actor_lr=3e-4",
    "learner.critic_lr=3e-4",
    "bc.episodes=16",
    "bc.epochs=1",
    "bc.mini_batch_size=16",
    "bc.lr=1e-3",
    "eval_episodes=24",
]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["hiper", "ppo"])
def test_rl_beats_its_bc_start(ray_local, tmp_path, algo):
    cfg = resolve_config(
        None, [*LEARN, f"algo={algo}", "iterations=1", "eval_every=1", f"run_dir={tmp_path}"]
    )
    trainer = Trainer(cfg)
    try:
        history = trainer.run()
    finally:
        trainer.close()
    (bc,) = [r for r in history if r.get("phase") == "bc"]
    (rl,) = [r for r in history if r.get("phase") == "rl"]
    after_bc, end = bc["eval_success"], rl["eval_success"]
    print(f"{algo}: eval success after BC {after_bc:.2f}, after one RL iteration {end:.2f}")
    assert end >= after_bc + 0.2, f"{algo}: eval success {end:.2f} after RL vs {after_bc:.2f} after BC"
