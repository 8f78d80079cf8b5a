"""docs/results at depth 2: critic_trunk's seeds, replays and iteration rows, and hierarchy_d2_seeds' per-seed
tables and over-seeds contrasts, recomputed from the JSON kept beside the pages (as in test_results_figures)."""

from __future__ import annotations

import re
import statistics

import pytest

from tests.unit.results_pages import (
    assert_shows,
    data,
    flat,
    numbers,
    page,
    row,
)


def test_critic_trunk_seeds_replay_and_iteration_rows():
    """critic_trunk: per seed the trunk arm's held-out gain and trunk minus own after RL, the pooled gains of both
    arms and their difference (each task's rate averaged over the seeds first, t over tasks), the replay rows, and
    the iteration table with its today ÷ trunk ratios, from the runs' and benches' JSON."""
    from launch.evaluation.intervals import paired_gain

    text = page("critic_trunk.md")
    seeds, replay_text, timed = (
        text.split(f"## {h}")[1].split("\n## ")[0] for h in ("Three", "The second", "The it")
    )
    own = [data(f"main_job_learns/vllm_seed{s}.json")["rows"] for s in (0, 1, 2)]
    trunk = [data(f"critic_trunk/trunk_seed{s}.json")["rows"] for s in (0, 1, 2)]
    key = "eval_task_rates"
    for seed in (0, 1, 2):
        cells = row(seeds, str(seed))
        g = paired_gain(trunk[seed][0][key], trunk[seed][-1][key])
        bc, rl = trunk[seed][0]["eval_success"], trunk[seed][-1]["eval_success"]
        assert_shows(numbers(cells[2]), [bc, rl, g.mean, g.low, g.high])
        d = paired_gain(own[seed][-1][key], trunk[seed][-1][key])
        shown = 3 if d.changed else 1  # "0.000 (no task changed)"
        assert_shows(numbers(cells[3])[:shown], [d.mean, d.low, d.high][:shown])

    def pooled(runs, i):
        return [statistics.mean(r[i][key][t] for r in runs) for t in range(len(runs[0][i][key]))]

    cells = row(seeds, "tasks, mean over the 3 seeds")
    for col, (before, after) in (
        (1, (pooled(own, 0), pooled(own, -1))),
        (2, (pooled(trunk, 0), pooled(trunk, -1))),
        (3, (pooled(own, -1), pooled(trunk, -1))),
    ):
        g = paired_gain(before, after)
        assert_shows(numbers(cells[col]), [g.mean, g.low, g.high])
    replay = {
        r["variant"]: r for arm in ("own", "trunk") for r in data(f"critic_trunk/replay_{arm}.json")["rows"]
    }
    lines = {
        line.split("|")[1].strip().replace("*", ""): line
        for line in replay_text.splitlines()
        if line.startswith("| ")
    }
    for arm in ("own", "trunk"):
        for name, label in ((arm, arm), (f"{arm}/neg", f"{arm}, negated"), (f"{arm}/zero", f"{arm}, A ≡ 0")):
            m, p = replay[name]["metrics"], replay[name]["probe"]
            want = [m["kl_update"] * 1e3, m["kl_update/action"] * 1e3]
            want += [
                p["action/all"],
                p["action/turn0"],
                p["action/keep"],
                p["switch/all"],
                p["train/action/all"],
            ]
            if name == arm:
                want.append((p["action/all"] - replay[f"{arm}/neg"]["probe"]["action/all"]) / 2)
            cells = lines[label].strip().strip("|").split("|")
            assert_shows([n for c in cells[1:] for n in numbers(c)], want)
    depth2 = text.split("## The iteration at depth 2")[1].split("\n## ")[0]
    for name, section, label in (("main", timed, ""), ("d2", depth2, "d2 ")):
        for k, it in data(f"critic_trunk/iteration_{name}.json")["iterations"].items():
            for arm_name, arm in it["learner"].items():
                ph = arm["phases"]
                want = [ph[p]["s"] for p in ("logprobs", "values", "update", "measure")]
                want += [arm["learner_s"], arm["learner_floor_s"], arm["rollout_s"], arm["iteration_s"]]
                want += [arm["iteration_over_floor"]]
                assert_shows(numbers(" ".join(row(section, f"{label}{k}", arm_name)[2:])), want)
            assert f"iteration {k} **{it['trunk_iteration_speedup']:.2f}×**" in flat(section)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hierarchy_d2_bc_starts(seed):
    """hierarchy_d2_seeds' BC start of one seed from its logged BC row (runs.json ``bc_s<seed>``): demonstrations,
    turns, the NLL of each pass, success on both panels with the logged Wilson interval and the random policy's,
    and BC's wall clock."""
    text = page("hierarchy_d2_seeds.md").split("## The BC starts\n")[1].split("\n## ")[0]
    (bc,) = data("hierarchy_d2_seeds/runs.json")[f"bc_s{seed}"]
    cells = row(text, f"seed {seed},")
    # "seed S, 96 demonstrations (D replays won, T turns), NLL a → b": the 96 asked for is the preset's
    seed_, _, *logged = numbers(cells[0])
    assert_shows([seed_, *logged], [seed, bc["demos"], bc["turns"], bc["nll_epoch0"], bc["nll_epoch1"]])
    for col, key in ((1, "eval"), (2, "train_eval")):
        want = [bc[f"{key}_success"], bc[f"{key}_ci_low"], bc[f"{key}_ci_high"]]
        assert_shows(numbers(cells[col])[:3], want)
    assert_shows(numbers(cells[3]), [bc["eval_random"], bc["train_eval_random"]])
    assert_shows(numbers(cells[4].replace(",", "")), [bc["wall_s"]])


