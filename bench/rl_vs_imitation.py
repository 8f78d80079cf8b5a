"""The RL-vs-imitation study (docs/results/rl_vs_imitation.md): the RL-task pilot and the study's tables, read from
the runs' ``metrics.jsonl`` (nothing is trained here).

    python bench/rl_vs_imitation.py pilot RUN --write     # the pilot's BC outcomes per goal -> textcraft_depth1_rl8
    python bench/rl_vs_imitation.py table --runs DIR      # every arm, seed and contrast -> JSON beside the page

Pilot: a run cloned BC on one half of the 72 train goals outside the held-out panel (``textcraft_depth1_pilot_a``)
and is scored on the other half (its RL-task evaluation and ``hierarl eval RUN --panel textcraft_depth1_pilot_b``).
A goal's pilot rate is its wins over its episodes; the 8 goals nearest 0.5 become the RL tasks (ties:
several-ingredient goals first, then the panel rule's salted hash), so RL's groups can differ in outcome.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
from pathlib import Path

from _env import setup, write_json

setup()

import prereg_panel  # noqa: E402

RL_PANEL = "textcraft_depth1_rl8"
RL_TASKS = 8


def rows(run: Path) -> list[dict]:
    return [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines() if r]


def pilot_episodes(run: Path, panel: str) -> dict[str, list[float]]:
    """Goal of candidate panel ``panel`` -> [wins, episodes] of the run's BC policy on it: its BC row's RL-task
    evaluation where that scored the goal, and ``hierarl eval RUN --panel <panel>`` (``eval_<panel>.json``)."""
    from launch.evaluation.panels import load_panel

    ids = [t.task_id for t in load_panel(panel).tasks]
    out = {i: [0.0, 0.0] for i in ids}
    bc = next(r for r in rows(run) if r.get("phase") == "bc")
    k = bc.get("train_eval_samples", 1)
    for task, rate in zip(
        bc.get("train_eval_task_ids", []), bc.get("train_eval_task_rates", []), strict=True
    ):
        if task in out:
            out[task][0] += rate * k
            out[task][1] += k
    stored = run / f"eval_{panel}.json"
    if stored.exists():
        ev = json.loads(stored.read_text())
        for task, rate in zip(ids, ev["task_rates"], strict=True):
            out[task][0] += rate * ev["samples"]
            out[task][1] += ev["samples"]
    return out


def choose(episodes: dict[str, list[float]], kinds: dict[str, str]) -> list[str]:
    """The ``RL_TASKS`` goals whose pilot success (wins / episodes) is nearest 0.5 (pure); ties: several-ingredient
    goals first, then the salted hash. Goals never won or always won are taken only if too few are mixed."""

    def key(task: str) -> tuple[float, int, str]:
        wins, n = episodes[task]
        mean = wins / n
        several = kinds[task] == "several ingredients"
        return (
            abs(mean - 0.5),
            0 if several else 1,
            hashlib.sha256(f"{prereg_panel.SALT}:rl:{task}".encode()).hexdigest(),
        )

    return sorted((t for t in episodes if episodes[t][1]), key=key)[:RL_TASKS]


def cmd_pilot(run: Path, panel: str, write: bool) -> dict:
    import envs
    from launch.evaluation.panels import save_panel

    env = envs.make("textcraft", **prereg_panel.OPTIONS)
    episodes = pilot_episodes(run, panel)
    kinds = {t: env.task_stratum(t) for t in episodes}
    chosen = choose(episodes, kinds)
    table = {
        t: {"wins": w, "episodes": n, "rate": w / n, "kind": kinds[t], "chosen": t in chosen}
        for t, (w, n) in sorted(episodes.items(), key=lambda kv: -kv[1][0] / max(kv[1][1], 1))
        if n
    }
    for t, row in table.items():
        mark = "*" if row["chosen"] else " "
        print(
            f"{mark} {t:<40} {row['kind']:<20} {row['rate']:.3f} ({row['wins']:.0f} of {row['episodes']:.0f})"
        )
    mixed = sum(0 < row["rate"] < 1 for row in table.values())
    print(f"{len(table)} goals scored; {mixed} with mixed outcomes; chosen: {', '.join(chosen)}")
    if write:
        text = (
            f"The {RL_TASKS} train goals outside {prereg_panel.NAME} whose 4-pass BC pilot success was nearest 0.5 "
            "(the RL tasks of the RL-vs-imitation study; bench/rl_vs_imitation.py pilot)."
        )
        print(save_panel(prereg_panel.listed(env, RL_PANEL, chosen, text)))
    return {"run": str(run), "candidates": panel, "goals": table, "chosen": chosen}


PANELS = {
    "held_out": "eval_",
    "held_out_greedy": "eval_greedy_",
    "rl_tasks": "train_eval_",
    "rl_tasks_greedy": "train_eval_greedy_",
}
"""Where each evaluation's per-task rates are in a metrics row (``launch.driver.run_log.eval_fields``)."""

