"""``bench_gpu_train.run_until``: a run still going at ``--deadline`` is killed with every process of its session
(a ``hierarl train`` and the Ray cluster it started), its status marked cut; a run that ends in time is left alone.
Run as a subprocess because the bench scripts set process-wide environment variables on import."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, "bench")
from bench_gpu_train import run_until
log, pidfile = sys.argv[1], sys.argv[2]
t0 = time.time()
slow = run_until(["bash", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], Path(log), t0 + 2)
fast = run_until(["bash", "-c", "echo done; exit 3"], Path(log), time.time() + 30)
print(json.dumps({"slow": slow, "fast": fast, "wall": time.time() - t0}))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_a_run_past_its_deadline_is_killed_with_its_whole_session(tmp_path):
    log, pidfile = tmp_path / "run.log", tmp_path / "child.pid"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log), str(pidfile)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["slow"] == [-9, True]  # SIGKILL at the 2 s deadline, marked cut
    assert got["fast"] == [3, False]  # ended in time: its own status, not cut
    assert got["wall"] < 20  # not the 60 s the child would sleep
    assert not _alive(int(pidfile.read_text()))  # the grandchild (a Ray process, in a real run) is gone too
    assert log.read_text().strip().endswith("done")  # both runs' output appended to the log


RESUME_SCRIPT = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, "bench")
import bench_gpu_train as b
b._command = lambda *a: ["bash", "-c", "sleep 60"]  # a run that never logs an RL iteration
t0 = time.time()
out = b.kill_and_resume("p", "m", Path(sys.argv[1]), 0.1, [], deadline=t0 + 2)
print(json.dumps({"killed": out["killed"], "cut": out["cut"], "wall": time.time() - t0}))
"""


def test_kill_and_resume_stops_waiting_for_iteration_1_at_the_deadline(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, str(tmp_path / "run")],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["killed"] and got["cut"]  # the first run killed at 2 s, the resume cut at once
    assert got["wall"] < 20  # not the 60 s the first run would sleep waiting for an RL row


STAGGER_SCRIPT = """
import json, sys, time
sys.path.insert(0, "bench")
from bench_gpu_train import staggered
t0, seen = time.time(), []
for job in staggered(["a", "b", "c"], 0.3):
    seen.append((job, time.time() - t0))
print(json.dumps(seen))
"""


def test_parallel_runs_start_staggered():
    """``--stagger``: the runs start one after another, that many seconds apart, the first at once."""
    out = subprocess.run(
        [sys.executable, "-c", STAGGER_SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert [job for job, _ in seen] == ["a", "b", "c"]
    starts = [t for _, t in seen]
    assert starts[0] < 0.25 and all(b - a >= 0.3 for a, b in itertools.pairwise(starts))
