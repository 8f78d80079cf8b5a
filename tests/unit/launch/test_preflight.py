"""``hierarl train``'s checks before Ray: a run folder it cannot create or write, and demonstrations longer than
``rollout.max_new_tokens``, each stop the command with one line and exit 2 instead of a traceback after Ray, the
engines and the learner have started."""

from __future__ import annotations

from pathlib import Path

import pytest

import launch.driver.train as driver
from launch.cli.main import main
from launch.cli.preflight import check_demonstrations
from launch.config import ConfigError, check_run_dir, resolve_config


@pytest.fixture
def no_ray(monkeypatch):
    """A check that lets a bad input through reaches ``train``, which would start Ray: fail instead."""

    def started(cfg):
        raise AssertionError("train() was called: the bad input got past the checks before Ray")

    monkeypatch.setattr(driver, "train", started)


def test_a_run_dir_under_a_file_is_refused_in_one_line(tmp_path, capsys, no_ray):
    """Before: the run started Ray and its engines, then died in ``build_run``'s mkdir with a NotADirectoryError
    traceback."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    run = blocker / "run"
    with pytest.raises(ConfigError, match=r"^run_dir: cannot create or write .*a_file/run \(Not a directory"):
        check_run_dir(resolve_config(None, [f"run_dir={run}"]))
    assert main(["train", f"run_dir={run}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hierarl train: run_dir: cannot create or write {run} (") and err.count("\n") == 1


def test_a_run_dir_the_system_refuses_is_refused_in_one_line(capsys, no_ray):
    """``/proc`` takes no new folders, whoever asks (root included): FileNotFoundError from mkdir before."""
    assert main(["train", "run_dir=/proc/hierarl_run"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("hierarl train: run_dir: cannot create or write /proc/hierarl_run (")
        and err.count("\n") == 1
    )
    assert not Path("/proc/hierarl_run").exists()


def test_a_run_dir_that_can_be_made_passes_and_is_left_as_it_was(tmp_path):
    """The check makes the missing folders to see that it can, then removes them: a later refusal leaves nothing."""
    run = tmp_path / "a" / "b" / "run"
    check_run_dir(resolve_config(None, [f"run_dir={run}"]))
    assert not (tmp_path / "a").exists()
    run.mkdir(parents=True)
    check_run_dir(resolve_config(None, [f"run_dir={run}"]))
    assert run.is_dir() and list(run.iterdir()) == []


def test_demonstrations_longer_than_max_new_tokens_stop_before_ray(tmp_path, capsys, no_ray):
    """Before: Ray started, the dashboard line printed, then BC died with actors/demos.py's ValueError traceback.
    The synthetic env's expert writes responses of up to 28 tokens in PPO's agent format."""
    run = tmp_path / "run"
    # the main job's TextCraft panels and goal kinds set aside: the synthetic env has neither
    textcraft = ["eval_panel=auto", "env.train_panel=auto", "bc.stratify=false"]
    args = ["algo=ppo", "env.name=synthetic", *textcraft, "rollout.max_new_tokens=24", f"run_dir={run}"]
    with pytest.raises(
        ValueError, match=r"^rollout\.max_new_tokens 24 cuts \d+ of \d+ demonstration responses"
    ):
        check_demonstrations(resolve_config(None, args))
    assert main(["train", *args]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("hierarl train: rollout.max_new_tokens 24 cuts ") and err.count("\n") == 1
    assert "raise it to at least 28" in err
    assert "demonstrations:" not in out  # the check's own collection prints nothing
    assert not run.exists()


def test_demonstrations_that_fit_pass_and_runs_without_them_are_not_played(monkeypatch):
    check_demonstrations(
        resolve_config(None, ["algo=ppo", "env.name=synthetic", "rollout.max_new_tokens=28"])
    )
    import launch.driver.wiring as wiring

    def played(*args, **kwargs):
        raise AssertionError("demonstrations collected for a run that clones none")

    monkeypatch.setattr(wiring, "expert_demonstrations", played)
    check_demonstrations(resolve_config(None, ["bc.enabled=false"]))
    check_demonstrations(resolve_config(None, ["bc.from_run=/some/run"]))
