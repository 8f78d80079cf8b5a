"""Checks of a run folder against the run config, before Ray starts (one line, exit 2): a folder holding a run is only
continued, a resume keeps what its checkpoints hold, and ``bc.from_run`` names a run that did the same BC. These read
files (the saved ``config.yaml``); ``launch.config.validate`` reads none."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from launch.config.resolve import flatten, read_run_config
from launch.config.schema import ConfigError, TrainConfig


def _first_difference(
    cfg: TrainConfig, run: Path, prefixes: tuple[str, ...]
) -> tuple[str, object, object] | None:
    """The first key under ``prefixes`` where ``cfg`` differs from the run saved in ``run``: (key, theirs, mine)."""
    mine, theirs = (flatten(dataclasses.asdict(c)) for c in (cfg, read_run_config(run)))
    for key in sorted(mine):
        if key.startswith(prefixes) and mine[key] != theirs.get(key):
            return key, theirs.get(key), mine[key]
    return None


BC_KEYS = (
    "model.",
    "bc.episodes",
    "bc.epochs",
    "bc.mini_batch_size",
    "bc.lr",
    "bc.agg",
    "env.",
    "rollout.agent",
    "rollout.agent_options",
    "rollout.history_length",
    "learner.dtype",
    "learner.zero_stage",
    "learner.num_workers",
    "learner.max_seq_len",
    "learner.max_grad_norm",
    "seed",
)
"""Run-config keys (or key prefixes) that shape the BC warm start: ``bc.from_run`` needs them equal."""


EVAL_KEYS = (
    "eval_panel",
    "eval_episodes",
    "eval_samples",
    "eval_greedy",
    "eval_train_samples",
    "eval_baselines",
    "eval_base_model",
    "rollout.eval_temperature",
    "rollout.engine",
    "rollout.weight_sync",
    "rollout.max_new_tokens",
)
"""Run-config keys that, beside ``BC_KEYS``, shape the evaluation after BC: where they equal ``bc.from_run``'s, its
evaluation of the BC state is this run's too (``bc_eval_reusable``)."""


CHECKPOINT_KEYS = (
    "algo",
    "model.lora_",
    "model.role_adapters",
    "rollout.agent",
    "learner.dtype",
    "learner.zero_stage",
    "learner.num_workers",
    "learner.critic_trunk",
)
"""Run-config keys (or key prefixes) that shape what a checkpoint holds (adapters, their optimizer state's format,
the learner's shards): ``resume=true`` needs them equal to the saved run's. A bf16 learner met an fp32 run's
checkpoint with DeepSpeed's ``KeyError: 'dynamic_loss_scale'``."""


def check_writable(run: Path) -> None:
    """The run folder can be made and written: its missing folders are made, a file is written in it, and what this
    made is removed again, so that a later check's refusal leaves nothing behind. Asking the file system itself
    catches what permission bits do not tell root (``/proc``, a read-only mount) and a path under a file."""
    made: list[Path] = []
    try:
        for folder in [*reversed(run.parents), run]:
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
        with tempfile.TemporaryFile(dir=run):
            pass
    except OSError as e:
        raise ConfigError(
            f"run_dir: cannot create or write {run} ({e.strerror or e}: {e.filename or run}); allowed: a folder "
            "this user can create and write"
        ) from e
    finally:
        for folder in reversed(made):
            folder.rmdir()


def check_run_dir(cfg: TrainConfig) -> None:
    """A run folder that already holds a run (its metrics or checkpoints) is only continued (``resume=true``),
    never overwritten: a fresh run there would delete the old run's metrics. A resume keeps the saved run's
    ``CHECKPOINT_KEYS``. The folder must be one this user can make and write."""
    run = Path(cfg.run_dir).expanduser()
    check_writable(run.absolute())
    held = [name for name in ("metrics.jsonl", "checkpoints") if (run / name).exists()]
    if held and not cfg.resume:
        raise ConfigError(
            f"run_dir: {run} already holds a run ({', '.join(held)}); allowed: resume=true to continue it, "
            "another run_dir, or remove the folder"
        )
    if (
        cfg.resume
        and (run / "config.yaml").exists()
        and (diff := _first_difference(cfg, run, CHECKPOINT_KEYS))
    ):
        key, theirs, mine = diff
        raise ConfigError(
            f"resume: {run} was run with {key}={theirs!r}, this run has {mine!r}; "
            "allowed: the saved run's value (its checkpoints hold that setting)"
        )


def check_bc_source(cfg: TrainConfig) -> Path:
    """The ``bc.from_run`` checkpoint folder, after checking that its run did the BC this run would (one line
    naming the first differing key otherwise)."""
    src = Path(cfg.bc.from_run).expanduser()
    ckpt = src / "checkpoints" / "iter_0"
    if not (ckpt / "policy_ds").is_dir() or not (src / "config.yaml").exists():
        raise ConfigError(f"bc.from_run: {src} has no BC checkpoint (checkpoints/iter_0) and config.yaml")
    if diff := _first_difference(cfg, src, BC_KEYS):
        key, theirs, mine = diff
        raise ConfigError(
            f"bc.from_run: {src} ran BC with {key}={theirs!r}, this run has {mine!r}; "
            "allowed: a run with the same BC setting"
        )
    return ckpt


def bc_eval_reusable(cfg: TrainConfig) -> bool:
    """Whether ``bc.from_run``'s evaluation after BC is what this run's would be (``EVAL_KEYS`` equal, the BC state
    the same by ``check_bc_source``): then it is taken, not played again, and every run from one BC start reads
    the same start."""
    return _first_difference(cfg, Path(cfg.bc.from_run).expanduser(), EVAL_KEYS) is None
