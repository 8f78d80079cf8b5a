"""``bench/gpu_study.sh``: the studies prepared for a lent GPU are valid runs before any device time is spent: every
run of every study resolves and validates as ``hierarl train`` would take it on the GPU (the overrides
``bench_gpu_train`` adds included), the labels are distinct, and a study pairs what it claims to pair."""

import dataclasses
import shlex
import subprocess
from pathlib import Path

import pytest

from launch.config import resolve_config, validate

ROOT = Path(__file__).resolve().parents[3]


def _runs(study: str) -> dict[str, tuple[str, list[str]]]:
    out = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_study.sh"), study, "--print"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.splitlines()  # fmt: skip
    specs = [out[i + 1] for i, arg in enumerate(out) if arg == "--run"]
    runs = {}
    for spec in specs:
        label, _, rest = spec.partition("=")
        preset, *overrides = shlex.split(rest)
        runs[label] = (preset, overrides)
    assert len(runs) == len(specs) == 6
    return runs


@pytest.mark.parametrize("study", ["main_engine", "d2_scale"])
def test_every_run_of_a_study_validates(study):
    for label, (preset, overrides) in _runs(study).items():
        gpu = ["model.path=smollm2", f"run_dir=/tmp/{label}", "rollout.gpus_per_worker=0.1"]
        cfg = resolve_config(preset, [*gpu, "learner.gpus_per_worker=0.1", *overrides])
        validate(cfg)
        assert cfg.rollout.gpu_memory_utilization == 0.12 and cfg.rollout.engine in ("vllm", "hf")


def test_main_engine_pairs_each_seed_vllm_with_hf_and_nothing_else():
    runs = _runs("main_engine")
    for s in (0, 1, 2):
        vllm, hf = (resolve_config(*runs[f"main_{e}_s{s}"]) for e in ("vllm", "hf"))
        assert (vllm.seed, vllm.rollout.engine, hf.rollout.engine) == (s, "vllm", "hf")
        assert dataclasses.replace(hf, rollout=dataclasses.replace(hf.rollout, engine="vllm")) == vllm


def test_an_unknown_study_is_refused_in_one_line():
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_study.sh"), "nope", "--print"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr == "gpu_study: unknown study nope (main_engine, d2_scale)\n"
