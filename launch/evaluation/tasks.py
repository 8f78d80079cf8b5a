"""Which tasks a run trains on and which it holds out (pure: builds envs and panels, imports no Ray): the fixed RL
task set (``env.train_panel``'s head), behaviour cloning's pool (the other train tasks), and neither of them holding a
task of an eval panel of the train split. The CLI runs ``task_split`` before Ray starts, so an RL task set that
overlaps the eval panel fails in one line; the driver builds the run from the same split."""

from __future__ import annotations

import random
from collections.abc import Sequence

from launch.config import ConfigError, TrainConfig
from launch.evaluation.panel_tasks import Panel
from launch.evaluation.panels import AUTO, resolve_panel


def env_task_ids(cfg: TrainConfig, split: str) -> list[str]:
    """The run's env's task ids of ``split`` (one env built and closed)."""
    import envs

    env = envs.make(cfg.env.name, **dict(cfg.env.options))
    try:
        return list(env.task_ids(split))
    finally:
        env.close()


def rl_task_panel(cfg: TrainConfig) -> Panel | None:
    """``env.train_tasks`` > 0: the fixed tasks RL plays, the first N of ``env.train_panel`` (the same for every
    seed); None: RL draws from every train task."""
    if not cfg.env.train_tasks:
        return None
    e = cfg.env
    panel = resolve_panel(e.name, dict(e.options), e.train_split, e.train_panel, e.train_tasks)
    if panel.split != e.train_split:
        raise ConfigError(
            f"env.train_panel: panel {panel.label} is of split {panel.split!r}, RL plays env.train_split "
            f"{e.train_split!r}; allowed: a panel of {e.train_split!r} or auto"
        )
    return panel


def held_out_ids(cfg: TrainConfig) -> frozenset[str]:
    """The tasks of a stored eval panel of the train split, all of it whatever ``eval_episodes`` scores (another
    run may score more of it): no run trains on them, neither behaviour cloning nor RL. ``auto`` is a split
    itself: evaluating on the train split with it is an in-sample check, and nothing is held out."""
    e = cfg.env
    if cfg.eval_panel == AUTO:
        return frozenset()
    panel = resolve_panel(e.name, dict(e.options), e.eval_split, cfg.eval_panel, 0)
    return frozenset(t.task_id for t in panel.tasks) if panel.split == e.train_split else frozenset()


def task_split(cfg: TrainConfig) -> tuple[Panel | None, list[str], list[str]]:
    """(the fixed RL task panel or None, the tasks RL plays, the tasks behaviour cloning may demonstrate): builds
    the env, so the CLI runs it before Ray starts and a task set that overlaps the eval panel fails in one line."""
    panel = rl_task_panel(cfg)
    rl, bc = rl_and_bc_tasks(
        env_task_ids(cfg, cfg.env.train_split), panel, cfg.bc.episodes, held_out_ids(cfg)
    )
    return panel, rl, bc


def rl_and_bc_tasks(
    train_ids: Sequence[str], panel: Panel | None, bc_episodes: int, held_out: frozenset[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """(the tasks RL plays, the tasks behaviour cloning may demonstrate): with a fixed RL task set (``panel``), BC
    demonstrates the other train tasks, so the RL tasks start as unseen as the held-out ones; neither holds a task
    of ``held_out`` (an eval panel of the train split: ``held_out_ids``)."""
    kept = [i for i in train_ids if i not in held_out]
    if train_ids and not kept:
        raise ConfigError(
            f"eval_panel: the evaluation scores all {len(train_ids)} train tasks, so none is left to train on; "
            "allowed: eval_episodes > 0 or an env.eval_split other than env.train_split"
        )
    train_ids = kept
    if panel is None:
        return list(train_ids), list(train_ids)
    rl = [t.task_id for t in panel.tasks]
    overlap = sorted(set(rl) & held_out)
    if overlap:
        raise ConfigError(
            f"env.train_panel: RL would train on {len(overlap)} task(s) of the eval panel (first {overlap[0]!r}); "
            "allowed: an RL task set apart from the eval panel"
        )
    chosen = set(rl)
    bc = [i for i in train_ids if i not in chosen]
    if len(bc) < bc_episodes:
        raise ValueError(
            f"env.train_tasks {len(rl)} leaves {len(bc)} of the {len(train_ids)} train tasks for bc.episodes "
            f"{bc_episodes}; allowed: at most {len(train_ids) - bc_episodes}"
        )
    return rl, bc


def stratified_draw(ids: Sequence[str], kinds: Sequence[str], k: int, rng: random.Random) -> list[str]:
    """``k`` of ``ids`` drawn evenly across their ``kinds`` (pure): the kinds take turns in sorted order, each
    giving one of its ids at random; a kind that runs out leaves its turns to the others."""
    pools = {kind: [i for i, c in zip(ids, kinds, strict=True) if c == kind] for kind in sorted(set(kinds))}
    for pool in pools.values():
        rng.shuffle(pool)
    out: list[str] = []
    while len(out) < min(k, len(ids)):
        for pool in pools.values():
            if pool and len(out) < k:
                out.append(pool.pop())
    return out
