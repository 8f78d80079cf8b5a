"""``hierarl sweep``: a 2x2 grid (algorithm x seed) of tiny runs on one local Ray cluster, killed mid-way and
re-run: finished cells are skipped, the others resume or start, and the table and curves cover every cell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = """
out: {out}
set: [model.path=tiny, model.dtype=float32, model.lora_rank=4, model.lora_alpha=8, model.max_model_len=512,
      env.name=synthetic, env.max_steps=3, env.workers_per_rollout=4, rollout.engine=hf, rollout.agent=react,
      rollout.group_size=2, rollout.groups_per_iter=2, rollout.max_new_tokens=8, learner.dtype=float32,
      learner.micro_batch_size=8, learner.mini_batch_size=8, bc.enabled=false, iterations=2, eval_every=1,
      eval_episodes=2, eval_samples=1, env.train_tasks=0, rollout.weight_sync=lora]
grid:
  algo: [grpo, rloo]
  seed: [0, 1]
"""


def _finished_cells(out: Path) -> list[str]:
    done = []
    for metrics in out.glob("*/metrics.jsonl"):
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        if any(r.get("phase") == "rl" and r.get("iteration") == 2 for r in rows):
            done.append(metrics.parent.name)
    return sorted(done)


@pytest.mark.slow
def test_sweep_runs_a_grid_and_resumes_after_a_kill(tmp_path):
    out = tmp_path / "sweep"
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out=out))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "launch.cli.main", "sweep", str(spec)]
    first = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 480
    while not _finished_cells(out) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(2)
    os.killpg(first.pid, signal.SIGKILL)  # the sweep driver and the cluster it started
    first.wait()
    before = _finished_cells(out)
    assert before, "no cell finished before the kill"
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-3000:]
    for name in before:
        assert f"[hierarl] sweep: {name} finished before, skipped" in again.stdout
    assert len(_finished_cells(out)) == 4
    for metrics in out.glob("*/metrics.jsonl"):  # every iteration logged once, killed cells included
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        assert [r["iteration"] for r in rows if r.get("phase") == "rl"] == [1, 2], metrics
    table = (out / "results.md").read_text()
    assert "| algo=grpo | 2 (2) |" in table and "| algo=rloo | 2 (2) |" in table
    assert (out / "results.csv").exists() and (out / "curves.png").stat().st_size > 0
