"""The training driver end to end through real Ray, the HF engine and DeepSpeed: a short run and exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch.config import resolve_config
from launch.driver.build import build_run
from launch.driver.train import Trainer
from tests.ray.tiny_runs import TINY, resume_matches, run_tiny, two_iterations


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "one_step_off"), [("ppo", False), ("hipif", False), ("hiper", True)])
def test_run_writes_everything_and_resume_reproduces_the_losses(ray_local, tmp_path, algo, one_step_off):
    """A critic algorithm and a critic-free one in the synchronous loop; HiPER in the one-step-off loop, where
    iteration 2's rollouts (generated during iteration 1's update, from the adapter before it) are regenerated from
    the checkpoint's behaviour adapter, so the resumed losses match too."""
    agent = {"hiper": "plan_execute", "hipif": "hipif"}.get(algo, "react")
    common = [f"algo={algo}", f"rollout.agent={agent}", "iterations=2", f"one_step_off={one_step_off}"]
    full = run_tiny(tmp_path / "full", common)

    run = tmp_path / "full"
    assert (run / "config.yaml").exists() and (run / "metrics.jsonl").exists()
    assert (run / "checkpoints" / "iter_2" / "adapter" / "adapter_config.json").exists()
    assert any(p.name.startswith("events") for p in (run / "tb").iterdir())
    rl = two_iterations(full)
    critic = ["value_loss"] if algo != "hipif" else []  # HIPIF is critic-free (GRPO objective)
    for r in rl:
        assert ("value_loss" in r) == bool(critic)
        for key in (
            "success",
            "return",
            "kl",
            "entropy",
            *critic,
            "time_rollout",
            "time_update",
            "time_push",
            "total_group_retries",
            "total_groups_dropped",
        ):
            assert key in r, key
        assert r["version"] == r["iteration"] + 1  # v1: the first push, after BC; then one per iteration
    # lag = the version updated minus the oldest that generated its turns; iteration 1 always follows BC's push
    assert [r["policy_lag"] for r in rl] == ([0, 1] if one_step_off else [0, 0])
    assert ("time_rollout_wait" in rl[0]) == one_step_off and "time_rollout_wait" not in rl[1]
    # the off-policy correction is on by default where the loop lags, and only there
    assert all(("is_weight_mean" in r) == one_step_off for r in rl)

    keys = ("success", "return", "loss_tokens", "kl", "entropy", *critic, "approx_kl")
    resume_matches(run, tmp_path / "part", common, rl[1], keys)


@pytest.mark.slow
def test_asynchronous_rollouts_train_within_their_staleness_bound_and_resume(ray_local, tmp_path):
    """``max_staleness=2``: the rollout workers keep generating through updates and pushes; every iteration trains
    on ``groups_per_iter`` whole groups none of whose turns lag the learner by more than 2 versions; evaluation
    pauses the streams and the run goes on after it; a killed run resumes from its checkpoint and continues."""
    common = [
        "algo=ppo",
        "rollout.agent=react",
        "max_staleness=2",
        "eval_every=2",
    ]
    history = run_tiny(tmp_path / "run", [*common, "iterations=3"])
    rl = [r for r in history if r.get("phase") == "rl"]
    assert [r["iteration"] for r in rl] == [1, 2, 3]
    for r in rl:
        assert 0 <= r["policy_lag"] <= 2 and r["groups_stale"] >= 0 and r["groups_dropped"] == 0
        assert r["is_weight_mean"] > 0  # the correction's default where the loop lags
    assert "eval_success" in rl[1] and "time_rollout_pause" in rl[1]
    assert any(r["policy_lag"] >= 1 for r in rl[1:])  # the queue runs ahead of the learner
    resumed = run_tiny(tmp_path / "run", [*common, "iterations=4", "resume=true"])
    assert [r["iteration"] for r in resumed if r.get("phase") == "rl"] == [1, 2, 3, 4]


