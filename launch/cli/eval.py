"""``hierarl eval``: a run's latest checkpoint scored on evaluation panels beside the random policy and the
zero-shot base model, or two runs compared task by task on the panel they share."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from launch.config import ConfigError, one_line, read_run_config
from launch.evaluation.report import paper_table


def cmd_eval(args: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="hierarl eval",
        description="RUN: evaluate a run's latest checkpoint on evaluation panels (the same (task, env seed) pairs "
        "for every run) through the run's own evaluator (its rollout workers, eval temperature, sampling seed and "
        "eval_samples): the paper-style table per task type, success with its Wilson 95%% interval, beside the "
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
    panels = [(name, None) for name in a.panel.split(",")] if a.panel else []
    panels += [(None, split) for split in a.split.split(",")] if a.split else []
    try:
        played = CheckpointEval(run, panels, a.episodes, random=not a.no_random, base=not a.no_base)
    except ConfigError as e:
        print(f"hierarl eval: {one_line(e)}", file=sys.stderr)
        return 2
    tables = []
    for panel, ev, seconds in played.play():
        tables.append((panel.label, _report(run, played, panel, ev, seconds)))
    if len(tables) > 1:
        print(paper_table(tables), flush=True)
    return 0


class CheckpointEval:
    """A run's latest checkpoint on evaluation panels through the run's own evaluator (``wiring.panel_evaluator``:
    its rollout workers, evaluation temperature, sampling seed and ``eval_samples`` a task), so that on the run's
    own panel it plays the episodes of the run's evaluation of that checkpoint. Panels are resolved and checked
    on construction (``ConfigError``), before Ray starts."""

    def __init__(
        self,
        run: Path,
        panels: Sequence[tuple[str | None, str | None]],
        episodes: int,
        *,
        random: bool = True,
        base: bool = True,
    ) -> None:
        """``panels``: (stored panel name, None) or (None, a split scored on its auto panel); empty: the run's own
        panel. ``episodes``: each panel's first N tasks (0: all)."""
        from actors.models import resolve_model_path
        from launch.evaluation.panels import AUTO, load_panel
        from launch.evaluation.scoring import Evaluation, scope

        cfg = self.cfg = read_run_config(run)
        self.adapter = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip() / "adapter"
        self.model_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
        self.episodes = episodes
        self.panels = []  # (the run config with the env options the panel is played in, its evaluation)
        for name, split in panels or [(cfg.eval_panel, None)]:
            name, split = name or AUTO, split or cfg.env.eval_split
            # a stored panel named here is played in the env it was made in (e.g. every TextCraft depth for a run
            # trained on depth 1); the run's own panel and auto panels in the run's env
            own = name in (AUTO, cfg.eval_panel)
            options = dict(cfg.env.options) if own else load_panel(name).options
            env_cfg = dataclasses.replace(
                cfg, env=dataclasses.replace(cfg.env, options=options, eval_split=split)
            )
            evaluated = dataclasses.replace(
                scope(env_cfg),
                eval_panel=name,
                eval_episodes=episodes,
                eval_baselines=True,
                eval_base_model=base,
                eval_random=random,
            )
            evaluation = Evaluation(evaluated, self.model_path)
            evaluation.panel(episodes)  # resolved and checked here
            self.panels.append((env_cfg, evaluation))

    def play(self) -> Iterator[tuple[Any, dict[str, Any], float]]:
        """Per panel: (the panel, ``PanelEvaluator.evaluate``'s result with its episodes, seconds)."""
        import ray
        import torch

        from actors.agents.base import adapter_names
        from actors.lora_weights import read_adapters
        from cluster.ray_cluster import init_ray
        from launch.driver.wiring import panel_evaluator, role_adapters, rollout_pool

        cfg = self.cfg
        device = "cuda" if torch.cuda.is_available() else "cpu"
        weights, _ = read_adapters(self.adapter, adapter_names(role_adapters(cfg)))
        started = not ray.is_initialized()
        init_ray(cfg.ray_address, device=device)
        pools: dict[str, Any] = {}  # one rollout pool per set of env options
        try:
            for env_cfg, evaluation in self.panels:
                key = json.dumps(env_cfg.env.options, sort_keys=True)
                if key not in pools:
                    pools[key] = rollout_pool(env_cfg, self.model_path, device)
                    pools[key].push(weights)
                t0 = time.perf_counter()
                ev = panel_evaluator(cfg, pools[key], evaluation, cfg.eval_samples).evaluate(self.episodes)
                yield evaluation.panel(self.episodes), ev, time.perf_counter() - t0
        finally:
            for pool in pools.values():
                pool.close()
            if started:
                ray.shutdown()


def _report(run: Path, played: CheckpointEval, panel: Any, ev: dict[str, Any], seconds: float) -> list[Any]:
    """One panel's table printed and written to ``<run>/eval_<panel>.md``, ``.csv`` and ``.json`` (every figure of
    the metric schema the evaluation has, the per-task outcomes paired comparisons read among them); returns its
    rows."""
    from launch.evaluation.metrics import eval_metrics
    from launch.evaluation.report import eval_markdown, eval_rows, write_eval

    cfg = played.cfg
    rows = eval_rows(ev["episodes"], ev["random_per_type"], ev["base_per_type"])
    title = (
        f"{cfg.algo} / {cfg.rollout.agent} on {cfg.env.name}, panel {panel.label} ({len(panel.tasks)} tasks × "
        f"{ev['samples']} at T = {ev['temperature']}, {seconds:.0f}s; checkpoint {played.adapter.parent.name})"
    )
    text = eval_markdown(rows, title)
    stem = run / f"eval_{panel.name}"
    write_eval(rows, text, stem)
    figures = {
        m.key: ev[m.key] for m in eval_metrics() if m.key in ev
    }  # the metric schema's, as a run logs them
    record = {**figures, "checkpoint": str(played.adapter.parent), "rows": rows}
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    print(text, flush=True)
    return rows


def _compare_runs(a: Path, b: Path, panel: str | None) -> int:
    """``hierarl eval RUN_A RUN_B``: the two runs' stored per-task outcomes on the panel they share, compared."""
    from launch.evaluation.intervals import rate_text
    from launch.evaluation.panels import load_panel, panel_names
    from launch.evaluation.report import paired_markdown, paired_rows, run_outcomes

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
