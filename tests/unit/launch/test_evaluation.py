"""An evaluation's result on a panel, its baselines' disk cache and the paired comparison of two runs:
launch/evaluation/scoring.py, launch/evaluation/baselines.py, launch/evaluation/report.py and the eval lines and tables of launch/driver/train.py, with
the synthetic env (no Ray)."""

from __future__ import annotations

import json
import math

import pytest

from actors.trajectory import Trajectory, Turn
from launch.cli.main import main
from launch.config import resolve_config
from launch.driver.run_log import eval_fields, eval_text, final_table, iteration_line
from launch.evaluation import baselines
from launch.evaluation.panels import load_panel, resolve_panel
from launch.evaluation.report import paired_rows, run_outcomes
from launch.evaluation.scoring import Evaluation, scope, summary


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HIERARL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "baselines"


SYNTH1 = ["env.name=synthetic", 'env.options={"stages": [1], "actions_per_stage": 1, "distractors": 1}']


def _panel4():
    return load_panel("synthetic_multi_test").head(4)


def test_summary_golden():
    panel = _panel4()
    # outcomes 1, 0, 1, dropped: 2 wins of 4 (the dropped task counts as lost); Wilson 2 of 4:
    # centre 0.5 + z²/8 = 0.9801824, half z·sqrt(0.0625 + z²/64) = 1.959964 · 0.3500326 = 0.6860513,
    # scale 1 + z²/4 = 1.9603647 -> [0.2941311, 1.6662337] / 1.9603647 = [0.1500390, 0.8499610]
    ev = summary(panel, "101-", [0.25, 0.5, 0.0, 0.25], [1.0, 0.0, 0.0, 0.0])
    assert (ev["success"], ev["wins"], ev["n"], ev["dropped"]) == (0.5, 2, 4, 1)
    assert ev["ci_low"] == pytest.approx(0.1500390, abs=1e-6) and ev["ci_high"] == pytest.approx(
        0.8499610, abs=1e-6
    )
    assert ev["random"] == 0.25 and ev["base"] == 0.25  # means over the same 4 tasks
    assert ev["per_type"] == {"stages2": 0.5} and ev["panel"] == "synthetic_multi_test@1[:4]"
    assert math.isnan(summary(panel, "0000", None, None)["base"])


def test_eval_metrics_lines_and_table_carry_the_interval_and_both_baselines():
    ev = {
        **summary(_panel4(), "1100", [0.0, 0.25, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]),
        "valid_format": 0.9,
        "valid_roles": {},
    }
    row = {"phase": "rl", "iteration": 2, **eval_fields(ev)}
    assert row["eval_ci_low"] < row["eval_success"] == 0.5 < row["eval_ci_high"]
    assert (row["eval_random"], row["eval_base"], row["eval_n"]) == (0.0625, 0.25, 4)
    assert row["eval_outcomes"] == "1100" and row["eval_panel"] == "synthetic_multi_test@1[:4]"
    assert (
        "success 0.500 [0.150, 0.850] (Wilson 95 %) on 4 tasks of panel synthetic_multi_test@1[:4]"
        in eval_text(ev)
    )
    assert "random policy 0.062 · base model 0.250" in eval_text(ev)
    assert "random policy 0.062 · valid format" in eval_text(
        {**ev, "base": float("nan")}
    )  # eval_base_model=false
    line = iteration_line(
        {**row, "success": 0.25, "return": 0.1, "valid_format": 1.0, "switch_rate": 0.2, "segment_len": 1.0}
        | {"prompt_tokens": 10.0, "response_tokens": 5.0}
    )
    assert "EVAL 0.50 [0.15,0.85] (random 0.06, base 0.25)" in line
    assert "EVAL 0.50 [0.15,0.85] (random 0.06) " in iteration_line(
        {**row, "eval_base": float("nan"), "success": 0.25, "return": 0.1, "valid_format": 1.0}
        | {"switch_rate": 0.2, "segment_len": 1.0, "prompt_tokens": 10.0, "response_tokens": 5.0}
    )
    table = final_table([row])
    assert "0.500  [0.150, 0.850]" in table and table.rstrip().endswith(
        "eval panel: synthetic_multi_test@1[:4] (4 tasks); random / base: the random policy / the zero-shot base model"
    )
    # eval_base_model=false: no base column, and a row without a figure shows "-" (never "nan")
    off = final_table([{**row, "eval_base": float("nan")}, {"phase": "rl", "iteration": 1, "success": 0.25}])
    assert "eval_base" not in off and "nan" not in off and "random: the random policy" in off
    assert off.splitlines()[3].split()[:4] == ["rl", "1", "0.250", "-"]


