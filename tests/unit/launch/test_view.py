"""``hierarl view``: what the report reads from a run folder (tests/view_runs.py writes one as the driver does) and
the page it writes; the browser test (tests/browser) opens that page in Chromium."""

from __future__ import annotations

import json
import re

import pytest

from launch.cli.main import main
from launch.view.page import build_page, clean, figures
from launch.view.run_data import Span, ViewError, compare_grids, read_run, spans
from tests.view_runs import TASKS, write_run


def payload(page: str) -> dict:
    return json.loads(
        re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    )


def test_a_response_is_cut_into_its_tagged_blocks_and_the_rest():
    """Tag text included (the learner's masks cover it); an unclosed block runs to the end, as the parsers read it."""
    assert spans("<switch>KEEP</switch> x<action>craft 1 bow") == (
        Span("<switch>KEEP</switch>", "switch"),
        Span(" x", "other"),
        Span("<action>craft 1 bow", "action"),
    )
    assert spans("no tags") == (Span("no tags", "other"),)
    assert spans("") == ()


def test_a_run_folder_reads_into_rows_episodes_and_the_eval_grid(tmp_path):
    view = read_run(write_run(tmp_path / "run"))
    assert [r["phase"] for r in view.history] == ["bc", "rl", "rl"] and view.notes == []
    assert [(e.source, e.iteration, e.task_id, e.won) for e in view.episodes] == [
        ("train", 1, TASKS[0], True),
        ("train", 1, TASKS[1], False),
        ("train", 2, TASKS[0], True),
        ("train", 2, TASKS[1], False),
        ("eval", 0, TASKS[0], False),  # every evaluation episode, after BC and after RL
        ("eval", 0, TASKS[1], True),
        ("eval", 2, TASKS[0], True),
        ("eval", 2, TASKS[1], True),
    ]
    assert not view.episodes[4].turns[0].tokens  # an evaluation trains nothing: no advantages
    won = view.episodes[0]
    assert [t.segment for t in won.turns] == [0, 0, 1]
    assert [t.switch for t in won.turns] == [True, False, True]
    keep = won.turns[1].tokens  # the KEEP turn: its subgoal copy is its own group; each token its advantage
    assert [(k.group, k.adv) for k in keep] == [("switch", 0.5), ("subgoal_keep", 0.5), ("action", 1.0)]
    assert "".join(k.piece for k in keep) == "".join(x.text for x in won.turns[1].spans)
    assert won.turns[0].values == {"v_high": 0.25, "v_low": 0.5}
    assert [k.adv for k in view.episodes[1].turns[2].tokens] == [-0.5, -0.5, -1.0]  # the lost episode's
    assert (won.turns[1].valid, won.turns[1].error) == (False, "no <action> block")
    assert won.episode_return == pytest.approx(1.0 - 0.1)  # the env's 1 on the last turn, the format penalty
    (grid,) = view.grids  # held-out only: the fixture has no RL-task evaluation
    assert grid.task_ids == TASKS and (grid.before, grid.after) == ((0.0, 1.0), (0.5, 0.5))
    assert [grid.change(i) for i in range(2)] == ["gained", "lost"]
    assert [e.iteration for e in read_run(tmp_path / "run", episodes_per_iteration=1).episodes[:2]] == [1, 2]


