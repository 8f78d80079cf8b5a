"""A pool of text environments, one per worker subprocess, stepped concurrently and restarted when they fail.

Why subprocesses and not one Ray actor per environment: the heavy benchmarks (ScienceWorld's JVM, ALFWorld /
TextWorld) crash, hang and leak memory (ALFWorld grows ~7 MB per game), and the method papers run 128
environments at once (HiPER App. C.1, HIPIF App. B: group size 8 × 16 groups).  One pool process (wrapped with
``ray.remote`` by ``cluster/``) hosts many environments cheaply and isolates each in its own killable process.
This module imports no Ray.

Design (one slot = one worker process = one environment)::

    caller ── submit_reset(slot, task, seed) / submit_step(slot, action) ──► pipe ──► worker: env.reset/step
    caller ◄────────── poll(timeout) -> [EnvResult, ...] ◄──────────── pipe ◄── ("ok", out) | ("error", tb)

* **Async form** (for a rollout loop that keeps generating while environments step): ``submit_*`` sends one
  command and returns at once; ``poll(timeout)`` returns every result that is ready (at least one unless
  ``timeout`` expires; ``poll(0)`` never blocks).  One command may be in flight per slot.
* **Batched form**: ``reset(requests)`` / ``step(actions)`` submit to all slots, then collect; the workers run
  concurrently, so a batch costs about its slowest member.  ``reset_group`` resets G slots with one
  ``(task_id, seed)``: every member of a GRPO/GiGPO group starts from the same task and state.
* **Per-call deadlines**: each command carries its own deadline (``step_timeout_s`` or ``reset_timeout_s``,
  plus the start-up time left when the worker is still building its environment).
* **Failures are results**: a worker that dies, raises, or misses its deadline is killed together with its
  process group (JVMs and other children of the environment die with it) and replaced by a fresh one; the
  command returns ``EnvResult(failed=True, failure="timeout after 30.0s in step")`` (or ``"worker died (signal
  9) in step"``, ``"exception in step: ValueError: ..."``) and that slot's episode is over, so the caller
  retries its group.  Every episode ends finished (``terminated``), ``truncated``, or failed with a reason.
* **Recycling** (``max_episodes_per_worker``, ``max_rss_mb``) happens between episodes only: when an episode
  ends, or at the next reset.  RSS is VmRSS from /proc of the worker and its descendants (a JVM counts).

As with any ``spawn``/``forkserver`` multiprocessing, the workers import the parent's ``__main__`` module
(``spawn`` once per worker, ``forkserver`` once): scripts that build a pool need an
``if __name__ == "__main__":`` guard and light top-level imports.  Not thread-safe: use it from one thread (a
Ray actor with the default ``max_concurrency=1``).  Workers exit on their own when the pool's process
disappears (their pipe reaches EOF); ``close()`` (or the context manager, or garbage collection / interpreter
exit) kills whatever is left, so no process outlives the pool.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from actors.env_process import alive, exit_text, kill_all, last_line, send_quiet, tree_rss_mb
from actors.env_slots import _CLOSE_GRACE_S, WorkerSlots, _Pending, _Worker

StartMethod = Literal["spawn", "forkserver"]

WORKER_THREAD_ENV: dict[str, str] = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}
"""Set in every worker before its environment is built: one BLAS/OpenMP thread per process (docs/platform.md)."""

_POOLS: weakref.WeakSet[EnvPool] = weakref.WeakSet()


def _at_exit() -> None:
    """Kill the workers of pools never closed.  Registered after ``multiprocessing.util`` registered its own
    exit hook (imported above), so it runs first: otherwise that hook would wait forever on idle workers."""
    for pool in list(_POOLS):
        pool._finalizer()


atexit.register(_at_exit)


@dataclass
class EnvResult:
    """The answer to one ``reset`` or ``step`` command.

    For a reset, ``reward`` is 0 and ``terminated``/``truncated`` are False.  ``failed`` means the machinery
    failed (crash, exception, timeout), not the task: the episode is over, ``failure`` says why, and
    ``terminated``/``truncated`` stay False so that a failure is never mistaken for an MDP outcome.
    """

    slot: int
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    failed: bool = False
    failure: str = ""
    op: Literal["reset", "step"] = "step"

    @property
    def done(self) -> bool:
        """The episode on this slot is over (the slot needs a reset)."""
        return self.terminated or self.truncated or self.failed


class EnvPool(WorkerSlots):
    """``num_workers`` environments ``env_name`` built with ``env_options``, each in its own worker process.

    ``env_name`` is a registry name for ``envs.make`` or an import path ``"module:callable"`` (tests use
    ``"tests.fake_envs:CounterEnv"``).  ``worker_env`` adds environment variables in the workers (e.g.
    ``JAVA_TOOL_OPTIONS="-Xmx256m -XX:+UseSerialGC"`` keeps a ScienceWorld JVM near 250 MB, docs/platform.md).
    The constructor waits until every worker has built its environment and raises ``RuntimeError`` if one
    cannot (a configuration error, not a transient failure).
    """

    def __init__(
        self,
        env_name: str,
        num_workers: int,
        env_options: Mapping[str, Any] | None = None,
        *,
        step_timeout_s: float = 30.0,
        reset_timeout_s: float = 120.0,
        max_episodes_per_worker: int | None = None,
        max_rss_mb: float | None = None,
        start_method: StartMethod = "spawn",
        worker_env: Mapping[str, str] | None = None,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if start_method not in ("spawn", "forkserver"):
            raise ValueError(f"start_method must be 'spawn' or 'forkserver', got {start_method!r}")
        self.env_name = env_name
        self.env_options = dict(env_options or {})
        self.step_timeout_s = float(step_timeout_s)
        self.reset_timeout_s = float(reset_timeout_s)
        self.max_episodes_per_worker = max_episodes_per_worker
        self.max_rss_mb = max_rss_mb
        self._worker_env = {**WORKER_THREAD_ENV, **(worker_env or {})}
        self._ctx = mp.get_context(start_method)
        self._workers: list[_Worker | None] = [None] * num_workers
        self._stash: list[
            EnvResult
        ] = []  # results ready before the next poll (failures found at submit time)
        self._retiring: list[tuple[BaseProcess, Connection, float]] = []
        self._live: set[BaseProcess] = set()
        self._closed = False
        self.stats: dict[str, int] = {
            "restarts": 0,
            "recycles": 0,
            "timeouts": 0,
            "crashes": 0,
            "exceptions": 0,
        }
        self._finalizer = weakref.finalize(self, kill_all, self._live)
        self._finalizer.atexit = False  # _at_exit runs it, before multiprocessing joins its children
        _POOLS.add(self)
        try:
            for slot in range(num_workers):
                self._workers[slot] = self._spawn()
            self._await_ready()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ public API

    @property
    def num_slots(self) -> int:
        return len(self._workers)

    def pids(self) -> list[int | None]:
        """The worker process id of each slot (None while a slot has no worker)."""
        return [w.proc.pid if w is not None else None for w in self._workers]

    def worker_rss_mb(self, slot: int) -> float:
        """Resident memory of slot's worker and its descendants in MiB (0.0 if it has none)."""
        w = self._workers[slot]
        return tree_rss_mb(w.proc.pid) if w is not None and w.proc.pid is not None else 0.0

    def busy_slots(self) -> list[int]:
        """Slots with a command in flight."""
        return [s for s, w in enumerate(self._workers) if w is not None and w.pending is not None]

    def submit_reset(self, slot: int, task_id: str | None = None, seed: int | None = None) -> None:
        """Start a new episode on ``slot`` (abandoning a running one); the result comes from ``poll``."""
        w = self._idle_worker(slot)
        if w is not None and not alive(w.proc):
            self._replace(slot)  # died while idle: a new episode loses nothing, so just start fresh
        elif w is not None and self._recycle_reason(w):
            self._recycle(slot)
        if self._workers[slot] is None:
            self._workers[slot] = self._spawn()
        self._send(slot, ("reset", task_id, seed), "reset", self.reset_timeout_s)

    def submit_step(self, slot: int, action: str) -> None:
        """Send ``action`` to ``slot``'s running episode; the result comes from ``poll``."""
        w = self._idle_worker(slot)
        if w is None or not w.in_episode:
            raise RuntimeError(f"slot {slot} has no running episode: reset it first")
        if not alive(w.proc):
            self.stats["crashes"] += 1
            self._stash.append(self._fail(slot, "step", f"worker died ({exit_text(w.proc)}) between steps"))
            return
        self._send(slot, ("step", action), "step", self.step_timeout_s)

    def poll(self, timeout: float | None = None) -> list[EnvResult]:
        """Results of submitted commands that are ready: at least one, unless ``timeout`` (s) runs out first
        or nothing is in flight.  ``poll(0)`` never blocks.  Commands past their deadline come back failed."""
        out, self._stash = self._stash, []
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self._reap_retiring()
            busy = [s for s, w in enumerate(self._workers) if w is not None and w.pending is not None]
            if not busy:
                return out
            now = time.monotonic()
            next_deadline = min(self._workers[s].pending.deadline for s in busy)  # type: ignore[union-attr]
            wait_s = 0.0 if out else next_deadline - now
            if end is not None:
                wait_s = min(wait_s, end - now)
            handles: dict[Any, int] = {}
            for s in busy:
                w = self._workers[s]
                assert w is not None
                handles[w.conn] = s
                handles[w.proc.sentinel] = s
            ready = wait(list(handles), timeout=max(0.0, wait_s))
            for s in sorted({handles[h] for h in ready}):
                self._service(s, out)
            now = time.monotonic()
            for s in busy:
                w = self._workers[s]
                if w is not None and w.pending is not None and now >= w.pending.deadline:
                    self.stats["timeouts"] += 1
                    p = w.pending
                    out.append(self._fail(s, p.op, f"timeout after {p.timeout_s}s in {p.op}"))
            if out or (end is not None and now >= end):
                return out

    def reset(self, requests: Iterable[tuple[int, str | None, int | None]]) -> list[EnvResult]:
        """Reset many slots at once: ``[(slot, task_id, seed), ...]`` -> results in the same order."""
        requests = list(requests)
        for slot, task_id, seed in requests:
            self.submit_reset(slot, task_id, seed)
        got = self._collect({slot for slot, _, _ in requests})
        return [got[slot] for slot, _, _ in requests]

    def reset_group(self, slots: Sequence[int], task_id: str | None, seed: int | None) -> list[EnvResult]:
        """Reset a GRPO/GiGPO group: G slots on the same task with the same seed, hence the same initial
        state: group-relative advantages compare episodes from one start (HiPER App. C.1, HIPIF App. B: G=8)."""
        return self.reset([(slot, task_id, seed) for slot in slots])

    def step(self, actions: Mapping[int, str]) -> dict[int, EnvResult]:
        """Step many slots at once: ``{slot: action}`` -> ``{slot: result}``."""
        for slot, action in actions.items():
            self.submit_step(slot, action)
        return self._collect(set(actions))

    def close(self) -> None:
        """Ask every worker to close its environment, kill what is still running after a grace period."""
        if self._closed:
            return
        self._closed = True
        procs: list[BaseProcess] = []
        for w in self._workers:
            if w is not None and w.pending is None:  # a busy worker may be hung: the finalizer kills it
                send_quiet(w.conn, ("close",))
                procs.append(w.proc)
        procs += [p for p, _, _ in self._retiring]
        end = time.monotonic() + _CLOSE_GRACE_S
        for p in procs:
            if p.pid is not None:
                p.join(timeout=max(0.0, end - time.monotonic()))
        for w in self._workers:
            if w is not None:
                w.conn.close()
        for _, conn, _ in self._retiring:
            conn.close()
        self._workers = [None] * len(self._workers)
        self._retiring = []
        self._finalizer()  # kills stragglers and their process groups, joins everything

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _idle_worker(self, slot: int) -> _Worker | None:
        if self._closed:
            raise RuntimeError("EnvPool is closed")
        if not 0 <= slot < len(self._workers):
            raise IndexError(f"slot {slot} out of range 0..{len(self._workers) - 1}")
        w = self._workers[slot]
        if (w is not None and w.pending is not None) or any(r.slot == slot for r in self._stash):
            raise RuntimeError(f"slot {slot} has a command in flight: poll its result first")
        return w

    def _send(self, slot: int, msg: tuple[Any, ...], op: Literal["reset", "step"], timeout_s: float) -> None:
        w = self._workers[slot]
        assert w is not None
        now = time.monotonic()
        start_left = 0.0 if w.ready else max(0.0, w.start_deadline - now)
        try:
            w.conn.send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            w.proc.join(timeout=1.0)
            self.stats["crashes"] += 1
            self._stash.append(self._fail(slot, op, f"worker died ({exit_text(w.proc)}) before {op}"))
            return
        w.pending = _Pending(op=op, timeout_s=timeout_s, deadline=now + start_left + timeout_s)

    def _service(self, slot: int, out: list[EnvResult]) -> None:
        """Read what slot's worker sent (a start-up notice, then the result), or notice that it died."""
        w = self._workers[slot]
        assert w is not None and w.pending is not None
        op = w.pending.op
        while True:
            try:
                if not w.conn.poll():
                    break
                msg = w.conn.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "ready":
                w.ready = True
                continue
            if msg[0] == "ok":
                out.append(self._complete(slot, msg[1]))
            elif msg[1] == "construct":
                out.append(
                    self._fail(slot, op, f"env construction failed: {last_line(msg[2])}", respawn=False)
                )
            else:
                self.stats["exceptions"] += 1
                out.append(self._fail(slot, op, f"exception in {op}: {last_line(msg[2])}", tb=msg[2]))
            return
        if not alive(w.proc) or w.conn.closed:
            w.proc.join(timeout=1.0)
            self.stats["crashes"] += 1
            out.append(self._fail(slot, op, f"worker died ({exit_text(w.proc)}) in {op}"))

    def _complete(self, slot: int, payload: tuple[Any, ...]) -> EnvResult:
        w = self._workers[slot]
        assert w is not None and w.pending is not None
        op, w.pending = w.pending.op, None
        if op == "reset":
            obs, info = payload
            w.episodes += 1
            w.in_episode = True
            return EnvResult(slot, obs, 0.0, False, False, info, op="reset")
        obs, reward, terminated, truncated, info = payload
        result = EnvResult(slot, obs, float(reward), bool(terminated), bool(truncated), info, op="step")
        if result.done:
            w.in_episode = False
            if self._recycle_reason(w):
                self._recycle(slot)
                self._workers[slot] = self._spawn()  # warm up the replacement while the caller works
        return result

    def _fail(
        self, slot: int, op: Literal["reset", "step"], reason: str, *, respawn: bool = True, tb: str = ""
    ) -> EnvResult:
        """Kill slot's worker (and its process group), start a fresh one, and report the episode failed."""
        self._replace(slot, respawn=respawn)
        info = {"traceback": tb} if tb else {}
        return EnvResult(slot, "", 0.0, False, False, info, failed=True, failure=reason, op=op)

    def _collect(self, slots: set[int]) -> dict[int, EnvResult]:
        """Poll until every slot in ``slots`` has its result; other slots' results wait for the next poll."""
        got: dict[int, EnvResult] = {}
        others: list[EnvResult] = []
        while len(got) < len(slots):
            for r in self.poll():
                if r.slot in slots:
                    got[r.slot] = r
                else:
                    others.append(r)
        self._stash = others + self._stash
        return got
