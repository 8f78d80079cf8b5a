"""docs/results/learner_packing.md against its JSON: the before/now table and the ratios in its title and prose,
recomputed from the two runs' figures."""

from tests.unit.results_pages import assert_shows, data, flat, numbers, page, row

PAGE = "learner_packing.md"


def _arms() -> dict[str, dict]:
    return data("learner_packing/ab.json")["arms"]


def _figures(arm: dict) -> list[float]:
    s, its = arm["sums_s"], arm["iterations"]
    return [
        arm["wall_s"],
        s["update"],
        s["values"],
        s["logprobs"],
        s["rollout"],
        *(i["learner_tokens_ratio"] for i in its),
        *(i["success"] for i in its),
        arm["success"]["held_out"]["rl"],
    ]


def test_the_table_is_the_json():
    text, arms = page(PAGE), _arms()
    for first, name in (("before (", "before"), ("**now**", "now")):
        cells = row(text, first)
        assert_shows([n for c in cells[1:] for n in numbers(c)], _figures(arms[name]))


def test_the_ratios_are_recomputed_from_the_two_runs():
    text, arms = page(PAGE), _arms()
    before, now = arms["before"], arms["now"]
    # e.g. the wall: 2064.78 s / 1170.84 s = 1.76
    expected = [
        before["wall_s"] / now["wall_s"],
        before["sums_s"]["update"] / now["sums_s"]["update"],
        before["sums_s"]["values"] / now["sums_s"]["values"],
        before["sums_s"]["logprobs"] / now["sums_s"]["logprobs"],
        before["sums_s"]["rollout"] / now["sums_s"]["rollout"],
    ]
    assert_shows([n for c in row(text, "before ÷ now")[1:] for n in numbers(c)], expected)
    title = text.splitlines()[0]
    assert f"{expected[0]:.2f}× faster end to end, its update {expected[1]:.2f}×" in title
    prose = flat(text)
    assert f"{now['wall_s'] / 60:.1f} min against {before['wall_s'] / 60:.1f} min" in prose
