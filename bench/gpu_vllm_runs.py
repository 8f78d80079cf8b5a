"""The ``hierarl train`` steps of ``bench/gpu_vllm.py`` (its docstring): ``train`` (the main job and a shortened Multi2
on vLLM), ``loops`` (sync against ``max_staleness=1``) and ``scale`` (HiPER, then PPO from its BC, on TextCraft depth
2 at 128 episodes an iteration), each run cut at ``--budget-s``."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import write_json
from gpu_vllm_common import CUDA, T0, wait_for_gpu_memory

TRAIN_RUNS = {
    "main": ("hiper_textcraft_cpu", []),
    "multi2": (
        "multi2_synthetic_multi",
        ["iterations=2", "eval_every=2", "eval_episodes=4", "bc.episodes=4", "bc.epochs=1",
         "algo.offline_iterations=1"],
    ),
}  # fmt: skip
"""``hierarl train`` runs of the train step: the main job as it is, and Multi2 as bench_gpu_train.py shortened it."""
CPU_SHORT = {
    "main": [
        "iterations=1", "eval_every=1", "eval_episodes=2", "bc.episodes=2", "bc.epochs=1",
        "rollout.groups_per_iter=1", "rollout.group_size=2", "env.max_steps=3", "checkpoint_every=0",
    ],
    "multi2": [
        "iterations=2", "eval_every=2", "eval_episodes=2", "bc.episodes=2", "bc.epochs=1",
        "rollout.groups_per_iter=1", "rollout.group_size=2", "checkpoint_every=0",
        "algo.offline_iterations=1", "algo.online_groups=1",
    ],
}  # fmt: skip
"""On the CPU the train step checks the path only: the tiny model, one short iteration (Multi2: one offline, one
online; its tasks keep their 6 steps, the expert needs more than 3)."""
LOOP_SETTING = "hiper_synthetic_multi iterations=3 eval_every=0 bc.episodes=8 bc.epochs=2 checkpoint_every=0"
"""The setting of the HF engine's sync vs max_staleness=1 runs on the H100 (docs/results, 1.50x)."""
SCALE = {
    "hiper": "hiper_textcraft_d2",
    "ppo": "ppo_textcraft_d2",
}
SCALE_SET = [
    "rollout.groups_per_iter=32", "env.train_tasks=32", "iterations=5", "eval_every=5",
    "learner.micro_batch_size=8", "checkpoint_every=5",
]  # fmt: skip
"""The presets at scale: 32 groups of 4 = 128 episodes an iteration on 32 train tasks (each seen by one group an
iteration), 5 iterations = 640 episodes; the presets' BC (96 demonstrations × 2), evaluation (16 held-out tasks × 2
and the train tasks × 2, T = 1) and reward terms; GPU micro-batches."""


def train_runs(a: argparse.Namespace, model: str) -> dict[str, Any]:
    """The train step (module docstring); each run's rc, wall time and metrics rows."""
    from bench_gpu_train import summary, train

    work = Path(tempfile.mkdtemp(prefix="gpu_vllm_train_"))
    runs = []
    for label, (preset, overrides) in TRAIN_RUNS.items():
        overrides = overrides if CUDA else CPU_SHORT[label]
        wait_for_gpu_memory()
        run = train(preset, model, work / label, a.share, ["rollout.engine=vllm", *overrides], deadline(a))
        run["run_dir"] = str(work / label)
        print(summary(run), flush=True)
        runs.append(run)
    return {"model": model, "share": a.share, "runs": runs}


def loops(a: argparse.Namespace, model: str) -> dict[str, Any]:
    """The loops step: sync then max_staleness=1, one run at a time, as bench_gpu_train.py --loops tables them."""
    from bench_gpu_train import summary, train
    from bench_pipeline import loop_summary, mode_overrides, print_loops

    preset, *setting = LOOP_SETTING.split()
    work = Path(tempfile.mkdtemp(prefix="gpu_vllm_loops_"))
    runs, table = [], {}
    for mode in ("sync", "async1"):
        overrides = [*setting, "rollout.engine=vllm", *mode_overrides(mode)]
        wait_for_gpu_memory()
        run = train(preset, model, work / mode, a.share, overrides, deadline(a))
        print(summary(run), flush=True)
        runs.append(run)
        if (s := loop_summary(run["rows"])) is not None:
            table[mode] = s
    if table:
        print_loops(table)
    return {"model": model, "share": a.share, "setting": LOOP_SETTING, "runs": runs, "loops": table}


def scale(a: argparse.Namespace, model: str) -> dict[str, Any]:
    """The scale step (module docstring): HiPER, then PPO from HiPER's BC checkpoint while the budget lasts."""
    from bench_gpu_train import summary, train

    work = Path(tempfile.mkdtemp(prefix="gpu_vllm_scale_"))
    runs: list[dict[str, Any]] = []
    for label, preset in SCALE.items():
        if deadline(a) is not None and time.time() > deadline(a) - 120:
            break  # a run needs its BC and a first iteration to say anything
        shared = [f"bc.from_run={work / 'hiper'}"] if runs else []
        wait_for_gpu_memory()
        run = train(preset, model, work / label, a.share, [*SCALE_SET, *shared], deadline(a))
        print(summary(run), flush=True)
        runs.append(run)
        write_json(a.out / "scale_partial.json", {"runs": runs})
    return {"model": model, "share": a.share, "set": SCALE_SET, "runs": runs}


def deadline(a: argparse.Namespace) -> float | None:
    """When this call's training runs are cut (``--budget-s`` from the start, 30 s kept to write the JSON)."""
    return T0 + a.budget_s - 30 if a.budget_s else None
