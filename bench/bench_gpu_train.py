"""``hierarl train`` end to end on one GPU: the main job and every paper's method through Ray, DeepSpeed over NCCL and
the HF engine on CUDA, each worker on a share of the one GPU (``rollout.gpus_per_worker``, ``learner.gpus_per_worker``).

The lent GPU machine has no vLLM and no model weights of its own (docs/platform.md): the engine is HF, and the model is
either a random-weight Llama of SmolLM2-135M's shape with the SmolLM2 tokenizer (``--model random``,
``bench_gpu.build_model``: its outputs are noise, so those runs check the path and time it, and show no learning) or
the packaged SmolLM2 carried along (``--model smollm2``). ``--presets`` runs each preset shortened the same way
(``SHORT``); ``--run`` runs a preset as given. ``--kill-resume LABEL`` adds LABEL's run killed (``kill -9``) once
its first RL iteration is logged and resumed, and compares its iteration 2 with the straight run's. ``--parallel``
starts every run at once, each in its own local Ray cluster (phase times then include the others' load). Each run's
rc, wall time, metrics rows and the tail of a failed run's log go to the JSON. ``--loops`` compares the runs as
training loops (``bench_pipeline``'s medians over RL iterations >= 2, speed-up over the first run): run them one at
a time, differing only in ``one_step_off``/``max_staleness``. ``--from-json`` prints a saved result again.

    python bench/bench_gpu_train.py --tokenizer <folder> --out gpu_train.json [--presets a,b]
    python bench/bench_gpu_train.py --model smollm2 --parallel --run main=hiper_textcraft_cpu \
        --run 'ppo=ppo_synthetic_multi eval_every=0' --kill-resume ppo
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

SHORT = [
    "iterations=2",
    "eval_every=2",
    "eval_episodes=4",
    "bc.episodes=4",
    "bc.epochs=1",
    "checkpoint_every=1",
]
"""The same for every preset: 2 RL iterations after a 4-demonstration BC, one eval of 4 tasks at the end."""
EXTRA: dict[str, list[str]] = {
    "hisr_synthetic_multi": [
        "algo.collect_tasks=4",
        "algo.collect_per_task=2",
        "algo.sprm_epochs=1",
        "algo.hindsight_epochs=1",
    ],
    "multi2_synthetic_multi": ["algo.offline_iterations=1"],
}
"""HISR's reward-model stages, shrunk like BC; Multi2's one offline iteration, so that iteration 2 is online."""
PRESETS = (
    "hiper_textcraft_cpu,hiper_synthetic_multi,ppo_synthetic_multi,hipif_synthetic_multi,hisr_synthetic_multi,"
    "step_hrl_synthetic_multi,multi2_synthetic_multi"
)
PHASES = ("time_rollout", "time_logprobs", "time_values", "time_update", "time_push", "time_iteration")


def _command(preset: str, model: str, run_dir: Path, share: float, overrides: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "launch.cli.main", "train", preset, f"model.path={model}", f"run_dir={run_dir}",
        f"rollout.gpus_per_worker={share}", f"learner.gpus_per_worker={share}", *overrides,
    ]  # fmt: skip


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_until(
    cmd: list[str], log: Path, deadline: float | None, stop: Callable[[], bool] | None = None
) -> tuple[int, bool]:
    """``cmd`` in its own process session, its output appended to ``log``: (exit status, cut). Still going at
    ``deadline`` (a ``time.time()``), or once ``stop()`` holds (polled every 0.5 s), the whole session is killed
    (``hierarl train`` and the Ray cluster it started), so nothing it left keeps the GPU."""
    with log.open("a") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    while proc.poll() is None:
        if (deadline is not None and time.time() >= deadline) or (stop is not None and stop()):
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(), True
        time.sleep(0.5)
    return proc.returncode, False


def train(
    preset: str, model: str, run_dir: Path, share: float, overrides: list[str], deadline: float | None = None
) -> dict[str, Any]:
    """One ``hierarl train`` run in a child process, its output streamed to ``<run_dir>.log`` (readable while it
    runs, and kept when the call is cut); its metrics.jsonl summarised. A run still going at ``deadline`` (a
    ``time.time()``) is killed with the Ray cluster it started and marked ``cut``: its rows so far are kept, since a
    call that outlives the lent machine's limit returns nothing."""
    log = run_dir.parent / f"{run_dir.name}.log"
    t0 = time.perf_counter()
    rc, cut = run_until(_command(preset, model, run_dir, share, overrides), log, deadline)
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "label": run_dir.name, "preset": preset, "overrides": overrides, "rc": rc, "wall_s": round(wall, 1),
        "cut": cut, "rows": _rows(run_dir),
    }  # fmt: skip
    if rc and not cut:
        out["log_tail"] = log.read_text()[-3000:]
    return out