CONTRASTS = (
    ("rl", "bc4"),
    ("rft", "bc4"),
    ("rl", "rft"),
    ("rl", "best_bc"),
    ("bc_all", "bc4"),
    ("bc8", "bc4"),
)
"""(arm, arm it is compared with), paired by task; ``best_bc`` is the BC arm with the highest mean on that panel."""

BC_ARMS = ("bc2", "bc4", "bc8", "bc_all")


def arm_rows(runs: Path, seed: int) -> dict[str, dict]:
    """The metrics row of each arm of one seed: BC after 2/4/8 passes (``bc8_seed``: its ``bc_epoch`` rows and its
    BC row), the main job's BC start and its last RL evaluation (``hiper_seed``), RFT's (``rft_seed``), BC on every
    demonstration (``bcall_seed``)."""
    out: dict[str, dict] = {}
    read = {
        name: rows(runs / f"{name}_seed{seed}")
        for name in ("hiper", "rft", "bc8", "bcall")
        if (runs / f"{name}_seed{seed}" / "metrics.jsonl").exists()
    }
    for name, rs in read.items():
        bc = next((r for r in rs if r.get("phase") == "bc"), None)
        last = next((r for r in reversed(rs) if r.get("phase") == "rl" and "eval_task_rates" in r), None)
        if name == "hiper" and bc is not None:
            out["bc4"] = bc
            if last is not None:
                out["rl"] = last
        elif name == "rft" and last is not None:
            out["rft"] = last
        elif name == "bc8":
            out.update({f"bc{r['bc_epoch']}_curve": r for r in rs if r.get("phase") == "bc_epoch"})
            if bc is not None:
                out["bc8"] = bc
        elif name == "bcall" and bc is not None:
            out["bc_all"] = bc
    if "bc2_curve" in out:
        out["bc2"] = out.pop("bc2_curve")
    if "bc4_curve" in out:
        out["bc4_of_bc8_run"] = out.pop("bc4_curve")
    return out


def rates(row: dict, prefix: str) -> list[float] | None:
    return row.get(f"{prefix}task_rates")


