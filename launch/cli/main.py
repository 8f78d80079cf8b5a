"""The ``hierarl`` command.

hierarl train [PRESET] [key=value ...]   the main job (no preset: hiper_textcraft_cpu, see README);
                                         --dry-run: print the resolved config and exit; --help: every key
hierarl eval RUN_DIR [--panel P,...]     success per task type of a run's latest checkpoint on evaluation panels
hierarl eval RUN_A RUN_B [--panel P]     two runs compared task by task on the panel they share (sign test)
hierarl panel list|show|make|check       the evaluation panels (fixed (task, env seed) lists, launch/panels/)
hierarl rollout [options]                play episodes, write trajectories as JSONL (+ summary)
hierarl sweep [--dry-run] SPEC.yaml      a grid of runs on one Ray cluster, resumable; a results table + curves
hierarl view RUN [RUN_B] [-o FILE]       a run's curves, episodes and eval grid as one HTML page (RUN_B overlaid)
hierarl download-alfworld [DEST]         the official ALFWorld data download (needs the internet)
hierarl presets                          list the YAML presets
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from common.errors import RunStopped
from launch.cli.eval import cmd_eval
from launch.config import (
    DEFAULT_PRESET,
    PRESET_DIR,
    ConfigError,
    check_bc_source,
    check_run_dir,
    one_line,
    preset_chain,
    resolve_config,
)

TRAIN_FLAGS = ("--dry-run", "--help", "-h")


def _split_preset(args: Sequence[str]) -> tuple[str | None, list[str]]:
    if args and "=" not in args[0]:
        return args[0], list(args[1:])
    return None, list(args)


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
        from launch.driver.stage_kinds import check_run

        cfg = resolve_config(preset, overrides)
        algo_cfg = check_run(cfg)
        if cfg.bc.enabled and cfg.bc.from_run:
            check_bc_source(cfg)
        if not dry_run:
            check_run_dir(cfg)
        described = _describe_preset(preset, named)
        from launch.evaluation.panels import run_panel

        panel = run_panel(cfg)  # builds the env: an unknown or mismatched panel fails here, before Ray
        if cfg.eval_panel != "auto" or cfg.env.train_panel != "auto":
            from launch.evaluation.tasks import task_split

            task_split(cfg)  # RL tasks apart from the eval panel: refused here, before Ray
        if not dry_run:
            from launch.cli.preflight import check_demonstrations

            check_demonstrations(cfg)  # the demonstrations BC will clone fit rollout.max_new_tokens
    except (ConfigError, ValueError) as e:
        print(f"hierarl train: {one_line(e)}", file=sys.stderr)
        return 2
    print(f"[hierarl] {described}; eval panel {panel.label} ({len(panel.tasks)} tasks)", flush=True)
    if dry_run:
        from launch.config import resolved_text

        print(
            "[hierarl] resolved config (--dry-run: nothing started):\n" + resolved_text(cfg, algo_cfg), end=""
        )
        return 0
    from launch.driver.train import train

    try:
        train(cfg)
    except RunStopped as e:
        print(f"hierarl train: stopped: {one_line(e)} (what it wrote so far: {cfg.run_dir})", file=sys.stderr)
        return 1
    return 0


def cmd_panel(args: Sequence[str]) -> int:
    """``hierarl panel list|show|make|check`` (launch/evaluation/panels.py): the stored evaluation panels."""
    p = argparse.ArgumentParser(
        prog="hierarl panel", description="Evaluation panels (launch/panels/<name>.json)."
    )
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="the stored panels")
    show = sub.add_parser("show", help="a panel's header and its tasks per type")
    show.add_argument("name")
    make = sub.add_parser(
        "make",
        help="make a panel from the installed env (NAME ENV SPLIT), or remake a stored one from its recipe (NAME "
        "alone; its version goes up if its tasks changed)",
    )
    make.add_argument("name")
    make.add_argument("env", nargs="?")
    make.add_argument("split", nargs="?")
    make.add_argument("--options", type=json.loads, default={}, help="env options as JSON (envs.make)")
    make.add_argument(
        "--size", type=int, default=0, help="keep the first N tasks of the split's order (0: all)"
    )
    make.add_argument(
        "--order", default="proportional", help="proportional or round_robin (launch/evaluation/panels.py)"
    )
    make.add_argument("--description", default="")
    make.add_argument("--out", default=None, help="folder to write to (default: launch/panels)")
    check = sub.add_parser("check", help="check a stored panel against the installed data")
    check.add_argument("name")
    check.add_argument("--options", type=json.loads, default=None, help="env options (default: the panel's)")
    a = p.parse_args(args)

    from launch.evaluation import panels as P

    try:
        if a.action == "list":
            for name in P.panel_names():
                pa = P.load_panel(name)
                made = ", ".join(f"{k} {v}" for k, v in pa.made_with.items()) or "built in"
                print(f"{pa.label:<34} {pa.env:<12} {pa.split:<14} {len(pa.tasks):>5} tasks  ({made})")
        elif a.action == "show":
            pa = P.load_panel(a.name)
            types: dict[str, int] = {}
            for t in pa.tasks:
                types[t.task_type] = types.get(t.task_type, 0) + 1
            print(f"{pa.label}: {pa.description}")
            print(f"  env {pa.env}, split {pa.split}, options {json.dumps(pa.options)}, digest {pa.digest}")
            print(f"  made with {pa.made_with}; {len(pa.tasks)} tasks:")
            for ty, n in sorted(types.items()):
                print(f"    {ty:<40} {n}")
        elif a.action == "make":
            out = Path(a.out) if a.out else P.PANEL_DIR
            if a.env is None:
                old = P.load_panel(a.name)
                panel = P.remake(old)
                verb = "unchanged" if panel.version == old.version else f"changed: version {panel.version}"
            else:
                panel = P.derive(a.env, a.options, a.split, name=a.name, size=a.size, order=a.order)
                old = (
                    P.from_json((out / f"{a.name}.json").read_text(), a.name)
                    if (out / f"{a.name}.json").exists()
                    else None
                )
                if old is not None:
                    bump = 0 if old.digest == panel.digest else 1
                    panel = dataclasses.replace(panel, version=old.version + bump)
                panel = dataclasses.replace(
                    panel, description=a.description or (old.description if old else "")
                )
                verb = "written"
            path = P.save_panel(panel, out)
            print(f"{path}: {panel.label}, {len(panel.tasks)} tasks ({verb})")
        elif a.action == "check":
            pa = P.load_panel(a.name)
            options = pa.options if a.options is None else a.options
            env = P.build_env(pa.env, options)
            try:
                notes = P.check_panel(pa, env)
            finally:
                env.close()
            for note in notes:
                print(f"note: {note}")
            print(f"{pa.label}: all {len(pa.tasks)} tasks match the installed data")
    except ConfigError as e:
        print(f"hierarl panel: {one_line(e)}", file=sys.stderr)
        return 2
    return 0


def cmd_rollout(args: Sequence[str]) -> int:
    from launch.cli.rollout import rollout_main

    rollout_main(list(args))
    return 0


def cmd_download_alfworld(args: Sequence[str]) -> int:
    """``hierarl download-alfworld [DEST]``: ALFWorld's official data download (``alfworld-download``; needs the
    internet) into DEST (default ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``); then point ``ALFWORLD_DATA`` at it."""
    from envs.data import download_alfworld

    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: hierarl download-alfworld [DEST]", file=sys.stderr)
        return 2
    dest = args[0] if args else os.environ.get("ALFWORLD_DATA", "~/.cache/alfworld")
    try:
        download_alfworld(Path(dest).expanduser())
    except OSError as e:
        print(f"hierarl download-alfworld: {one_line(e)}", file=sys.stderr)
        return 1
    return 0


def cmd_presets(args: Sequence[str]) -> int:
    """``hierarl presets``: every YAML preset of ``launch/configs/`` with its first comment line."""
    for p in sorted(PRESET_DIR.glob("*.yaml")):
        first = p.read_text().splitlines()[0].lstrip("# ") if p.read_text() else ""
        mark = " (default)" if p.stem == DEFAULT_PRESET else ""
        print(f"{p.stem + mark:<32} {first}")
    return 0


def cmd_sweep(args: Sequence[str]) -> int:
    """``hierarl sweep [--dry-run] SPEC.yaml`` (launch/cli/sweep.py): every cell validated first, then run on one Ray
    cluster, as many at once as it has room for; finished cells are skipped, killed ones resume."""
    from launch.cli.sweep import cells, load_spec, needs, run_sweep

    dry_run = "--dry-run" in args
    rest = [a for a in args if a != "--dry-run"]
    if len(rest) != 1 or rest[0].startswith("-"):
        print("usage: hierarl sweep [--dry-run] SPEC.yaml", file=sys.stderr)
        return 2
    try:
        spec = load_spec(rest[0])
        grid = cells(spec)
    except (ConfigError, ValueError) as e:
        print(f"hierarl sweep: {one_line(e)}", file=sys.stderr)
        return 2
    print(f"[hierarl] sweep {rest[0]}: {len(grid)} cells in {spec.out}", flush=True)
    if dry_run:
        for cell in grid:
            print(f"  {cell.name}: {needs(cell.cfg, gpu=False)['CPU']:g} CPU")
        return 0
    return run_sweep(spec, grid)


def cmd_view(args: Sequence[str]) -> int:
    """``hierarl view RUN [RUN_B] [-o report.html] [--episodes N]``: one self-contained HTML page of a run folder
    (learning curves, with RUN_B's overlaid; RUN's kept episodes; its eval grid before and after RL)."""
    from launch.view.page import build_page
    from launch.view.run_data import ViewError, read_run

    p = argparse.ArgumentParser(prog="hierarl view", description=cmd_view.__doc__)
    p.add_argument("runs", nargs="+", metavar="RUN")
    p.add_argument("-o", "--out", default="", help="the HTML file (default: RUN/report.html)")
    p.add_argument("--episodes", type=int, default=16, help="episodes shown per iteration (default 16)")
    a = p.parse_args(args)
    if len(a.runs) > 2:
        print(f"hierarl view: one run, or two to overlay; got {len(a.runs)}", file=sys.stderr)
        return 2
    try:
        runs = [read_run(r, episodes_per_iteration=a.episodes) for r in a.runs]
    except ViewError as e:
        print(f"hierarl view: {e}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else Path(a.runs[0]) / "report.html"
    out.write_text(build_page(runs))
    print(f"[hierarl] wrote {out} ({out.stat().st_size / 1e6:.1f} MB): open it in a browser")
    return 0


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "rollout": cmd_rollout,
    "sweep": cmd_sweep,
    "panel": cmd_panel,
    "download-alfworld": cmd_download_alfworld,
    "presets": cmd_presets,
    "view": cmd_view,
}


# Commands whose docstring is their whole help; the others parse ``--help`` themselves (train lists every key).
DOC_HELP = ("sweep", "download-alfworld", "presets")
HELP_FLAGS = ("-h", "--help")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in HELP_FLAGS:
        print(__doc__)
        return 0
    if args[0] not in COMMANDS:
        print(f"hierarl: unknown command {args[0]!r}; one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if args[0] in DOC_HELP and any(a in HELP_FLAGS for a in args[1:]):
        print(inspect.cleandoc(COMMANDS[args[0]].__doc__ or "").replace("``", "`"))
        return 0
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