METHODS = (("HiPER", "hiper"), ("PPO", "ppo"), ("GiGPO", "gigpo"))
"""hierarchy_d2_seeds' methods: (the page's label, the run folder's prefix)."""


def d2_runs() -> dict:
    return data("hierarchy_d2_seeds/runs.json")


def seeds_run(runs: dict, *algos: str) -> list[int]:
    """The seeds on which every one of ``algos`` has a run in runs.json (the page reports a method on a seed when
    its run is kept)."""
    return [s for s in range(3) if all(f"{a}_seed{s}" in runs for a in algos)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hierarchy_d2_seed_rows_and_contrast(seed):
    """hierarchy_d2_seeds' table of one seed from runs.json (each run's logged rows): per method run on that seed
    the paired gain over the seed's shared BC start (mean over tasks of after − before, t over tasks) on both
    panels, the update KL ×1e3 and switch rate per iteration; then HiPER against each other method after RL,
    paired by task, as the prose prints it. A method without a kept run on the seed has no row."""
    from launch.evaluation.intervals import paired_gain

    text = page("hierarchy_d2_seeds.md").split(f"## Seed {seed}\n")[1].split("\n## ")[0]
    runs = d2_runs()
    methods = [(label, algo) for label, algo in METHODS if f"{algo}_seed{seed}" in runs]
    assert methods[0][0] == "HiPER"
    after = {}
    for label, algo in methods:
        rows, cells = runs[f"{algo}_seed{seed}"], row(text, label)
        after[label] = rows[-1]
        for key, col in (("eval_task_rates", 2), ("train_eval_task_rates", 4)):
            g = paired_gain(rows[0][key], rows[-1][key])
            k = 1 if g.changed == 0 else 3  # no task changed: the page prints the +0.000 alone
            assert_shows(numbers(cells[col])[:k], [g.mean, g.low, g.high][:k])
        rl = [r for r in rows if r["phase"] == "rl"]
        assert_shows(numbers(cells[6]), [r["kl_update"] * 1e3 for r in rl])
        assert_shows(numbers(cells[7]), [r["switch_rate"] for r in rl])
    missing = [label for label, algo in METHODS if f"{algo}_seed{seed}" not in runs]
    assert all(f"| {label} |" not in text for label in missing)
    prose = flat(text)
    for other, _ in methods[1:]:
        for key, panel in (("eval_task_rates", "held-out"), ("train_eval_task_rates", "RL tasks")):
            g = paired_gain(after[other][key], after["HiPER"][key])
            printed = re.search(
                panel + r" \*\*([^*]+)\*\*", prose.split(f"**HiPER against {other}, seed {seed}**")[1]
            ).group(1)
            k = 1 if g.changed == 0 else 3  # no task differs: "+0.000: none of the 8 tasks differ"
            assert_shows(numbers(printed)[:k], [g.mean, g.low, g.high][:k])


def test_hierarchy_d2_over_seeds_by_task():
    """hierarchy_d2_seeds' "together" table from runs.json: each task's change (after RL − after BC), or HiPER's
    rate after RL minus PPO's (GiGPO's), averaged over the seeds on which the methods compared have runs, then a
    t-interval over tasks (the task the unit); each row names its seeds."""
    from launch.evaluation.intervals import paired_gain

    text = page("hierarchy_d2_seeds.md").split("## The seeds together")[1].split("\n## ")[0]
    runs = d2_runs()

    def shows_change_by_task(
        cells: list[str], col: int, pairs: list[tuple[list[float], list[float]]]
    ) -> None:
        """``cells[col]`` prints each task's (b − a) averaged over the seeds' (a, b) rate lists, t over tasks;
        ``cells[0]`` names those seeds ("seeds 0–2", "seeds 0 and 1")."""
        d = [statistics.fmean(b[i] - a[i] for a, b in pairs) for i in range(len(pairs[0][0]))]
        g = paired_gain([0.0] * len(d), d)
        assert_shows(numbers(cells[col])[:3], [g.mean, g.low, g.high])

    def named(seeds: list[int]) -> str:
        return {(0, 1, 2): "seeds 0–2", (0, 1): "seeds 0 and 1"}[tuple(seeds)]

    for col, key in ((1, "eval_task_rates"), (2, "train_eval_task_rates")):
        for label, algo in METHODS:
            seeds = seeds_run(runs, algo)
            cells = row(text, f"{label}, {named(seeds)}")
            pairs = [(r[0][key], r[-1][key]) for r in (runs[f"{algo}_seed{s}"] for s in seeds)]
            shows_change_by_task(cells, col, pairs)
        for label, algo in METHODS[1:]:
            seeds = seeds_run(runs, "hiper", algo)
            cells = row(text, f"**HiPER − {label}**, {named(seeds)}")
            pairs = [(runs[f"{algo}_seed{s}"][-1][key], runs[f"hiper_seed{s}"][-1][key]) for s in seeds]
            shows_change_by_task(cells, col, pairs)