def test_random_baseline_is_computed_once_per_task_and_setting(cache):
    cfg = resolve_config(None, [*SYNTH1, "env.max_steps=1"])
    panel = resolve_panel("synthetic", dict(cfg.env.options), "test", "auto", 0)
    first = baselines.random_rates(cfg, panel.tasks[:5])
    store = baselines.random_cache(cfg)
    assert store.path.parent == cache and store.missing(panel.tasks[:5]) == []
    # a longer panel pays only for its new tasks
    assert len(store.missing(panel.tasks)) == len(panel.tasks) - 5
    rates = baselines.random_rates(cfg, panel.tasks)
    assert rates[:5] == first and store.missing(panel.tasks) == []
    # one step, two commands (craft the goal, take the distractor): 4 plays each, mean near 1/2
    assert all(r in (0.0, 0.25, 0.5, 0.75, 1.0) for r in rates)
    assert sum(rates) / len(rates) == pytest.approx(0.5, abs=0.2)
    longer = resolve_config(None, [*SYNTH1, "env.max_steps=2"])
    assert baselines.random_cache(longer).path != store.path  # another step limit: another setting


def test_base_model_outcomes_are_cached_per_task(cache):
    cfg = resolve_config("hiper_synthetic_multi")
    ev = Evaluation(scope(cfg), "smollm2")
    panel = _panel4()
    t0, t1, t2, t3 = panel.tasks
    trajs = [
        Trajectory("a", "g", t0.task_id, "synthetic", won=True, info={"seed": t0.seed}),
        Trajectory("b", "g", t2.task_id, "synthetic", won=False, info={"seed": t2.seed}),
    ]
    assert ev.base_missing(panel) == list(panel.tasks)
    ev.store_base(panel, trajs)
    assert ev.base_missing(panel) == [t1, t3]  # not played (dropped): played again next time
    assert ev.base_cache.values(panel.head(1).tasks) == [1.0]
    other = Evaluation(
        scope(resolve_config("hiper_synthetic_multi", ["rollout.eval_temperature=1.0"])), "smollm2"
    )
    assert other.base_missing(panel) == list(panel.tasks)  # another sampling setting: not the same baseline
    off = Evaluation(scope(resolve_config("hiper_synthetic_multi", ["eval_base_model=false"])), "smollm2")
    assert off.base_missing(panel) == []  # eval_base_model=false: the base model plays nothing


def test_paired_rows_per_type_and_all():
    # A 1101-, B 0110 (shorter prefix): compared on the first 4 tasks both played: 0: A only, 1: both, 2: B only,
    # 3: A only -> A only 2, B only 1, both 1; sign test 2 : 1 -> 2 · (1 + 3) / 8 = 1.0
    rows = paired_rows("1101-", "0110", ["x", "y", "x", "y", "x"])
    by = {r["task_type"]: r for r in rows}
    assert (by["all"]["tasks"], by["all"]["a_only"], by["all"]["b_only"], by["all"]["both"]) == (4, 2, 1, 1)
    assert (
        by["all"]["sign_test_p"] == 1.0 and by["all"]["a_success"] == 0.75 and by["all"]["b_success"] == 0.5
    )
    assert (by["x"]["a_only"], by["x"]["b_only"], by["y"]["a_only"], by["y"]["both"]) == (1, 1, 1, 1)
    # a task one run did not play (its group dropped: "-") is left out, not counted as lost:
    # A 1-01, B 0111 -> tasks 0, 2, 3: A only (0), B only (2), both (3)
    (total,) = paired_rows("1-01", "0111")
    assert (total["tasks"], total["a_only"], total["b_only"], total["both"], total["neither"]) == (
        3,
        1,
        1,
        1,
        0,
    )


