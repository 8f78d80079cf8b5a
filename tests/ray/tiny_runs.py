"""The tiny runs the Ray tests of the training driver share: the config, and a run through the real driver."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from launch.config import resolve_config
from launch.driver.build import build_run
from launch.driver.train import Trainer

# A tiny random model on the synthetic env: exercises every phase (zero-shot eval, BC, rollout, advantages,
# DeepSpeed updates of policy and critic, weight push, eval, checkpoint) in about a minute.
TINY = [
    "model.path=tiny",
    "model.dtype=float32",
    "model.lora_rank=4",
    "model.lora_alpha=8",
    "model.max_model_len=512",
    "env.name=synthetic",
    "env.max_steps=3",
    "env.workers_per_rollout=4",
    'env.options={"stages": [2], "actions_per_stage": 1, "distractors": 1}',
    "rollout.engine=hf",
    "rollout.group_size=2",
    "rollout.groups_per_iter=2",
    "rollout.max_new_tokens=34",  # the longest demonstration response (34 tokens, HIPIF's) fits (check_demos_fit)
    "learner.dtype=float32",
    "learner.micro_batch_size=8",
    "learner.mini_batch_size=8",
    "bc.episodes=4",
    "bc.epochs=1",
    "eval_episodes=2",
    "eval_every=2",
    # the main job's evaluation and RL task set are its own: one episode a task, RL on every train task, LoRA pushes
    "eval_samples=1",
    "env.train_tasks=0",
    "rollout.weight_sync=lora",
    "eval_base_model=true",
    # the tiny random model never wins: its batches carry no outcome signal, and every policy step would be skipped
    # (algo.no_outcome_batch; tests/ray/test_learning.py tests the skip), where these tests exercise the step
    "algo.no_outcome_batch=train",
    # the defaults where `hierarl train` (job submit, two nodes) starts from the main job's preset: its panels are
    # TextCraft's
    "eval_panel=auto",
    "env.train_panel=auto",
]

HISR_TINY = [
    "algo=hisr",
    "rollout.agent=react",  # segmentation=auto -> entropy change points (the policy group's entropy pass)
    "algo.collect_tasks=2",
    "algo.collect_per_task=2",
    "algo.collect_filter=false",  # the tiny model does not keep the format after one BC epoch
    "algo.sprm_batch=8",
    "algo.hindsight_batch=8",
]

MULTI2_TINY = [
    "algo=multi2",
    "rollout.agent=multi2",
    'model.role_adapters={"planner": "planner", "executor": "executor"}',
    "algo.offline_iterations=1",  # iteration 1 offline (SFT + IQL + AWR + the anchor term), iteration 2 online
    "algo.online_groups=1",
    "algo.anchor_fraction=0.5",
    "algo.kl_coef=1.0",
    "learner.ppo_epochs=1",
]


def run_tiny(run_dir: Path, extra: list[str], *, resumed_from: str | None = None) -> list[dict]:
    """``TINY`` plus ``extra`` through ``Trainer`` in this process (on the test's Ray): the metrics rows. With
    ``resumed_from``, the run must have resumed from that checkpoint (``iter_<k>``)."""
    cfg = resolve_config(None, [*TINY, f"run_dir={run_dir}", *extra])
    trainer = Trainer(build_run(cfg))
    try:
        rows = trainer.run()
        if resumed_from is not None:
            assert trainer.resumed_from is not None and trainer.resumed_from.name == resumed_from
        return rows
    finally:
        trainer.close()


def replay(run: Path, out: Path, args: list[str]) -> list[dict]:
    """``bench/bench_replay.py --run RUN --repeats 1 ARGS`` in a child process: its rows."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_replay.py"
    cmd = [sys.executable, str(bench), "--run", str(run), "--repeats", "1", *args, "--out", str(out)]
    subprocess.run(cmd, check=True, timeout=900)
    return json.loads(out.read_text())["rows"]


def two_iterations(rows: list[dict], finite: Sequence[str] = ()) -> list[dict]:
    """The RL rows of a tiny ``iterations=2`` run, after the checks every such run shares: RL iterations 1 and 2;
    every evaluation (after BC, after RL 2) scores the same pairs, the eval panel's first ``eval_episodes`` (2)
    tasks, its success the share of won outcomes; each key of ``finite`` logged and finite on every RL row."""
    rl = [r for r in rows if r.get("phase") == "rl"]
    assert [r["iteration"] for r in rl] == [1, 2]
    evals = [r for r in rows if "eval_success" in r]
    assert [r["phase"] for r in evals] == ["bc", "rl"]
    assert {r["eval_panel"] for r in evals} == {"synthetic_small_test@1[:2]"}
    assert all(r["eval_success"] == r["eval_outcomes"].count("1") / 2 for r in evals)
    for r in rl:
        for key in finite:
            assert key in r and math.isfinite(r[key]), key
    return rl


def resume_matches(
    full: Path,
    run_dir: Path,
    extra: list[str],
    straight: dict,
    keys: Sequence[str],
    drop: Sequence[str] = (),
) -> list[dict]:
    """``full`` (an uninterrupted ``iterations=2`` run of ``extra``) as a kill right after iteration 1's checkpoint
    leaves it, copied to ``run_dir`` (without ``checkpoints/iter_2`` and the iteration-2 files in ``drop``; the logs
    and kept episodes past iteration 1 stay, for the resume to cut back), resumed to iteration 2: it repeats
    ``straight`` (``full``'s iteration 2) in each of ``keys``. Returns the resumed run's rows."""
    shutil.copytree(full, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "iter_2")
    (run_dir / "checkpoints" / "latest").write_text("iter_1")
    for name in drop:
        (run_dir / name).unlink()
    resumed = run_tiny(run_dir, [*extra, "iterations=2", "resume=true"], resumed_from="iter_1")
    again = next(r for r in resumed if r.get("phase") == "rl" and r["iteration"] == 2)
    for key in keys:
        assert again[key] == pytest.approx(straight[key], rel=1e-5, abs=1e-7), key
    return resumed
