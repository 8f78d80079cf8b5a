"""Driver bookkeeping without Ray: which checkpoints are pruned, and what an iteration without samples does."""

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from common.errors import RunStopped
from common.rng import process_rngs, restore_process_rngs
from launch.config import resolve_config
from launch.driver.checkpoints import check_driver_state, checkpoint_iterations, checkpoints_to_prune
from launch.driver.sources import EmptyIterations


@pytest.mark.parametrize(
    ("iterations", "keep", "pruned"),
    [
        ([0, 1, 2, 3, 4], 2, [1, 2]),  # iter_0 (BC) always stays; the newest two RL ones stay
        ([0, 1, 2], 2, []),
        ([0, 1, 2, 3], 0, []),  # 0: keep all
        ([1, 2, 3], 1, [1, 2]),  # no BC checkpoint
        ([0, 2, 4, 6], 1, [2, 4]),  # checkpoint_every = 2
    ],
)
def test_checkpoints_to_prune(iterations, keep, pruned):
    assert checkpoints_to_prune(iterations, keep) == pruned


def test_only_complete_checkpoint_folders_count(tmp_path):
    for name in ("iter_0", "iter_3", ".iter_4.tmp", "iter_x"):
        (tmp_path / name).mkdir()
    (tmp_path / "latest").write_text("iter_3")
    assert checkpoint_iterations(tmp_path) == [0, 3]


def test_a_checkpoint_from_older_code_is_refused_in_one_line(tmp_path):
    """A driver.pt without the RNG state (older code) resumed into ``KeyError: 'rng'``; now it is named."""
    torch.save({"iteration": 3, "version": 4}, tmp_path / "driver.pt")
    old = torch.load(tmp_path / "driver.pt", weights_only=False)
    with pytest.raises(RunStopped, match=r"older hierarl \(its driver.pt lacks rng\)") as e:
        check_driver_state(tmp_path, old)
    assert "\n" not in str(e.value) and "start a new run_dir" in str(e.value)
    check_driver_state(tmp_path, {**old, "rng": process_rngs()})  # today's: accepted


def test_restored_rngs_draw_again_what_they_drew_after_the_save(tmp_path):
    """Each of the three generators a checkpoint keeps (driver and learner ranks alike) draws the same after a
    restore, through ``torch.save``/``load`` as a checkpoint stores them; leaving one out fails its draw."""

    def draw():
        return random.random(), float(np.random.rand()), float(torch.rand(()))

    torch.save({"rng": process_rngs()}, tmp_path / "state.pt")
    first = draw()
    assert draw() != first
    restore_process_rngs(torch.load(tmp_path / "state.pt", weights_only=False)["rng"])
    assert draw() == first


def test_iterations_without_samples_warn_then_fail(capsys):
    """Every group dropped: an ``empty`` row and a warning; the ``limit``-th in a row raises, and an iteration with
    samples resets the count. (The loop never trains or checkpoints an empty iteration.)"""
    guard = EmptyIterations(limit=2, groups_per_iter=4)
    stats = {"groups_dropped": 4, "failed": 0.0}
    assert guard.empty(1, stats) == {"iteration": 1, "phase": "rl", "empty": 1, **stats}
    assert "WARNING iteration 1: no samples (4 of 4 groups dropped" in capsys.readouterr().out
    guard.sampled()
    guard.empty(2, stats)  # one in a row again
    with pytest.raises(RunStopped, match="2 iterations in a row without samples"):
        guard.empty(3, stats)


def test_progress_lines_for_long_learner_phases(capsys):
    """A line per advance once ``every`` seconds passed (here 0: every advance but the last), a closing line if any
    was printed; a phase that finishes within ``every`` prints nothing."""
    from common.progress import Ticker
    from learners.group import _loss_note

    t = Ticker("update", 3, "optimizer steps", every=0.0)
    t.advance(1, _loss_note({"nll": 1.0}, {"nll": 1}))
    t.advance(1)
    t.advance(1)
    t.close(_loss_note({"nll": 1.5}, {"nll": 3}))
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(" (")[0] for ln in lines] == [
        "[hierarl]   update: 1/3 optimizer steps",
        "[hierarl]   update: 2/3 optimizer steps",
        "[hierarl]   update: 3/3 optimizer steps",
    ]
    assert lines[0].endswith("nll 1.000") and lines[-1].endswith("nll 0.500")
    quick = Ticker("log-probs", 8, "rows", every=60.0)
    quick.advance(8)
    quick.close()
    assert capsys.readouterr().out == ""