def contrast(per_seed: dict[int, tuple[list[float], list[float]]]) -> dict:
    """Arm A − arm B paired by task: per seed (t over tasks), over seeds by task (each task's difference averaged
    over the seeds, t over tasks), the seed-level t-interval over the seeds' mean differences, and the exact sign
    test over tasks of the seed-averaged differences."""
    from launch.evaluation.intervals import paired_gain, seed_mean, sign_test

    seeds = sorted(per_seed)
    each = {s: paired_gain(per_seed[s][1], per_seed[s][0]) for s in seeds}
    n = len(per_seed[seeds[0]][0]) if seeds else 0
    mean_a = [statistics.fmean(per_seed[s][0][t] for s in seeds) for t in range(n)]
    mean_b = [statistics.fmean(per_seed[s][1][t] for s in seeds) for t in range(n)]
    pooled = paired_gain(mean_b, mean_a)
    diffs = [a - b for a, b in zip(mean_a, mean_b, strict=True)]
    sd = statistics.stdev(diffs) if len(diffs) > 1 else math.nan
    seed_level = seed_mean([each[s].mean for s in seeds])

    def record(g) -> dict:
        return {"mean": g.mean, "low": g.low, "high": g.high, "tasks": g.tasks, "changed": g.changed}

    return {
        "per_seed": {str(s): record(each[s]) for s in seeds},
        "over_seeds_by_task": record(pooled),
        "seed_level": {"mean": seed_level.mean, "half": seed_level.half, "seeds": seed_level.n},
        "sign_test": {
            "better": sum(d > 0 for d in diffs),
            "worse": sum(d < 0 for d in diffs),
            "p": sign_test(sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)),
        },
        "seeds_with_low_above_0": sum(each[s].low > 0 for s in seeds),
        # the mean difference a paired t over these tasks detects with 80 % power at 5 %: (t + z_0.8) · sd / sqrt(n)
        "smallest_detectable": (t95_of(len(diffs) - 1) + 0.8416) * sd / math.sqrt(len(diffs))
        if len(diffs) > 1
        else math.nan,
    }


def t95_of(df: int) -> float:
    from launch.evaluation.intervals import t95

    return t95(df)


def cmd_table(runs: Path, seeds: list[int]) -> dict:
    """Every arm's success per seed and panel, and the contrasts of ``CONTRASTS`` (module docstring)."""
    by_seed = {s: arm_rows(runs, s) for s in seeds}
    by_seed = {s: arms for s, arms in by_seed.items() if arms}
    out: dict = {"runs": str(runs), "seeds": sorted(by_seed), "arms": {}, "contrasts": {}, "random": {}}
    # each arm's per-task success per seed: what a reader (and tests/unit/test_results_rl_vs_imitation.py)
    # recomputes every contrast from
    out["task_rates"] = {}
    for panel, prefix in PANELS.items():
        arms: dict[str, dict[str, float]] = {}
        for s, rows_of in by_seed.items():
            for arm, row in rows_of.items():
                r = rates(row, prefix)
                if r is not None:
                    arms.setdefault(arm, {})[str(s)] = statistics.fmean(r)
                    out["task_rates"].setdefault(panel, {}).setdefault(arm, {})[str(s)] = r
            random = next(
                (
                    row.get(f"{prefix}random")
                    for row in rows_of.values()
                    if row.get(f"{prefix}random") is not None
                ),
                None,
            )
            if random is not None:
                out["random"].setdefault(panel, random)
        out["arms"][panel] = arms
        # the best BC on the seeds every BC arm ran, so an arm run on fewer seeds is not favoured by their draw
        bc_arms = [a for a in BC_ARMS if a in arms]
        common = set.intersection(*(set(arms[a]) for a in bc_arms)) if bc_arms else set()
        bc_means = {a: statistics.fmean(arms[a][s] for s in common) for a in bc_arms} if common else {}
        best = max(bc_means, key=bc_means.get) if bc_means else None
        out.setdefault("best_bc", {})[panel] = best
        for a, b in CONTRASTS:
            b_arm = best if b == "best_bc" else b
            pairs = {
                s: (rates(rows_of[a], prefix), rates(rows_of[b_arm], prefix))
                for s, rows_of in by_seed.items()
                if b_arm is not None
                and a in rows_of
                and b_arm in rows_of
                and rates(rows_of[a], prefix) is not None
                and rates(rows_of[b_arm], prefix) is not None
            }
            if pairs:
                out["contrasts"].setdefault(panel, {})[f"{a} - {b}"] = {"b_arm": b_arm, **contrast(pairs)}
    return out


