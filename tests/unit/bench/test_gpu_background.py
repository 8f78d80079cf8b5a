"""``bench/gpu_background.sh``: a study that outlives one device call runs in its own process session, and every
``wait`` brings back what it has written so far (logs, JSON, metrics; not checkpoints), with exit 3 while it runs
and 0 once it has ended (its own status in DIR/rc)."""

import os
import re
import signal
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "bench" / "gpu_background.sh"


def _bg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def _packed(out: Path, name: str) -> dict[str, str]:
    with tarfile.open(out / f"{name}.tgz") as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def test_a_finished_command_is_packed_with_its_status(tmp_path):
    study, out = tmp_path / "study", tmp_path / "out"
    out.mkdir()
    # writes a run's metrics two folders down, a JSON, and a checkpoint that must stay behind; ends with status 5
    cmd = (
        f"mkdir -p {study}/work/run_a/ckpt && echo '{{\"it\": 1}}' > {study}/work/run_a/metrics.jsonl"
        f" && echo '{{}}' > {study}/x.json && echo weights > {study}/work/run_a/ckpt/model.bin && echo hello; exit 5"
    )
    assert _bg("start", str(study), "bash", "-c", cmd).returncode == 0
    waited = _bg("wait", str(study), "30", str(out))
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "ended, rc 5" in waited.stdout and "hello" in waited.stdout
    files = _packed(out, "study")
    assert files["study/rc"].strip() == "5"
    assert files["study/log"].strip() == "hello"
    assert files["study/work/run_a/metrics.jsonl"].strip() == '{"it": 1}'
    assert "study/x.json" in files
    assert not any("model.bin" in f for f in files)


def test_a_command_still_running_brings_back_its_log_and_keeps_running(tmp_path):
    study, out = tmp_path / "study", tmp_path / "out"
    out.mkdir()
    started = _bg("start", str(study), "bash", "-c", "echo first; sleep 30; echo never")
    pid = int(re.search(r"pid (\d+)", started.stdout).group(1))
    try:
        waited = _bg("wait", str(study), "2", str(out))
        assert waited.returncode == 3, waited.stdout + waited.stderr
        assert "still running" in waited.stdout
        files = _packed(out, "study")
        assert files["study/log"].strip() == "first" and "study/rc" not in files
        # its own session: the caller's process group ending (a device call's shell) does not reach it
        assert os.getsid(pid) == pid != os.getsid(0)
    finally:
        os.killpg(pid, signal.SIGKILL)
