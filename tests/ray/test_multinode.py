"""The multi-node recipe on one machine: a head and a worker node started with ``ray start`` (distinct ports), a
job submitted with ``ray job submit``, and the rollout and learner workers placed on different nodes.

Each node offers 1 CPU and each worker asks for 1 (``rollout.cpus_per_worker=1 learner.cpus_per_worker=1``), so
their placement groups cannot share a node. Ray 2.60 refuses a second node in its laptop mode, so this cluster runs
in cluster mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1``): its servers listen on the host's address, as on real
machines, unlike the loopback-only cluster ``hierarl train`` starts for itself."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.ray.test_job_submit import _free_port, _stop_head
from tests.ray.tiny_runs import TINY

ROOT = Path(__file__).resolve().parents[2]


def _start_node(cmd: list[str], temp_dir: str, env: dict[str, str]) -> None:
    """``ray start``, up to 3 times. It gives a raylet a fixed 30 s to register with the GCS (ray/_private/node.py);
    on 2 loaded cores the worker node once missed it ("The current node timed out during startup", CI at
    07e6932), so a half-started node is stopped and started again."""
    for _ in range(3):
        started = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        if started.returncode == 0:
            return
        _stop_head(temp_dir)
    raise AssertionError(f"{' '.join(cmd[:3])} failed 3 times: {started.stderr[-2000:]}")


@pytest.mark.slow
def test_a_job_on_two_nodes_spreads_rollout_and_learner_workers(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    env.pop("RAY_ADDRESS", None)
    ray_bin = str(Path(sys.executable).with_name("ray"))
    port, dash = _free_port(), _free_port()
    temp_dir = tempfile.mkdtemp(prefix="rn", dir="/tmp")
    # the worker node's own temp dir: sharing the head's, its runtime-env agent deleted the job's working_dir
    # package under the running driver (FileNotFoundError for its cwd)
    worker_dir = tempfile.mkdtemp(prefix="rw", dir="/tmp")
    head = [ray_bin, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
            "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
            f"--temp-dir={temp_dir}", f"--dashboard-agent-listen-port={_free_port()}"]  # fmt: skip
    ports = [_free_port() for _ in range(6)]
    worker = [ray_bin, "start", f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
              f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
              f"--metrics-export-port={ports[2]}", f"--dashboard-agent-listen-port={ports[3]}",
              f"--dashboard-agent-grpc-port={ports[4]}", f"--runtime-env-agent-port={ports[5]}",
              f"--temp-dir={worker_dir}"]  # fmt: skip
    try:
        _start_node(head, temp_dir, env)
        _start_node(worker, worker_dir, env)
        args = [*TINY, "algo=grpo", "rollout.agent=react", "bc.enabled=false", "eval_every=0", "iterations=1",
                "rollout.cpus_per_worker=1", "learner.cpus_per_worker=1", f"run_dir={tmp_path / 'job'}",
                "ray_address=auto"]  # fmt: skip
        submit = [ray_bin, "job", "submit", f"--address=http://127.0.0.1:{dash}", "--working-dir", str(ROOT),
                  "--", sys.executable, "-m", "launch.cli.main", "train", *args]  # fmt: skip
        for _ in range(12):  # the head's job agent comes up a few seconds after `ray start` returns
            out = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=600)
            if "No available agent to submit job" not in out.stderr:
                break
            time.sleep(5)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        from ray.util.state import list_actors

        nodes: dict[str, set[str]] = {}
        for a in list_actors(address=f"http://127.0.0.1:{dash}", detail=True, limit=1000):
            if a.class_name in ("RolloutWorker", "LearnerWorker"):
                nodes.setdefault(a.class_name, set()).add(a.node_id)
        assert set(nodes) == {"RolloutWorker", "LearnerWorker"}
        assert nodes["RolloutWorker"].isdisjoint(nodes["LearnerWorker"]), nodes
    finally:
        _stop_head(worker_dir)
        _stop_head(temp_dir)
