"""The env worker process and the process plumbing of ``actors.env_pool``: the worker's command loop, killing a
worker with its process group (an environment's JVM dies with it), exit texts, and resident memory from /proc.
Plain ``os`` and ``multiprocessing``; imports no Ray."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import traceback
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any


def worker_main(
    conn: Connection, env_name: str, env_options: dict[str, Any], worker_env: dict[str, str]
) -> None:
    """Worker loop: build the env, then answer ``reset``/``step`` commands until ``close`` or EOF."""
    with contextlib.suppress(OSError):
        os.setsid()  # own process group: the pool kills the env's children (JVMs) together with the worker
    os.environ.update(worker_env)
    try:
        env = build_env(env_name, env_options)
    except BaseException:
        send_quiet(conn, ("error", "construct", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return  # the pool is gone
            if msg[0] == "close":
                return
            try:
                if msg[0] == "reset":
                    out: Any = env.reset(task_id=msg[1], seed=msg[2])
                else:
                    out = env.step(msg[1])
                conn.send(("ok", out))
            except Exception:
                conn.send(("error", msg[0], traceback.format_exc()))
    finally:
        with contextlib.suppress(Exception):
            env.close()


def build_env(env_name: str, options: dict[str, Any]) -> Any:
    if ":" in env_name:
        module_name, attr = env_name.split(":", 1)
        return getattr(importlib.import_module(module_name), attr)(**options)
    from envs.base import make

    return make(env_name, **options)


def send_quiet(conn: Connection, msg: tuple[Any, ...]) -> None:
    with contextlib.suppress(OSError, ValueError):
        conn.send(msg)


def alive(proc: BaseProcess) -> bool:
    return proc.pid is not None and proc.is_alive()


def kill_group(proc: BaseProcess) -> None:
    """SIGKILL the worker's process group (the worker leads it, see setsid), then reap the worker."""
    if proc.pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):  # died before setsid, or group gone
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.is_alive():
        proc.kill()
    proc.join(timeout=5.0)


def kill_all(procs: set[BaseProcess]) -> None:
    for proc in list(procs):
        kill_group(proc)
    procs.clear()


def exit_text(proc: BaseProcess) -> str:
    code = proc.exitcode
    if code is None:
        return "exit code unknown"
    if code < 0:
        return f"signal {-code}"
    return f"exit code {code}"


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown error"


def vmrss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except (OSError, ValueError):
        pass
    return kids


def tree_rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` plus its descendants, in MiB (from /proc; no psutil)."""
    total_kb, stack, seen = 0, [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total_kb += vmrss_kb(p)
        stack += children(p)
    return total_kb / 1024.0
