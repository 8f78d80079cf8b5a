"""The loop table of the benches (``bench_pipeline.loop_summary``/``print_loops``, via ``bench_gpu_train.py
--from-json --loops``): medians over RL iterations >= 2 and speed-ups over the first run, the figures docs/results
quotes. Run as a subprocess because the bench scripts set process-wide environment variables on import."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _rows(iteration_s: list[float], lag: int, stale: list[int], success: list[float]) -> list[dict]:
    """BC's row, then one RL row per entry: iteration 1 is the one every loop starts after BC's push."""
    rows: list[dict] = [{"phase": "bc", "iteration": 0, "time_iteration": 99.0}]
    for i, (t, s, w) in enumerate(zip(iteration_s, stale, success, strict=True), start=1):
        rows.append(
            {
                "phase": "rl",
                "iteration": i,
                "success": w,
                "policy_lag": 0 if i == 1 else lag,
                "groups_stale": s,
                "time_iteration": t,
                "time_update": t / 2,
            }
        )
    return rows


def _table(path: Path) -> dict[str, list[str]]:
    """The ``--loops`` table of a saved result, each row split into its cells, by mode."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_gpu_train.py"), "--from-json", str(path), "--loops"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    table = out[out.index("\nmode") :].strip().splitlines()
    return {line.split()[0]: line.split() for line in table[1:]}


def _loops(tmp_path: Path, runs: dict[str, list[dict]]) -> dict[str, list[str]]:
    saved = {"runs": [{"label": k, "rc": 0, "wall_s": 1.0, "rows": v} for k, v in runs.items()]}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(saved))
    return _table(path)


def test_medians_skip_the_first_iteration_and_speedups_divide_the_first_runs_median(tmp_path):
    loops = _loops(
        tmp_path,
        {
            # RL iterations 2..4: 30, 50, 10 s -> median 30 s (iteration 1's 500 s is left out)
            "sync": _rows([500.0, 30.0, 50.0, 10.0], lag=0, stale=[0, 0, 0, 0], success=[1, 0.5, 0.25, 0]),
            # iterations 2..3: 20, 24 s -> median 22 s; speed-up 30 / 22 = 1.3636
            "async2": _rows([7.0, 20.0, 24.0], lag=2, stale=[5, 1, 2], success=[1, 0.5, 0]),
        },
    )
    # columns: mode, n, rollout, logprobs, values, update, rollout_wait, push, iteration, speedup, lag, stale, success
    sync, async2 = loops["sync"], loops["async2"]
    assert (sync[1], async2[1]) == ("3", "2")  # RL iterations 2..4 and 2..3
    assert sync[5] == "15.0s" and sync[8] == "30.0s" and sync[9] == "1.00x"  # update: median of 15, 25, 5
    assert async2[8] == "22.0s" and async2[9] == "1.36x"
    assert (
        async2[10] == "2" and async2[11] == "3"
    )  # lags of iterations >= 2; stale groups 1 + 2 (not iteration 1's 5)
    assert sync[12] == "0.250" and async2[12] == "0.250"  # mean of 0.5, 0.25, 0 and of 0.5, 0


def test_the_saved_gpu_loop_figure_is_the_one_docs_quote():
    """docs/results/gpu_loops.md: "max_staleness=1 1.50× faster" comes from gpu_pipeline.json's own rows
    (34.4 / 23.0 s)."""
    table = _table(ROOT / "docs" / "results" / "gpu_pipeline.json")
    assert table["sync"][8] == "34.4s" and table["async1"][8] == "23.0s"
    assert table["async1"][9] == "1.50x"
