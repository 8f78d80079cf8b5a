"""docs/results/no_signal_batches.md against its JSON: the replayed all-lost update's table and the figures its
prose reads off the update's metrics."""

from tests.unit.results_pages import assert_shows, data, flat, numbers, page, row

PAGE = "no_signal_batches.md"


def _rows() -> dict[str, dict]:
    return {r["variant"]: r for r in data("no_signal_batches/replay_pack.json")["rows"]}


def test_the_replay_table_is_the_json():
    text, rows = page(PAGE), _rows()
    for first, variant in (
        ("`train` (the step taken", "train_padded"),
        ("`train`, packed", "train_tree_rows"),
        ("`skip`", "skip"),
    ):
        r = rows[variant]
        m, p = r["metrics"], r["probe"]
        cells = row(text, first)
        figures = [n for c in cells[1:] for n in numbers(c)]
        expected = [
            m["kl_update"],
            m["kl_update/switch"],
            m["kl_update/action"],
            p["action/all"],
            p["action/keep"],
            p["train/response/all"],
            p["train/response/turn0"],
        ]
        assert_shows(figures, expected)


def test_the_prose_reads_the_updates_metrics():
    text, m = flat(page(PAGE)), _rows()["train_padded"]["metrics"]
    probe = _rows()["train_padded"]["probe"]
    assert f"rms was {m['adv_raw_rms_low']:.3f}" in text
    assert f"raised it to {m['adv_rms/action']:.2f}" in text
    assert f"(×{m['adv_rms/action'] / m['adv_raw_rms_low']:.0f})" in text
    assert f"**+{m['adv_mean/lost_last']:.2f}**" in text
    assert f"(correlation {m['adv_turn_corr']:.2f})" in text
    assert f"(+{probe['switch/keep']:.3f})" in text
    assert f"update KL **{m['kl_update']:.4f}**" in text
