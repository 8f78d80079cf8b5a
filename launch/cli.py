"""The ``hierarl`` command.

hierarl train [PRESET] [key=value ...]   the main job (no preset: hiper_textcraft_cpu, see README);
                                         --dry-run: print the resolved config and exit; --help: every key
hierarl eval RUN_DIR [--episodes N]      success per task type of a run's latest checkpoint
hierarl rollout [options]                play episodes, write trajectories as JSONL (+ summary)
hierarl sweep [--dry-run] SPEC.yaml      a grid of runs on one Ray cluster, resumable; a results table + curves
hierarl download-alfworld [DEST]         the official ALFWorld data download (needs the internet)
hierarl presets                          list the YAML presets
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from launch.config import (
    DEFAULT_PRESET,
    PRESET_DIR,
    ConfigError,
    check_bc_source,
    check_run_dir,
    preset_chain,
    read_run_config,
    resolve_config,
)

TRAIN_FLAGS = ("--dry-run", "--help", "-h")


def _split_preset(args: Sequence[str]) -> tuple[str | None, list[str]]:
    if args and "=" not in args[0]:
        return args[0], list(args[1:])
    return None, list(args)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def _describe_preset(preset: str, named: bool) -> str:
    chain = preset_chain(preset)
    path = chain[-1][0]
    try:
        shown = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = path
    text = f"preset {path.stem} ({shown}"
    if len(chain) > 1:
        text += f"; base {chain[0][0].stem}"
    return text + ")" + ("" if named else ": the default, no preset named")


def cmd_train(args: Sequence[str]) -> int:
    """``hierarl train [--dry-run] [PRESET] [key=value ...]`` (``--help``: usage and every config key).
    Everything is resolved and validated before anything heavy starts; a bad input exits 2 with one line."""
    args = list(args)
    if "-h" in args or "--help" in args:
        from launch.config import config_help

        print(config_help())
        return 0
    dry_run = "--dry-run" in args
    args = [a for a in args if a != "--dry-run"]
    unknown = [a for a in args if a.startswith("-")]
    if unknown:
        print(
            f"hierarl train: unknown option {unknown[0]!r}; allowed: {', '.join(TRAIN_FLAGS)}",
            file=sys.stderr,
        )
        return 2
    preset, overrides = _split_preset(args)
    named = preset is not None
    preset = preset or DEFAULT_PRESET
    try:
        from launch.config import validate

        cfg = resolve_config(preset, overrides)
        algo_cfg = validate(cfg)
        if cfg.bc.enabled and cfg.bc.from_run:
            check_bc_source(cfg)
        if not dry_run:
            check_run_dir(cfg)
        described = _describe_preset(preset, named)
    except (ConfigError, ValueError) as e:
        print(f"hierarl train: {_one_line(e)}", file=sys.stderr)
        return 2
    print(f"[hierarl] {described}", flush=True)
    if dry_run:
        from launch.config import resolved_text

        print(
            "[hierarl] resolved config (--dry-run: nothing started):\n" + resolved_text(cfg, algo_cfg), end=""
        )
        return 0
    from launch.train import train

    train(cfg)
    return 0


def cmd_eval(args: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="hierarl eval",
        description="Evaluate a run's latest checkpoint: the paper-style table per task type, beside the random "
        "policy on the same tasks; written to <run>/eval_<split>.md and .csv.",
    )
    p.add_argument("run_dir")
    p.add_argument("--episodes", type=int, default=0, help="0: the whole eval split")
    p.add_argument(
        "--split",
        default=None,
        help="comma-separated splits, e.g. ALFWorld's eval_in_distribution,eval_out_of_distribution (seen / "
        "unseen); default: the run's env.eval_split",
    )
    p.add_argument("--no-random", action="store_true", help="skip the random-policy column (slow envs)")
    a = p.parse_args(args)
    run = Path(a.run_dir)
    latest = run / "checkpoints" / "latest"
    if not latest.exists():
        print(f"hierarl eval: no checkpoint under {run}", file=sys.stderr)
        return 2
    cfg = read_run_config(run)
    adapter = run / "checkpoints" / latest.read_text().strip() / "adapter"

    import torch

    import envs
    from actors.models import resolve_model_path
    from actors.rollout import RolloutWorker
    from envs.random_policy import random_policy_success
    from launch.report import eval_markdown, eval_rows, task_type, write_eval
    from launch.train import rollout_worker_config

    m_path = resolve_model_path(cfg.model.path, cfg.model.cache_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    worker = RolloutWorker(
        rollout_worker_config(
            cfg, m_path, device, adapter_path=str(adapter), temperature=cfg.rollout.eval_temperature
        )
    )
    try:
        for split in (a.split or cfg.env.eval_split).split(","):
            probe = envs.make(cfg.env.name, **dict(cfg.env.options))
            tasks = probe.task_ids(split)
            tasks = tasks[: a.episodes] if a.episodes else tasks
            t0 = time.perf_counter()
            groups = worker.collect(tasks, 1, cfg.seed, packed=False)
            trajs = [t for g in groups for t in g.trajectories]  # type: ignore[union-attr]
            chance: dict[str, float] = {}
            if not a.no_random:
                by_type: dict[str, list[str]] = {}
                for t in trajs:
                    by_type.setdefault(task_type(t), []).append(t.task_id)
                for name, ids in by_type.items():
                    base = random_policy_success(probe, ids, max_steps=cfg.env.max_steps, seed=cfg.seed)
                    chance[name] = float("nan") if base is None else base.success
            probe.close()
            rows = eval_rows(trajs, chance)
            title = (
                f"{cfg.algo} / {cfg.rollout.agent} on {cfg.env.name} {split} ({len(trajs)} episodes, "
                f"{time.perf_counter() - t0:.0f}s; checkpoint {adapter.parent.name})"
            )
            text = eval_markdown(rows, title)
            write_eval(rows, text, run / f"eval_{split}")
            print(text, flush=True)
    finally:
        worker.close()
    return 0


def cmd_rollout(args: Sequence[str]) -> int:
    from actors.rollout import rollout_main

    rollout_main(list(args))
    return 0


def cmd_download_alfworld(args: Sequence[str]) -> int:
    from envs.data import download_alfworld

    dest = args[0] if args else os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld")
    download_alfworld(Path(dest).expanduser())
    return 0


def cmd_presets(args: Sequence[str]) -> int:
    for p in sorted(PRESET_DIR.glob("*.yaml")):
        first = p.read_text().splitlines()[0].lstrip("# ") if p.read_text() else ""
        mark = " (default)" if p.stem == DEFAULT_PRESET else ""
        print(f"{p.stem + mark:<32} {first}")
    return 0


def cmd_sweep(args: Sequence[str]) -> int:
    """``hierarl sweep [--dry-run] SPEC.yaml`` (launch/sweep.py): every cell validated first, then run on one Ray
    cluster, as many at once as it has room for; finished cells are skipped, killed ones resume."""
    from launch.sweep import cells, load_spec, needs, run_sweep

    dry_run = "--dry-run" in args
    rest = [a for a in args if a != "--dry-run"]
    if len(rest) != 1 or rest[0].startswith("-"):
        print("usage: hierarl sweep [--dry-run] SPEC.yaml", file=sys.stderr)
        return 2
    try:
        spec = load_spec(rest[0])
        grid = cells(spec)
    except (ConfigError, ValueError) as e:
        print(f"hierarl sweep: {_one_line(e)}", file=sys.stderr)
        return 2
    print(f"[hierarl] sweep {rest[0]}: {len(grid)} cells in {spec.out}", flush=True)
    if dry_run:
        for cell in grid:
            print(f"  {cell.name}: {needs(cell.cfg, gpu=False)['CPU']:g} CPU")
        return 0
    return run_sweep(spec, grid)


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "rollout": cmd_rollout,
    "sweep": cmd_sweep,
    "download-alfworld": cmd_download_alfworld,
    "presets": cmd_presets,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args[0] not in COMMANDS:
        print(f"hierarl: unknown command {args[0]!r}; one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