RESUME_KEYS = ("success", "return", "loss_tokens", "kl", "approx_kl", "value_loss", "entropy")
"""Iteration 2's metrics a resumed run must share with the uninterrupted one (tests/ray/test_train.py compares the
first four on the CPU)."""


def kill_and_resume(
    preset: str, model: str, run_dir: Path, share: float, overrides: list[str], deadline: float | None = None
) -> dict[str, Any]:
    """``kill -9`` of ``hierarl train`` (and the cluster it started) once its first RL iteration is logged, then
    ``resume=true`` to iteration 2, as the CPU chaos test does. At ``deadline`` the first run is killed whatever it
    has logged, and the resume, started past it, is cut at once: the rows so far are kept, marked ``cut``."""
    args = _command(preset, model, run_dir, share, [*overrides, "iterations=2"])
    log = run_dir.parent / f"{run_dir.name}.log"
    _, killed = run_until(
        args, log, deadline, stop=lambda: any(r.get("phase") == "rl" for r in _rows(run_dir))
    )
    latest = run_dir / "checkpoints" / "latest"
    resumed_from = latest.read_text() if latest.exists() else None
    out = train(preset, model, run_dir, share, [*overrides, "iterations=2", "resume=true"], deadline)
    out.update(killed=killed, resumed_from=resumed_from)
    return out


def compare_resume(straight: dict[str, Any], resumed: dict[str, Any]) -> dict[str, Any]:
    """Iteration 2 of both runs side by side, and the largest difference of their final adapters."""
    from safetensors.numpy import load_file

    def it2(run: dict[str, Any]) -> dict[str, Any]:
        return next((r for r in run["rows"] if r.get("phase") == "rl" and r.get("iteration") == 2), {})

    a, b = it2(straight), it2(resumed)
    out: dict[str, Any] = {k: [a.get(k), b.get(k)] for k in RESUME_KEYS}
    adapter = "checkpoints/iter_2/adapter/adapter_model.safetensors"
    paths = [Path(run["run_dir"]) / adapter for run in (straight, resumed)]
    if all(p.exists() for p in paths):
        x, y = (load_file(str(p)) for p in paths)
        out["adapter_max_abs_diff"] = (
            max(float(abs(x[k] - y[k]).max()) for k in x) if x.keys() == y.keys() else None
        )
    return out


def summary(run: dict[str, Any]) -> str:
    rl = [r for r in run["rows"] if r.get("phase") == "rl"]
    phases = " ".join(f"{p[5:]} {sum(r.get(p, 0) for r in rl) / max(1, len(rl)):.1f}" for p in PHASES)
    bc = next((r for r in run["rows"] if r.get("phase") == "bc"), {})
    evals = " ".join(
        f"{r.get('iteration')}:{r['eval_success']:.3f} (random {r.get('eval_random', float('nan')):.3f}, "
        f"valid {r.get('eval_valid_format', float('nan')):.2f})"
        for r in run["rows"]
        if "eval_success" in r
    )
    return (
        f"{run['label']:<26} rc {run['rc']}{' (cut)' if run.get('cut') else ''} wall {run['wall_s']:6.0f} s  BC {bc.get('wall_s', 0):5.1f} s  "
        f"RL iters {len(rl)}  per iteration (s): {phases}  "
        f"gap {rl[-1].get('logprob_gap', float('nan')) if rl else 0:.2g}  eval {evals or '-'}"
    )


def loops(result: dict[str, Any]) -> None:
    """The runs as loops side by side (``bench_pipeline``'s table; the first run is the baseline), into ``loops``."""
    from bench_pipeline import loop_summary, print_loops

    by_label = {run["label"]: loop_summary(run["rows"]) for run in result["runs"]}
    result["loops"] = {label: s for label, s in by_label.items() if s is not None}
    if result["loops"]:
        print_loops(result["loops"])


def staggered(jobs: list[Any], seconds: float) -> Iterator[Any]:
    """``jobs`` one by one, ``seconds`` apart (none before the first): vLLM engines starting together each count the
    memory the others take during its start-up profile as its own (docs/results/gpu_vllm_train.md)."""
    for k, job in enumerate(jobs):
        if k and seconds:
            time.sleep(seconds)
        yield job