def test_a_small_kl_prints_its_digits_not_zero():
    """The main job's update KL is ~1e-5 (docs/results/main_job_seeds.md): printed with 4 decimals it read as
    ``0.0000``, an update that moved nothing. Below 10^-decimals two significant digits are printed instead."""
    from common.progress import small_text
    from launch.driver.run_log import iteration_line
    from learners.group import _loss_note

    assert small_text(0.0123) == "0.012" and small_text(0.0) == "0.000" and small_text(0.001) == "0.001"
    assert small_text(9.94e-6) == "9.9e-06" and small_text(-2e-4) == "-2.0e-04"
    assert small_text(0.00042, 4) == "0.0004" and small_text(4.2e-5, 4) == "4.2e-05"
    # 2 optimizer steps with approx. KL 1e-6 and 3e-6: mean 2e-6
    assert _loss_note({"approx_kl": 4e-6}, {"approx_kl": 2}) == "approx_kl 2.0e-06"
    row = {"iteration": 1, "success": 0.25, "return": 0.25, "valid_format": 1.0, "switch_rate": 0.0}
    row |= {"segment_len": 1.0, "prompt_tokens": 10.0, "response_tokens": 5.0, "kl": 0.0, "kl_update": 9.9e-6}
    line = iteration_line(row)
    assert "| kl 0.0000 |" in line and "| update kl 9.9e-06 |" in line


def test_bc_from_run_must_have_done_the_same_bc(tmp_path):
    from launch.config import ConfigError, bc_eval_reusable, check_bc_source, resolved_text
    from learners.algos.registry import get_algo

    src = tmp_path / "src"
    (src / "checkpoints" / "iter_0" / "policy_ds").mkdir(parents=True)
    done = resolve_config("hiper_synthetic_multi")
    (src / "config.yaml").write_text(resolved_text(done, get_algo("hiper").Config()))
    ppo = resolve_config("ppo_synthetic_multi", [f"bc.from_run={src}"])
    assert check_bc_source(ppo) == src / "checkpoints" / "iter_0"
    assert bc_eval_reusable(ppo)  # evaluated as this run would: its evaluation after BC is taken
    assert not bc_eval_reusable(
        resolve_config("ppo_synthetic_multi", [f"bc.from_run={src}", "eval_samples=3"])
    )
    assert not bc_eval_reusable(
        resolve_config("ppo_synthetic_multi", [f"bc.from_run={src}", "rollout.eval_temperature=1.0"])
    )
    with pytest.raises(ConfigError, match=r"bc.from_run: .* ran BC with seed=0, this run has 1"):
        check_bc_source(resolve_config("ppo_synthetic_multi", [f"bc.from_run={src}", "seed=1"]))
    with pytest.raises(ConfigError, match=r"bc\.epochs=4, this run has 3"):
        check_bc_source(resolve_config("ppo_synthetic_multi", [f"bc.from_run={src}", "bc.epochs=3"]))
    with pytest.raises(ConfigError, match="has no BC checkpoint"):
        check_bc_source(resolve_config(None, [f"bc.from_run={tmp_path / 'none'}"]))


def test_resume_rewrites_metrics_and_tensorboard_to_the_checkpoint(tmp_path):
    """Before: a resume truncated metrics.jsonl but TensorBoard kept the rows logged after the checkpoint, so the
    re-logged iteration appeared twice there. Now both hold exactly the history, every step once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from launch.config import LogConfig
    from launch.driver.run_log import RunLog

    t = RunLog.__new__(RunLog)  # the bookkeeping only: no Ray gauges
    t.run_dir, t.cfg, t.path, t.history, t._tb, t._wandb = (
        tmp_path,
        LogConfig(),
        tmp_path / "metrics.jsonl",
        [],
        None,
        None,
    )
    exported: list[dict] = []
    t.gauges = SimpleNamespace(record=exported.append)  # the Ray gauges (cluster/metrics.py) get every row
    for it in range(3):
        t.log({"iteration": it, "success": 0.1 * it})
    t.restart(t.history[:2])  # the checkpoint holds iterations 0-1; iteration 2 was killed after its row
    t.log({"iteration": 2, "success": 0.9})
    t.close()
    rows = [line for line in t.path.read_text().splitlines() if line]
    assert [json.loads(r)["iteration"] for r in rows] == [0, 1, 2]
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    events = acc.Scalars("success")
    assert [e.step for e in events] == [0, 1, 2]
    assert events[-1].value == pytest.approx(0.9)
    assert [r["iteration"] for r in exported] == [
        0,
        1,
        2,
        2,
    ]  # live gauges: the re-logged iteration overwrites


def test_a_jobs_own_env_vars_win_over_hierarls():
    """``ray job submit --runtime-env-json`` env vars: Ray refuses a driver runtime env that repeats a key, so
    hierarl drops its own value for every key the job sets."""
    from cluster.ray_cluster import job_env_vars

    job = json.dumps({"runtime_env": {"env_vars": {"OMP_NUM_THREADS": "4"}, "working_dir": "x"}, "other": 1})
    assert job_env_vars(job) == {"OMP_NUM_THREADS": "4"}
    assert job_env_vars(json.dumps({"runtime_env": None})) == {}
    assert job_env_vars("") == {}


def _group(*versions_per_episode: list[int]):
    from actors.trajectory import Trajectory, TrajectoryGroup

    def episode(versions: list[int]) -> Trajectory:
        turns = [SimpleNamespace(policy_version=v) for v in versions]
        return SimpleNamespace(turns=turns)  # staleness reads the turns' versions only

    return TrajectoryGroup("g", "t", [episode(v) for v in versions_per_episode])  # type: ignore[arg-type]


def test_a_groups_staleness_is_its_oldest_turns_lag():
    """The learner at version 6: an episode whose turns were sampled by versions 3 and 5 (a push landed between
    them) makes its group 6 - 3 = 3 versions stale, whatever the other episodes' turns are."""
    from launch.driver.stream import staleness

    assert staleness(_group([5, 6], [3, 5]), 6) == 3
    assert staleness(_group([6, 6], [6]), 6) == 0
    assert staleness(_group([], []), 6) == 0  # no turns: nothing stale


