"""``hierarl sweep``'s pure half (launch/cli/sweep.py): the grid, and the table from the cells' metrics rows."""

import pytest

from launch.cli.sweep import SweepSpec, cells, load_spec, summarize
from launch.config import ConfigError


def test_grid_cells_and_groups(tmp_path):
    spec = SweepSpec(
        out=str(tmp_path), grid={"algo": ["hiper", "ppo"], "seed": [0, 1]}, set=("iterations=2",)
    )
    grid = cells(spec)
    assert [c.name for c in grid] == [
        "algo-hiper_seed-0",
        "algo-hiper_seed-1",
        "algo-ppo_seed-0",
        "algo-ppo_seed-1",
    ]
    assert grid[3].cfg.algo == "ppo" and grid[3].cfg.seed == 1 and grid[3].cfg.iterations == 2
    assert grid[3].cfg.run_dir == str(tmp_path / "algo-ppo_seed-1") and grid[3].group == "algo=ppo"
    with pytest.raises(ConfigError, match="sweep cell algo-nope: algo"):
        cells(SweepSpec(out=str(tmp_path), grid={"algo": ["nope"]}))


def test_a_malformed_spec_fails_in_one_line(tmp_path):
    # PyYAML's own message spans several lines ("while parsing ... in <file>, line 1, column 1" and a caret line);
    # the error every hierarl command prints must be one line: launch.config.one_line collapses the whitespace
    bad = tmp_path / "sweep.yaml"
    bad.write_text("out: [unclosed\ngrid: {}\n")
    with pytest.raises(ConfigError) as e:
        load_spec(bad)
    msg = str(e.value)
    assert msg.startswith(f"sweep spec {bad}: ") and "\n" not in msg and "  " not in msg


def test_table_over_seeds_with_and_without_eval(tmp_path):
    spec = SweepSpec(out=str(tmp_path), grid={"seed": [0, 1]}, set=("iterations=2",))
    a, b = cells(spec)
    # RL samples: group_size * groups_per_iter episodes per logged RL iteration
    per_iter = a.cfg.rollout.group_size * a.cfg.rollout.groups_per_iter
    ev = {"eval_random": 0.1, "eval_base": 0.05, "eval_panel": "p@1"}
    bc = {"iteration": 0, "phase": "bc", "wall_s": 10.0, "eval_success": 0.25, **ev}
    rl = [{"iteration": k, "phase": "rl", "time_iteration": 5.0} for k in (1, 2)]
    final = {"eval_success": 0.5, "eval_ci_low": 0.2, "eval_ci_high": 0.8, **ev}
    (row,) = summarize([(a, [bc, rl[0], {**rl[1], **final}]), (b, [bc, *rl])])
    # a: final 0.5; b: final 0.25 (its BC eval) -> mean 0.375, sample std s = 0.25 / sqrt(2) = 0.1767767;
    # 95 % t-interval half-width t_{0.975,1} · s / sqrt(2) = 12.706205 · 0.125 = 1.5882756, clipped to [0, 1]
    assert (
        row["finished"] == 2 and row["final_eval"] == pytest.approx(0.375) and row["interval"] == "t, 2 seeds"
    )
    assert (row["final_eval_low"], row["final_eval_high"]) == (0.0, 1.0)
    assert (
        row["random"] == pytest.approx(0.1) and row["base"] == pytest.approx(0.05) and row["panel"] == "p@1"
    )
    assert row["wall_s"] == pytest.approx(20.0) and row["samples"] == 2 * per_iter
    # one seed: its final eval's Wilson interval, as logged
    (one,) = summarize([(a, [bc, rl[0], {**rl[1], **final}])])
    assert (one["final_eval"], one["final_eval_low"], one["final_eval_high"], one["interval"]) == (
        0.5,
        0.2,
        0.8,
        "Wilson",
    )
    # three seeds 0.4, 0.5, 0.6: mean 0.5, s = 0.1, half-width t_{0.975,2} · s / sqrt(3) = 4.302653 · 0.0577350
    # = 0.2484138 -> [0.2515862, 0.7484138]
    finals = [{**bc, "eval_success": x} for x in (0.4, 0.5, 0.6)]
    c = cells(SweepSpec(out=str(tmp_path), grid={"seed": [0, 1, 2]}))
    (three,) = summarize([(cell, [r]) for cell, r in zip(c, finals, strict=True)])
    assert three["final_eval_low"] == pytest.approx(0.2515862, abs=1e-6)
    assert three["final_eval_high"] == pytest.approx(0.7484138, abs=1e-6)
    assert three["final_eval"] == pytest.approx(0.5) and three["interval"] == "t, 3 seeds"
    (bare,) = summarize([(a, rl)])  # eval_every=0: no success figures, but time and samples
    assert (
        bare["finished"] == 1
        and bare["wall_s"] == pytest.approx(10.0)
        and bare["final_eval"] != bare["final_eval"]
    )


def test_cells_that_run_side_by_side_get_one_thread_each():
    """Auto ``cpu_threads`` gives a run every core; two sweep cells at once would each take them all. A cluster with
    room for two cells gives each auto cell 1 (a user's own value stays); room for one changes nothing."""
    import dataclasses

    from launch.cli.sweep import one_thread_each
    from launch.config import TrainConfig

    need = {"CPU": 1.0}
    todo = [("a", TrainConfig(), need), ("b", dataclasses.replace(TrainConfig(), cpu_threads=3), need)]
    assert [cfg.cpu_threads for _, cfg, _ in one_thread_each(todo, {"CPU": 2.0})] == [1, 3]
    assert one_thread_each(todo, {"CPU": 1.5}) == todo  # one at a time: each gets the node
    assert one_thread_each(todo[:1], {"CPU": 8.0}) == todo[:1]  # a single cell runs alone


def test_a_cell_reserves_its_workers_gpu_shares():
    """On a GPU cluster a cell needs each worker's ``gpus_per_worker``; on CPU no GPU at all."""
    from launch.cli.sweep import needs
    from launch.config import resolve_config

    cfg = resolve_config(
        None, ["rollout.num_workers=2", "rollout.gpus_per_worker=0.25", "learner.gpus_per_worker=1"]
    )
    # 2 rollout workers x 0.25 + 1 learner x 1
    assert needs(cfg, gpu=True)["GPU"] == 1.5
    assert "GPU" not in needs(cfg, gpu=False)
