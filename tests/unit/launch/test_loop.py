"""The training loop (``launch/driver/train.py``'s ``Trainer``) on plain fakes of its parts (``tests/unit/loop_fakes.py``),
without Ray: what it calls, in which order, and what it logs, pushes and checkpoints; and the driver stage's hooks
(``launch/driver/stages.py``) among those calls. Every fake appends to one event list, so a test reads the loop's calls as
one sequence (take → update → push → eval → checkpoint → log)."""

from __future__ import annotations

import json

import pytest

from common.errors import RunStopped
from common.rng import process_rngs
from launch.config import BCConfig
from launch.driver import train as train_module
from launch.driver.train import train
from tests.unit.loop_fakes import SEED, STATS, fake_run, iteration_events

START_RL = ("start_rl", "default", True, 2)
"""RL starts with the defaults of ``LearnerConfig``: a fresh AdamW (``rl_optimizer="fresh"``) warmed up over 2 steps
(``rl_warmup_steps``). With "continue", BC's moments steered RL's first steps (docs/results/learning_fixes.md); a
revert of either default changes this event."""


def test_each_iteration_takes_updates_pushes_evaluates_checkpoints_then_logs(tmp_path, capsys):
    trainer, events, sources = fake_run(tmp_path)
    rows = trainer.run()
    warm_start = [("restart",), ("push", 1), ("freeze_reference",), START_RL, ("save", 0)]
    each = [iteration_events(it, it + 1, evaluate=it % 2 == 0) for it in (1, 2, 3, 4)]
    assert events == [*warm_start, *(e for it in each for e in it), ("source_close",)]
    assert sources == [(1, None)]
    # the critic's warm-up passes on the first RL iteration only; the null driver stage annotates nothing and leaves
    # the update's other arguments at their defaults
    calls = trainer.parts.updater.calls
    assert [c["critic_warmup"] for c in calls] == [2, 0, 0, 0]
    assert all(c["annotate"] is None and c["reference"] and c["warmup_left"] == 0 for c in calls)

    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    row = rows[1]
    fields = ["iteration", "phase", "version", *STATS, "policy_lag", "loss", "optimizer_steps"]
    fields += ["total_rollout_restarts", "total_learner_restarts"]
    assert list(row)[: len(fields)] == fields
    assert row["iteration"] == 2 and row["phase"] == "rl" and row["version"] == 3 and row["policy_lag"] == 0
    assert row["eval_success"] == 0.5 and "eval_success" not in rows[0]
    times = [k for k in row if k.startswith("time_")]
    assert times == [
        "time_rollout",
        "time_update",
        "time_push",
        "time_eval",
        "time_checkpoint",
        "time_iteration",
    ]
    assert list(row)[-len(times) :] == times

    # the checkpoint holds the row as logged, less the times, and the adapter version pushed; the null driver stage
    # keeps nothing in it
    learner, state, behaviour = trainer.parts.checkpoints.saved[2]
    assert learner == "learner0" and behaviour is None
    assert state == {"version": 3, "record": {k: v for k, v in row.items() if not k.startswith("time_")}}
    assert trainer.parts.pool.weights.current() == {None: {"from": "learner0", "export": 5}}
    out = capsys.readouterr().out
    assert out.count("iter   ") == 4 and "EVAL 0.50" in out
    assert f"hierarl view {tmp_path}" in out


def test_a_resume_starts_after_the_checkpoints_iteration(tmp_path, capsys):
    trainer, events, sources = fake_run(tmp_path, resume=True)
    path = tmp_path / "checkpoints" / "iter_2"
    last = {"iteration": 2, "phase": "rl", **STATS}
    state = {"iteration": 2, "version": 3, "rng": process_rngs(), "record": last}
    trainer.parts.checkpoints.newest = (path, state)
    rows = trainer.run()
    resumed = [("load_newest", "learner0"), ("push", 3), ("resume_at", 2)]
    each = [iteration_events(it, it + 1, evaluate=it % 2 == 0) for it in (3, 4)]
    assert events == [*resumed, *(e for it in each for e in it), ("source_close",)]
    assert sources == [(3, path)] and trainer.resumed_from == path
    assert [c["critic_warmup"] for c in trainer.parts.updater.calls] == [0, 0]
    assert [r["iteration"] for r in rows] == [2, 3, 4]
    assert f"resumed from {path} at iteration 3" in capsys.readouterr().out


