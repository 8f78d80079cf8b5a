"""The two baselines every success rate is printed beside, on the same panel pairs: the uniformly random policy and
the zero-shot base model. Each is computed once per task and setting and cached on disk
(``$HIERARL_CACHE/baselines``, default ``~/.cache/hierarl/baselines``), so every run, seed and method of a
comparison reads the same numbers and only the first one pays for them.

A cache file holds one setting (everything that changes the baseline's outcome: for the random policy the env,
its options and step limit; for the base model also the model, engine, dtype, agent protocol and prompts, and the
sampling settings) and one value per task, keyed by (task id, env seed, fingerprint): a panel's prefix, the whole
panel and any other panel holding the same task share the entries. Pure Python (no Ray).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.data import cache_dir
from launch.evaluation.panel_tasks import PanelTask

RANDOM_SEED = 0
"""The random policy's draws (each play seeded by this, the task, its seed and the play's index)."""
RANDOM_REPEATS = 4
"""Plays of each task by the random policy."""
BASE_SEED = 10_000
"""The base model's sampling seed (the same for every run, so the first run's result is everyone's)."""


def task_key(task: PanelTask) -> str:
    return f"{task.task_id}|{task.seed}|{task.fingerprint}"


@dataclass(frozen=True)
class TaskCache:
    """One setting's per-task values in one JSON file (``{"setting": ..., "tasks": {key: value}}``); a value may
    be nan (the baseline does not exist for that task, e.g. an env without a command list)."""

    kind: str
    setting: dict[str, Any]

    @property
    def path(self) -> Path:
        text = json.dumps(self.setting, sort_keys=True, default=str)
        name = (
            f"{self.kind}-{self.setting.get('env', 'env')}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
        )
        return cache_dir() / "baselines" / f"{name}.json"

    def _load(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {k: (math.nan if v is None else float(v)) for k, v in data.get("tasks", {}).items()}

    def missing(self, tasks: Sequence[PanelTask]) -> list[PanelTask]:
        have = self._load()
        return [t for t in tasks if task_key(t) not in have]

    def values(self, tasks: Sequence[PanelTask]) -> list[float] | None:
        """The cached value of every task (None if one is missing)."""
        have = self._load()
        if any(task_key(t) not in have for t in tasks):
            return None
        return [have[task_key(t)] for t in tasks]

    def put(self, values: dict[PanelTask, float]) -> None:
        """Add values (merged with what another process may have written meanwhile; written atomically)."""
        merged = {**self._load(), **{task_key(t): v for t, v in values.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"setting": self.setting, "tasks": {k: (None if v != v else v) for k, v in merged.items()}}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=0, sort_keys=True, default=str)
        os.replace(tmp, self.path)


def random_cache(cfg: Any) -> TaskCache:
    e = cfg.env
    setting = {
        "env": e.name,
        "options": dict(e.options),
        "max_steps": e.max_steps,
        "repeats": RANDOM_REPEATS,
        "seed": RANDOM_SEED,
    }
    return TaskCache("random", setting)


def model_identity(model_path: str | Path) -> str:
    """What the base model's cache entries are tied to besides ``model.path``: a hash of the resolved folder's
    ``config.json`` and its weight files' names and sizes (a model replaced in the same folder gets new entries)."""
    folder = Path(model_path).expanduser()
    if not folder.is_dir():
        return str(model_path)
    parts = [(folder / "config.json").read_text() if (folder / "config.json").is_file() else ""]
    parts += sorted(
        f"{p.name}:{p.stat().st_size}" for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")
    )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def base_cache(cfg: Any, model_path: str | Path) -> TaskCache:
    """``model_path``: the resolved model folder (``actors.models.resolve_model_path``)."""
    m, e, r = cfg.model, cfg.env, cfg.rollout
    setting = {
        "env": e.name,
        "options": dict(e.options),
        "max_steps": e.max_steps,
        "model": m.path,
        "model_files": model_identity(model_path),
        "dtype": m.dtype,
        "max_model_len": m.max_model_len,
        "engine": r.engine,
        "agent": r.agent,
        "agent_options": dict(r.agent_options),
        "history_length": r.history_length,
        "temperature": r.eval_temperature,
        "top_p": r.top_p,
        "max_new_tokens": r.max_new_tokens,
        "seed": BASE_SEED,
    }
    return TaskCache("base", setting)


def random_rates(cfg: Any, tasks: Sequence[PanelTask]) -> list[float]:
    """The random policy's success rate on each task (``RANDOM_REPEATS`` plays from the task's own initial state,
    ``envs.random_policy``), from the cache, the missing ones played here and added; nan everywhere where the env
    offers no command list."""
    cache = random_cache(cfg)
    todo = cache.missing(tasks)
    if todo:
        import envs
        from envs.random_policy import random_policy_wins

        env = envs.make(cfg.env.name, **dict(cfg.env.options))
        try:
            wins = random_policy_wins(
                env,
                [t.key for t in todo],
                max_steps=cfg.env.max_steps,
                seed=RANDOM_SEED,
                repeats=RANDOM_REPEATS,
            )
        finally:
            env.close()
        rates = [math.nan] * len(todo) if wins is None else [w / RANDOM_REPEATS for w in wins]
        cache.put(dict(zip(todo, rates, strict=True)))
    values = cache.values(tasks)
    assert values is not None
    return values