def test_a_cut_run_and_a_run_from_older_code_read_as_far_as_they_go(tmp_path):
    run = write_run(tmp_path / "cut")
    with (run / "episodes" / "iter_2.jsonl").open("a") as f:
        f.write('{"task_id": "depth2-bo')  # the write the kill interrupted
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"phase": "rl", "iter')
    view = read_run(run)
    assert len([e for e in view.episodes if e.source == "train"]) == 4
    assert view.notes == [
        "metrics.jsonl: 1 unreadable line(s) left out",
        "iter_2.jsonl: line 3 unreadable (JSONDecodeError); read up to there",
    ]
    old = tmp_path / "old"
    old.mkdir()
    rows = [{"phase": "bc", "iteration": 0, "eval_task_rates": [0, 1]}, {"phase": "rl", "iteration": 1}]
    rows.append({"phase": "rl", "iteration": 2, "eval_task_rates": [1, 1]})  # no eval_task_ids: older code
    (old / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    view = read_run(old)
    assert view.episodes == [] and view.grids[0].task_ids == ("task 1", "task 2")
    assert view.notes == ["no episodes kept: the run had keep_episodes=0 and save_trajectories=false"]
    # a run from before keep_episodes, with save_trajectories=true: its episodes, without tokens
    view = read_run(write_run(tmp_path / "trajectories_only", kept=False))
    assert len(view.episodes) == 4 and all(not t.tokens for e in view.episodes for t in e.turns)
    assert view.notes == [
        "episodes from trajectories/ (written before the update): no advantages or reward terms"
    ]


def test_a_folder_with_nothing_to_show_is_one_clear_error(tmp_path):
    with pytest.raises(ViewError, match="no such run folder"):
        read_run(tmp_path / "missing")
    with pytest.raises(ViewError, match=r"no metrics\.jsonl"):
        read_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("not json\n")
    with pytest.raises(ViewError, match="no readable row"):
        read_run(tmp_path)


def test_the_page_holds_the_curves_episodes_and_grid_as_json_a_browser_parses(tmp_path):
    """NaN (the base model off) becomes null; each token group's update KL is a trace on a log axis; two runs
    overlay their curves (the second's dashed) and the page shows the first's episodes."""
    a, b = read_run(write_run(tmp_path / "a")), read_run(write_run(tmp_path / "b", iterations=3))
    page = build_page([a, b])
    data = payload(page)
    assert (
        "NaN" not in json.dumps(data) and len(data["episodes"]) == 4 + 4
    )  # 2 iterations × 2, 2 evaluations × 2
    kl = next(f for f in data["figures"] if f["layout"]["title"]["text"] == "Update KL per token group")
    assert kl["layout"]["yaxis"]["type"] == "log"
    assert {t["name"] for t in kl["data"]} == {"a action", "a switch", "b action", "b switch"}
    assert {t["line"]["dash"] for t in kl["data"] if t["name"].startswith("b ")} == {"dash"}
    assert [t["y"] for t in kl["data"] if t["name"] == "b action"] == [[1e-3, 2e-3, 3e-3]]
    assert len(figures([a])) == 5  # success, KL, advantages, policy, phase times
    policy = next(f for f in data["figures"] if f["layout"]["title"]["text"].startswith("Switches"))
    assert "a switch_agreement" in {t["name"] for t in policy["data"]}
    assert '<tr class="gained"><td>depth2-bow</td><td>0.00</td><td>0.50</td>' in page
    # a diverged figure (a NaN loss, an infinite ratio) reaches the page as null, never as a token JSON.parse rejects
    assert clean({"y": [float("nan"), 1.0, float("inf")], "n": (2, "x")}) == {
        "y": [None, 1.0, None],
        "n": [2, "x"],
    }


def test_hierarl_view_writes_the_report_or_says_why_not(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    assert main(["view", str(run)]) == 0
    assert (run / "report.html").stat().st_size > 1e6  # plotly.js inline: the page opens offline
    assert main(["view", str(run), str(run), "-o", str(tmp_path / "ab.html")]) == 0
    assert main(["view", str(run), str(run), str(run)]) == 2
    assert main(["view", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "hierarl view: one run, or two to overlay; got 3",
        f"hierarl view: {tmp_path / 'nope'}: no such run folder",
    ]


def test_two_runs_are_compared_task_by_task_on_the_panels_they_share(tmp_path):
    """A's last evaluation (bow 0.5, slab 0.5) against B's (bow 1.0, slab 0.0): B gained bow, lost slab."""
    a = read_run(write_run(tmp_path / "a"))
    b = read_run(write_run(tmp_path / "b", iterations=3, last=(1.0, 0.0)))
    (grid,) = compare_grids(a, b)
    assert grid.label == "held-out panel: a rl 2 → b rl 3"
    assert (grid.before, grid.after) == ((0.5, 0.5), (1.0, 0.0))
    assert [grid.change(i) for i in range(2)] == ["gained", "lost"]
    assert "held-out panel: a rl 2 → b rl 3" in build_page([a, b])
