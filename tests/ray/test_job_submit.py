"""The user path, on loopback: `ray start --head`, then `ray job submit --working-dir . -- hierarl train ...`.

Its own module, so no in-process Ray session of another test module is alive next to the head node. The head gets
its own temp dir and agent port and is stopped by killing exactly its processes: `ray stop --force` would also kill
every other Ray cluster on the machine (it once killed a benchmark running beside the suite)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.ray.test_train import TINY

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_head(temp_dir: str) -> None:
    """Kill the processes started with ``temp_dir`` in their command line (GCS, raylet, dashboard) and all their
    descendants (agents, workers, the job's driver)."""
    import psutil

    me = os.getpid()
    roots = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.pid != me and any(temp_dir in a for a in (p.info["cmdline"] or []))
    ]
    family: set = set()
    for p in roots:
        with contextlib.suppress(psutil.NoSuchProcess):
            family |= {p, *p.children(recursive=True)}
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(list(family), timeout=30)
    shutil.rmtree(temp_dir, ignore_errors=True)


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
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths live under it
    subprocess.run(
        [ray_bin, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
         f"--temp-dir={temp_dir}", f"--dashboard-agent-listen-port={_free_port()}"],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        run_dir = tmp_path / "job"
        args = [*TINY, "iterations=1", "bc.enabled=false", "eval_zero_shot=false", "eval_every=0",
                f"run_dir={run_dir}", "ray_address=auto"]  # fmt: skip
        # the user's own runtime env, with a key hierarl also sets for its workers: merged, the user's value wins
        # (before: "Failed to merge the Job's runtime env")
        user_env = json.dumps({"env_vars": {"OMP_NUM_THREADS": "1", "HIERARL_PROBE": "from-the-job"}})
        submit = [ray_bin, "job", "submit", f"--address=http://127.0.0.1:{dash}", "--working-dir", str(ROOT),
                  "--runtime-env-json", user_env,
                  "--", sys.executable, "-m", "launch.cli.main", "train", *args]  # fmt: skip
        # the head's job agent comes up a few seconds after `ray start` returns (seen once): retry for a minute
        for _ in range(12):
            out = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=600)
            if "No available agent to submit job" not in out.stderr:
                break
            time.sleep(5)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "succeeded" in out.stdout
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["iteration"] for r in records if r.get("phase") == "rl"] == [1]
    finally:
        _stop_head(temp_dir)
