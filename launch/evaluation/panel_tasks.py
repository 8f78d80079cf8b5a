"""The records of an evaluation panel (``Panel``, ``PanelTask``), a task's env seed, and the orders that interleave
a panel's tasks by type.

``launch.evaluation.panels`` holds what touches envs and files (the facts of a task, making, storing,
loading, checking and resolving a panel), this module the plain data those work on. Pure Python: builds no
env, imports no Ray, vLLM or DeepSpeed, and not ``launch.evaluation.panels``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs._common import stable_hash


@dataclass(frozen=True)
class PanelTask:
    """One task of a panel: the env is reset with ``(task_id, seed)``."""

    task_id: str
    seed: int
    task_type: str
    fingerprint: str

    @property
    def key(self) -> tuple[str, int]:
        return self.task_id, self.seed


@dataclass(frozen=True)
class Panel:
    """A fixed list of tasks of one env and split, with what it was made from."""

    name: str
    version: int
    env: str
    split: str
    options: dict[str, Any]
    """The env options the panel was made with (``envs.make``)."""
    tasks: tuple[PanelTask, ...]
    made_with: dict[str, str] = field(default_factory=dict)
    """Package → version at making time."""
    size: int = 0
    """The recipe: the first ``size`` tasks of the split's order (0: all)."""
    order: str = "proportional"
    """The recipe: how the tasks are ordered (``ORDERS``)."""
    description: str = ""
    first: int = 0
    """A prefix of the stored panel (``head``): the first ``first`` tasks; 0: the whole panel."""

    @property
    def label(self) -> str:
        """What metrics and tables call it: ``name@version``, with ``[:N]`` for a prefix."""
        return f"{self.name}@{self.version}" + (f"[:{self.first}]" if self.first else "")

    @property
    def digest(self) -> str:
        """A hash of the (task id, seed, fingerprint) list: equal digests, equal panels."""
        text = "\n".join(f"{t.task_id}\t{t.seed}\t{t.fingerprint}" for t in self.tasks)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def head(self, n: int) -> Panel:
        """The first ``n`` tasks (0 or >= its size: the whole panel)."""
        if n <= 0 or n >= len(self.tasks):
            return self
        return dataclasses.replace(self, tasks=self.tasks[:n], first=n)


def task_seed(task_id: str) -> int:
    """A task's env seed: a hash of its id only (independent of run seed, task order and worker count)."""
    return stable_hash(f"hierarl-panel-seed:{task_id}") % 2**31


def _by_type(tasks: Sequence[PanelTask]) -> dict[str, list[PanelTask]]:
    """The tasks per type (types sorted), each type's in a fixed pseudo-random order (hash of task id and seed):
    a function of the set of tasks, never of the order they came in."""
    by_type: dict[str, list[PanelTask]] = {}
    for t in sorted(tasks, key=lambda t: (stable_hash(f"hierarl-panel-order:{t.task_id}:{t.seed}"), t.key)):
        by_type.setdefault(t.task_type, []).append(t)
    return dict(sorted(by_type.items()))


def proportional_order(tasks: Sequence[PanelTask]) -> list[PanelTask]:
    """Interleave the task types so that every prefix keeps their shares (the largest deficit share·k − taken goes
    next, ties by type name): the first N estimate the whole panel's success."""
    by_type = _by_type(tasks)
    total = len(tasks)
    taken = dict.fromkeys(by_type, 0)
    out: list[PanelTask] = []
    for k in range(1, total + 1):
        left = [ty for ty in sorted(by_type) if taken[ty] < len(by_type[ty])]
        ty = max(left, key=lambda ty: (len(by_type[ty]) * k / total - taken[ty], -left.index(ty)))
        out.append(by_type[ty][taken[ty]])
        taken[ty] += 1
    return out


def round_robin_order(tasks: Sequence[PanelTask]) -> list[PanelTask]:
    """One task of each type in turn (types that run out drop out): the first k·types hold k of each, as benchmarks
    that weight every task type equally (ScienceWorld's per-task averages) sample them."""
    lists = list(_by_type(tasks).values())
    return [ts[i] for i in range(max(map(len, lists), default=0)) for ts in lists if i < len(ts)]


ORDERS: dict[str, Callable[[Sequence[PanelTask]], list[PanelTask]]] = {
    "proportional": proportional_order,
    "round_robin": round_robin_order,
}
"""How a panel orders its tasks, so that its first N make a small panel (``Panel.order``)."""
