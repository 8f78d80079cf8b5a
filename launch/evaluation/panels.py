"""Evaluation panels: named, versioned, fixed lists of (task id, env seed) per benchmark and split, stored as data
(``launch/panels/<name>.json``), so every seed and every method of a comparison is scored on the same tasks.

A panel is made from the installed env (``hierarl panel make``): every task id of the split, each with

* its **env seed**, a hash of the task id (``task_seed``): the same task always starts from the same state, whatever
  the run's seed, the order of the tasks or the number of rollout workers;
* its **task type** (ALFWorld's six types, ScienceWorld's task family, TextCraft's depth, ...) for per-type tables;
* a **fingerprint** of the data behind it (``FACTS``): the initial observation and instruction where a reset is
  cheap, ALFWorld's PDDL problem, ScienceWorld's variation range and package version (its tasks live in its jar).

The order is fixed once and for all, tasks interleaved by type (``ORDERS``): so that every prefix keeps the types'
shares (``proportional_order``, the default), or one of each type in turn (``round_robin_order``, for benchmarks
averaged per task type); so the first N tasks (``eval_episodes=N``) are a small panel representative of the whole,
one flag away from it (``eval_episodes=0``). A panel records the versions of the env's packages it was made with;
``check_panel`` refuses a panel whose task is missing from the installed data or whose data differs (one line naming
the panel and the first such task). ``eval_panel=auto`` (the default) derives the panel from the installed env the
same way and names it after the stored panel it equals, if any.

Pure Python: builds envs (``envs.make``), imports no Ray, vLLM or DeepSpeed.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib.metadata
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from launch.config import ConfigError
from launch.evaluation.panel_tasks import ORDERS, Panel, PanelTask, proportional_order, task_seed

PANEL_DIR = Path(__file__).parents[1] / "panels"
AUTO = "auto"
"""``eval_panel=auto``: the panel derived from the run's env, eval split and options (module docstring)."""

PACKAGES: dict[str, tuple[str, ...]] = {
    "alfworld": ("alfworld", "textworld"),
    "scienceworld": ("scienceworld",),
    "textcraft": ("textcraft",),
    "virtualhome": ("virtualhome-eval",),
    "webshop": ("hierarl", "rank-bm25"),
    "synthetic": ("hierarl",),
}
"""The packages an env's tasks and engine come from (WebShop's text engine and the synthetic env are this
project's own): their versions are recorded in every panel made with it."""


def _hash(*parts: object) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:12]


# --- what each env says about a task without playing it -------------------------------------------------------

Facts = Callable[[Any, str, Sequence[tuple[str, int]]], list[tuple[str, str]]]
"""(env, split, [(task id, seed)]) → [(task type, fingerprint)]."""


def _reset_facts(env: Any, split: str, tasks: Sequence[tuple[str, int]]) -> list[tuple[str, str]]:
    """The default: reset each task with its seed; type from ``info``, fingerprint of the first observation and the
    instruction (what the agent is shown at the start)."""
    out = []
    for task_id, seed in tasks:
        obs, info = env.reset(task_id=task_id, seed=seed)
        out.append((str(info.get("task_type") or "all"), _hash(obs, info.get("task", ""))))
    return out


def _alfworld_facts(env: Any, split: str, tasks: Sequence[tuple[str, int]]) -> list[tuple[str, str]]:
    """ALFWorld: a reset loads a TextWorld game (~0.7 s), so the facts come from the game files: the task type of
    ``traj_data.json`` and the game's PDDL problem (its objects and initial state)."""
    from envs.alfworld import list_games

    games = {g.task_id: g for g in list_games(env.data_dir, split)}
    out = []
    for task_id, _ in tasks:
        game = games[task_id]
        out.append((game.task_type, _hash(json.loads(game.game_file.read_text())["pddl_problem"])))
    return out


def _scienceworld_facts(env: Any, split: str, tasks: Sequence[tuple[str, int]]) -> list[tuple[str, str]]:
    """ScienceWorld: a reset costs ~0.35 s and its tasks live in the package's jar, so the fingerprint is the
    variation, its family's official split sizes and the package version (another version: another data version)."""
    from envs.scienceworld import SPLIT_SIZES

    version = _version("scienceworld")
    out = []
    for task_id, _ in tasks:
        family = task_id.rpartition(":")[0]
        out.append((family, _hash(task_id, SPLIT_SIZES[family], version)))
    return out


FACTS: dict[str, Facts] = {"alfworld": _alfworld_facts, "scienceworld": _scienceworld_facts}
"""Envs whose facts do not come from a reset (``_reset_facts``, the default)."""


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def package_versions(env_name: str) -> dict[str, str]:
    return {p: _version(p) for p in PACKAGES.get(env_name, ())}


def task_facts(
    env_name: str, env: Any, split: str, tasks: Sequence[tuple[str, int]]
) -> list[tuple[str, str]]:
    return FACTS.get(env_name, _reset_facts)(env, split, tasks)


# --- making, storing, loading -----------------------------------------------------------------------------------


