"""``hierarl sweep SPEC.yaml``: a grid of training runs (algorithm × preset × seed × any config key) scheduled on
one Ray cluster, resumable, summarised in one table and one figure.

A spec::

    out: runs/sweep_demo                      # cells, results.md / results.csv and curves.png go here
    preset: hiper_synthetic_small             # optional: the base preset of every cell (or a grid axis)
    set: [iterations=2, eval_every=1]         # optional: overrides shared by every cell
    grid:                                     # the axes, in this order; every combination is one cell
      algo: [hiper, ppo]
      seed: [0, 1, 2]
      rollout.num_workers: [1, 2]

Every cell is validated before Ray starts. A cell is one ``Trainer`` run in ``<out>/<cell>`` executed as a Ray task;
its rollout and learner workers reserve what they need in placement groups, and the sweep starts a cell only while
the cluster has room for all of them (cells run concurrently as far as the cluster allows; ``rollout.num_workers`` is
an axis like any other). Re-running a sweep skips finished cells and resumes killed ones from their checkpoints.
Works the same under ``ray job submit -- hierarl sweep SPEC.yaml`` (the driver joins the job's cluster).

The table (Markdown and CSV): per cell without its seed, over seeds, the final and best eval success (mean ± the 95 %
t-interval; one seed: its Wilson interval), the random policy's and the zero-shot base model's success on the same
eval panel, wall time and RL samples (episodes). ``curves.png``: eval success
against RL samples and against wall time.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launch.config import ConfigError, TrainConfig, one_line, parse_cli_overrides, resolve_config
from launch.evaluation.intervals import seed_mean
from launch.evaluation.metrics import Metric, scalar_eval_metrics
from launch.evaluation.panels import run_panel


@dataclass(frozen=True)
class SweepSpec:
    out: str
    grid: dict[str, list[Any]]
    preset: str | None = None
    set: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cell:
    """One run of the grid: its axis values (``preset`` among them when it is an axis) and resolved config."""

    values: dict[str, Any]
    cfg: TrainConfig
    name: str = field(default="")

    @property
    def group(self) -> str:
        """The cell without its seed: cells of one group differ only in the seed."""
        return ",".join(f"{k}={v}" for k, v in self.values.items() if k != "seed") or "all"


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a spec file (one-line ``ConfigError`` on anything wrong)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"sweep spec {path}: {one_line(e)}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"sweep spec {path}: expected a mapping with out, grid (and preset, set)")
    unknown = sorted(set(data) - {"out", "grid", "preset", "set"})
    if unknown:
        raise ConfigError(f"sweep spec {path}: unknown key {unknown[0]!r}; allowed: out, grid, preset, set")
    grid = data.get("grid") or {}
    if not isinstance(grid, dict) or not grid:
        raise ConfigError(f"sweep spec {path}: grid must map config keys to lists of values")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep spec {path}: grid.{key} must be a non-empty list")
    if not data.get("out"):
        raise ConfigError(f"sweep spec {path}: out (the sweep's folder) is required")
    fixed = data.get("set") or []
    if isinstance(fixed, str) or not all(isinstance(s, str) for s in fixed):
        raise ConfigError(f"sweep spec {path}: set must be a list of key=value strings")
    return SweepSpec(out=str(data["out"]), grid=dict(grid), preset=data.get("preset"), set=tuple(fixed))


def _cell_name(values: dict[str, Any]) -> str:
    text = "_".join(f"{k}-{v}" for k, v in values.items())
    return re.sub(r"[^A-Za-z0-9_.=-]", "", text.replace("/", "-"))


def cells(spec: SweepSpec) -> list[Cell]:
    """Every combination of the grid, resolved and checked as ``hierarl train`` checks it (before anything starts)."""
    from launch.driver.stage_kinds import check_run

    axes = list(spec.grid)
    out = []
    panels: set[str] = set()  # eval panels checked already (one env build each)
    for combo in itertools.product(*(spec.grid[a] for a in axes)):
        values = dict(zip(axes, combo, strict=True))
        preset = values.get("preset", spec.preset)
        name = _cell_name(values)
        overrides = [*spec.set, *(f"{k}={_text(v)}" for k, v in values.items() if k != "preset")]
        parse_cli_overrides(overrides)  # key=value syntax
        try:
            cfg = resolve_config(preset, [*overrides, f"run_dir={Path(spec.out) / name}"])
            check_run(cfg)
            key = repr((cfg.env.name, cfg.env.options, cfg.env.eval_split, cfg.eval_panel, cfg.eval_episodes))
            if key not in panels:
                run_panel(cfg)  # an unknown panel, or one the installed data does not match, fails here
                panels.add(key)
        except ConfigError as e:
            raise ConfigError(f"sweep cell {name}: {e}") from e
        out.append(Cell(values, cfg, name))
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


def needs(cfg: TrainConfig, gpu: bool) -> dict[str, float]:
    """What a cell's workers reserve: its rollout and learner bundles (``gpus_per_worker`` each on a GPU cluster)."""
    need = {
        "CPU": cfg.rollout.num_workers * cfg.rollout.cpus_per_worker
        + cfg.learner.num_workers * cfg.learner.cpus_per_worker
    }
    if gpu:
        need["GPU"] = (
            cfg.rollout.num_workers * cfg.rollout.gpus_per_worker
            + cfg.learner.num_workers * cfg.learner.gpus_per_worker
        )
    return need


