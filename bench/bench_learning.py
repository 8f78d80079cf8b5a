"""Learning curves: success at zero-shot, after BC and per RL iteration, for one or more algorithms over seeds.

Each (algorithm, seed) is one ``hierarl train`` run in its own folder (``<out>/<algo>_seed<k>``), launched one after
the other (they would fight over the 2 cores otherwise); an existing finished run is read, not re-run, so a killed
sweep continues where it stopped.  Printed: the per-run table and, per algorithm, the mean ± std over seeds of train
success (rollouts at the training temperature) and eval success (held-out split, validation temperature) at each
point; written: ``<out>/learning.json`` and ``<out>/learning.png``.

The default main job's curve (SmolLM2, TextCraft depth 1, HiPER)::

    python bench/bench_learning.py --out bench/results/main_job --algos hiper --seeds 0 \\
        --set iterations=6 eval_every=1 eval_zero_shot=true

HiPER vs flat PPO at equal sample budget on the synthetic env's longest tasks (same model, BC and rollout budget)::

    python bench/bench_learning.py --out bench/results/hiper_vs_ppo --preset synthetic_long --algos hiper,ppo \\
        --seeds 0,1,2

The 3-stage study: HiPER, PPO and GiGPO from one BC warm start per seed (``--shared-bc``: the first algorithm's
BC checkpoint is the others' ``bc.from_run``), 6 iterations, eval on the fixed 48-task panel::

    python bench/bench_learning.py --out bench/results/synthetic_3stage --preset synthetic_3stage \
        --algos hiper,ppo,gigpo --seeds 0,1,2 --shared-bc

HiPER against PPO task by task (``--contrast hiper,ppo``: per seed, HiPER's per-task success after RL minus PPO's
from the same BC start, with a t-interval over tasks; and the tasks' differences averaged over seeds)::

    python bench/bench_learning.py --out runs/d2 --preset textcraft_d2 --algos hiper,ppo,gigpo --seeds 0,1,2 \
        --shared-bc --contrast hiper,ppo hiper,gigpo

The same with a negative control: the first algorithm once more per seed with every advantage negated
(``learner.advantage_scale=-1``, labelled ``hiper-negated``); it must not gain over its BC start::

    python bench/bench_learning.py --out bench/results/hiper_vs_ppo_multi --preset synthetic_multi \\
        --algos hiper,ppo --seeds 0,1,2 --negative-control

Summarise runs that already exist (any run folders, e.g. the main job's ``runs/default``), labelled by folder; runs
named ``<label>_seed<k>`` are aggregated per label. ``--from-json`` adds the runs of an earlier ``learning.json``
(folders since deleted keep their curves there)::

    python bench/bench_learning.py --out bench/results/main_job --runs runs/default
    python bench/bench_learning.py --out docs/results/hiper_vs_ppo_multi --runs runs/ppo_seed1 \
        --from-json docs/results/hiper_vs_ppo_multi/learning.json

``--preset synthetic_long`` means ``launch/configs/<algo>_synthetic_long.yaml`` per algorithm; otherwise the
embedded default with ``algo=<name>``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from _env import setup

ROOT = setup()

from learning_tables import aggregate, contrast_table, curve, eval_gain, gain_table  # noqa: E402  (needs setup())

from launch.evaluation.intervals import seed_mean  # noqa: E402  (importable once setup() put the repo on the path)


def read_history(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def finished(history: list[dict[str, Any]], iterations: int) -> bool:
    return any(r.get("phase") == "rl" and r.get("iteration") == iterations for r in history) or (
        iterations == 0 and any(r.get("phase") == "bc" for r in history)
    )


def ensure_run(
    out: Path, name: str, preset: str | None, overrides: list[str], *, run: bool = True
) -> list[dict]:
    """The history of ``hierarl train [preset] overrides`` in ``out/name``; trains it first (log: ``out/name.log``)
    unless it already finished or ``run`` is False."""
    run_dir = out / name
    overrides = [*overrides, f"run_dir={run_dir}"]
    from launch.config import resolve_config

    history = read_history(run_dir)
    if run and not finished(history, resolve_config(preset, overrides).iterations):
        if run_dir.exists():  # a killed run: continue it from its checkpoint (a fresh start if it has none)
            overrides = [*overrides, "resume=true"]
        cmd = [sys.executable, "-m", "launch.cli.main", "train", *([preset] if preset else []), *overrides]
        print("[bench] " + " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        with open(out / f"{name}.log", "w") as log:
            rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=os.environ)
        print(f"[bench] {name}: rc {rc} in {time.perf_counter() - t0:.0f}s", flush=True)
        history = read_history(run_dir)
    return history


def print_paired(table: dict[str, Any], what: str, verb: str, prefix: str = "") -> None:
    """``gain_table``'s or ``contrast_table``'s rows: per seed (named ``prefix`` + key), then over seeds by task."""
    for key, g in table.items():
        print(f"\n{key}: {what} [95 % t over tasks]")
        rows = [
            (f"{prefix}{name}", x, f" ({x['changed']} of {x['tasks']} {verb})")
            for name, x in g["per_seed"].items()
        ]
        if g["over_seeds_by_task"]:
            rows.append(("tasks, mean over seeds", g["over_seeds_by_task"], ""))
        for name, x, note in rows:
            # a zero-width interval would read as a precise zero: it is no change at all
            if x["changed"] == 0:
                print(f"  {name:<24} +0.000: none of the {x['tasks']} tasks {verb}")
            else:
                print(f"  {name:<24} {x['mean']:+.3f} [{x['low']:+.3f}, {x['high']:+.3f}]{note}")


def label_of(run_name: str) -> str:
    """The label a run is aggregated under: its name without a trailing ``_seed<k>``."""
    return re.sub(r"_seed\d+$", "", run_name)


def fmt(row: dict[str, Any], key: str) -> str:
    if key not in row:
        return "-"
    if row.get(key + "_n", 1) > 1 and key + "_ci95" in row:  # mean ± the 95 % t-interval over seeds
        return f"{row[key]:.3f}±{row[key + '_ci95']:.3f}"
    if row.get(key + "_n", 1) > 1:  # rows of a learning.json written before the intervals
        return f"{row[key]:.3f}±{row[key + '_std']:.3f}sd"
    return f"{row[key]:.3f}"


def print_run(name: str, c: list[dict[str, Any]]) -> None:
    print(f"\n{name}")
    print(f"{'point':<10} {'train':>7} {'eval':>7} {'random':>7} {'valid':>7} {'time_s':>8}")
    for pt in c:
        keys = ("train_success", "eval_success", "eval_random", "valid_format", "time_iteration")
        cells = [pt.get(k) for k in keys]
        print(f"{pt['label']:<10} " + " ".join("      -" if v is None else f"{v:7.3f}" for v in cells))


def plot(summary: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(9.6, 4.8))  # wide: the legend sits beside the axes, not over the curves
    # each label's eval and train lines: one hue, dark and light
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
    levels: list[float] = []
    for algo, rows in summary.items():
        for key, style in (("eval_success", "-o"), ("train_success", "--s")):
            pts = [
                (r["iteration"], r[key], r.get(key + "_std", 0.0), r[key + "_n"]) for r in rows if key in r
            ]
            if not pts:
                continue
            # the line joins the points every seed has; a point fewer seeds reached (an extra eval) is hollow
            full = max(n for *_, n in pts)
            xs, ys, es, _ = zip(*[q for q in pts if q[3] == full], strict=True)
            bar = ax.errorbar(
                xs, ys, yerr=es, fmt=style, capsize=3, label=f"{algo} {key.split('_')[0]} (n={full})"
            )
            few = [q for q in pts if q[3] < full]
            if few:
                ax.plot(
                    [q[0] for q in few], [q[1] for q in few], style[-1], mfc="none", color=bar[0].get_color()
                )
        chance = [(r["eval_random"], r["eval_random_n"]) for r in rows if r.get("eval_random") is not None]
        level = statistics.fmean(x for x, n in chance if n == max(m for _, m in chance)) if chance else None
        if level is not None and all(abs(level - x) > 1e-9 for x in levels):  # one line per distinct task set
            levels.append(level)
            ax.axhline(level, color="grey", ls=":", label=f"random policy ({algo}'s tasks)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("RL iteration (-1 = zero-shot, 0 = after BC)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(textwrap.fill(title, 70), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--algos", default="hiper")
    p.add_argument("--seeds", default="0")
    p.add_argument("--preset", default="", help="suffix: launch/configs/<algo>_<preset>.yaml")
    p.add_argument("--set", nargs="*", default=[], help="key=value overrides for every run")
    p.add_argument(
        "--negative-control",
        action="store_true",
        help="also run the first algorithm with learner.advantage_scale=-1 per seed",
    )
    p.add_argument(
        "--shared-bc",
        action="store_true",
        help="per seed, the first algorithm's BC warm start is every other algorithm's (bc.from_run)",
    )
    p.add_argument(
        "--contrast",
        nargs="*",
        default=[],
        help="A,B label pairs: A's per-task success after RL minus B's, paired by task on each seed both ran",
    )
    p.add_argument("--no-run", action="store_true", help="only summarise the runs already in --out")
    p.add_argument("--runs", nargs="*", default=[], help="summarise these run folders instead (no training)")
    p.add_argument(
        "--from-json",
        nargs="*",
        default=[],
        help="also the runs of these earlier learning.json files (no training)",
    )
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in map(Path, a.from_json):
        runs.update(json.loads(path.read_text())["runs"])
    for run_dir in map(Path, a.runs):
        c = curve(read_history(run_dir))
        if c:
            runs[run_dir.name] = c
    algos = [] if a.runs or a.from_json else a.algos.split(",")
    # (label, algorithm, extra overrides): every algorithm, then the negative control if asked for
    variants = [(algo, algo, []) for algo in algos]
    if a.negative_control and algos:
        variants.append((f"{algos[0]}-negated", algos[0], ["learner.advantage_scale=-1"]))
    # Seed-major order: a sweep cut short still holds every algorithm at the seeds it finished.
    for seed in [int(s) for s in a.seeds.split(",")] if algos else []:
        for i, (label, algo, extra) in enumerate(variants):
            preset = f"{algo}_{a.preset}" if a.preset else None
            overrides = ([] if preset else [f"algo={algo}"]) + [*a.set, *extra, f"seed={seed}"]
            if a.shared_bc and i:  # the same BC start for every algorithm of this seed
                overrides.append(f"bc.from_run={out / f'{variants[0][0]}_seed{seed}'}")
            history = ensure_run(out, f"{label}_seed{seed}", preset, overrides, run=not a.no_run)
            if history:
                runs[f"{label}_seed{seed}"] = curve(history)
    curves: dict[str, list[list[dict[str, Any]]]] = {}
    names: dict[str, list[str]] = {}
    for name, c in sorted(runs.items()):
        print_run(name, c)
        curves.setdefault(label_of(name), []).append(c)
        names.setdefault(label_of(name), []).append(name)
    summary = {label: aggregate(cs) for label, cs in curves.items()}
    gains = {label: [g for g in map(eval_gain, cs) if g is not None] for label, cs in curves.items()}
    print(
        f"\n{'algo':<14} {'point':<10} {'train success':>16} {'eval success':>16} {'random policy':>16} "
        f"{'base model':>16}   (mean ± 95 % t-interval over seeds)"
    )
    for algo, rows in summary.items():
        for r in rows:
            keys = ("train_success", "eval_success", "eval_random", "eval_base")
            cells = " ".join(f"{fmt(r, k):>16}" for k in keys)
            print(f"{algo:<14} {r['label']:<10} {cells}")
    for label, g in gains.items():
        if g:
            per_seed = ", ".join(f"{x:+.3f}" for x in g)
            m = seed_mean(g)
            ci = f" ± {m.half:.3f} (95 % t over {m.n} seeds)" if m.n > 1 else ""
            print(f"{label}: eval gain over BC per seed {per_seed}; mean {m.mean:+.3f}{ci}")
    paired = gain_table(curves, names)
    print_paired(paired, "RL gain over BC, mean per-task change", "changed")
    contrasts: dict[str, Any] = {}
    for pair in a.contrast:
        contrasts.update(contrast_table(runs, *pair.split(",")))
    print_paired(
        contrasts, "success after RL, first minus second, mean per-task difference", "differ", "seed "
    )
    (out / "learning.json").write_text(
        json.dumps(
            {
                "summary": summary,
                "gains": gains,
                "paired_gains": paired,
                "contrasts": contrasts,
                "runs": runs,
            },
            indent=1,
        )
    )
    if summary:
        plot(summary, out / "learning.png", f"{', '.join(summary)} — {out.name}")
        print(f"[bench] wrote {out / 'learning.json'} and {out / 'learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