def test_an_iteration_without_turns_is_logged_empty_and_neither_trained_nor_pushed(tmp_path, capsys):
    trainer, events, _ = fake_run(tmp_path, iterations=3, eval_every=0, empty=frozenset({2}))
    rows = trainer.run()
    assert events[5:] == [
        *iteration_events(1, 2, evaluate=False),
        ("take", 2),
        ("log", 2),
        *iteration_events(3, 3, evaluate=False),
        ("source_close",),
    ]
    assert rows[1] == {"iteration": 2, "phase": "rl", "empty": 1, **STATS}
    assert 2 not in trainer.parts.checkpoints.saved and trainer.parts.empty.in_a_row == 0
    assert "WARNING iteration 2: no samples" in capsys.readouterr().out


def test_a_lost_learner_worker_rebuilds_the_group_from_a_checkpoint_and_redoes_the_update(tmp_path, capsys):
    trainer, events, _ = fake_run(tmp_path, iterations=1, eval_every=0, fail=1)
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_0", {"iteration": 0})
    rows = trainer.run()
    assert events[5:] == [
        ("take", 1),
        ("update", SEED + 1, "learner0"),
        ("rebuild", "learner0"),
        ("load_newest", "learner1"),
        ("update", SEED + 1, "learner1"),
        ("before_push",),
        ("push", 2),
        ("save", 1),
        ("log", 1),
        ("source_close",),
    ]
    first, again = trainer.parts.updater.calls
    assert again["trajs"] is first["trajs"] and again["critic_warmup"] == first["critic_warmup"] == 2
    assert trainer.learner.name == "learner1" and trainer.learner_restarts == 1
    assert trainer.parts.pool.weights.current() == {None: {"from": "learner1", "export": 1}}
    assert trainer.parts.checkpoints.saved[1][0] == "learner1"
    assert rows[0]["total_learner_restarts"] == 1
    assert "group rebuilt from" in capsys.readouterr().out


def test_a_learner_lost_again_past_max_restarts_ends_the_run(tmp_path):
    trainer, events, _ = fake_run(tmp_path, iterations=1, fail=2)
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_0", {"iteration": 0})
    with pytest.raises(RunStopped, match=r"learner.max_restarts \(1\) rebuilds were used up"):
        trainer.run()
    assert events.count(("rebuild", "learner0")) == 1 and ("rebuild", "learner1") not in events


def test_a_warm_start_evaluates_the_base_model_then_clones_evaluates_and_freezes_the_reference(tmp_path):
    trainer, events, _ = fake_run(tmp_path, iterations=0, eval_zero_shot=True, bc=BCConfig(epochs=1))
    rows = trainer.run()
    assert events == [
        ("restart",),
        ("push", 1),
        ("evaluate", 2, True),  # the first push of a fresh run: a zero adapter, the base model
        ("log", -1),
        ("update", SEED, "learner0"),  # one BC epoch
        ("push", 2),
        ("evaluate", 2, False),
        ("log", 0),
        ("freeze_reference",),
        START_RL,
        ("save", 0),
        ("source_close",),
    ]
    assert [r["phase"] for r in rows] == ["zero-shot", "bc"]
    assert rows[1]["push_s"] == 0.0 and rows[1]["eval_success"] == 0.5
    assert trainer.parts.updater.calls[0]["algo"].name == "sft"


