"""docs/results/multi2_multi recomputed from multi2_multi/learning.json (and the old STEP-HRL run kept in
step_hrl_multi/learning.json): seed 0's eval per point beside STEP-HRL, HiPER and PPO, the seeds table with the
Vanilla-IQL ablation, and the gains, ratios and sign test the prose draws from them.

Evaluations are 24 held-out tasks, so each figure is k/24; a figure taken from another point or seed fails."""

from __future__ import annotations

import statistics

from tests.unit.results_pages import assert_shows, data, flat, numbers, page, row, sign_test, signed

PAGE = "multi2_multi.md"
EPISODES = 24


def runs() -> dict[str, list[dict]]:
    return data("multi2_multi/learning.json")["runs"]


def evals(run: list[dict]) -> dict[str, float]:
    """Eval success by point label ('bc', 'rl 2', ...), where the run evaluated."""
    return {r["label"]: r["eval_success"] for r in run if r["eval_success"] is not None}


def test_seed0_points_beside_the_other_methods():
    text = page(PAGE).split("| point |")[1].split("\n\n")[0]
    r = runs()
    multi2, hiper, ppo = (evals(r[f"{m}_seed0"]) for m in ("multi2", "hiper", "ppo"))
    step = evals(data("step_hrl_multi/learning.json")["runs"]["step_hrl_seed0"])
    random = r["multi2_seed0"][0]["eval_random"]
    for label, point in (("after BC", "bc"), ("RL 1", "rl 1"), ("RL 2", "rl 2"), ("RL 3", "rl 3")):
        cells = [c.replace("*", "") for c in row(text, label)]
        assert_shows(numbers(cells[1])[:1], [multi2[point]])
        expected = [step.get(point), hiper.get(point), ppo.get(point)]
        for cell, value in zip(cells[2:5], expected, strict=True):
            assert (cell == "–") if value is None else (numbers(cell)[0] == f"{value:.3f}"), (
                label,
                cell,
                value,
            )
        if point in hiper:
            assert_shows([cells[5]], [random])


def test_seeds_table_and_ablation():
    """Per seed: BC and its random policy, the first actor pass (RL 2) of Multi2 and of Vanilla-IQL; the mean row."""
    text = page(PAGE).split("| seed |")[1].split("\n\n")[0]
    r = runs()
    multi2 = [evals(r[f"multi2_seed{s}"]) for s in (0, 1, 2)]
    vanilla = {s: evals(r[f"multi2-vanilla_seed{s}"]) for s in (1, 2)}
    randoms = [r[f"multi2_seed{s}"][0]["eval_random"] for s in (0, 1, 2)]
    for seed in (0, 1, 2):
        cells = [c.replace("*", "") for c in row(text, str(seed))]
        assert_shows(numbers(cells[1])[:2], [multi2[seed]["bc"], randoms[seed]])
        assert_shows(numbers(cells[2])[:1], [multi2[seed]["rl 2"]])
        if seed in vanilla:
            assert vanilla[seed]["bc"] == multi2[seed]["bc"]  # the ablation starts from the seed's BC state
            assert_shows(numbers(cells[3])[:1], [vanilla[seed]["rl 2"]])
        else:
            assert cells[3] == "not run"
    cells = [c.replace("*", "") for c in row(text, "mean")]
    assert_shows(
        numbers(cells[1]) + numbers(cells[2]),
        [
            statistics.mean(m["bc"] for m in multi2),
            statistics.mean(randoms),
            statistics.mean(m["rl 2"] for m in multi2),
        ],
    )
    assert_shows(
        [n for n in numbers(cells[3]) if "." in n],  # "seeds 1–2: 0.313 (Multi2 0.458, BC 0.375)"
        [
            statistics.mean(v["rl 2"] for v in vanilla.values()),
            statistics.mean(multi2[s]["rl 2"] for s in vanilla),
            statistics.mean(multi2[s]["bc"] for s in vanilla),
        ],
    )


def test_gains_ratios_and_sign_test_in_the_prose():
    prose = flat(page(PAGE))
    r = runs()
    multi2 = [evals(r[f"multi2_seed{s}"]) for s in (0, 1, 2)]
    gains = [m["rl 2"] - m["bc"] for m in multi2]  # +2, +3, +1 episodes of 24
    times_random = [m["rl 2"] / r[f"multi2_seed{s}"][0]["eval_random"] for s, m in enumerate(multi2)]
    assert (
        f"beat its BC start on all three seeds: {', '.join(signed(g) for g in gains)} "
        f"(mean {signed(statistics.mean(gains))}, two episodes of 24; "
        f"{statistics.mean(m['bc'] for m in multi2):.3f} → {statistics.mean(m['rl 2'] for m in multi2):.3f}), "
        f"{min(times_random):.0f}–{max(times_random):.0f}× the random policy"
    ) in prose
    gained = sum(g > 0 for g in gains)
    assert f"a two-sided sign test gives p = {sign_test(gained, len(gains) - gained):.2f}" in prose
    vanilla = {s: evals(r[f"multi2-vanilla_seed{s}"]) for s in (1, 2)}
    over_bc = {s: v["rl 2"] - v["bc"] for s, v in vanilla.items()}
    below = {s: multi2[s]["rl 2"] - v["rl 2"] for s, v in vanilla.items()}  # one and six episodes of 24
    assert (
        f"{vanilla[1]['rl 2']:.3f} on seed 1 ({signed(over_bc[1])} over BC, one episode below Multi2) and "
        f"{vanilla[2]['rl 2']:.3f} on seed 2 ({signed(over_bc[2])} under BC, six episodes below Multi2)"
    ) in prose
    assert [round(below[s] * EPISODES) for s in (1, 2)] == [1, 6]
    assert (
        f"({signed(below[1])}, {signed(below[2])}; mean {signed(statistics.mean(below.values()))})" in prose
    )


def test_online_iteration_and_the_scripts_printed_gains():
    """RL 3, the online iteration on seeds 0 and 1, and the mean over each seed's last eval that bench_learning
    prints (for PPO too)."""
    prose = flat(page(PAGE))
    r = runs()
    seed0, seed1 = evals(r["multi2_seed0"]), evals(r["multi2_seed1"])
    online = r["multi2_seed1"][-1]
    assert (
        f"{online['time_iteration'] / 60:.1f} min: 4 groups of 4 fresh episodes, "
        f"train success {online['train_success']:.2f}"
    ) in prose
    assert (
        f"eval {seed1['rl 2']:.3f} → {seed1['rl 3']:.3f} (random {online['eval_random']:.3f}, valid 1.00)"
    ) in prose
    assert f"Seed 0's online iteration went {seed0['rl 2']:.3f} → {seed0['rl 3']:.3f}" in prose
    assert (
        round((seed1["rl 2"] - seed1["rl 3"]) * EPISODES)
        == round((seed0["rl 2"] - seed0["rl 3"]) * EPISODES)
        == 2
    )

    def last_gain(run: list[dict]) -> float:
        points = list(evals(run).values())
        return points[-1] - points[0]

    multi2 = [last_gain(r[f"multi2_seed{s}"]) for s in (0, 1, 2)]
    ppo = [last_gain(r[f"ppo_seed{s}"]) for s in (0, 1, 2)]
    assert (
        f"(gains {multi2[0]:.0f} and {signed(multi2[1])}; seed 2 {signed(multi2[2])} at RL 2), and so prints a "
        f"Multi2 mean of {signed(statistics.mean(multi2))} (PPO: {signed(statistics.mean(ppo))} after"
    ) in prose
    assert data("multi2_multi/learning.json")["gains"]["multi2"] == multi2
