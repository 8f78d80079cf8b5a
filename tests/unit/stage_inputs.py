"""A driver stage's ``StageInputs`` for unit tests (``launch.driver.stages``): an algorithm, its config and a run
folder, small config sections, and every call of the run's parts refusing to be made unless a test gives it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from launch.driver.stages import StageInputs
from learners.algorithm import Algorithm

SECTIONS = {
    "env": SimpleNamespace(name="synthetic", train_split="train"),
    "rollout": SimpleNamespace(agent="react", group_size=2, temperature=1.0),
    "learner": SimpleNamespace(max_seq_len=64),
}
"""The run-config sections the stages in the tree read (``StageKind.sections``), with the fields they read."""


def unused(*_: Any, **__: Any) -> Any:
    raise AssertionError("not expected in this test")


def stage_inputs(algo: Algorithm, algo_cfg: Any, run_dir: Path, **parts: Any) -> StageInputs:
    """``StageInputs`` over ``run_dir``; ``parts``: any field to give (``collect``, ``learner``, ``sections``...)."""
    fields: dict[str, Any] = {
        "seed": 0,
        "sections": SECTIONS,
        "tokenizer": None,
        "pad_id": 0,
        "train_ids": [],
        "learner": unused,
        "collect": unused,
        "sample": unused,
        "demonstrations": unused,
        "log": unused,
        "freeze_reference": unused,
    }
    return StageInputs(algo=algo, algo_cfg=algo_cfg, run_dir=Path(run_dir), **{**fields, **parts})