def test_eval_and_training_build_the_same_rollout_config():
    """`hierarl eval` reuses the training rollout config; only what it overrides differs (it once lost the
    compact-prompt agent options, evaluating a model in a prompt format it was never trained on)."""
    from launch.driver.wiring import rollout_worker_config

    cfg = resolve_config(None, [*TINY, 'rollout.agent_options={"compact": true}'])
    train_cfg = rollout_worker_config(cfg, "model", "cpu")
    eval_cfg = rollout_worker_config(
        cfg, "model", "cpu", adapter_path="a", temperature=cfg.rollout.eval_temperature
    )
    assert eval_cfg.agent_options == train_cfg.agent_options == {"compact": True}
    assert eval_cfg.temperature == 0.4 and eval_cfg.adapter_path == "a"
    assert eval_cfg.env_options == train_cfg.env_options and eval_cfg.lora == train_cfg.lora


def test_the_workers_run_the_threads_the_run_config_resolves(ray_local, tmp_path):
    """``cpu_threads`` auto reaches the worker processes (which start with ``OMP_NUM_THREADS=1``): the synchronous
    loop gives the one rollout worker and the one learner worker every core of the node."""
    import ray
    import torch

    from cluster.ray_cluster import node_cores

    trainer = Trainer(build_run(resolve_config(None, [*TINY, f"run_dir={tmp_path}"])))
    try:
        threads = ray.get(
            [
                w.__ray_call__.remote(lambda _: torch.get_num_threads())
                for w in trainer.parts.pool.workers + trainer.learner.workers
            ]
        )
    finally:
        trainer.close()
    assert threads == [node_cores(), node_cores()]


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.mark.slow
def test_checkpoints_are_small_pruned_and_fall_back_when_corrupted(ray_local, tmp_path, capsys):
    """Checkpoints hold the trainable state only (not the frozen base), iter_0 (BC) and the newest
    ``checkpoint_keep_last`` RL ones stay; a truncated latest checkpoint is named in one line and the run resumes
    from the one before, re-running the lost iteration exactly, with every metrics row exactly once."""
    from actors.models import resolve_model_path

    common = ["algo=hiper", "rollout.agent=plan_execute", "checkpoint_keep_last=2", "eval_every=0"]
    run = tmp_path / "run"
    first = run_tiny(run, [*common, "iterations=2"])
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_0", "iter_1", "iter_2", "latest"]
    base = _size(Path(resolve_model_path("tiny")))
    # HiPER: policy + critic, each with LoRA + AdamW moments; the frozen base (twice, policy and critic) was the bulk
    assert _size(ckpts / "iter_2") < 0.05 * base, (_size(ckpts / "iter_2"), base)  # measured 0.66 MB vs 30 MB

    states = next((ckpts / "iter_2" / "policy_ds" / "ckpt").glob("mp_rank_*"))
    states.write_bytes(states.read_bytes()[:100])  # a truncated file
    resumed = run_tiny(run, [*common, "iterations=3", "resume=true"])
    assert "checkpoint " + str(ckpts / "iter_2") + " is unreadable" in capsys.readouterr().out
    rows = [r for r in resumed if r.get("phase") in ("bc", "rl")]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    redo = next(r for r in rows if r["iteration"] == 2)
    orig = next(r for r in first if r.get("phase") == "rl" and r["iteration"] == 2)
    for key in ("success", "loss_tokens", "kl", "value_loss"):
        assert redo[key] == pytest.approx(orig[key], rel=1e-5, abs=1e-7), key
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_0", "iter_2", "iter_3", "latest"]


