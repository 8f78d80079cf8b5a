"""docs/results/rl_vs_imitation.md against its JSON: both results tables recomputed from each arm's per-task success
per seed (``task_rates``), not read back from the JSON's own contrasts."""

import math
import statistics

from launch.evaluation.intervals import paired_gain, t95
from tests.unit.results_pages import assert_shows, data, numbers, page, sign_test

PAGE = "rl_vs_imitation.md"
Z80 = 0.8416212335729143  # the normal's 0.8 quantile: 80 % power


def _study() -> dict:
    return data("rl_vs_imitation/study.json")


def row(text: str, panel: str, name: str) -> list[str]:
    """The one table row whose first two cells are exactly ``panel`` and ``name``."""
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line[:1] == "|"
    ]
    found = [r for r in rows if r[:2] == [panel, name]]
    assert len(found) == 1, f"{len(found)} table rows are {panel!r} | {name!r}"
    return found[0]


def test_the_arms_table_is_each_arms_mean_task_success():
    text, study = page(PAGE), _study()
    seeds = [str(s) for s in study["seeds"]]
    for panel, arms in study["task_rates"].items():
        for arm, per_seed in arms.items():
            means = [statistics.fmean(per_seed[s]) for s in seeds if s in per_seed]
            cells = row(text, panel, arm)[2:]
            figures = [n for c in cells for n in numbers(c)]
            assert_shows(figures, [*means, statistics.fmean(means)])


def _recomputed(a: dict[str, list[float]], b: dict[str, list[float]]) -> list[float]:
    """A − B paired by task: over seeds by task, each seed's interval, the seed-level t, the sign test, the seeds
    whose lower end is above 0 and the smallest detectable mean difference, in the page's column order."""
    seeds = sorted(set(a) & set(b), key=int)
    each = [paired_gain(b[s], a[s]) for s in seeds]
    n = len(a[seeds[0]])
    diffs = [statistics.fmean(a[s][t] - b[s][t] for s in seeds) for t in range(n)]
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = t95(n - 1) * sd / math.sqrt(n)
    out = [mean, mean - half, mean + half]
    out += [x for g in each for x in (g.mean, g.low, g.high)]
    seed_means = [g.mean for g in each]
    out.append(statistics.fmean(seed_means))
    if len(seeds) > 1:
        out.append(t95(len(seeds) - 1) * statistics.stdev(seed_means) / math.sqrt(len(seeds)))
    better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    out += [better, worse, sign_test(better, worse)]
    out += [sum(g.low > 0 for g in each), len(seeds)]
    out.append((t95(n - 1) + Z80) * sd / math.sqrt(n))
    return out


def test_the_contrasts_table_is_recomputed_from_the_task_rates():
    text, study = page(PAGE), _study()
    for panel, contrasts in study["contrasts"].items():
        rates = study["task_rates"][panel]
        for name, c in contrasts.items():
            a, b = name.split(" - ")
            b_arm = c["b_arm"]
            label = f"{a} - best BC, {b_arm}" if b == "best_bc" else name
            cells = row(text, panel, label)[2:]
            figures = [n for cell in cells for n in numbers(cell)]
            assert_shows(figures, _recomputed(rates[a], rates[b_arm]))


def test_the_readmes_claim_is_the_studys():
    """README.md's main-job paragraph states the pre-registered contrasts (2 decimals) and how many seeds ran."""
    from pathlib import Path

    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    study = _study()
    c = study["contrasts"]

    def cell(g: dict) -> str:
        return f"{g['mean']:+.2f} [{g['low']:+.2f}, {g['high']:+.2f}]".replace("-", "−")

    assert f"on {len(study['seeds'])} of the 5 pre-registered seeds" in readme
    assert f"({cell(c['rl_tasks']['rl - bc4']['over_seeds_by_task'])} at T = 1)" in readme
    assert f"held-out goals ({cell(c['held_out']['rl - bc4']['over_seeds_by_task'])})" in readme
    assert f"(held-out {cell(c['held_out']['rft - bc4']['over_seeds_by_task'])})" in readme