def test_bc_eval_epochs_evaluate_the_policy_after_those_passes(tmp_path):
    """``bc.eval_epochs=(1, 2)`` with 3 passes: after passes 1 and 2 the adapter is pushed and evaluated into a
    ``bc_epoch`` row; after pass 3 the usual BC row. Nothing is pushed before BC (no zero-shot eval): the first
    push is pass 1's, so the rollout workers' engines start while BC runs."""
    trainer, events, _ = fake_run(tmp_path, iterations=0, bc=BCConfig(epochs=3, eval_epochs=(1, 2)))
    rows = trainer.run()
    assert events[:11] == [
        ("restart",),
        ("update", SEED, "learner0"),
        *[("push", 1), ("evaluate", 2, False), ("log", 0)],
        ("update", SEED + 1, "learner0"),
        *[("push", 2), ("evaluate", 2, False), ("log", 0)],
        ("update", SEED + 2, "learner0"),
        ("push", 3),
    ]
    assert [(r["phase"], r.get("bc_epoch")) for r in rows] == [("bc_epoch", 1), ("bc_epoch", 2), ("bc", None)]


@pytest.mark.parametrize("reused", [True, False])
def test_a_warm_start_from_another_runs_bc_takes_its_evaluation_where_it_evaluated_alike(
    tmp_path, capsys, reused
):
    """``bc.from_run`` with the same evaluation settings (``Schedule.bc_eval_reused``): that run's evaluation after
    BC is logged and printed, nothing is played; with other settings the state is evaluated here."""
    src = tmp_path / "src"
    (src / "checkpoints" / "iter_0").mkdir(parents=True)
    theirs = {"eval_success": 0.25, "eval_ci_low": 0.1, "eval_ci_high": 0.5, "eval_n": 2, "eval_random": 0.0}
    theirs |= {"eval_panel": "p@1", "eval_valid_format": 1.0, "eval_task_rates": [0.5, 0.0]}
    (src / "metrics.jsonl").write_text(json.dumps({"phase": "bc", "demos": 4, "turns": 9, **theirs}) + "\n")
    trainer, events, _ = fake_run(
        tmp_path / "run",
        iterations=0,
        bc=BCConfig(epochs=1),
        bc_source=src / "checkpoints" / "iter_0",
        bc_eval_reused=reused,
    )
    rows = trainer.run()
    played = [e for e in events if e[0] == "evaluate"]
    # the first push is the BC state's: the engines start while the checkpoint loads
    assert events[:3] == [("restart",), ("load_checkpoint", "iter_0", ("default",)), ("push", 1)]
    assert played == ([] if reused else [("evaluate", 2, False)])
    bc = rows[0]
    assert bc["bc_from_run"] == str(src) and bc["demos"] == 4
    assert bc["eval_success"] == (0.25 if reused else 0.5)  # the fake evaluator scores 0.5
    assert (bc.get("eval_task_rates") == [0.5, 0.0]) is reused  # theirs, or the fake evaluator's
    said = (
        "eval after BC (that run's: same state and settings) success 0.250 [0.100, 0.500] (Wilson 95 %) on 2"
    )
    assert (said in capsys.readouterr().out) is reused


def test_a_one_step_off_checkpoint_keeps_the_adapter_its_in_flight_rollouts_came_from(tmp_path):
    """The adapter pushed before the last one: the next iteration's prefetched rollouts were played with it."""
    trainer, _, _ = fake_run(tmp_path, iterations=2, one_step_off=True)
    trainer.run()
    saved = trainer.parts.checkpoints.saved
    assert saved[0][2] is None  # one push so far: nothing in flight
    assert [saved[it][2] for it in (1, 2)] == [{"from": "learner0", "export": k} for k in (1, 2)]
    assert saved[2][1]["version"] == 3


def test_train_closes_the_run_whatever_the_loop_raises(tmp_path, monkeypatch):
    """``train``: the workers, the current learner group (here the rebuilt one) and the log closed on an error."""
    trainer, events, _ = fake_run(tmp_path, iterations=1, fail=2)
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_0", {"iteration": 0})
    monkeypatch.setattr(train_module, "build_run", lambda cfg: trainer.parts)
    with pytest.raises(RunStopped, match="rebuilds were used up"):
        train(None)
    assert events[-3:] == [("pool_close",), ("shutdown", "learner1"), ("log_close",)]


