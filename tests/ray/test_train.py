"""The training driver end to end through real Ray, the HF engine and DeepSpeed: a short run, exact resume, and the
same job submitted with ``ray job submit`` to a local head node on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.config import resolve_config
from launch.train import Trainer

ROOT = Path(__file__).resolve().parents[2]

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
    "rollout.max_new_tokens=12",
    "learner.dtype=float32",
    "learner.micro_batch_size=8",
    "learner.mini_batch_size=8",
    "bc.episodes=4",
    "bc.epochs=1",
    "eval_episodes=2",
    "eval_every=2",
]


def _run(tmp_path: Path, extra: list[str]) -> list[dict]:
    cfg = resolve_config(None, [*TINY, f"run_dir={tmp_path}", *extra])
    trainer = Trainer(cfg)
    try:
        return trainer.run()
    finally:
        trainer.close()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["hiper", "ppo"])
def test_run_writes_everything_and_resume_reproduces_the_losses(ray_local, tmp_path, algo):
    agent = "plan_execute" if algo == "hiper" else "react"
    common = [f"algo={algo}", f"rollout.agent={agent}", "iterations=2"]
    full = _run(tmp_path / "full", common)

    run = tmp_path / "full"
    assert (run / "config.yaml").exists() and (run / "metrics.jsonl").exists()
    assert (run / "checkpoints" / "iter_2" / "adapter" / "adapter_config.json").exists()
    assert any(p.name.startswith("events") for p in (run / "tb").iterdir())
    rl = [r for r in full if r.get("phase") == "rl"]
    assert [r["iteration"] for r in rl] == [1, 2]
    for r in rl:
        for key in (
            "success",
            "return",
            "kl",
            "entropy",
            "value_loss",
            "time_rollout",
            "time_update",
            "time_push",
        ):
            assert key in r, key
        assert r["version"] == r["iteration"] + 2  # v1: initial push, v2: after BC, then one per iteration

    # kill after iteration 1 (simulated by a run that stops there), then resume to iteration 2
    part = tmp_path / "part"
    _run(part, [*common, "iterations=1"])
    resumed = _run(part, [*common, "iterations=2", "resume=true"])
    again = next(r for r in resumed if r.get("phase") == "rl" and r["iteration"] == 2)
    for key in ("success", "return", "loss_tokens", "kl", "entropy", "value_loss", "approx_kl"):
        assert again[key] == pytest.approx(rl[1][key], rel=1e-5, abs=1e-7), key


@pytest.mark.slow
def test_ray_job_submit_to_a_local_head(tmp_path):
    """The user path: `ray start --head` on loopback, then `ray job submit --working-dir . -- hierarl train ...`."""
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "OMP_NUM_THREADS": "1",
    }
    ray_bin = str(Path(sys.executable).with_name("ray"))
    port, dash = "6391", "8291"
    subprocess.run(
        [ray_bin, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}"],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        run_dir = tmp_path / "job"
        args = [*TINY, "iterations=1", "bc.enabled=false", "eval_zero_shot=false", "eval_every=0",
                f"run_dir={run_dir}", "ray_address=auto"]  # fmt: skip
        out = subprocess.run(
            [ray_bin, "job", "submit", f"--address=http://127.0.0.1:{dash}", "--working-dir", str(ROOT),
             "--", sys.executable, "-m", "launch.cli", "train", *args],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "succeeded" in out.stdout
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["iteration"] for r in records if r.get("phase") == "rl"] == [1]
    finally:
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=120)
        time.sleep(1)
