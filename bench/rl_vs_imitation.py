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
from pathlib import Path

from _env import setup

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pilot", help="choose the RL tasks from the pilot runs")
    p.add_argument("run", type=Path, help="a BC run cloned on the other half")
    p.add_argument("--candidates", default="textcraft_depth1_pilot_b", help="the half it was scored on")
    p.add_argument("--write", action="store_true", help=f"write launch/panels/{RL_PANEL}.json")
    p.add_argument("--out", type=Path, default=None, help="the pilot's JSON")
    a = ap.parse_args(argv)
    if a.cmd == "pilot":
        result = cmd_pilot(a.run, a.candidates, a.write)
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
