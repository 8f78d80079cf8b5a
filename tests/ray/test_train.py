"""The training driver end to end through real Ray, the HF engine and DeepSpeed: a short run and exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch.config import resolve_config
from launch.train import Trainer
from tests.ray.tiny_runs import TINY, run_tiny, two_iterations


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "one_step_off"), [("hiper", False), ("ppo", False), ("hipif", False), ("hiper", True)]
)
def test_run_writes_everything_and_resume_reproduces_the_losses(ray_local, tmp_path, algo, one_step_off):
    """Also for one-step-off: iteration 2's rollouts (generated during iteration 1's update, from the adapter
    before it) are regenerated from the checkpoint's behaviour adapter, so the resumed losses match too."""
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
        assert r["version"] == r["iteration"] + 2  # v1: initial push, v2: after BC, then one per iteration
    # lag = the version updated minus the oldest that generated its turns; iteration 1 always follows BC's push
    assert [r["policy_lag"] for r in rl] == ([0, 1] if one_step_off else [0, 0])
    assert ("time_rollout_wait" in rl[0]) == one_step_off and "time_rollout_wait" not in rl[1]
    # the off-policy correction is on by default where the loop lags, and only there
    assert all(("is_weight_mean" in r) == one_step_off for r in rl)

    # kill after iteration 1 (simulated by a run that stops there), then resume to iteration 2
    part = tmp_path / "part"
    run_tiny(part, [*common, "iterations=1"])
    resumed = run_tiny(part, [*common, "iterations=2", "resume=true"])
    again = next(r for r in resumed if r.get("phase") == "rl" and r["iteration"] == 2)
    for key in ("success", "return", "loss_tokens", "kl", "entropy", *critic, "approx_kl"):
        assert again[key] == pytest.approx(rl[1][key], rel=1e-5, abs=1e-7), key


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
    from launch.specs import rollout_worker_config

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

    trainer = Trainer(resolve_config(None, [*TINY, f"run_dir={tmp_path}"]))
    try:
        threads = ray.get(
            [
                w.__ray_call__.remote(lambda _: torch.get_num_threads())
                for w in trainer.pool.workers + trainer.learner.workers
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


CHAOS = ["algo=hiper", "rollout.agent=plan_execute", "eval_every=0"]
"""The chaos tests' run: HiPER's adapter and critic change every iteration, so a resume is checked on weights."""


@pytest.fixture(scope="module")
def straight(ray_local, tmp_path_factory) -> Path:
    """The uninterrupted two-iteration run the chaos tests must end at."""
    run = tmp_path_factory.mktemp("straight")
    run_tiny(run, [*CHAOS, "iterations=2"])
    return run


def _assert_matches_straight(rows: list[dict], run: Path, straight: Path) -> None:
    """Every metrics row once, iteration 2 redone to the uninterrupted run's losses and adapter."""
    from safetensors.numpy import load_file

    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for history in (rows, logged):
        assert [r["iteration"] for r in history if r.get("phase") in ("bc", "rl")] == [0, 1, 2]
    mine = next(r for r in logged if r.get("phase") == "rl" and r["iteration"] == 2)
    orig = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    orig2 = next(r for r in orig if r.get("phase") == "rl" and r["iteration"] == 2)
    for key in ("success", "loss_tokens", "kl", "value_loss"):
        assert mine[key] == pytest.approx(orig2[key], rel=1e-5, abs=1e-7), key
    adapter = "checkpoints/iter_2/adapter/adapter_model.safetensors"
    a, b = load_file(str(straight / adapter)), load_file(str(run / adapter))
    assert a.keys() == b.keys() and all(abs(a[k] - b[k]).max() < 1e-5 for k in a)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs: a disk that can really fill up (needs CAP_SYS_ADMIN, as root in the CI container has)."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True
        )
    except FileNotFoundError:
        pytest.skip("cannot mount a tmpfs here: no mount command")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` until a write fails with ENOSPC, then free ``leave`` bytes; returns the filler to delete."""
    filler = disk / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 2**20)
                f.flush()
        except OSError as e:
            assert e.errno == 28, e  # ENOSPC
    with filler.open("r+b") as f:
        f.truncate(max(0, filler.stat().st_size - leave))
    return filler


@pytest.mark.slow
def test_a_full_disk_fails_the_checkpoint_in_one_line_and_a_resume_after_freeing_it_matches(
    ray_local, tmp_path, small_disk, straight
):
    """Chaos: the disk fills up during iteration 2.  Its checkpoint fails with "no space left on device" (not a
    torch/iostream error), leaves no partial folder and keeps ``latest`` at iteration 1; once space is freed,
    ``resume=true`` redoes iteration 2 to the same losses as an uninterrupted run, every metrics row once."""
    run = small_disk / "run"
    run_tiny(run, [*CHAOS, "iterations=1"])
    filler = _fill(
        small_disk, leave=256 * 2**10
    )  # room for the metrics and logs, not for a 0.66 MB checkpoint
    with pytest.raises(RuntimeError, match=r"checkpoint .*iter_2: no space left on device \(\d+ MiB free"):
        run_tiny(run, [*CHAOS, "iterations=2", "resume=true"])
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_0", "iter_1", "latest"]  # no partial iter_2
    assert (ckpts / "latest").read_text() == "iter_1"

    filler.unlink()
    _assert_matches_straight(run_tiny(run, [*CHAOS, "iterations=2", "resume=true"]), run, straight)


@pytest.mark.slow
def test_a_driver_killed_mid_iteration_resumes_to_the_uninterrupted_run(ray_local, tmp_path, straight):
    """Chaos: ``kill -9`` of ``hierarl train`` (and the cluster it started) once iteration 1 is logged, i.e. inside
    iteration 2; ``resume=true`` continues from iteration 1's checkpoint and ends where an uninterrupted run does."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    bare = tmp_path / "defaults.yaml"  # a preset of no keys: the defaults _run resolves, not the main job's
    bare.write_text("{}\n")
    cmd = [
        sys.executable,
        "-m",
        "launch.cli",
        "train",
        str(bare),
        *TINY,
        *CHAOS,
        "iterations=2",
        f"run_dir={run}",
    ]
    driver = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    metrics, deadline = run / "metrics.jsonl", time.monotonic() + 600
    while driver.poll() is None and time.monotonic() < deadline:
        if metrics.exists() and '"phase": "rl"' in metrics.read_text():
            break
        time.sleep(0.2)
    assert driver.poll() is None, "the run ended before it could be killed"
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    assert (run / "checkpoints" / "latest").read_text() == "iter_1"  # killed before iteration 2's checkpoint
    _assert_matches_straight(run_tiny(run, [*CHAOS, "iterations=2", "resume=true"]), run, straight)


@pytest.mark.slow
def test_bc_from_run_reuses_another_algorithms_bc(ray_local, tmp_path):
    """``bc.from_run``: a PPO run takes HiPER's BC checkpoint (policy + optimizer state, critic fresh) instead of
    running BC, and its policy after BC is HiPER's exactly."""
    from safetensors.numpy import load_file

    common = ["eval_every=0", "rollout.agent=plan_execute"]
    run_tiny(tmp_path / "hiper", ["algo=hiper", "iterations=0", *common])
    rows = run_tiny(
        tmp_path / "ppo", ["algo=ppo", "iterations=1", f"bc.from_run={tmp_path / 'hiper'}", *common]
    )
    bc = next(r for r in rows if r.get("phase") == "bc")
    assert bc["bc_from_run"] == str(tmp_path / "hiper") and "nll_epoch0" in bc
    adapter = "checkpoints/iter_0/adapter/adapter_model.safetensors"
    a, b = load_file(str(tmp_path / "hiper" / adapter)), load_file(str(tmp_path / "ppo" / adapter))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert [r["iteration"] for r in rows if r.get("phase") == "rl"] == [1]


@pytest.mark.slow
@pytest.mark.parametrize("reference", ["start", "base"])
def test_the_kl_reference_is_the_policy_rl_starts_from(ray_local, tmp_path, reference):
    """``learner.kl_reference=start`` (default): after BC the learner keeps a frozen copy of the policy
    (``ref_default``, in every checkpoint), the reference log-probs are read under it, and the first update (one
    optimizer step, taken before the policy moves) measures KL 0. ``base``: the adapter disabled, no copy."""
    from actors.rollout import read_peft_adapter

    one_step = ["algo=ppo", "iterations=1", "eval_every=0", "learner.mini_batch_size=64"]
    cfg = resolve_config(None, [*TINY, f"run_dir={tmp_path}", *one_step, f"learner.kl_reference={reference}"])
    trainer = Trainer(cfg)
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
    assert {"adapter": "ref_default"} in calls and not any(c.get("reference") for c in calls)
    bc_policy, _ = read_peft_adapter(ckpt / "iter_0" / "adapter")
    frozen_0, _ = read_peft_adapter(ckpt / "iter_0" / "adapter" / "ref_default")
    frozen_1, _ = read_peft_adapter(ckpt / "iter_1" / "adapter" / "ref_default")
    trained, _ = read_peft_adapter(ckpt / "iter_1" / "adapter")
    assert max(float(abs(bc_policy[k]).max()) for k in bc_policy if "lora_B" in k) > 0  # BC moved the policy
    assert all((frozen_0[k] == bc_policy[k]).all() and (frozen_1[k] == bc_policy[k]).all() for k in bc_policy)
    assert max(float(abs(trained[k] - bc_policy[k]).max()) for k in bc_policy) > 0
    assert abs(rl["kl"]) < 1e-6


@pytest.mark.slow
def test_a_dead_rollout_worker_is_replaced_and_its_groups_recollected(ray_local, tmp_path, capsys):
    """Before: ``kill -9`` of a rollout worker ended the run 3.4 s later with ActorDiedError from ``gather``.
    Now the worker is replaced in its bundle with the newest adapter and its share of the collection is collected
    again, whole; a second death beyond ``rollout.max_restarts`` ends the run with a clear error."""
    import ray

    cfg = resolve_config(
        None, [*TINY, f"run_dir={tmp_path}", "algo=grpo", "rollout.agent=react", "rollout.max_restarts=1"]
    )
    trainer = Trainer(cfg)
    try:
        trainer.push()
        pool = trainer.pool
        tasks = trainer.train_ids[:2]
        pending = pool.start(tasks, 2, seed=5, temperature=1.0)
        ray.kill(pool.workers[0])  # dies mid-collection
        trajs = pool.gather(pending)
        assert sorted(t.task_id for t in trajs) == sorted(tasks * 2)  # both groups, whole
        assert pool.restarts == 1
        line = next(ln for ln in capsys.readouterr().out.splitlines() if "rollout worker 0 died (" in ln)
        with capsys.disabled():
            print(
                f"\n{line}"
            )  # the measured replacement time, for the reliability table (docs/operations.md)
        assert pool.fault_totals(1)["total_rollout_restarts"] == 1
        assert len(pool.collect(tasks, 2, seed=6, temperature=1.0)) == 4  # the replacement works
        ray.kill(pool.workers[0])
        with pytest.raises(RuntimeError, match=r"rollout.max_restarts \(1\) replacements were used up"):
            pool.collect(tasks, 2, seed=7, temperature=1.0)
    finally:
        trainer.close()


@pytest.mark.slow
def test_a_dead_rollout_worker_mid_stream_is_replaced_and_its_groups_queued_again(ray_local, tmp_path):
    """Asynchronous rollouts: a rollout worker killed while its stream plays the queued groups is replaced, a new
    stream starts on the replacement with the groups that had not come back, and the iteration still gets its
    groups whole; pausing then drains the next batch, queued during the take."""
    import ray

    from launch.stream import AsyncRollouts

    cfg = resolve_config(
        None, [*TINY, f"run_dir={tmp_path}", "algo=grpo", "rollout.agent=react", "max_staleness=1"]
    )
    trainer = Trainer(cfg)
    try:
        trainer.push()
        stream = AsyncRollouts(
            trainer.pool,
            cfg.rollout,
            max_staleness=1,
            train_ids=trainer.train_ids,
            seed=cfg.seed,
            first_batch=1,
        )
        stream.queue_batch()
        ray.kill(trainer.pool.workers[0])  # dies mid-stream
        groups, stats = stream.take_groups(1)
        assert trainer.pool.restarts == 1
        assert [len(g.trajectories) for g in groups] == [2, 2] and stats["groups_stale"] == 0
        assert stream.next_batch == 3  # batch 2 was queued for the update to overlap
        stream.pause()
        assert len(stream.ready) == 2 and not stream.streams
    finally:
        trainer.close()


@pytest.mark.slow
def test_a_dead_learner_worker_rebuilds_the_group_from_the_checkpoint(ray_local, tmp_path, capsys):
    """Before: ``kill -9`` of a learner worker ended the run 9.6 s later and the iteration's rollouts were lost.
    Now the group is rebuilt, reloads the newest checkpoint (the adapter is the checkpoint's again) and the update is
    redone on the same rollouts; past ``learner.max_restarts`` the run ends with a clear error."""
    import numpy as np
    import ray

    from actors.rollout import read_peft_adapter

    cfg = resolve_config(
        None,
        [
            *TINY,
            f"run_dir={tmp_path}",
            "algo=grpo",
            "rollout.agent=react",
            "iterations=1",
            "eval_every=0",
            "learner.max_restarts=1",
        ],
    )
    trainer = Trainer(cfg)
    try:
        trainer.run()  # BC, iteration 1, checkpoint iter_1
        saved, _ = read_peft_adapter(tmp_path / "checkpoints" / "iter_1" / "adapter")
        trajs = trainer.pool.collect(trainer.train_ids[:2], 2, seed=9, temperature=1.0)
        ray.kill(trainer.learner.workers[0])
        metrics, _ = trainer.update_recovering(trajs, 2)
        assert trainer.learner_restarts == 1 and metrics["loss_tokens"] > 0
        assert "group rebuilt from" in capsys.readouterr().out
        ray.kill(trainer.learner.workers[0])
        with pytest.raises(RuntimeError, match=r"learner.max_restarts \(1\) rebuilds were used up"):
            trainer.update_recovering(trajs, 3)
    finally:
        trainer.close()
    # the rebuilt group started from the checkpoint: a fresh Trainer rebuilt the same way reproduces its adapter
    restored = Trainer(
        resolve_config(None, [*TINY, f"run_dir={tmp_path}", "algo=grpo", "rollout.agent=react"])
    )
    try:
        restored.learner_restarts = 0
        ray.kill(restored.learner.workers[0])
        restored.rebuild_learner(RuntimeError("killed"))
        now = restored.learner.adapter_weights()
        assert set(now) == set(saved) and all(np.allclose(now[k], saved[k]) for k in saved)
    finally:
        restored.close()