@pytest.mark.slow
def test_bc_from_run_reuses_another_algorithms_bc(ray_local, tmp_path):
    """``bc.from_run``: a PPO run takes HiPER's BC checkpoint (policy + optimizer state, critic fresh) instead of
    running BC, and its policy after BC is HiPER's exactly, its evaluation after BC HiPER's."""
    from safetensors.numpy import load_file

    common = ["eval_every=0", "rollout.agent=plan_execute"]
    hiper = run_tiny(tmp_path / "hiper", ["algo=hiper", "iterations=0", *common])
    rows = run_tiny(
        tmp_path / "ppo", ["algo=ppo", "iterations=1", f"bc.from_run={tmp_path / 'hiper'}", *common]
    )
    bc = next(r for r in rows if r.get("phase") == "bc")
    assert bc["bc_from_run"] == str(tmp_path / "hiper") and "nll_epoch0" in bc
    # evaluated alike (same state, same eval settings): HiPER's evaluation after BC is PPO's, not played again
    theirs = next(r for r in hiper if r.get("phase") == "bc")
    evaluated = {k: v for k, v in theirs.items() if k.startswith(("eval_", "train_eval_"))}
    assert evaluated and all(bc[k] == v or v != v for k, v in evaluated.items())
    adapter = "checkpoints/iter_0/adapter/adapter_model.safetensors"
    a, b = load_file(str(tmp_path / "hiper" / adapter)), load_file(str(tmp_path / "ppo" / adapter))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert [r["iteration"] for r in rows if r.get("phase") == "rl"] == [1]


@pytest.mark.slow
@pytest.mark.parametrize("reference", ["start", "base"])
def test_the_kl_reference_is_the_policy_rl_starts_from(ray_local, tmp_path, reference):
    """``learner.kl_reference=start`` (default): after BC the learner keeps a frozen copy of the policy
    (``ref_default``, in every checkpoint), the reference log-probs are read under it from the second update on (the
    first one's equal π_old: its pass is skipped), and the first update (one optimizer step, taken before the policy
    moves) measures KL 0. ``base``: the adapter disabled, no copy."""
    from actors.lora_weights import read_peft_adapter

    one_step = ["algo=ppo", "iterations=2", "eval_every=0", "learner.mini_batch_size=64"]
    cfg = resolve_config(None, [*TINY, f"run_dir={tmp_path}", *one_step, f"learner.kl_reference={reference}"])
    trainer = Trainer(build_run(cfg))
    calls: list[dict] = []
    logprobs = trainer.learner.logprobs

    def recorded(seqs, **kw):
        calls.append(kw)
        return logprobs(seqs, **kw)

    trainer.learner.logprobs = recorded
    try:
        rl = next(r for r in trainer.run() if r.get("phase") == "rl")
    finally:
        trainer.close()
    ckpt = tmp_path / "checkpoints"
    if reference == "base":
        assert {"reference": True} in calls and not any(
            str(c.get("adapter")).startswith("ref_") for c in calls
        )
        assert not (ckpt / "iter_0" / "adapter" / "ref_default").exists()
        return
    assert calls.count({"adapter": "ref_default"}) == 1 and not any(c.get("reference") for c in calls)
    bc_policy, _ = read_peft_adapter(ckpt / "iter_0" / "adapter")
    frozen_0, _ = read_peft_adapter(ckpt / "iter_0" / "adapter" / "ref_default")
    frozen_1, _ = read_peft_adapter(ckpt / "iter_1" / "adapter" / "ref_default")
    trained, _ = read_peft_adapter(ckpt / "iter_1" / "adapter")
    assert max(float(abs(bc_policy[k]).max()) for k in bc_policy if "lora_B" in k) > 0  # BC moved the policy
    assert all((frozen_0[k] == bc_policy[k]).all() and (frozen_1[k] == bc_policy[k]).all() for k in bc_policy)
    assert max(float(abs(trained[k] - bc_policy[k]).max()) for k in bc_policy) > 0
    assert abs(rl["kl"]) < 1e-6


