"""Checkpoints of a run: ``<run_dir>/checkpoints/iter_<k>``, each complete or absent, the newest readable one loaded.

A checkpoint holds the learner group's trainable state (``LearnerGroup.save_checkpoint``: adapters, value heads,
optimizer states, RNG) and the driver's (``driver.pt``: iteration, adapter version, RNG, the iteration's metrics
row, the parts' own counters; one-step-off: the adapter its in-flight rollouts came from). It is written to a
temporary folder and renamed, so a folder under its final name is complete; then ``latest`` points at it and the RL
checkpoints beyond ``keep_last`` go (``iter_0``, after BC, always stays).
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.errors import RunStopped
from common.rng import process_rngs
from learners.group import LearnerGroup


def checkpoint_iterations(root: Path) -> list[int]:
    """Iterations with a complete checkpoint folder (``iter_<k>``; temporary ``.iter_<k>.tmp`` ones are not)."""
    return sorted(int(p.name[5:]) for p in root.glob("iter_*") if p.is_dir() and p.name[5:].isdigit())


def checkpoint_candidates(root: Path) -> list[Path]:
    """The checkpoints to try, newest first: ``latest``'s target, then every complete ``iter_<k>`` downwards."""
    latest = root / "latest"
    first = [latest.read_text().strip()] if latest.exists() else []
    names = first + [f"iter_{k}" for k in sorted(checkpoint_iterations(root), reverse=True)]
    return [root / name for name in dict.fromkeys(names)]


def checkpoints_to_prune(iterations: Sequence[int], keep_last: int) -> list[int]:
    """The RL iterations whose checkpoints go: all but the newest ``keep_last`` (0: none go); iteration 0, the
    BC checkpoint, always stays."""
    rl = sorted(k for k in iterations if k > 0)
    return rl[:-keep_last] if keep_last and len(rl) > keep_last else []


class Checkpointer:
    """Saves and loads a run's checkpoints under ``root`` (``checkpoint_keep_last``: ``keep_last``)."""

    def __init__(self, root: Path, keep_last: int) -> None:
        self.root, self.keep_last = root, keep_last

    @property
    def has_latest(self) -> bool:
        return (self.root / "latest").exists()

    def save(
        self,
        iteration: int,
        learner: LearnerGroup,
        state: dict[str, Any],
        behaviour: dict[str, np.ndarray] | None = None,
    ) -> Path:
        """``iter_<iteration>``: the learner's state, ``state`` with the process RNGs (``driver.pt``), and the
        behaviour adapter of one-step-off's in-flight rollouts if given. A full disk is named in one line."""
        path, tmp = self.root / f"iter_{iteration}", self.root / f".iter_{iteration}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            learner.save_checkpoint(str(tmp))
            torch.save({"iteration": iteration, **state, "rng": process_rngs()}, tmp / "driver.pt")
            if behaviour is not None:
                np.savez(tmp / "behaviour_adapter.npz", **behaviour)
        except Exception as e:
            shutil.rmtree(tmp, ignore_errors=True)
            free = shutil.disk_usage(self.root).free
            if free < 256 * 2**20 or getattr(e, "errno", None) == errno.ENOSPC:
                raise RunStopped(
                    f"checkpoint {path}: no space left on device ({free / 2**20:.0f} MiB free under {self.root})"
                ) from e
            raise
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        (self.root / "latest.tmp").write_text(path.name)
        (self.root / "latest.tmp").replace(self.root / "latest")
        for old in checkpoints_to_prune(checkpoint_iterations(self.root), self.keep_last):
            shutil.rmtree(self.root / f"iter_{old}", ignore_errors=True)
        return path

    def load_newest(self, learner: LearnerGroup) -> tuple[Path, dict[str, Any]] | None:
        """Load the learner state of the newest readable checkpoint and return (its folder, its driver state); an
        unreadable one (truncated, corrupted) is named in one line and the previous one tried. None: none readable."""
        for path in checkpoint_candidates(self.root):
            try:
                learner.load_checkpoint(str(path))
                state = torch.load(path / "driver.pt", weights_only=False)
            except Exception as e:
                print(
                    f"[hierarl] checkpoint {path} is unreadable ({type(e).__name__}: {e}); trying an older one"
                )
                continue
            check_driver_state(path, state)
            return path, state
        return None


DRIVER_KEYS = ("iteration", "version", "rng")
"""What ``Trainer.resume`` reads from every ``driver.pt``; older code wrote no ``rng``."""


def check_driver_state(path: Path, state: dict[str, Any]) -> None:
    """Refuse, in one line, a checkpoint that older code wrote: it is readable but cannot resume exactly (a resume
    without the RNG state would silently draw other rollouts than the killed run)."""
    missing = [k for k in DRIVER_KEYS if k not in state]
    if missing:
        raise RunStopped(
            f"checkpoint {path} was written by an older hierarl (its driver.pt lacks {', '.join(missing)}) and "
            "cannot resume exactly: start a new run_dir, or resume with the version that wrote it"
        )


def behaviour_adapter(path: Path) -> dict[str, np.ndarray] | None:
    """The one-step-off behaviour adapter a checkpoint saved, if any."""
    file = path / "behaviour_adapter.npz"
    if not file.exists():
        return None
    with np.load(file) as z:
        return {k: z[k] for k in z.files}
