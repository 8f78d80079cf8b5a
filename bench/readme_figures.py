"""README.md's two command lines and docs/testing.md's suite line carry how long the commands take and how many tests
the suite has. Written by hand they drift from what was measured; this writes them from
``docs/results/durations.json``, where each wall time sits with its host (CPU, matmul GFLOP/s) and its source.

    python bench/readme_figures.py           # rewrite the comments of those three lines
    python bench/readme_figures.py --check   # exit 1, naming the line, where a file disagrees with the JSON

A range runs from the fastest run's whole minutes down to the slowest's up (645 s and 1906 s: "10–32 min"); a figure
from an estimate reads "about" or "~"."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "docs" / "results" / "durations.json"
MAIN_JOB = "bash install.sh && RAY_AUTH_MODE=disabled hierarl train"
SUITE = "bash install.sh test && python -m pytest -q tests"
"""The commands whose lines carry the figures: each line is found by its command, its comment after ``# ``."""
SHARE = {2: "half", 3: "a third", 4: "a quarter"}


def minutes(runs: list[dict[str, Any]]) -> str:
    """'10–32' for runs of 645 and 1906 s; one run alone: its minutes, rounded, 'about' when estimated."""
    walls = [r["wall_s"] for r in runs]
    if len(walls) == 1:
        return ("about " if runs[0].get("estimate") else "") + f"{round(walls[0] / 60)}"
    return f"{math.floor(min(walls) / 60)}–{math.ceil(max(walls) / 60)}"


def on(data: dict[str, Any], runs: list[dict[str, Any]], isa: str) -> list[dict[str, Any]]:
    return [r for r in runs if data["hosts"][r["host"]]["isa"].startswith(isa)]


def hosts_apart(data: dict[str, Any], runs: list[dict[str, Any]]) -> tuple[str, str, int]:
    """(fastest host, slowest host, how many times apart their 2-thread matmul is) among ``runs``' hosts."""
    speed = {r["host"]: data["hosts"][r["host"]]["matmul_gflop_s"]["2"] for r in runs}
    fast, slow = max(speed, key=speed.get), min(speed, key=speed.get)
    return fast, slow, round(speed[fast] / speed[slow])


def comments(data: dict[str, Any]) -> dict[str, dict[str, str]]:
    """{file: {command: the comment its line should carry}}."""
    job, suite = data["main_job"], data["suite"]
    job_avx2, suite_avx2 = on(data, job["runs"], "AVX2"), on(data, suite["runs"], "AVX2")
    xeon = minutes(on(data, suite["runs"], "AVX-512")).replace("about ", "~")
    fast, slow, apart = hosts_apart(data, suite_avx2)
    by_host = {h: [r for r in suite_avx2 if r["host"] == h] for h in (fast, slow)}
    return {
        "README.md": {
            MAIN_JOB: (
                f"install, then run the main job ({minutes(job_avx2)} min on 2 AVX2 cores, hosts differ "
                f"{hosts_apart(data, job_avx2)[2]}×; +{round(job['uncached_install_s'] / 60)} min uncached install)"
            ),
            SUITE: (
                f"install with test tools, then the whole suite ({minutes(suite_avx2)} min on 2 AVX2 cores, hosts "
                f"differ {apart}×; {xeon} on 2 Intel Xeon cores)"
            ),
        },
        "docs/testing.md": {
            SUITE: (
                f"everything CI runs (.ci/run): {suite['tests']} tests, {minutes(suite_avx2)} min on 2 AMD EPYC (AVX2) "
                f"cores ({minutes(by_host[fast])} on a host at {data['hosts'][fast]['matmul_gflop_s']['2']} GFLOP/s "
                f"fp32 matmul, {minutes(by_host[slow])} on one at {SHARE.get(apart, f'1/{apart} of')} that), {xeon} "
                "min on 2 Intel Xeon (AVX-512) cores"
            )
        },
    }


def rewritten(text: str, wanted: dict[str, str]) -> str:
    """``text`` with the comment of each command's line (the one line starting with the command) replaced."""
    lines = text.split("\n")
    for command, comment in wanted.items():
        (i,) = [i for i, line in enumerate(lines) if line.startswith(command)]
        code, _, _ = lines[i].partition("# ")
        lines[i] = f"{code}# {comment}"
    return "\n".join(lines)


def stale(root: Path = ROOT, durations: Path = DURATIONS) -> list[str]:
    """The files under ``root`` whose lines disagree with ``durations``, each with the line it should have."""
    out = []
    for name, wanted in comments(json.loads(durations.read_text())).items():
        text = (root / name).read_text()
        new = rewritten(text, wanted)
        if new != text:
            changed = [b for a, b in zip(text.split("\n"), new.split("\n"), strict=True) if a != b]
            out += [f"{name}: {line}" for line in changed]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file disagrees")
    a = ap.parse_args(argv)
    if a.check:
        wrong = stale()
        for line in wrong:
            print(f"readme_figures: should be {line}", file=sys.stderr)
        return 1 if wrong else 0
    for name, wanted in comments(json.loads(DURATIONS.read_text())).items():
        path = ROOT / name
        path.write_text(rewritten(path.read_text(), wanted))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