def one_thread_each(
    todo: list[tuple[Cell, TrainConfig, dict[str, float]]], total: dict[str, float]
) -> list[tuple[Cell, TrainConfig, dict[str, float]]]:
    """Cells that will run side by side (two fit the cluster at once) get ``cpu_threads=1`` where it is auto, which
    would give each of them every core of the node; a value set by the user stays."""
    if len(todo) < 2 or not _fits({k: 2 * v for k, v in todo[0][2].items()}, {}, total):
        return todo
    return [(c, cfg if cfg.cpu_threads else dataclasses.replace(cfg, cpu_threads=1), n) for c, cfg, n in todo]


def finished(history: Sequence[dict[str, Any]], cfg: TrainConfig) -> bool:
    if cfg.iterations == 0:
        return any(r.get("phase") == "bc" for r in history)
    return any(r.get("phase") == "rl" and r.get("iteration") == cfg.iterations for r in history)


def _wall(row: dict[str, Any]) -> float:
    """Seconds a metrics row accounts for: BC's wall time, an RL iteration's (eval and checkpoint included)."""
    return float(row.get("wall_s", 0.0) if row.get("phase") == "bc" else row.get("time_iteration", 0.0))


def curve(history: Sequence[dict[str, Any]], cfg: TrainConfig) -> list[dict[str, Any]]:
    """The eval points of one run: RL samples (episodes) and wall seconds so far, eval success with its Wilson
    interval, the figures reported beside it (``_beside``: the random policy's and the base model's success, ...),
    and the panel."""
    per_iter = cfg.rollout.group_size * cfg.rollout.groups_per_iter
    wall = 0.0
    nan = float("nan")
    points = []
    for r in history:
        wall += _wall(r)
        if "eval_success" in r:
            samples = per_iter * max(int(r.get("iteration", 0)), 0)
            points.append(
                {
                    "samples": samples,
                    "wall_s": wall,
                    "eval": float(r["eval_success"]),
                    "ci_low": float(r.get("eval_ci_low", nan)),
                    "ci_high": float(r.get("eval_ci_high", nan)),
                    **{m.key: float(r.get(m.row_key(), nan)) for m in _beside()},
                    "panel": r.get("eval_panel", ""),
                }
            )
    return points


def _beside() -> tuple[Metric, ...]:
    """The final eval's figures a sweep reports beside its success (the metric schema's table columns: the random
    policy, the base model, valid format, ...), each the mean over the seeds."""
    return tuple(m for m in scalar_eval_metrics() if not m.interval)


