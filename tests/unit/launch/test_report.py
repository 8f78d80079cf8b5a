"""The paper-style eval table (launch/evaluation/report.py): rows per task type and ``all``, beside the random policy."""

import math

import pytest

from actors.trajectory import Decision, Trajectory, Turn
from launch.evaluation.report import eval_markdown, eval_rows


def _traj(task_type: str, won: bool, score: float, valid: list[bool]) -> Trajectory:
    turns = [Turn([1], [2], [0.0], decision=Decision(action="a", valid=v)) for v in valid]
    return Trajectory(
        "t", "g", "task", "alfworld", turns, won=won, score=score, info={"task_type": task_type}
    )


def test_rows_per_type_and_all_weighted_by_episodes():
    trajs = [
        _traj("pick", True, 1.0, [True, True]),
        _traj("pick", False, 0.0, [True, False]),
        _traj("clean", True, 1.0, [True]),
    ]
    rows = eval_rows(trajs, {"pick": 0.25, "clean": 0.1})
    assert [r["task_type"] for r in rows] == ["clean", "pick", "all"]
    clean, pick, total = rows
    assert (clean["episodes"], clean["success"], clean["random"]) == (1, 1.0, 0.1)
    assert (pick["episodes"], pick["success"], pick["valid_format"]) == (
        2,
        0.5,
        0.75,
    )  # 3 of 4 turns well-formed
    # all: 2 of 3 won; valid 4 of 5 turns; random weighted by episodes: (0.1 * 1 + 0.25 * 2) / 3 = 0.2
    assert total["success"] == pytest.approx(2 / 3) and total["valid_format"] == pytest.approx(0.8)
    assert total["random"] == pytest.approx(0.2) and total["score"] == pytest.approx(2 / 3)
    text = eval_markdown(rows, "title")
    # Wilson 1 of 2: centre 0.5 + z²/4 = 1.4603647, half z·sqrt(0.125 + z²/16) = 1.959964 · 0.6042278 = 1.1842652,
    # scale 1 + z²/2 = 2.9207294 -> [0.2760995, 2.6446299] / 2.9207294 = [0.0945312, 0.9054688]; no base model: nan
    assert (pick["ci_low"], pick["ci_high"]) == pytest.approx((0.0945312, 0.9054688), abs=1e-6)
    assert "| pick | 2 | 0.500 [0.095, 0.905] | 0.500 | 0.75 | 0.250 | nan |" in text


def test_one_type_has_no_separate_all_row_and_unknown_chance_is_nan():
    rows = eval_rows([_traj("", True, 1.0, [True])], {})
    assert [r["task_type"] for r in rows] == ["all"] and math.isnan(rows[0]["random"])


def test_multi_role_protocols_get_a_validity_column_per_role():
    """STEP-HRL: the high level's subgoal validity apart from the low level's actions (the per-role eval)."""
    turns = [
        Turn([1], [2], [0.0], decision=Decision(valid=False), role="high"),
        Turn([1], [2], [0.0], decision=Decision(action="a", valid=True), role="low"),
        Turn([1], [2], [0.0], decision=Decision(action="b", valid=True), role="low"),
    ]
    rows = eval_rows([Trajectory("t", "g", "task", "synthetic", turns, won=True)], {})
    assert rows[0]["valid_high"] == 0.0 and rows[0]["valid_low"] == 1.0 and "valid_agent" not in rows[0]
    text = eval_markdown(rows, "title")
    # one sub-goal issued, none completed (no completion flag, no winning step)
    assert "| valid high | valid low | subgoals done |" in text and text.rstrip().endswith(
        "| 0.00 | 1.00 | 0.00 |"
    )


def test_multi2_reports_the_executors_subgoal_completion_rate():
    """The per-role eval: the share of the planner's sub-goals the executor completed. Two sub-goals: the first
    flagged done with the score risen (completed), the second flagged done without progress (not completed)."""
    done = {"completion": True}
    turns = [
        Turn([1], [2], [0.0], decision=Decision(subgoal="g0"), role="planner"),
        Turn(
            [1], [2], [0.0], decision=Decision(action="a", extra=done), role="executor", info={"score": 0.5}
        ),
        Turn([1], [2], [0.0], decision=Decision(subgoal="g1"), role="planner"),
        Turn(
            [1], [2], [0.0], decision=Decision(action="b", extra=done), role="executor", info={"score": 0.5}
        ),
    ]
    plain = _traj("all", False, 0.0, [True])
    rows = eval_rows([Trajectory("t", "g", "task", "synthetic", turns), plain], {})
    assert rows[0]["subgoals_done"] == 0.5  # 1 of 2 issued; the ReAct trajectory issues none
    assert "subgoals_done" not in eval_rows([plain], {})[0]
