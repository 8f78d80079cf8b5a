"""The update replay (``bench/bench_replay.py``) against the training driver on real Ray: from a tiny run's saved
state it reproduces the run's own update (PPO with a critic warm-up, Multi2's two adapters and IQL critic, HISR with
its reward models), and a variant at a vanishing learning rate moves nothing."""

from __future__ import annotations

import math

import pytest

from tests.ray.tiny_runs import HISR_TINY, MULTI2_TINY, replay, run_tiny


@pytest.mark.slow
def test_critic_warmup_saved_rollouts_and_the_update_replay(ray_local, tmp_path):
    """``learner.critic_warmup_passes`` fits the critic before RL iteration 1's update (its value loss falls over the
    passes); the update's KL per token group and the advantages' rms per group are logged; ``save_trajectories``
    writes the rollouts; and the update replay, from the run's start state on those rollouts, reproduces the run's own
    update exactly, while a variant with a vanishing learning rate barely moves the policy."""
    run = tmp_path / "run"
    # PPO: the tiny random model's outputs parse into no block ("other"), which HiPER leaves out of its loss (its
    # update would be empty) and PPO's covers. The tiny model is near-deterministic (entropy ~0.01 nats/token), so
    # a step moves it measurably only at lr 1e-1 (measured kl_update: 4e-8 at 1e-2, 10 at 1e-1); no BC, whose
    # 4 demos make it more deterministic still (kl_update 1e-9 at 1e-2)
    common = ["algo=ppo", "rollout.agent=plan_execute", "iterations=1", "eval_every=0", "bc.enabled=false"]
    extra = ["learner.critic_warmup_passes=3", "save_trajectories=true", "checkpoint_keep_last=0"]
    rows = run_tiny(run, [*common, *extra, "learner.actor_lr=1e-1"])
    rl = next(r for r in rows if r.get("phase") == "rl")
    assert rl["critic_warmup_loss_last"] < rl["critic_warmup_loss_first"]
    assert rl["kl_update"] > 1e-6 and {"kl_update/other", "adv_rms/other"} <= set(rl)
    assert (run / "trajectories" / "iter_1.jsonl").exists()
    variants = ["--variant", "run", "--variant", "still=learner.actor_lr=1e-12"]
    same, still = replay(run, tmp_path / "replay.json", [*variants, "--probe-states", "4"])
    assert same["metrics"]["kl_update"] == pytest.approx(rl["kl_update"], rel=1e-3)
    assert same["metrics"]["critic_warmup_loss_last"] == pytest.approx(
        rl["critic_warmup_loss_last"], rel=1e-3
    )
    assert still["metrics"]["kl_update"] < 1e-3 * same["metrics"]["kl_update"]
    assert abs(still["probe"]["action/all"]) < 1e-3 * max(1e-9, abs(same["probe"]["action/all"])) + 1e-6


@pytest.mark.slow
def test_the_update_replay_of_multi2_reads_each_role_under_its_own_adapter(ray_local, tmp_path):
    """Multi2's offline iteration (planner and executor adapters, the IQL critic with its target copy, policy-anchored
    samples) replayed from the run's state with the run's critic reproduces the run's own update, and the probe reads
    each row under its role's adapter (Δ log P per role). Loading only a ``default`` adapter, or the critic without
    its target copy, fails here."""
    run = tmp_path / "run"
    common = [*MULTI2_TINY, "iterations=1", "eval_every=0", "learner.actor_lr=1e-1"]
    rows = run_tiny(run, [*common, "save_trajectories=true", "checkpoint_keep_last=0"])
    rl = next(r for r in rows if r.get("phase") == "rl")
    assert rl["anchor_rows"] > 0
    assert "policy_lag" not in rl  # an offline iteration plays no episode: stored data has no policy lag
    args = ["--variant", "run", "--critic-from-run", "--probe-states", "4"]
    (same,) = replay(run, tmp_path / "replay.json", args)
    for key in ("kl_update", "value_loss", "awr_weight", "adv_mean"):
        assert same["metrics"][key] == pytest.approx(rl[key], rel=1e-3, abs=1e-9), key
    assert {"planner.response/all", "executor.response/all", "executor.action/all"} <= set(same["probe"])
    assert all(math.isfinite(v) for v in same["probe"].values())


@pytest.mark.slow
def test_the_update_replay_of_hisr_scores_with_the_runs_reward_models(ray_local, tmp_path):
    """HISR's RL iteration 1 replayed from the run's state reproduces the run's own update, the reward models'
    scores included (loaded from the stage cache, as the run had them). The reward models learn at lr 1e-1 here so
    that a replay scoring with fresh ones instead (the tiny run's defaults barely move them) reads other importances."""
    run = tmp_path / "run"
    models = ["algo.hindsight_lr=1e-1", "algo.sprm_lr=1e-1"]
    extra = ["iterations=1", "eval_every=0", "save_trajectories=true", "checkpoint_keep_last=0"]
    rows = run_tiny(run, [*HISR_TINY, *models, *extra])
    rl = next(r for r in rows if r.get("phase") == "rl")
    (same,) = replay(run, tmp_path / "replay.json", ["--variant", "run", "--probe-states", "4"])
    for key in ("hisr_segments", "hisr_importance", "hisr_segment_reward", "value_loss", "kl_update"):
        assert same["metrics"][key] == pytest.approx(rl[key], rel=1e-3, abs=1e-9), key