def derive(
    env_name: str,
    options: dict[str, Any],
    split: str,
    *,
    name: str = AUTO,
    size: int = 0,
    order: str = "proportional",
    env: Any = None,
) -> Panel:
    """The panel of ``split`` as the installed env gives it: every task id, its seed, type and fingerprint, in
    ``ORDERS[order]``; the first ``size`` (0: all). ``env``: an env built with ``options`` (else built here)."""
    if order not in ORDERS:
        raise ConfigError(f"panel order: unknown {order!r}; allowed: {', '.join(ORDERS)}")
    own = env is None
    env = build_env(env_name, options) if own else env
    try:
        tasks = ORDERS[order](split_tasks(env_name, env, split))
    finally:
        if own:
            env.close()
    tasks = tasks[:size] if size else tasks
    return Panel(
        name, 1, env_name, split, dict(options), tuple(tasks), package_versions(env_name), size, order
    )


def split_tasks(env_name: str, env: Any, split: str) -> list[PanelTask]:
    """Every task of ``split`` with its seed, type and fingerprint, in the env's own order."""
    pairs = [(i, task_seed(i)) for i in env.task_ids(split)]
    facts = task_facts(env_name, env, split, pairs)
    return [PanelTask(i, s, ty, fp) for (i, s), (ty, fp) in zip(pairs, facts, strict=True)]


def panel_path(name: str) -> Path:
    return PANEL_DIR / f"{name}.json"


def panel_names() -> list[str]:
    return sorted(p.stem for p in PANEL_DIR.glob("*.json"))


def to_json(panel: Panel) -> str:
    """One task a line (diffs of a remade panel stay readable)."""
    head = {
        "name": panel.name,
        "version": panel.version,
        "description": panel.description,
        "env": panel.env,
        "split": panel.split,
        "options": panel.options,
        "size": panel.size,
        "order": panel.order,
        "made_with": panel.made_with,
        "digest": panel.digest,
    }
    lines = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}," for k, v in head.items()]
    rows = [json.dumps([t.task_id, t.seed, t.task_type, t.fingerprint]) for t in panel.tasks]
    body = ",\n".join(f"    {r}" for r in rows)
    return "{\n" + "\n".join(lines) + '\n  "tasks": [\n' + body + "\n  ]\n}\n"


def from_json(text: str, where: str) -> Panel:
    try:
        d = json.loads(text)
        tasks = tuple(PanelTask(str(i), int(s), str(ty), str(fp)) for i, s, ty, fp in d["tasks"])
        panel = Panel(
            d["name"],
            int(d["version"]),
            d["env"],
            d["split"],
            dict(d["options"]),
            tasks,
            dict(d["made_with"]),
            int(d.get("size", 0)),
            d.get("order", "proportional"),
            d.get("description", ""),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"eval_panel: {where} is not a panel file ({type(e).__name__}: {e})") from e
    if len({t.key for t in tasks}) != len(tasks):
        raise ConfigError(f"eval_panel: {where} lists a (task id, seed) twice")
    if d.get("digest") not in (None, panel.digest):
        raise ConfigError(
            f"eval_panel: {where}'s tasks were edited by hand (digest {panel.digest} != {d['digest']})"
        )
    return panel


def load_panel(name: str) -> Panel:
    """A stored panel by name; an unknown name fails in one line with the known ones."""
    path = panel_path(name)
    if not path.is_file():
        known = panel_names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"eval_panel: unknown panel {name!r}{hint}; allowed: auto, {', '.join(known)} (launch/panels/)"
        )
    return from_json(path.read_text(), str(path))


def save_panel(panel: Panel, root: Path = PANEL_DIR) -> Path:
    path = root / f"{panel.name}.json"
    path.write_text(to_json(panel))
    return path


LISTED = "listed"
"""A panel's ``order`` when its tasks are an explicit list (a pre-registered selection, its rule in the
description): remade, it keeps the same task ids and takes their facts from the installed data."""


def remake(panel: Panel, env: Any = None) -> Panel:
    """The panel's recipe (env, split, options, size) applied to the installed env again, or its listed tasks
    looked up again (``LISTED``); its version goes up by one if its tasks changed."""
    if panel.order == LISTED:
        own = env is None
        env = build_env(panel.env, panel.options) if own else env
        try:
            by_id = {t.task_id: t for t in split_tasks(panel.env, env, panel.split)}
        finally:
            if own:
                env.close()
        tasks = tuple(by_id[t.task_id] for t in panel.tasks if t.task_id in by_id)
        new = dataclasses.replace(panel, tasks=tasks, made_with=package_versions(panel.env))
    else:
        new = derive(
            panel.env,
            panel.options,
            panel.split,
            name=panel.name,
            size=panel.size,
            order=panel.order,
            env=env,
        )
    same = new.digest == panel.digest
    return dataclasses.replace(new, version=panel.version + (0 if same else 1), description=panel.description)


# --- checking a panel against the installed data ----------------------------------------------------------------