@pytest.mark.slow
def test_a_fixed_rl_task_set_is_trained_and_scored_beside_the_held_out_panel(
    ray_local, tmp_path, capsys, chromium
):
    """``env.train_tasks=2``: RL plays only the first 2 tasks of the train panel, BC demonstrates others, every
    evaluation scores those 2 tasks × 3 samples beside the held-out panel's 2 tasks × 2 samples (per-task rates in
    thirds and halves: each panel played with its own sample count), and the final table prints the paired RL gain on both. The run's report (``hierarl view``) opens in
    Chromium with its episodes and both panels' grids, named by task."""
    extra = [
        "env.train_tasks=2",
        "eval_train_samples=3",
        "eval_samples=2",
        "iterations=2",
        "save_trajectories=true",
    ]
    cfg = resolve_config(None, [*TINY, f"run_dir={tmp_path}", *extra])
    trainer = Trainer(build_run(cfg))
    try:
        rl_tasks = [t.task_id for t in trainer.parts.rl_panel.tasks]
        assert trainer.parts.train_ids == rl_tasks and len(rl_tasks) == 2
        assert not set(trainer.parts.bc_ids) & set(rl_tasks)
        rows = trainer.run()
    finally:
        trainer.close()
    evals = [r for r in rows if "train_eval_task_rates" in r]
    assert [r["phase"] for r in evals] == ["bc", "rl"]
    for r in evals:
        assert r["train_eval_samples"] == 3 and r["eval_samples"] == 2
        for key, rates in (("train_eval_task_rates", {0, 1 / 3, 2 / 3, 1}), ("eval_task_rates", {0, 0.5, 1})):
            assert len(r[key]) == 2 and set(r[key]) <= rates
        assert "train" in r["train_eval_panel"]  # the train split's panel, its first 2 tasks
    played = {
        line.split('"task_id": "')[1].split('"')[0]
        for k in (1, 2)
        for line in (tmp_path / "trajectories" / f"iter_{k}.jsonl").read_text().splitlines()
    }
    assert played <= set(rl_tasks)
    out = capsys.readouterr().out
    assert "RL gain over BC on the 2 tasks RL trains on at T = " in out
    assert "RL gain over BC on 2 held-out tasks at T = " in out
    from selenium.webdriver.common.by import By

    from launch.cli.main import main
    from tests.chromium import console_errors, open_page

    assert main(["view", str(tmp_path)]) == 0
    open_page(chromium, tmp_path / "report.html")
    assert console_errors(chromium) == []
    from selenium.webdriver.support.ui import Select

    shown = {}
    for source in ("eval", "eval RL tasks", "train"):
        Select(chromium.find_element(By.ID, "f-source")).select_by_value(source)
        shown[source] = len(chromium.find_elements(By.CSS_SELECTOR, "#episode-list li"))
    # every evaluation episode (after BC and after RL: 2 held-out tasks × 2 samples, 2 RL tasks × 3 samples) and the
    # train sample (2 iterations × 2 groups of 2, all kept: keep_episodes 16 > 4 an iteration)
    assert shown == {"eval": 2 * 2 * 2, "eval RL tasks": 2 * 2 * 3, "train": 2 * 4}
    items = chromium.find_elements(By.CSS_SELECTOR, "#episode-list li")
    items[-1].click()
    turns = chromium.find_elements(By.CSS_SELECTOR, "#episode .turn")
    tokens = [t.find_elements(By.CSS_SELECTOR, ".resp span.tok") for t in turns]
    assert turns and all(tokens)  # every turn's response as the update's tokens, each with its advantage
    assert {s.get_attribute("title").split(":")[0] for ts in tokens for s in ts} <= {
        "switch",
        "subgoal",
        "subgoal_keep",
        "action",
        "other",
    }
    kept = [json.loads(x) for x in (tmp_path / "episodes" / "iter_2.jsonl").read_text().splitlines()]
    assert all(len(t["pieces"]) == len(t["token_adv"]) == len(t["groups"]) for e in kept for t in e["turns"])
    assert any(a != 0 for e in kept for t in e["turns"] for a in t["token_adv"])
    named = {td.text for td in chromium.find_elements(By.CSS_SELECTOR, "table.grid td:first-child")}
    assert set(rl_tasks) <= named  # the RL tasks' grid names its tasks (eval_task_ids)
    assert console_errors(chromium) == []