def _jobs(a: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(label, preset, overrides): ``--run`` as given, else each of ``--presets`` shortened alike."""
    if a.run:
        return [(label, *_split(spec)) for label, spec in (r.split("=", 1) for r in a.run)]
    return [(p, p, [*SHORT, *EXTRA.get(p, [])]) for p in a.presets.split(",")]


def _split(spec: str) -> tuple[str, list[str]]:
    preset, *overrides = shlex.split(spec)
    return preset, overrides


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="random", help="random: --shape's random weights; else a model.path")
    ap.add_argument("--tokenizer", help="with --model random: a folder with the SmolLM2 tokenizer's files")
    ap.add_argument("--out", default="gpu_train.json")
    ap.add_argument("--presets", default=PRESETS, help="each shortened by SHORT (and EXTRA)")
    ap.add_argument(
        "--run", action="append", default=[], metavar="'LABEL=PRESET [KEY=VALUE ...]'",
        help="a run exactly as given (repeatable; replaces --presets)",
    )  # fmt: skip
    ap.add_argument(
        "--kill-resume", action="append", default=[], metavar="LABEL",
        help="also run LABEL (iterations=2) killed once iteration 1 is logged, resumed, compared to the straight run",
    )  # fmt: skip
    ap.add_argument(
        "--parallel", action="store_true", help="every run at once, each in its own local Ray cluster"
    )
    ap.add_argument(
        "--share", type=float, default=0.25, help="GPU share of each worker (HISR runs three groups)"
    )
    ap.add_argument(
        "--stagger", type=float, default=0.0, metavar="S",
        help="with --parallel, start the runs S seconds apart (vLLM engines starting at once misjudge free memory)",
    )  # fmt: skip
    ap.add_argument(
        "--deadline", type=float, metavar="S",
        help="kill the runs still going S seconds after the start and keep their rows so far (marked cut)",
    )  # fmt: skip
    ap.add_argument(
        "--work", metavar="DIR", help="the runs' folders and logs (default: a new temporary folder)"
    )
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument(
        "--loops", action="store_true",
        help="also each run's phase medians over RL iterations >= 2 and its speed-up over the first run's iteration",
    )  # fmt: skip
    ap.add_argument(
        "--from-json", metavar="FILE", help="print a saved result's summaries (and --loops); run nothing"
    )
    a = ap.parse_args()
    if a.from_json:
        saved = json.loads(Path(a.from_json).read_text())
        for run in saved["runs"]:
            print(summary(run))
        if a.loops:
            loops(saved)
        return
    if a.model == "random" and not a.tokenizer:
        ap.error("--model random needs --tokenizer (the SmolLM2 tokenizer's folder)")

    import torch

    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="gpu_train_"))
    work.mkdir(parents=True, exist_ok=True)
    if a.model == "random":
        from bench_gpu import build_model

        model = build_model(a.shape, a.tokenizer, work / "model", "cuda")
    else:
        from actors.models import resolve_model_path

        model = resolve_model_path(a.model)
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU)",
        "torch": torch.__version__,
        "model": a.model if a.model != "random" else f"random {a.shape}",
        "parallel": a.parallel,
    }
    result["runs"] = runs = []
    jobs: list[tuple[Any, str, str, list[str]]] = []  # (function, label, preset, overrides)
    for label, preset, overrides in _jobs(a):
        if label in a.kill_resume:
            jobs.append((kill_and_resume, f"{label}_resumed", preset, overrides))
            overrides = [*overrides, "iterations=2"]  # the straight run the resumed one must match
        jobs.append((train, label, preset, overrides))
    deadline = None if a.deadline is None else time.time() + a.deadline
    with ThreadPoolExecutor(len(jobs) if a.parallel else 1) as pool:
        futures = {
            pool.submit(fn, preset, model, work / label, a.share, overrides, deadline): label
            for fn, label, preset, overrides in staggered(jobs, a.stagger if a.parallel else 0.0)
        }
        for future in as_completed(futures):
            label = futures[future]
            run = {**future.result(), "run_dir": str(work / label)}  # train() labels it by its folder
            runs.append(run)
            print(summary(run), flush=True)
            if "log_tail" in run:
                print(run["log_tail"], flush=True)
            # after every run: a call cut at the lent machine's time limit keeps the finished runs
            write_json(Path(a.out), result)
    by_label = {r["label"]: r for r in runs}
    for label in a.kill_resume:
        result.setdefault("resume", {})[label] = cmp = compare_resume(
            by_label[label], by_label[f"{label}_resumed"]
        )
        print(f"resume {label} (straight, resumed): {json.dumps(cmp)}", flush=True)
    if a.loops:
        loops(result)
    write_json(Path(a.out), result)


if __name__ == "__main__":
    main()
