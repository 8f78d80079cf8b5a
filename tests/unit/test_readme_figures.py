"""README.md's two commands and docs/testing.md's suite line say how long they take and how many tests run; those
figures are written by ``bench/readme_figures.py`` from ``docs/results/durations.json`` (each measurement with its
host and source), and must not drift from it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from readme_figures import DURATIONS, MAIN_JOB, SUITE, comments, stale  # noqa: E402

HOSTS = {
    "fast": {"isa": "AVX2", "matmul_gflop_s": {"2": 200}},
    "slow": {"isa": "AVX2", "matmul_gflop_s": {"2": 95}},
    "xeon": {"isa": "AVX-512", "matmul_gflop_s": None},
}


def test_the_readme_and_testing_md_say_what_durations_json_says():
    assert stale() == []


def test_the_readme_starts_with_exactly_the_two_commands():
    block = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.partition("#")[0].strip() for line in block.splitlines()] == [MAIN_JOB, SUITE]


def test_the_figures_from_a_hand_made_file():
    data = {
        "hosts": HOSTS,
        "main_job": {
            "uncached_install_s": 270,  # 4.5 min → "+4" (round half to even)
            "runs": [
                {"host": "fast", "wall_s": 601},
                {"host": "slow", "wall_s": 1261},
            ],  # 10.02 → 10, 21.02 → 22
        },
        "suite": {
            "tests": 1300,
            "runs": [
                {"host": "fast", "wall_s": 900},  # 15 min
                {"host": "fast", "wall_s": 1000},  # 16.7 → 17
                {"host": "slow", "wall_s": 2880, "estimate": True},  # 48 min, estimated: "about 48"
                {"host": "xeon", "wall_s": 1500, "estimate": True},  # 25 min, estimated: "~25"
            ],
        },
    }
    got = comments(data)
    # 200 / 95 = 2.1 → "2×", "half"
    assert got["README.md"] == {
        MAIN_JOB: "install, then run the main job (10–22 min on 2 AVX2 cores, hosts differ 2×; +4 min uncached install)",
        SUITE: "install with test tools, then the whole suite (15–48 min on 2 AVX2 cores, hosts differ 2×; ~25 on 2 "
        "Intel Xeon cores)",
    }
    assert got["docs/testing.md"] == {
        SUITE: "everything CI runs (.ci/run): 1300 tests, 15–48 min on 2 AMD EPYC (AVX2) cores (15–17 on a host at 200 "
        "GFLOP/s fp32 matmul, about 48 on one at half that), ~25 min on 2 Intel Xeon (AVX-512) cores"
    }


def test_a_figure_changed_on_either_side_is_caught(tmp_path):
    for name in ("README.md", "docs/testing.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    durations = tmp_path / "durations.json"
    shutil.copy(DURATIONS, durations)
    assert stale(tmp_path, durations) == []
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("min uncached install)", "min uncached install, fast)", 1))
    assert [line.split(":")[0] for line in stale(tmp_path, durations)] == ["README.md"]
    shutil.copy(ROOT / "README.md", readme)
    data = json.loads(durations.read_text())
    data["suite"]["tests"] += 1  # one more test: testing.md's count is stale, README names none
    durations.write_text(json.dumps(data))
    assert [line.split(":")[0] for line in stale(tmp_path, durations)] == ["docs/testing.md"]
    data["main_job"]["runs"].append({"host": data["main_job"]["runs"][0]["host"], "wall_s": 540})  # 9 min
    durations.write_text(json.dumps(data))
    wrong = stale(tmp_path, durations)
    assert len(wrong) == 2 and "run the main job (9–32 min" in wrong[0]
