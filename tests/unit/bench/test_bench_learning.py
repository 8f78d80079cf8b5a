"""The RL gains ``bench/bench_learning.py`` reports (``--runs``): each seed's paired gain over BC with its t-interval
over tasks, and the tasks' changes averaged over seeds with a t-interval over tasks. Run as a subprocess because the
bench scripts set process-wide environment variables on import."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _run(run_dir: Path, before: list[float], after: list[float]) -> None:
    run_dir.mkdir(parents=True)
    rows = [
        {"phase": "bc", "iteration": 0, "eval_success": sum(before) / 4, "eval_task_rates": before},
        {"phase": "rl", "iteration": 1, "success": 0.5},
        {
            "phase": "rl",
            "iteration": 2,
            "success": 0.5,
            "eval_success": sum(after) / 4,
            "eval_task_rates": after,
        },
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _summarise(out: Path, runs: list[Path], *extra: str) -> str:
    """``bench_learning.py --out OUT [extra] --runs RUNS`` (summarise only); its printed output."""
    cmd = [sys.executable, str(ROOT / "bench" / "bench_learning.py"), "--out", str(out), *extra, "--runs"]
    proc = subprocess.run([*cmd, *map(str, runs)], check=True, cwd=ROOT, capture_output=True)
    return proc.stdout.decode()


def test_paired_gains_per_seed_and_over_seeds_by_task(tmp_path):
    """Seed 0: changes [0.5, 0, 0, 0.5] (mean 0.25, half 3.182446 · 0.288675 / 2 = 0.459347); seed 1: [0.5, 0.5, 0,
    0.5] (mean 0.375, sd 0.25, half 3.182446 · 0.25 / 2 = 0.397806). Over seeds by task: [0.5, 0.25, 0, 0.5], mean
    0.3125, sd 0.239357, half 3.182446 · 0.239357 / 2 = 0.380870."""
    _run(tmp_path / "runs" / "main_seed0", [0, 0.5, 1, 0.25], [0.5, 0.5, 1, 0.75])
    _run(tmp_path / "runs" / "main_seed1", [0, 0, 1, 0], [0.5, 0.5, 1, 0.5])
    out = tmp_path / "out"
    _summarise(out, sorted((tmp_path / "runs").iterdir()))
    g = json.loads((out / "learning.json").read_text())["paired_gains"]["main/held_out"]
    s0, s1 = g["per_seed"]["main_seed0"], g["per_seed"]["main_seed1"]
    assert (s0["mean"], s0["changed"], s0["tasks"]) == (0.25, 2, 4)
    assert abs(s0["high"] - (0.25 + 0.459347)) < 1e-5 and abs(s1["low"] - (0.375 - 0.397806)) < 1e-5
    pooled = g["over_seeds_by_task"]
    assert abs(pooled["mean"] - 0.3125) < 1e-9 and abs(pooled["low"] - (0.3125 - 0.380870)) < 1e-5


def test_a_contrast_pairs_two_algorithms_by_task_on_each_seed_both_ran(tmp_path):
    """``--contrast hiper,ppo``: HiPER's per-task success after RL minus PPO's. Seed 0: [0.5, 0.5, 1, 0.75] −
    [0, 0.5, 1, 0.25] = [0.5, 0, 0, 0.5] (mean 0.25, half 0.459347 as above); seed 1: [0.5, 0.5, 1, 0.5] −
    [0, 0, 1, 0] = [0.5, 0.5, 0, 0.5] (mean 0.375, half 0.397806); over seeds by task: mean 0.3125, half 0.380870.
    PPO's seed 2 has no HiPER twin and is left out."""
    runs = tmp_path / "runs"
    _run(runs / "hiper_seed0", [0, 0, 0, 0], [0.5, 0.5, 1, 0.75])
    _run(runs / "ppo_seed0", [0, 0, 0, 0], [0, 0.5, 1, 0.25])
    _run(runs / "hiper_seed1", [0, 0, 0, 0], [0.5, 0.5, 1, 0.5])
    _run(runs / "ppo_seed1", [0, 0, 0, 0], [0, 0, 1, 0])
    _run(runs / "ppo_seed2", [0, 0, 0, 0], [1, 1, 1, 1])
    out = tmp_path / "out"
    _summarise(out, sorted(runs.iterdir()), "--contrast", "hiper,ppo")
    g = json.loads((out / "learning.json").read_text())["contrasts"]["hiper-ppo/held_out"]
    assert sorted(g["per_seed"]) == ["0", "1"]
    s0, s1 = g["per_seed"]["0"], g["per_seed"]["1"]
    assert (s0["mean"], s0["changed"], s0["tasks"], s1["mean"]) == (0.25, 2, 4, 0.375)
    assert abs(s0["high"] - (0.25 + 0.459347)) < 1e-5 and abs(s1["low"] - (0.375 - 0.397806)) < 1e-5
    pooled = g["over_seeds_by_task"]
    assert abs(pooled["mean"] - 0.3125) < 1e-9 and abs(pooled["low"] - (0.3125 - 0.380870)) < 1e-5


def test_no_task_changed_is_printed_as_such(tmp_path):
    """After RL equal to before on every task: the printed row says no task changed, not ``+0.000 [+0.000, +0.000]``
    (a zero-width interval that would read as a precise zero)."""
    _run(tmp_path / "runs" / "main_seed0", [0, 0.5, 1, 0.25], [0, 0.5, 1, 0.25])
    printed = _summarise(tmp_path / "out", [tmp_path / "runs" / "main_seed0"])
    assert "main_seed0               +0.000: none of the 4 tasks changed" in printed
    assert "[+0.000, +0.000]" not in printed
