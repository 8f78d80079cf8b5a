"""Tiny ``TextEnv`` fakes for testing the machinery around environments (``actors.env_pool``), not benchmarks.

Importable by path, e.g. ``EnvPool("tests.fake_envs:FaultyEnv", 2, {})``.

* ``CounterEnv``: count up to a target.  The initial state (target, start, a nonce) is a function of
  ``(task_id, seed)`` only, so a group reset with one seed gives identical observations.
* ``FaultyEnv``: a ``CounterEnv`` that misbehaves on command: ``crash`` (``os._exit(3)``), ``hang`` (sleeps
  ``hang_s``), ``grow`` (keeps ``grow_mb`` more resident memory), ``raise`` (``RuntimeError``).  With
  ``spawn_child=True`` it starts a ``sleep`` subprocess, standing in for the JVM a real adapter owns; its pid
  is in ``info["child_pid"]``.  ``fail_on_init=True`` makes the constructor raise.
* ``FaultsOnceSyntheticEnv``: the synthetic env whose steps, across every process of a pool, take the faults of
  ``faults`` once each and in order (the first step anywhere the first fault, ...), claimed through marker files
  in ``marker_dir``: env-worker deaths and hangs in the middle of a real rollout.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path
from typing import Any

from envs.synthetic import SyntheticHierEnv


class CounterEnv:
    """Reach ``target`` with ``inc``; ``dec`` steps back.  Reward 1.0 on reaching the target."""

    name = "counter"

    def __init__(self, max_steps: int = 20, num_tasks: int = 5) -> None:
        self.max_steps = max_steps
        self._tasks = [f"count-{i}" for i in range(num_tasks)]
        self._task_id = self._tasks[0]
        self._value = self._target = self._steps = 0
        self._nonce = 0

    def task_ids(self, split: str | None = None) -> list[str]:
        return list(self._tasks)

    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self._task_id = task_id if task_id is not None else self._tasks[0]
        rng = random.Random(f"{self._task_id}/{seed}")
        self._target = rng.randint(3, 6)
        self._value = rng.randint(0, 2)
        self._nonce = rng.randint(0, 10**9)
        self._steps = 0
        return self._observation(), self._info(valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._steps += 1
        valid = action in ("inc", "dec")
        self._value += {"inc": 1, "dec": -1}.get(action, 0)
        won = self._value == self._target
        truncated = not won and self._steps >= self.max_steps
        obs = self._observation() if valid else f"Nothing happens. {self._observation()}"
        return obs, 1.0 if won else 0.0, won, truncated, self._info(valid=valid, won=won)

    def close(self) -> None:
        pass

    def expert_action(self) -> str | None:
        return "inc" if self._value < self._target else "dec"

    def _observation(self) -> str:
        return f"[{self._task_id} #{self._nonce}] value {self._value}, target {self._target}."

    def _info(self, *, valid: bool, won: bool = False) -> dict[str, Any]:
        return {
            "task": f"count to {self._target}",
            "admissible_actions": ["inc", "dec"],
            "won": won,
            "score": 1.0 if won else 0.0,
            "valid_action": valid,
            "task_id": self._task_id,
            "task_type": "counter",
            "split": "train",
            "pid": os.getpid(),
        }


class FaultyEnv(CounterEnv):
    """A ``CounterEnv`` that crashes, hangs, leaks or raises on the actions of the same names."""

    name = "faulty"

    def __init__(
        self,
        max_steps: int = 20,
        *,
        hang_s: float = 3600.0,
        grow_mb: int = 200,
        spawn_child: bool = False,
        fail_on_init: bool = False,
    ) -> None:
        if fail_on_init:
            raise ValueError("FaultyEnv asked to fail on init")
        super().__init__(max_steps=max_steps)
        self._hang_s = hang_s
        self._grow_mb = grow_mb
        self._hoard: list[bytes] = []
        self._child = subprocess.Popen(["sleep", "3600"]) if spawn_child else None

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == "crash":
            os._exit(3)
        if action == "hang":
            time.sleep(self._hang_s)
        if action == "grow":
            self._hoard.append(b"\x01" * (self._grow_mb << 20))  # written bytes: resident, not just reserved
        if action == "raise":
            raise RuntimeError("FaultyEnv raised on purpose")
        return super().step(action)

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()

    def _info(self, *, valid: bool, won: bool = False) -> dict[str, Any]:
        info = super()._info(valid=valid, won=won)
        info["child_pid"] = self._child.pid if self._child is not None else None
        return info


class FaultsOnceSyntheticEnv(SyntheticHierEnv):
    """``SyntheticHierEnv`` whose next step anywhere takes the next unclaimed fault: ``crash`` (``os._exit``, as a
    ``kill -9``) or ``hang`` (sleeps an hour, as a stuck simulator)."""

    def __init__(self, marker_dir: str, faults: tuple[str, ...] = ("crash", "hang"), **options: Any) -> None:
        super().__init__(**options)
        self._markers = Path(marker_dir)
        self._faults = tuple(faults)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        for i, fault in enumerate(self._faults):
            try:  # O_EXCL: exactly one step of one process claims each fault
                os.close(os.open(self._markers / f"{i}-{fault}", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                continue
            if fault == "crash":
                os._exit(9)
            time.sleep(3600.0)
        return super().step(action)