def test_the_policy_lag_counts_only_the_episodes_played_in_the_iteration():
    """Learner at version 4: played turns of versions 3 and 4 lag 4 - 3 = 1; an offline iteration's stored data
    (expert turns of version 0) has no lag (None, not 4), and its fresh online episodes are the only ones that count."""
    from launch.driver.sources import IterationData

    played = _group([3, 4], [4]).trajectories
    stored = _group([0, 0]).trajectories
    assert IterationData(played).policy_lag(4) == 1
    assert IterationData(stored + played, played=played).policy_lag(4) == 1
    assert IterationData(stored, played=[]).policy_lag(4) is None
    assert IterationData(stored).policy_lag(4) == 4  # without ``played`` every trajectory counts


def test_asynchronous_batches_draw_the_synchronous_iterations_tasks():
    """Batch b of the asynchronous queue plays what iteration b plays in the synchronous loop: same tasks, same env
    seed (``SyncRollouts`` uses the same function); batches differ from each other."""
    from launch.driver.sources import iteration_tasks

    ids = [f"task{i}" for i in range(50)]
    a, seed_a = iteration_tasks(ids, 3, 1, 4)
    assert iteration_tasks(ids, 3, 1, 4) == (a, seed_a) and len(set(a)) == 4
    b, seed_b = iteration_tasks(ids, 3, 2, 4)
    assert a != b and seed_b == seed_a + 1 == 3 * 7919 + 2
    assert len(iteration_tasks(ids[:2], 3, 1, 4)[0]) == 2  # fewer tasks than groups: each once


def test_take_skips_groups_older_than_the_bound_and_keeps_finish_order():
    """The learner at version 5, ``max_staleness=1``, 2 groups per iteration; finished groups with lags 2, 0, 1,
    0 (in the order they finished): the lag-2 group is dropped and counted, the next two are taken in order, the
    last waits for the next iteration. (The queue is already ahead, so no worker is asked for anything.)"""
    from launch.driver.stream import AsyncRollouts

    pool = SimpleNamespace(weights=SimpleNamespace(version=5))
    rollout = SimpleNamespace(groups_per_iter=2)
    stream = AsyncRollouts(pool, rollout, max_staleness=1, train_ids=[], seed=0, first_batch=10)  # type: ignore[arg-type]
    groups = [_group([3, 5]), _group([5]), _group([4, 5]), _group([5, 5])]
    stream.ready = list(groups)
    taken, stats = stream.take_groups(3)
    assert taken == groups[1:3]
    assert stats == {"groups_stale": 1.0, "groups_dropped": 0.0, "groups_ready": 1.0}
    assert stream.ready == groups[3:]


def test_a_failed_pause_does_not_leave_the_queue_stopping() -> None:
    """``pause`` sets ``stopping`` while it drains; a drain that raises (a stop call to a dead worker) must clear it,
    or every later replacement of a dead worker would be told to stop at once."""
    from types import SimpleNamespace

    from launch.driver.stream import AsyncRollouts

    def dead(index, drop_queued=False):
        raise RuntimeError("the worker died")

    pool = SimpleNamespace(stop_serving=dead)
    q = AsyncRollouts(pool, SimpleNamespace(), max_staleness=1, train_ids=[], seed=0, first_batch=0)  # type: ignore[arg-type]
    q.streams = {0: SimpleNamespace()}  # type: ignore[dict-item]
    with pytest.raises(RuntimeError, match="died"):
        q.pause()
    assert q.stopping is False
