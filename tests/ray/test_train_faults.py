"""The training driver under faults, through real Ray, the HF engine and DeepSpeed: a full disk, a killed driver,
dead rollout and learner workers; each run ends where the uninterrupted one does, or fails in one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import RunStopped
from launch.config import resolve_config
from launch.driver.build import build_run
from launch.driver.train import Trainer
from tests.ray.tiny_runs import TINY, run_tiny

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
    with pytest.raises(RunStopped, match=r"checkpoint .*iter_2: no space left on device \(\d+ MiB free"):
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
        "launch.cli.main",
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
def test_a_dead_rollout_worker_is_replaced_and_its_groups_recollected(ray_local, tmp_path, capsys):
    """Before: ``kill -9`` of a rollout worker ended the run 3.4 s later with ActorDiedError from ``gather``.
    Now the worker is replaced in its bundle with the newest adapter and its share of the collection is collected
    again, whole; a second death beyond ``rollout.max_restarts`` ends the run with a clear error."""
    import ray

    cfg = resolve_config(
        None, [*TINY, f"run_dir={tmp_path}", "algo=grpo", "rollout.agent=react", "rollout.max_restarts=1"]
    )
    trainer = Trainer(build_run(cfg))
    try:
        trainer.push()
        pool = trainer.parts.pool
        tasks = trainer.parts.train_ids[:2]
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
        with pytest.raises(RunStopped, match=r"rollout.max_restarts \(1\) replacements were used up"):
            pool.collect(tasks, 2, seed=7, temperature=1.0)
    finally:
        trainer.close()


@pytest.mark.slow
def test_a_dead_rollout_worker_mid_stream_is_replaced_and_its_groups_queued_again(ray_local, tmp_path):
    """Asynchronous rollouts: a rollout worker killed while its stream plays the queued groups is replaced, a new
    stream starts on the replacement with the groups that had not come back, and the iteration still gets its
    groups whole; pausing then drains the next batch, queued during the take."""
    import ray

    from launch.driver.stream import AsyncRollouts

    cfg = resolve_config(
        None, [*TINY, f"run_dir={tmp_path}", "algo=grpo", "rollout.agent=react", "max_staleness=1"]
    )
    trainer = Trainer(build_run(cfg))
    try:
        trainer.push()
        stream = AsyncRollouts(
            trainer.parts.pool,
            cfg.rollout,
            max_staleness=1,
            train_ids=trainer.parts.train_ids,
            seed=cfg.seed,
            first_batch=1,
        )
        stream.queue_batch()
        ray.kill(trainer.parts.pool.workers[0])  # dies mid-stream
        groups, stats = stream.take_groups(1)
        assert trainer.parts.pool.restarts == 1
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

    from actors.lora_weights import read_peft_adapter

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
    trainer = Trainer(build_run(cfg))
    try:
        trainer.run()  # BC, iteration 1, checkpoint iter_1
        saved, _ = read_peft_adapter(tmp_path / "checkpoints" / "iter_1" / "adapter")
        trajs = trainer.parts.pool.collect(trainer.parts.train_ids[:2], 2, seed=9, temperature=1.0)
        ray.kill(trainer.learner.workers[0])
        metrics, _ = trainer.update_recovering(trajs, 2)
        assert trainer.learner_restarts == 1 and metrics["loss_tokens"] > 0
        assert "group rebuilt from" in capsys.readouterr().out
        ray.kill(trainer.learner.workers[0])
        with pytest.raises(RunStopped, match=r"learner.max_restarts \(1\) rebuilds were used up"):
            trainer.update_recovering(trajs, 3)
    finally:
        trainer.close()
    # the rebuilt group started from the checkpoint: a fresh Trainer rebuilt the same way reproduces its adapter
    restored = Trainer(
        build_run(resolve_config(None, [*TINY, f"run_dir={tmp_path}", "algo=grpo", "rollout.agent=react"]))
    )
    try:
        restored.learner_restarts = 0
        ray.kill(restored.learner.workers[0])
        restored.rebuild_learner(RuntimeError("killed"))
        now = restored.learner.adapter_weights()
        assert set(now) == set(saved) and all(np.allclose(now[k], saved[k]) for k in saved)
    finally:
        restored.close()
