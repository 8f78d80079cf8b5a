"""Each paper's own stages through the training driver on real Ray: HISR's reward models, STEP-HRL's offline data,
Multi2's offline-then-online phases and role adapters, each with an exact resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from launch.config import resolve_config
from launch.driver.build import build_run
from launch.driver.train import Trainer
from tests.ray.tiny_runs import HISR_TINY, MULTI2_TINY, TINY, resume_matches, run_tiny, two_iterations


@pytest.mark.slow
def test_hisr_stages_are_cached_and_a_resume_reproduces_the_losses(ray_local, tmp_path):
    """BC -> collection with π_ref -> segmentation -> SPRM -> hindsight model -> PPO on r_fuse, through the real
    rollout workers and both learner groups; the stages are cached in the run folder and a resumed run loads them."""
    full = run_tiny(tmp_path / "full", [*HISR_TINY, "iterations=2"])
    root = tmp_path / "full" / "hisr"
    assert (root / "collected.jsonl").exists() and (root / "models" / "learner_rank0.pt").exists()
    stages = json.loads((root / "stages.json").read_text())
    assert set(stages) == {"sprm", "hindsight"} and math.isfinite(stages["sprm"]["sprm_loss"])
    row = next(r for r in full if r.get("phase") == "hisr")
    assert row["collected"] == 4 and row["hindsight_rows"] > 0
    rl = two_iterations(
        full, ("hisr_segments", "hisr_importance", "hisr_segment_reward", "value_loss", "time_reward_models")
    )
    for r in rl:
        assert r["hisr_segments"] >= 1

    part = tmp_path / "part"
    stamp = (tmp_path / "full" / "hisr" / "collected.jsonl").stat().st_mtime_ns
    keys = ("success", "return", "kl", "value_loss", "hisr_segment_reward", "hisr_importance")
    resumed = resume_matches(tmp_path / "full", part, HISR_TINY, rl[1], keys)
    assert (part / "hisr" / "collected.jsonl").stat().st_mtime_ns == stamp  # copied, not collected again
    assert sum(r.get("phase") == "hisr" for r in resumed) == 1  # the stages' row once, not re-run

    # the reward models are adapters of the policy's learner group: a group rebuilt after a worker died gets them
    # back from an RL checkpoint, which holds them, or from the stage cache when the newest checkpoint is iter_0
    # (written before the stages)
    import ray

    trainer = Trainer(build_run(resolve_config(None, [*TINY, *HISR_TINY, f"run_dir={part}", "resume=true"])))
    try:
        assert trainer.resume() == 3 and trainer.resumed_from.name == "iter_2"
        hisr = trainer.parts.stage
        hisr.prepare(2)  # the learner holds iter_2, the reward models with it
        trajs = hisr.collect()
        seqs = hisr._sprm_batch(trajs, hisr.segment(trajs, hisr._turns(trajs))).seqs

        def models() -> tuple[dict[str, np.ndarray], np.ndarray]:
            return trainer.learner.adapter_weights("hindsight"), trainer.learner.values(seqs, critic="sprm")

        hindsight, sprm = models()
        # trained from π_ref (a fresh adapter's lora_B is 0); the SPRM stays at its zero start here (the tiny
        # model's collected episodes all fail: target 0 everywhere), so the hindsight adapter is what tells
        assert max(np.abs(w).max() for k, w in hindsight.items() if "lora_B" in k) > 0
        for newest in ("iter_2", "iter_0"):
            if newest == "iter_0":
                for k in (1, 2):
                    (part / "checkpoints" / f"iter_{k}").rename(part / f"moved_iter_{k}")
                (part / "checkpoints" / "latest").write_text("iter_0")
            ray.kill(trainer.learner.workers[0])
            trainer.rebuild_learner(RuntimeError("killed"))
            h, v = models()
            assert all(np.array_equal(h[k], hindsight[k]) for k in hindsight), newest
            np.testing.assert_array_equal(v, sprm)
    finally:
        trainer.close()


STEP_HRL_TINY = [
    "algo=step_hrl",
    "rollout.agent=step_hrl",
    "algo.warmup_steps=1",  # the first pass trains the critic alone (warm-up in whole passes), the second both
    "algo.online_groups=1",  # and the online option: one group per iteration joins the buffer
    "learner.ppo_epochs=1",
]


@pytest.mark.slow
def test_step_hrl_offline_data_is_cached_and_a_resume_reproduces_the_losses(ray_local, tmp_path):
    """BC -> the offline dataset (the BC demonstrations + 2x as many BC-policy rollouts) -> IQL critics with a
    target copy and AWR on all three roles, through the real rollout workers and learner group; the data are cached
    in the run folder, and a resumed run reads them (and the online buffer) back and repeats the losses."""
    full = run_tiny(tmp_path / "full", [*STEP_HRL_TINY, "iterations=2"])
    root = tmp_path / "full" / "offline"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["expert"] == 4 and 1 <= manifest["collected"] <= 8
    assert all(manifest["transitions"][r] > 0 for r in ("high", "low", "progress"))
    assert (root / "online_1.jsonl").exists() and (root / "online_2.jsonl").exists()
    assert sum(r.get("phase") == "data" for r in full) == 1
    rl = two_iterations(full, ("value_loss", "adv_abs_mean", "transitions_low", "buffer_trajectories"))
    assert "awr_weight" not in rl[0] and math.isfinite(
        rl[1]["awr_weight"]
    )  # the actor joins after the warm-up
    assert rl[1]["buffer_trajectories"] == rl[0]["buffer_trajectories"] + 2  # the online group of size 2

    # iteration 2's online group is collected again from the restored policy and RNG state
    part = tmp_path / "part"
    stamp = (root / "dataset.jsonl").stat().st_mtime_ns
    keys = ("value_loss", "awr_weight", "adv_mean", "buffer_trajectories")
    resume_matches(tmp_path / "full", part, STEP_HRL_TINY, rl[1], keys, drop=["offline/online_2.jsonl"])
    assert (part / "offline" / "dataset.jsonl").stat().st_mtime_ns == stamp  # copied, not collected again
    assert (part / "offline" / "online_2.jsonl").exists()


@pytest.mark.slow
def test_multi2_offline_then_online_and_a_resume_reproduces_the_losses(ray_local, tmp_path):
    """Multi2 end to end on the planner and executor adapters: the offline iteration adds policy-anchored samples
    from the served executor and trains both adapters and the critic; the online iteration collects, freezes the
    executor as π_off (a copy on the learner, equal to the executor the offline phase ended with) and adds the KL
    term; a resumed run reads the cached anchors and online groups back and repeats the losses."""
    from actors.lora_weights import read_peft_adapter

    full = run_tiny(tmp_path / "full", [*MULTI2_TINY, "iterations=2"])
    root = tmp_path / "full" / "offline"
    assert (root / "anchor_1.jsonl").exists() and not (root / "anchor_2.jsonl").exists()
    assert (root / "online_2.jsonl").exists() and not (root / "online_1.jsonl").exists()
    rl = two_iterations(full, ("value_loss", "planner/nll", "executor/nll", "awr_weight", "sft_rows"))
    assert rl[0]["anchor_rows"] > 0 and "kl" not in rl[0]
    assert rl[1]["anchor_rows"] == 0 and math.isfinite(rl[1]["executor/kl"]) and rl[1]["executor/kl"] >= 0
    ckpt = tmp_path / "full" / "checkpoints"
    offline_end, _ = read_peft_adapter(ckpt / "iter_1" / "adapter" / "executor")
    frozen, _ = read_peft_adapter(ckpt / "iter_2" / "adapter" / "ref_executor")
    trained, _ = read_peft_adapter(ckpt / "iter_2" / "adapter" / "executor")
    assert max(float(abs(offline_end[k] - frozen[k]).max()) for k in frozen) == 0.0
    assert max(float(abs(trained[k] - frozen[k]).max()) for k in frozen) > 0.0

    keys = ("value_loss", "awr_weight", "executor/kl", "executor/nll", "buffer_trajectories")
    resume_matches(
        tmp_path / "full", tmp_path / "part", MULTI2_TINY, rl[1], keys, drop=["offline/online_2.jsonl"]
    )


@pytest.mark.slow
def test_multi2_with_one_shared_adapter_keeps_its_own_frozen_copy(ray_local, tmp_path):
    """The paper's "Shared adapter" ablation (Fig. 6c): every role on one adapter; the online phase's π_off is a
    frozen copy of it (``ref_default``), and the served adapter stays the trained one."""
    shared = [a for a in MULTI2_TINY if not a.startswith("model.role_adapters")]
    rl = [r for r in run_tiny(tmp_path, [*shared, "iterations=2"]) if r.get("phase") == "rl"]
    assert rl[0]["anchor_rows"] > 0 and "kl" not in rl[0]
    assert math.isfinite(rl[1]["kl"]) and rl[1]["kl"] >= 0 and math.isfinite(rl[1]["nll"])


ROLE_ADAPTERS = [
    "algo=ppo",
    "rollout.agent=multi2",
    'model.role_adapters={"planner": "planner", "executor": "executor"}',
    'learner.adapter_lr={"planner": 1e-4}',
]


@pytest.mark.slow
def test_role_adapters_train_apart_and_a_resume_reproduces_the_losses(ray_local, tmp_path):
    """Multi2's role-specific adapters through the whole driver: BC and PPO train the planner adapter on planner
    turns and the executor adapter on executor turns (each its own optimizer and learning rate), both are pushed
    to and served by the rollout workers, checkpointed apart, and a resumed run repeats the losses."""
    from actors.lora_weights import read_peft_adapter

    full = run_tiny(tmp_path / "full", [*ROLE_ADAPTERS, "iterations=2"])
    rl = two_iterations(
        full, ("planner/approx_kl", "executor/approx_kl", "approx_kl", "value_loss", "valid_format_planner")
    )
    adapter = tmp_path / "full" / "checkpoints" / "iter_2" / "adapter"
    planner, _ = read_peft_adapter(adapter / "planner")
    executor, _ = read_peft_adapter(adapter / "executor")
    assert set(planner) == set(executor)
    assert max(float(abs(planner[k] - executor[k]).max()) for k in planner) > 1e-4  # two different adapters
    # hierarl eval serves each adapter from its own checkpoint folder (adapter/<name>)
    from launch.cli.eval import cmd_eval

    assert cmd_eval([str(tmp_path / "full"), "--episodes", "2", "--no-random"]) == 0
    table = next((tmp_path / "full").glob("eval_*.md")).read_text()
    assert "valid executor | valid planner |" in table

    keys = ("success", "return", "planner/approx_kl", "executor/approx_kl", "value_loss")
    resume_matches(tmp_path / "full", tmp_path / "part", ROLE_ADAPTERS, rl[1], keys)
