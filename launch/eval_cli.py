"""``hierarl eval``: a run's latest checkpoint scored on evaluation panels beside the random policy and the
zero-shot base model, or two runs compared task by task on the panel they share."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launch.config import ConfigError, one_line, read_run_config


def cmd_eval(args: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="hierarl eval",
        description="RUN: evaluate a run's latest checkpoint on evaluation panels (the same (task, env seed) pairs "
        "for every run): the paper-style table per task type, success with its Wilson 95%% interval, beside the "
        "random policy and the zero-shot base model on the same pairs; written to <run>/eval_<panel>.md, .csv "
        "and .json (per-task outcomes). RUN_A RUN_B: compare two runs on the panel they share, task by task "
        "(their stored outcomes: eval_<panel>.json, else their last eval in metrics.jsonl), with an exact sign "
        "test; nothing is played.",
    )
    p.add_argument("run_dir", nargs="+", help="RUN, or RUN_A RUN_B")
    p.add_argument(
        "--panel",
        default=None,
        help="comma-separated panel names (hierarl panel list); default: the run's eval_panel",
    )
    p.add_argument("--episodes", type=int, default=0, help="the first N tasks of each panel; 0: all of them")
    p.add_argument(
        "--split",
        default=None,
        help="comma-separated splits, each scored on its auto panel, e.g. ALFWorld's valid_seen,valid_unseen "
        "(seen / unseen); instead of --panel",
    )
    p.add_argument("--no-random", action="store_true", help="skip the random-policy column (slow envs)")
    p.add_argument("--no-base", action="store_true", help="skip the zero-shot base model column")
    a = p.parse_args(args)
    if len(a.run_dir) == 2:
        return _compare_runs(*map(Path, a.run_dir), a.panel)
    if len(a.run_dir) > 2:
        print("hierarl eval: RUN, or two runs to compare (RUN_A RUN_B)", file=sys.stderr)
        return 2
    run = Path(a.run_dir[0])
    latest = run / "checkpoints" / "latest"
    if not latest.exists():
        print(f"hierarl eval: no checkpoint under {run}", file=sys.stderr)
        return 2
    if a.panel and a.split:
        print("hierarl eval: --panel or --split, not both", file=sys.stderr)
        return 2
    cfg = read_run_config(run)
    adapter = run / "checkpoints" / latest.read_text().strip() / "adapter"
    from launch.panels import AUTO, load_panel, resolve_panel

    wanted = [(name, cfg.env.eval_split) for name in a.panel.split(",")] if a.panel else []
    wanted += [(AUTO, split) for split in a.split.split(",")] if a.split else []
    panels = []  # (panel, the run config with the env options it is played with)
    try:
        for name, split in wanted or [(cfg.eval_panel, cfg.env.eval_split)]:
            # a stored panel named here is played in the env it was made in (e.g. every TextCraft depth for a run
            # trained on depth 1); the run's own panel and auto panels in the run's env
            own = name in (AUTO, cfg.eval_panel)
            options = dict(cfg.env.options) if own else load_panel(name).options
            env_cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, options=options))
            panels.append((resolve_panel(cfg.env.name, options, split, name, a.episodes), env_cfg))
    except ConfigError as e:
        print(f"hierarl eval: {one_line(e)}", file=sys.stderr)
        return 2

    import torch

    from actors.models import resolve_model_path
    from actors.rollout import RolloutWorker
    from launch.baselines import BASE_SEED, base_cache, random_rates
    from launch.evaluation import outcome_string, per_type
    from launch.report import eval_markdown, eval_rows, paper_table, write_eval
    from launch.specs import rollout_worker_config

    m_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def worker(env_cfg: Any, adapter_path: str | None) -> RolloutWorker:
        wc = rollout_worker_config(
            env_cfg, m_path, device, adapter_path=adapter_path, temperature=cfg.rollout.eval_temperature
        )
        return RolloutWorker(wc)

    def play(w: RolloutWorker, tasks: Sequence[Any], sample_seed: int) -> list[Any]:
        ids, seeds = [t.task_id for t in tasks], [t.seed for t in tasks]
        groups = w.collect(ids, 1, packed=False, seeds=seeds, sample_seed=sample_seed)
        return [t for g in groups for t in g.trajectories]  # type: ignore[union-attr]

    policies: dict[str, RolloutWorker] = {}  # one per set of env options
    tables = []
    try:
        for panel, env_cfg in panels:
            key = json.dumps(env_cfg.env.options, sort_keys=True)
            if key not in policies:
                policies[key] = worker(env_cfg, str(adapter))
            t0 = time.perf_counter()
            trajs = play(policies[key], panel.tasks, cfg.seed + 10_000)
            seconds = time.perf_counter() - t0
            chance = {} if a.no_random else per_type(panel, random_rates(env_cfg, panel.tasks))
            base: dict[str, float] = {}
            if not a.no_base:
                cache = base_cache(env_cfg, m_path)
                missing = cache.missing(panel.tasks)
                if missing:
                    zero_shot = worker(env_cfg, None)
                    try:
                        played = play(zero_shot, missing, BASE_SEED)
                    finally:
                        zero_shot.close()
                    won = {(t.task_id, t.info.get("seed")): float(t.won) for t in played}
                    cache.put({t: won[t.key] for t in missing if t.key in won})
                values = cache.values(panel.tasks)
                base = per_type(panel, values) if values is not None else {}
            rows = eval_rows(trajs, chance, base)
            title = (
                f"{cfg.algo} / {cfg.rollout.agent} on {cfg.env.name}, panel {panel.label} ({len(trajs)} of "
                f"{len(panel.tasks)} tasks played, {seconds:.0f}s; checkpoint {adapter.parent.name})"
            )
            text = eval_markdown(rows, title)
            stem = run / f"eval_{panel.name}"
            write_eval(rows, text, stem)
            outcomes = outcome_string(panel, trajs)
            record = {
                "panel": panel.label,
                "outcomes": outcomes,
                "checkpoint": str(adapter.parent),
                "rows": rows,
            }
            stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
            tables.append((panel.label, rows))
            print(text, flush=True)
    finally:
        for w in policies.values():
            w.close()
    if len(tables) > 1:
        print(paper_table(tables), flush=True)
    return 0


def _compare_runs(a: Path, b: Path, panel: str | None) -> int:
    """``hierarl eval RUN_A RUN_B``: the two runs' stored per-task outcomes on the panel they share, compared."""
    from launch.panels import load_panel, panel_names
    from launch.report import paired_markdown, paired_rows, run_outcomes
    from launch.stats import rate_text

    found = [run_outcomes(r, panel) for r in (a, b)]
    for run, out in zip((a, b), found, strict=True):
        if out is None:
            what = f"panel {panel}" if panel else "any panel"
            print(
                f"hierarl eval: {run} has no evaluation on {what}: run `hierarl eval {run}"
                f"{' --panel ' + panel if panel else ''}` first",
                file=sys.stderr,
            )
            return 2
    oa, ob = found
    assert oa is not None and ob is not None
    if oa.panel != ob.panel:
        print(
            f"hierarl eval: {a} was evaluated on {oa.label}, {b} on {ob.label}: no shared panel to compare on "
            "(--panel NAME picks one both have)",
            file=sys.stderr,
        )
        return 2
    name, _, version = oa.panel.rpartition("@")
    types = None
    if name in panel_names() and str(load_panel(name).version) == version:
        types = [t.task_type for t in load_panel(name).tasks]
    rows = paired_rows(oa.outcomes, ob.outcomes, types)
    total = rows[-1]
    n = total["tasks"]
    wins_a, wins_b = total["a_only"] + total["both"], total["b_only"] + total["both"]
    title = (
        f"A = {a} ({oa.source}): {rate_text(wins_a, n)}\n"
        f"B = {b} ({ob.source}): {rate_text(wins_b, n)}\n"
        f"on the {n} tasks of {oa.panel} both played (success [95 % Wilson])"
    )
    print(paired_markdown(rows, title), flush=True)
    return 0
