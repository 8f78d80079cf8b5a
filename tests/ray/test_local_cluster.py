"""A local run is local and observable: the cluster ``hierarl train`` starts for itself listens on loopback only
(every Ray server, the dashboard, the learners' rendezvous), and its metrics rows reach the node's metrics export
port as ``hierarl_*`` series tagged by run, algorithm and env.

The run happens in a fresh process (this file run as a script), because the other Ray tests share a cluster this
module must not join, and because the listeners are those of one process tree: the driver and what it started.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.ray.tiny_runs import TINY

RUN = [
    *TINY,
    "rollout.agent=react",
    "rollout.max_new_tokens=8",
    "learner.num_workers=2",  # two ranks: the rendezvous store and gloo's pairs are listeners too
    "learner.micro_batch_size=4",
    "bc.enabled=false",
    "eval_every=0",
    "iterations=1",
    "algo=grpo",
]


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or bool(mapped and mapped.is_loopback)


def listeners_off_loopback() -> list[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of this process and its descendants that is
    not bound to a loopback address."""
    import psutil

    me = psutil.Process()
    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
    out = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids and not _loopback(c.laddr.ip):
            out.append((c.laddr.ip, c.laddr.port, psutil.Process(c.pid).name()))
    return sorted(out)


def scrape(port: int, prefix: str, timeout_s: float = 60.0) -> list[str]:
    """The node's metrics export, polled until a line starts with ``prefix`` (Ray exports every few seconds)."""
    deadline = time.monotonic() + timeout_s
    lines: list[str] = []
    while time.monotonic() < deadline:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
        if lines:
            return lines
        time.sleep(2)
    return lines


def _child(run_dir: str) -> None:
    """The run, then the facts the test asserts, as one JSON line on stdout."""
    import ray

    from launch.config import resolve_config
    from launch.driver.build import build_run
    from launch.driver.train import Trainer

    trainer = Trainer(build_run(resolve_config(None, [*RUN, f"run_dir={run_dir}"])))
    try:
        trainer.run()
        node = ray._private.worker.global_worker.node  # the ports this run's cluster chose
        dashboard = node.address_info["webui_url"]
        facts = {
            "off_loopback": listeners_off_loopback(),
            "node_ip": ray.util.get_node_ip_address(),
            "series": scrape(node.metrics_export_port, "ray_hierarl_success{"),
            "dashboard": dashboard,
            "dashboard_status": urllib.request.urlopen(f"http://{dashboard}/api/version", timeout=10).status,
        }
    finally:
        trainer.close()
    print("FACTS " + json.dumps(facts), flush=True)


@pytest.mark.slow
def test_a_local_run_listens_on_loopback_only_and_exports_its_metrics(tmp_path):
    """Before: with ``_node_ip_address="127.0.0.1"`` Ray still resolved the node to the host's address, and the
    GCS, raylet, workers and agents listened on every interface (measured with ss: 13 such sockets)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, __file__, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FACTS ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    facts = json.loads(line[len("FACTS ") :])
    assert facts["node_ip"] == "127.0.0.1"
    assert facts["off_loopback"] == []
    assert facts["dashboard"].startswith("127.0.0.1:") and facts["dashboard_status"] == 200
    assert f"[hierarl] Ray dashboard: http://{facts['dashboard']}" in proc.stdout
    series = facts["series"]
    assert series, "no ray_hierarl_success series exported"
    assert any(
        'algo="grpo"' in s and 'env="synthetic"' in s and 'run="run"' in s and 'phase="rl"' in s
        for s in series
    )


if __name__ == "__main__":
    _child(sys.argv[1])