def interval(points: Sequence[dict[str, Any]], key: str = "eval") -> tuple[float, float, float, str]:
    """(mean, low, high, how) of one eval point per seed: over m >= 2 seeds the mean ± the 95 % t-interval
    (``launch.evaluation.intervals.seed_mean``, clipped to [0, 1]); one seed: its eval's Wilson 95 % interval (of the final eval
    only)."""
    nan = float("nan")
    if not points:
        return nan, nan, nan, ""
    if len(points) == 1:
        p = points[0]
        wilson = key == "eval" and p["ci_low"] == p["ci_low"]
        return p[key], (p["ci_low"] if wilson else nan), (p["ci_high"] if wilson else nan), "Wilson" * wilson
    m = seed_mean([p[key] for p in points])
    return m.mean, max(0.0, m.mean - m.half), min(1.0, m.mean + m.half), f"t, {m.n} seeds"


def summarize(results: Sequence[tuple[Cell, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One row per cell group (its seeds' runs): final and best eval success with their 95 % intervals
    (``interval``), the random policy and the base model on the same panel, wall time and RL samples."""
    groups: dict[str, list[tuple[Cell, list[dict[str, Any]]]]] = {}
    for cell, history in results:
        groups.setdefault(cell.group, []).append((cell, history))
    rows = []
    for group, members in groups.items():
        finals, bests, walls, samples, done = [], [], [], [], 0
        for cell, history in members:
            done += finished(history, cell.cfg)
            rl = [r for r in history if r.get("phase") == "rl"]
            walls.append(sum(_wall(r) for r in history))
            samples.append(cell.cfg.rollout.group_size * cell.cfg.rollout.groups_per_iter * len(rl))
            points = curve(history, cell.cfg)
            if points:  # runs without eval (eval_every=0) have no success figures
                finals.append(points[-1])
                bests.append(max(points, key=lambda p: p["eval"]))
        final, final_lo, final_hi, how = interval(finals)
        best, best_lo, best_hi, _ = interval([{**b, "ci_low": float("nan")} for b in bests])
        rows.append(
            {
                "cell": group,
                "seeds": len(members),
                "finished": done,
                "panel": ", ".join(sorted({p["panel"] for p in finals if p["panel"]})),
                "final_eval": final,
                "final_eval_low": final_lo,
                "final_eval_high": final_hi,
                "interval": how,
                "best_eval": best,
                "best_eval_low": best_lo,
                "best_eval_high": best_hi,
                **{m.key: seed_mean([p[m.key] for p in finals]).mean for m in _beside()},
                "wall_s": seed_mean(walls).mean,
                "samples": seed_mean(samples).mean,
            }
        )
    return rows


def _cell(mean: float, low: float, high: float) -> str:
    if mean != mean:
        return "–"
    return f"{mean:.3f}" + (f" [{low:.3f}, {high:.3f}]" if low == low else "")


def write_table(rows: Sequence[dict[str, Any]], out: Path) -> str:
    """``results.csv`` and ``results.md`` in ``out``; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["cell"])
        writer.writeheader()
        writer.writerows(rows)
    beside = _beside()
    lines = [
        "| cell | seeds (finished) | eval panel | final eval [95 %] | best eval [95 %] | "
        + "".join(f"{m.label} | " for m in beside)
        + "wall time | RL samples |",
        "|---|---|---|---|---|" + "---|" * len(beside) + "---|---|",
    ]
    for r in rows:
        how = f" ({r['interval']})" if r["interval"] else ""
        lines.append(
            f"| {r['cell']} | {r['seeds']} ({r['finished']}) | {r['panel']} | "
            f"{_cell(r['final_eval'], r['final_eval_low'], r['final_eval_high'])}{how} | "
            f"{_cell(r['best_eval'], r['best_eval_low'], r['best_eval_high'])} | "
            + "".join(f"{format(r[m.key], m.fmt)} | " for m in beside)
            + f"{r['wall_s']:.0f} s | {r['samples']:.0f} |"
        )
    lines += [
        "",
        "Over several seeds: their mean ± the 95 % t-interval (t_{0.975, m-1} · s / sqrt(m), m seeds, the eval "
        "panel fixed; clipped to [0, 1]); one seed: the Wilson 95 % interval of its final eval. Best eval: the best point of each "
        "seed's curve (biased upwards). Random policy and base model: on the same panel pairs.",
    ]
    text = "\n".join(lines) + "\n"
    (out / "results.md").write_text(text)
    return text


def plot(results: Sequence[tuple[Cell, list[dict[str, Any]]]], path: Path) -> None:
    """Eval success vs RL samples and vs wall time, one line per cell group (mean over seeds at each point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_s, ax_t) = plt.subplots(1, 2, figsize=(11, 4))
    groups: dict[str, list[list[dict[str, float]]]] = {}
    for cell, history in results:
        groups.setdefault(cell.group, []).append(curve(history, cell.cfg))
    for group, runs in groups.items():
        n = min((len(c) for c in runs), default=0)
        if n == 0:
            continue
        mean = [statistics.fmean(c[i]["eval"] for c in runs) for i in range(n)]
        ax_s.plot([runs[0][i]["samples"] for i in range(n)], mean, marker="o", label=group)
        ax_t.plot([statistics.fmean(c[i]["wall_s"] for c in runs) for i in range(n)], mean, marker="o")
    ax_s.set(xlabel="RL samples (episodes)", ylabel="eval success", ylim=(-0.02, 1.02))
    ax_t.set(xlabel="wall time (s)", ylim=(-0.02, 1.02))
    ax_s.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def read_history(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_cell(cfg: TrainConfig, device: str) -> None:
    """One cell, inside a Ray task: the same ``Trainer`` as ``hierarl train`` (it joins the sweep's cluster)."""
    from launch.driver.build import build_run
    from launch.driver.train import Trainer

    trainer = Trainer(build_run(cfg, device=device))
    try:
        trainer.run()
    finally:
        trainer.close()


def _fits(need: dict[str, float], used: dict[str, float], total: dict[str, float]) -> bool:
    return all(used.get(k, 0.0) + v <= total.get(k, 0.0) + 1e-9 for k, v in need.items())


def run_sweep(spec: SweepSpec, grid: Sequence[Cell], ray_address: str = "") -> int:
    """Run the unfinished cells on one Ray cluster, as many at once as its resources allow; then write the table
    and the curves. Returns 0 when every cell finished, 1 otherwise (the failures are printed)."""

    import ray

    from cluster.ray_cluster import init_ray

    total = init_ray(ray_address)
    device = "cuda" if total.get("GPU", 0) > 0 else "cpu"
    out = Path(spec.out)
    todo = []
    for cell in grid:
        history = read_history(Path(cell.cfg.run_dir))
        if finished(history, cell.cfg):
            print(f"[hierarl] sweep: {cell.name} finished before, skipped", flush=True)
            continue
        cfg = dataclasses.replace(cell.cfg, resume=Path(cell.cfg.run_dir).exists())
        need = needs(cfg, device == "cuda")
        if not _fits(need, {}, total):
            raise ConfigError(f"sweep cell {cell.name} needs {need}, more than the cluster has ({total})")
        todo.append((cell, cfg, need))
    todo = one_thread_each(todo, total)
    task = ray.remote(num_cpus=0, max_retries=0)(_run_cell)
    running: dict[Any, tuple[Cell, dict[str, float]]] = {}
    used: dict[str, float] = {}
    failures = []
    while todo or running:
        while todo and _fits(todo[0][2], used, total):
            cell, cfg, need = todo.pop(0)
            verb = "resumes" if cfg.resume else "starts"
            print(f"[hierarl] sweep: {cell.name} {verb} ({len(running) + 1} running)", flush=True)
            running[task.remote(cfg, device)] = (cell, need)
            for k, v in need.items():
                used[k] = used.get(k, 0.0) + v
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            cell, need = running.pop(ref)
            for k, v in need.items():
                used[k] -= v
            try:
                ray.get(ref)
                print(f"[hierarl] sweep: {cell.name} done", flush=True)
            except Exception as e:  # one cell's failure must not end the others
                failures.append(cell.name)
                print(f"[hierarl] sweep: {cell.name} FAILED: {one_line(e)[:500]}", flush=True)
    results = [(cell, read_history(Path(cell.cfg.run_dir))) for cell in grid]
    table = write_table(summarize(results), out)
    plot(results, out / "curves.png")
    print(f"[hierarl] sweep results ({out / 'results.md'}, results.csv, curves.png):\n{table}", flush=True)
    if failures:
        print(f"[hierarl] sweep: {len(failures)} cell(s) failed: {', '.join(failures)}", flush=True)
    return 1 if failures else 0
