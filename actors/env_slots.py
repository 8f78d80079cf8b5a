"""The slots of ``actors.env_pool.EnvPool``: each slot's worker record, and starting, awaiting, replacing,
recycling and reaping the worker processes behind the slots.

``actors.env_pool`` holds the command protocol (submit, poll, results and failures), this module the worker
processes' lifecycle. ``EnvPool`` inherits ``WorkerSlots``; this module does not import
``actors.env_pool``. Plain ``multiprocessing``; imports no Ray.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from actors.env_process import alive, exit_text, kill_group, last_line, send_quiet, tree_rss_mb, worker_main

_CLOSE_GRACE_S = 5.0  # how long a worker may take to close its environment before it is killed


@dataclass
class _Pending:
    op: Literal["reset", "step"]
    timeout_s: float
    deadline: float


@dataclass
class _Worker:
    proc: BaseProcess
    conn: Connection
    start_deadline: float
    ready: bool = False
    pending: _Pending | None = None
    episodes: int = 0  # resets served by this process
    in_episode: bool = False


class WorkerSlots:
    """The worker processes behind ``EnvPool``'s slots (its base class; ``EnvPool.__init__`` sets these fields)."""

    env_name: str
    env_options: dict[str, Any]
    reset_timeout_s: float
    max_episodes_per_worker: int | None
    max_rss_mb: float | None
    stats: dict[str, int]
    _worker_env: dict[str, str]
    _ctx: BaseContext
    _workers: list[_Worker | None]
    _retiring: list[tuple[BaseProcess, Connection, float]]
    _live: set[BaseProcess]

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=worker_main,
            args=(child_conn, self.env_name, self.env_options, self._worker_env),
            name="hierarl-env-worker",
        )
        proc.start()
        child_conn.close()  # the parent keeps no copy, so the worker's death reads as EOF
        self._live.add(proc)
        return _Worker(proc=proc, conn=parent_conn, start_deadline=time.monotonic() + self.reset_timeout_s)

    def _await_ready(self) -> None:
        """Block until every worker reports that its environment is built (constructor only)."""
        waiting = {w.conn: s for s, w in enumerate(self._workers) if w is not None and not w.ready}
        while waiting:
            left = max(w.start_deadline for w in self._workers if w is not None) - time.monotonic()
            ready = wait(list(waiting), timeout=max(0.0, left))
            if not ready:
                raise RuntimeError(
                    f"env workers {sorted(waiting.values())} not ready after {self.reset_timeout_s}s"
                )
            for conn in ready:
                slot = waiting.pop(conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    w = self._workers[slot]
                    assert w is not None
                    w.proc.join(timeout=1.0)
                    raise RuntimeError(f"env worker {slot} died during start ({exit_text(w.proc)})") from None
                if msg[0] != "ready":
                    raise RuntimeError(f"env {self.env_name!r} could not be built: {last_line(msg[2])}")
                self._workers[slot].ready = True  # type: ignore[union-attr]

    def _replace(self, slot: int, *, respawn: bool = True) -> None:
        w = self._workers[slot]
        if w is not None:
            kill_group(w.proc)
            w.conn.close()
            self._live.discard(w.proc)
        self._workers[slot] = self._spawn() if respawn else None
        if respawn:
            self.stats["restarts"] += 1

    def _recycle_reason(self, w: _Worker) -> str:
        if self.max_episodes_per_worker is not None and w.episodes >= self.max_episodes_per_worker:
            return f"{w.episodes} episodes"
        if self.max_rss_mb is not None and w.proc.pid is not None:
            rss = tree_rss_mb(w.proc.pid)
            if rss > self.max_rss_mb:
                return f"RSS {rss:.0f} MB > {self.max_rss_mb} MB"
        return ""

    def _recycle(self, slot: int) -> None:
        """Retire slot's worker gracefully (it closes its env while the pool goes on); the caller respawns."""
        w = self._workers[slot]
        assert w is not None
        send_quiet(w.conn, ("close",))
        self._retiring.append((w.proc, w.conn, time.monotonic() + _CLOSE_GRACE_S))
        self._workers[slot] = None
        self.stats["recycles"] += 1

    def _reap_retiring(self) -> None:
        keep = []
        for proc, conn, deadline in self._retiring:
            if alive(proc) and time.monotonic() < deadline:
                keep.append((proc, conn, deadline))
                continue
            kill_group(proc)  # also takes down anything the env left running
            conn.close()
            self._live.discard(proc)
        self._retiring = keep