# ------------------------------------------------------------------------------------------------------------
# The driver stage (``launch/driver/stages.py``): its hooks among the loop's calls
# ------------------------------------------------------------------------------------------------------------


def test_the_driver_stage_is_prepared_supplies_the_data_and_brackets_every_update(tmp_path):
    """A fresh run with a stage: the warm start leaves the KL reference to it; it is prepared on checkpoint 0's
    learner and its own data replace the rollouts; each update gets its arguments (read from the steps counted so
    far) and its annotation, and is followed by its bookkeeping; every checkpoint holds its state."""
    trainer, events, sources = fake_run(tmp_path, staged=True)
    trainer.run()
    each = [iteration_events(it, it + 1, evaluate=it % 2 == 0) for it in (1, 2, 3, 4)]
    for calls in each:
        calls.insert(2, ("stage_after_update",))  # right after the update, before the push
    warm_start = [("restart",), ("push", 1), START_RL, ("save", 0)]  # no freeze_reference
    start = [("stage_prepare", 0), ("stage_source",)]
    assert events == [*warm_start, *start, *(e for it in each for e in it), ("source_close",)]
    assert sources == []  # no rollouts built
    stage, calls = trainer.parts.stage, trainer.parts.updater.calls
    assert [(c["reference"], c["warmup_left"], c["critic_warmup"]) for c in calls] == [
        (False, 3, 0),  # no critic passes: the stage owes its critic's warm-up in steps
        (True, 2, 0),
        (True, 1, 0),
        (True, 0, 0),
    ]
    assert all(c["annotate"] == stage.annotate for c in calls)
    saved = trainer.parts.checkpoints.saved
    assert [saved[it][1]["stage_steps"] for it in range(5)] == [0, 1, 2, 3, 4]
    assert "offline_steps" not in saved[4][1]  # the stored data's key is the stored data's alone


def test_a_resume_restores_the_driver_stage_then_prepares_it_on_the_checkpoints_learner(tmp_path):
    """Resumed from iter_2 (2 of the 3 critic-only steps taken): restored before anything reads it, prepared on
    iter_2's learner; the next update owes 1 step, not 3."""
    trainer, events, sources = fake_run(tmp_path, staged=True, resume=True)
    last = {"iteration": 2, "phase": "rl", **STATS}
    state = {"iteration": 2, "version": 3, "rng": process_rngs(), "record": last}
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_2", {**state, "stage_steps": 2})
    trainer.run()
    restored = [("load_newest", "learner0"), ("stage_restore", 2), ("push", 3), ("resume_at", 2)]
    assert events[:6] == [*restored, ("stage_prepare", 2), ("stage_source",)]
    assert [c["warmup_left"] for c in trainer.parts.updater.calls] == [1, 0]
    assert sources == [] and trainer.parts.stage.steps == 4


def test_a_rebuilt_learner_group_gets_the_driver_stage_of_the_checkpoint_it_loaded(tmp_path):
    """Checkpoints every second iteration; after iteration 3 (3 steps counted) the next update loses a learner
    worker: the group rebuilt from iter_2 restores the stage to its 2 steps and prepares it on iter_2, and the redone
    update reads that state and counts once (3 steps, not 4)."""
    trainer, events, _ = fake_run(tmp_path, staged=True, iterations=3, checkpoint_every=2, eval_every=0)
    trainer.run()
    _, state, _ = trainer.parts.checkpoints.saved[2]
    trainer.parts.checkpoints.newest = (tmp_path / "checkpoints" / "iter_2", {"iteration": 2, **state})
    trainer.parts.updater.fail = 1
    events.clear()
    trainer.update_recovering([], 4)
    assert events == [
        ("update", SEED + 4, "learner0"),
        ("rebuild", "learner0"),
        ("load_newest", "learner1"),
        ("stage_restore", 2),
        ("stage_prepare", 2),
        ("update", SEED + 4, "learner1"),
        ("stage_after_update",),
    ]
    lost, redone = trainer.parts.updater.calls[-2:]
    assert (lost["warmup_left"], redone["warmup_left"]) == (0, 1)
    assert trainer.parts.stage.steps == 3