def _run(path, rows):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_hierarl_eval_compares_two_runs_task_by_task(tmp_path, capsys):
    """``hierarl eval RUN_A RUN_B`` reads the runs' stored outcomes (their last evals) and plays nothing."""
    label = "synthetic_multi_test@1[:24]"
    a = _run(
        tmp_path / "a",
        [
            {"phase": "bc", "eval_panel": label, "eval_outcomes": "0" * 24},
            {"phase": "rl", "iteration": 3, "eval_panel": label, "eval_outcomes": "1" * 9 + "0" * 15},
        ],
    )
    b = _run(
        tmp_path / "b",
        [
            {
                "phase": "rl",
                "iteration": 3,
                "eval_panel": "synthetic_multi_test@1",
                "eval_outcomes": "0" * 8 + "1" + "0" * 41,
            }
        ],
    )
    assert run_outcomes(a).outcomes == "1" * 9 + "0" * 15
    assert main(["eval", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    # 24 shared tasks: A won 0..8, B won 8: A only 8, B only 0, both 1 -> p = 2 / 2^8 = 0.0078125
    assert "| all | 24 | 0.375 | 0.042 | 8 | 0 | 1 | 15 | 0.008 |" in out
    other = _run(
        tmp_path / "c",
        [{"phase": "rl", "eval_panel": "synthetic_small_test@1[:24]", "eval_outcomes": "0" * 24}],
    )
    assert main(["eval", str(a), str(other)]) == 2
    assert "no shared panel" in capsys.readouterr().err
    assert main(["eval", str(a), str(_run(tmp_path / "d", [{"phase": "rl"}]))]) == 2


def test_several_samples_a_task_give_its_rate_and_the_interval_over_every_episode():
    """4 tasks × 4 samples, wins [4, 1, 0, 2]: success 7/16 = 0.4375 over 16 episodes, task rates [1, 0.25, 0,
    0.5]; outcomes keep one character a task (the first sample's). Catches the denominator left at 4 tasks."""
    ev = summary(_panel4(), "1000", None, None, [4, 1, 0, 2], samples=4)
    assert (ev["success"], ev["wins"], ev["n"], ev["samples"]) == (0.4375, 7, 4, 4)
    assert ev["task_rates"] == [1.0, 0.25, 0.0, 0.5]
    assert ev["per_type"] == {"stages2": pytest.approx(0.4375)}
    fields = eval_fields({**ev, "valid_format": 1.0, "valid_roles": {}}, prefix="train_eval_")
    assert fields["train_eval_task_rates"] == [1.0, 0.25, 0.0, 0.5] and fields["train_eval_samples"] == 4
    # the rates' tasks, in panel order (hierarl view's eval grid names them)
    assert fields["train_eval_task_ids"] == [t.task_id for t in _panel4().tasks]


def test_the_final_table_prints_the_paired_rl_gain_per_panel():
    """BC: RL-task rates [0, 0.5, 1, 0.25], held-out [1, 0]; last eval [0.5, 0.5, 1, 0.75] and [1, 0].
    RL tasks: differences [0.5, 0, 0, 0.5], mean 0.25, sd 0.288675, half t(3) 3.182446 · 0.288675 / 2 =
    0.459347 -> [-0.209, +0.709]; held-out: nothing changed, said as such."""
    bc = {
        "phase": "bc",
        "iteration": 0,
        "train_eval_task_rates": [0, 0.5, 1, 0.25],
        "eval_task_rates": [1, 0],
    }
    last = {
        "phase": "rl",
        "iteration": 2,
        "train_eval_task_rates": [0.5, 0.5, 1, 0.75],
        "train_eval_samples": 4,
        "train_eval_temperature": 1.0,
        "eval_task_rates": [1, 0],
        "eval_samples": 1,
    }
    text = final_table([bc, {"phase": "rl", "iteration": 1}, last])
    assert (
        "RL gain over BC on the 4 tasks RL trains on at T = 1: +0.250 [-0.209, +0.709] (paired over 4 tasks × "
        "4 samples, t over tasks)"
    ) in text
    assert "RL gain over BC on 2 held-out tasks: +0.000: the policy did not change any task's outcome" in text
    assert "RL gain" not in final_table([bc, {"phase": "rl", "iteration": 1}])  # no eval after RL yet


class _TemperaturePool:
    """Plays every task ``samples`` times; at T = 0 it wins the first task, sampled the first two. Records the
    temperatures it was asked for."""

    def __init__(self):
        self.asked = []

    def play(self, tasks, sample_seed, *, temperature, samples=1):
        self.asked.append((temperature, samples))
        won = {0} if temperature == 0 else {0, 1}
        return [
            Trajectory(f"{i}-{k}", f"g{i}", t.task_id, "synthetic", won=i in won, info={"seed": t.seed})
            for i, t in enumerate(tasks)
            for k in range(samples)
        ]


def test_eval_greedy_plays_the_panel_once_at_temperature_0_beside_the_samples(cache):
    """``eval_greedy``: 4 tasks × 2 samples at T = 1 (wins: task 0 both, task 1 both -> 0.5) and once each at T = 0
    (task 0 -> 0.25); logged under eval_greedy_*, printed beside, and its own RL-gain line. BC greedy rates
    [0, 0, 0, 0], RL's [1, 0, 0, 0]: difference mean 0.25, sd 0.5, half t(3) 3.182446 · 0.5 / 2 = 0.795612."""
    from launch.driver.evaluator import PanelEvaluator

    cfg = resolve_config(None, [*SYNTH1, "eval_base_model=false", "eval_greedy=true"])
    pool = _TemperaturePool()
    panel = resolve_panel("synthetic", dict(cfg.env.options), "test", "auto", 4)
    ev = PanelEvaluator(pool, Evaluation(scope(cfg), "smollm2"), 1.0, 0, samples=2, greedy=True).evaluate(4)
    assert pool.asked == [(1.0, 2), (0.0, 1)]
    assert ev["success"] == 0.5 and ev["greedy"]["success"] == 0.25 and ev["greedy"]["temperature"] == 0.0
    assert ev["greedy"]["task_rates"] == [1.0, 0.0, 0.0, 0.0] and ev["greedy"]["n"] == len(panel.tasks)
    fields = eval_fields({**ev, "valid_roles": {}})
    assert (fields["eval_success"], fields["eval_greedy_success"], fields["eval_greedy_samples"]) == (
        0.5,
        0.25,
        1,
    )
    assert " · greedy 0.250 [" in eval_text(ev)
    bc = {"phase": "bc", "eval_greedy_task_rates": [0.0, 0.0, 0.0, 0.0]}
    text = final_table([bc, {"phase": "rl", **fields}])
    assert "RL gain over BC on 4 held-out tasks at T = 0: +0.250 [-0.546, +1.046]" in text
    # greedy is off at T = 0 (it would repeat the evaluation) and by default
    assert not PanelEvaluator(pool, Evaluation(scope(cfg), "smollm2"), 0.0, 0, greedy=True).greedy
    assert not resolve_config(None, SYNTH1).eval_greedy


class _TurnsPool:
    """Plays every task once: the first two won in 1 and 3 turns, the others lost in 5 (``wins=False``: all lost)."""

    def __init__(self, wins: bool = True) -> None:
        self.turns = {0: 1, 1: 3} if wins else {}

    def play(self, tasks, sample_seed, *, temperature, samples=1):
        return [
            Trajectory(
                f"{i}",
                f"g{i}",
                t.task_id,
                "synthetic",
                [Turn([1], [2], [-1.0])] * self.turns.get(i, 5),
                won=i in self.turns,
                info={"seed": t.seed},
            )
            for i, t in enumerate(tasks)
        ]


def test_eval_won_turns_is_the_mean_length_of_the_won_episodes(cache):
    """Won in 1 and 3 turns, lost in 5 and 5: ``eval_won_turns`` (1 + 3) / 2 = 2.0, the lost ones not counted;
    NaN without a win, printed "-". Catches the mean taken over every episode (3.5) or over the lost ones (5)."""
    from launch.driver.evaluator import PanelEvaluator

    cfg = resolve_config(None, [*SYNTH1, "eval_base_model=false", "eval_baselines=false"])
    evaluation = Evaluation(scope(cfg), "smollm2")
    ev = PanelEvaluator(_TurnsPool(), evaluation, 1.0, 0).evaluate(4)
    assert eval_fields({**ev, "valid_roles": {}})["eval_won_turns"] == 2.0
    lost = eval_fields(
        {**PanelEvaluator(_TurnsPool(wins=False), evaluation, 1.0, 0).evaluate(4), "valid_roles": {}}
    )
    assert math.isnan(lost["eval_won_turns"])
    table = final_table([{"phase": "rl", "iteration": 1, **lost}])
    assert table.splitlines()[1].split()[-3:] == ["eval_won_turns", "return", "iter_time_s"]
    assert table.splitlines()[2].split()[-3:] == ["-", "-", "-"]