def check_panel(panel: Panel, env: Any) -> list[str]:
    """Every task of ``panel`` against ``env`` (built with the run's options): a task id the installed data lacks,
    or whose fingerprint differs (another data version), fails in one line naming the panel and the first such
    task. Returns notes (package versions that differ from the panel's)."""
    ids = set(env.task_ids(panel.split))
    where = f"eval_panel: panel {panel.label} ({panel.env} {panel.split})"
    missing = [t for t in panel.tasks if t.task_id not in ids]
    installed = package_versions(panel.env)
    made = ", ".join(f"{p} {v}" for p, v in panel.made_with.items()) or "the built-in env"
    now = ", ".join(f"{p} {v}" for p, v in installed.items()) or "the built-in env"
    if missing:
        raise ConfigError(
            f"{where}: task {missing[0].task_id!r} is not in the installed data ({len(missing)} of "
            f"{len(panel.tasks)} missing; the panel was made with env options {json.dumps(panel.options)} and "
            f"{made}, installed {now}); allowed: a panel made from this data (hierarl panel make)"
        )
    facts = task_facts(panel.env, env, panel.split, [t.key for t in panel.tasks])
    for t, (task_type, fingerprint) in zip(panel.tasks, facts, strict=True):
        if fingerprint != t.fingerprint or task_type != t.task_type:
            raise ConfigError(
                f"{where}: task {t.task_id!r} differs from the installed data (another data version: made with "
                f"{made}, installed {now}); allowed: a panel made from this data (hierarl panel make)"
            )
    return [
        f"panel {panel.label} was made with {p} {v}, installed {installed.get(p)}"
        for p, v in panel.made_with.items()
        if installed.get(p) != v
    ]


def stored_match(panel: Panel) -> Panel | None:
    """The stored panel whose tasks ``panel``'s are (all of them, or a prefix), as that panel (or its ``head``)."""
    for name in panel_names():
        try:
            stored = load_panel(name)
        except ConfigError:
            continue
        n = len(panel.tasks)
        if stored.env == panel.env and stored.tasks[:n] == panel.tasks:
            return stored.head(n)
    return None


def auto_panel(env_name: str, options: dict[str, Any], split: str, first: int, env: Any) -> Panel:
    """``eval_panel=auto``: the first ``first`` tasks of ``split`` in a stored panel's order when a stored panel
    holds them (named after it), else in ``proportional_order`` (named ``auto-<env>-<split>-<digest>``)."""
    tasks = split_tasks(env_name, env, split)
    versions = package_versions(env_name)
    for order, arrange in ORDERS.items():
        panel = Panel(AUTO, 1, env_name, split, dict(options), tuple(arrange(tasks)), versions, 0, order)
        stored = stored_match(panel.head(first))
        if stored is not None:
            return stored
    panel = Panel(AUTO, 1, env_name, split, dict(options), tuple(proportional_order(tasks)), versions).head(
        first
    )
    return dataclasses.replace(panel, name=f"auto-{env_name}-{split}-{panel.digest[:8]}", first=0)


def resolve_panel(env_name: str, options: dict[str, Any], eval_split: str, name: str, first: int) -> Panel:
    """The tasks an evaluation scores: stored panel ``name`` (checked against the installed data) or, for
    ``auto``, the panel derived from the env's ``eval_split`` (named after the stored panel it equals, if any);
    its first ``first`` tasks (0: all). Fails in one line (``ConfigError``) before anything heavy starts."""
    env = build_env(env_name, options)
    try:
        if name == AUTO:
            return auto_panel(env_name, options, eval_split, first, env)
        panel = load_panel(name)
        if panel.env != env_name:
            raise ConfigError(
                f"eval_panel: panel {panel.label} is for env {panel.env!r}, the run's env.name is {env_name!r}; "
                f"allowed: a panel of {env_name} ({', '.join(panel_names_for(env_name)) or 'none stored'}) or auto"
            )
        panel = panel.head(first)
        for note in check_panel(panel, env):
            print(f"[hierarl] note: {note}", flush=True)
        return panel
    finally:
        env.close()


def panel_names_for(env_name: str) -> list[str]:
    out = []
    for name in panel_names():
        try:
            if load_panel(name).env == env_name:
                out.append(name)
        except ConfigError:
            continue
    return out


def build_env(env_name: str, options: dict[str, Any]) -> Any:
    """``envs.make`` for a panel check: an env that cannot be built (package or data missing) fails in one line."""
    import envs

    try:
        return envs.make(env_name, **options)
    except (ImportError, OSError, ValueError) as e:
        raise ConfigError(
            f"eval_panel: env {env_name!r} with options {options} cannot be built to resolve its eval panel "
            f"({type(e).__name__}: {e})"
        ) from e


def run_panel(cfg: Any) -> Panel:
    """``resolve_panel`` for a run config (``eval_panel``, ``eval_episodes``, the env and its eval split)."""
    return resolve_panel(
        cfg.env.name, dict(cfg.env.options), cfg.env.eval_split, cfg.eval_panel, cfg.eval_episodes
    )


def shards(tasks: Sequence[PanelTask], workers: int) -> list[list[PanelTask]]:
    """The tasks dealt over ``workers`` rollout workers (each carries its own seed, so the split changes nothing
    about which (task, seed) pairs are played)."""
    return [list(tasks[k::workers]) for k in range(workers)]