def print_table(result: dict) -> None:
    for panel, arms in result["arms"].items():
        print(
            f"\n{panel} (random policy {result['random'].get(panel, float('nan')):.3f}; best BC {result['best_bc'][panel]})"
        )
        for arm, per in arms.items():
            cells = " ".join(f"s{s} {v:.3f}" for s, v in sorted(per.items()))
            print(f"  {arm:<16} mean {statistics.fmean(per.values()):.3f}  {cells}")
        for name, c in result["contrasts"].get(panel, {}).items():
            g, sl, st = c["over_seeds_by_task"], c["seed_level"], c["sign_test"]
            seeds = " ".join(
                f"{float(x['mean']):+.3f}[{x['low']:+.3f},{x['high']:+.3f}]" for x in c["per_seed"].values()
            )
            print(
                f"  {name:<16} by task {g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}] | seeds {sl['mean']:+.3f} ± "
                f"{sl['half']:.3f} | sign {st['better']}:{st['worse']} p {st['p']:.3f} | lo>0 on {c['seeds_with_low_above_0']} | "
                f"detectable {c['smallest_detectable']:.3f} | {seeds}"
            )


def markdown(result: dict) -> str:
    """The page's two tables: every arm's success per seed, and every contrast (what the page's test reads)."""
    seeds = [str(s) for s in result["seeds"]]
    lines = [
        "| panel | arm | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |",
        "|---|---|" + "---|" * (len(seeds) + 1),
    ]
    for panel, arms in result["arms"].items():
        for arm_name, per in arms.items():
            cells = " | ".join(f"{per[s]:.3f}" if s in per else "–" for s in seeds)
            lines.append(f"| {panel} | {arm_name} | {cells} | {statistics.fmean(per.values()):.3f} |")
    lines += [
        "",
        "| panel | contrast | by task, over seeds [95 %] | each seed [95 %] | seed-level t | sign test | seeds lo > 0 "
        "| smallest detectable |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for panel, contrasts in result["contrasts"].items():
        for name, c in contrasts.items():
            g, sl, st = c["over_seeds_by_task"], c["seed_level"], c["sign_test"]
            each = ", ".join(
                f"{x['mean']:+.3f} [{x['low']:+.3f}, {x['high']:+.3f}]" for x in c["per_seed"].values()
            )
            half = f"± {sl['half']:.3f}" if sl["half"] == sl["half"] else "(one seed)"
            lines.append(
                f"| {panel} | {name.replace('best_bc', 'best BC, ' + c['b_arm'])} | {g['mean']:+.3f} [{g['low']:+.3f}, "
                f"{g['high']:+.3f}] | {each} | {sl['mean']:+.3f} {half} | {st['better']}:{st['worse']}, p "
                f"{st['p']:.3f} | {c['seeds_with_low_above_0']} of {len(c['per_seed'])} | "
                f"{c['smallest_detectable']:.3f} |"
            )
    return "\n".join(lines).replace("-0.", "−0.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pilot", help="choose the RL tasks from the pilot runs")
    p.add_argument("run", type=Path, help="a BC run cloned on the other half")
    p.add_argument("--candidates", default="textcraft_depth1_pilot_b", help="the half it was scored on")
    p.add_argument("--write", action="store_true", help=f"write launch/panels/{RL_PANEL}.json")
    p.add_argument("--out", type=Path, default=None, help="the pilot's JSON")
    t = sub.add_parser("table", help="every arm, seed and contrast of the study's runs")
    t.add_argument("--runs", type=Path, required=True)
    t.add_argument("--seeds", default="0,1,2,3,4")
    t.add_argument("--out", type=Path, default=None)
    t.add_argument("--markdown", action="store_true", help="print the page's tables instead")
    a = ap.parse_args(argv)
    if a.cmd == "table":
        result = cmd_table(a.runs, [int(x) for x in a.seeds.split(",")])
        print(markdown(result)) if a.markdown else print_table(result)
        if a.out:
            write_json(a.out, result)
        return 0
    if a.cmd == "pilot":
        result = cmd_pilot(a.run, a.candidates, a.write)
        if a.out:
            write_json(a.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
