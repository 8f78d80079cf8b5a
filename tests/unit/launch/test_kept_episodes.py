"""What a run keeps of each RL iteration for ``hierarl view`` (``keep_episodes``): which episodes, and in what form
(the form itself is read back in tests/unit/launch/test_view.py)."""

from __future__ import annotations

import pytest

from actors.trajectory import Trajectory
from launch.config import ConfigError, resolve_config, validate
from launch.driver.kept_episodes import sample


def batch(outcomes: str) -> list[Trajectory]:
    return [Trajectory(f"t{i}", "g", "task", "synthetic", won=o == "W") for i, o in enumerate(outcomes)]


@pytest.mark.parametrize(
    ("outcomes", "n", "kept"),
    [
        ("WLWLWL", 4, [0, 1, 2, 3]),  # 2 won + 2 lost, in batch order
        ("LLLLLW", 4, [0, 1, 2, 5]),  # the one win kept, 3 losses fill the rest
        ("WWWWWL", 4, [0, 1, 2, 5]),  # half = 2, but one loss only: 3 wins
        ("LLLL", 2, [0, 1]),
        ("WL", 16, [0, 1]),  # fewer episodes than asked: all
        ("WLWL", 0, []),
    ],
)
def test_a_sample_shows_both_outcomes_where_the_batch_has_both(outcomes, n, kept):
    assert sample(batch(outcomes), n) == kept


def test_keep_episodes_defaults_to_a_page_worth_and_refuses_a_negative_count():
    assert resolve_config(None).keep_episodes == 16
    with pytest.raises(ConfigError, match="keep_episodes"):
        validate(resolve_config(None, ["keep_episodes=-1"]))


def test_an_evaluation_run_again_after_a_resume_is_written_over(tmp_path):
    """One file per evaluation and panel: a resumed run that evaluates an iteration again keeps one copy."""
    from launch.driver.kept_episodes import EpisodeKeeper

    keeper = EpisodeKeeper(tmp_path, None, 16, [])
    for _ in range(2):
        keeper.keep_eval(2, "eval RL tasks", batch("WL"))
    (path,) = (tmp_path / "episodes").iterdir()
    assert path.name == "eval_iter_2.eval_RL_tasks.jsonl" and len(path.read_text().splitlines()) == 2
    assert EpisodeKeeper(tmp_path / "none", None, 0, []).keep_eval(0, "eval", batch("W")) is None
    assert not (tmp_path / "none").exists()  # keep_episodes=0: nothing
