"""Driver stages (``launch/driver/stages.py``): which stage each algorithm's record names and what ``launch.driver.stage_builders`` builds
for it, and the hooks of the two stages in the tree, HISR's reward models (``launch/driver/hisr_rewards.py``) and the stored data of
STEP-HRL and Multi2 (``launch/driver/offline_data.py``), without Ray. Their place among the loop's calls:
``tests/unit/launch/test_loop.py``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from actors.trajectory import Trajectory, Turn, to_jsonl
from launch.config import resolve_algo_config, resolve_config
from launch.driver import stage_builders
from launch.driver.hisr_rewards import REWARD_MODELS, RewardModels
from launch.driver.offline_data import OfflineData
from launch.driver.stage_builders import STAGES, StageInputs, register_stage, stage_builder
from launch.driver.stages import DriverStage
from launch.driver.update_plan import UpdatePlan
from learners.algos import hisr, multi2
from learners.algos.registry import ALGOS, get_algo


def unused(*_: Any, **__: Any) -> Any:
    raise AssertionError("not expected in this test")


def test_each_record_names_a_registered_stage_hisr_and_the_offline_methods_their_own():
    assert {name: a.driver_stage for name, a in ALGOS.items() if a.driver_stage} == {
        "hisr": "reward_models",
        "step_hrl": "offline_data",
        "multi2": "offline_data",
    }
    for algo in ALGOS.values():
        assert stage_builder(algo) is STAGES[algo.driver_stage]
        # the learner-side flags of the same methods agree with the stage they name
        assert (algo.driver_stage == "reward_models", algo.driver_stage == "offline_data") == (
            algo.reward_models,
            algo.offline,
        )


def test_an_unregistered_stage_is_refused_and_a_taken_name_too(monkeypatch):
    with pytest.raises(
        ValueError, match=r"^algorithm 'ppo': unknown driver_stage 'nope'; known: '', 'offline_data'"
    ):
        stage_builder(replace(get_algo("ppo"), driver_stage="nope"))
    monkeypatch.setattr(stage_builders, "STAGES", dict(STAGES))
    with pytest.raises(ValueError, match="driver stage 'offline_data' is already registered"):
        register_stage("offline_data", stage_builders.no_stage)
    assert register_stage("nope", stage_builders.no_stage) is stage_builders.no_stage
    assert isinstance(stage_builder(replace(get_algo("ppo"), driver_stage="nope"))(None), DriverStage)


@pytest.mark.parametrize(
    ("preset", "overrides", "kind", "folder"),
    [
        ("ppo_synthetic_small", [], DriverStage, None),
        ("hisr_synthetic_multi", [], RewardModels, "hisr"),
        ("step_hrl_synthetic_multi", [], OfflineData, "offline"),
        ("multi2_synthetic_multi", ["algo.online_groups=1"], OfflineData, "offline"),  # online: a KL term
    ],
)
def test_specs_builds_the_stage_the_record_names_over_the_run_folder(
    tmp_path, preset, overrides, kind, folder
):
    cfg = resolve_config(preset, [f"run_dir={tmp_path}", *overrides])
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    inputs = StageInputs(
        cfg=cfg,
        algo=algo,
        algo_cfg=algo_cfg,
        tokenizer=None,
        pad_id=0,
        train_ids=["t"],
        learner=unused,
        collect=unused,
        sample=unused,
        demonstrations=unused,
        log=unused,
        freeze_reference=unused,
    )
    stage = stage_builder(algo)(inputs)
    assert type(stage) is kind
    assert [p.name for p in tmp_path.iterdir()] == ([folder] if folder else [])
    if isinstance(stage, OfflineData):  # the online phase's KL reference, where there is a KL term
        assert (
            (stage.freeze_reference is unused)
            == algo.uses_reference(algo_cfg)
            == (preset == "multi2_synthetic_multi")
        )


# ------------------------------------------------------------------------------------------------------------
# The stored data (STEP-HRL, Multi2)
# ------------------------------------------------------------------------------------------------------------


def won(traj_id: str = "w") -> Trajectory:
    turn = Turn([1, 2], [5], [-1.0], env_reward=1.0, role="executor")
    return Trajectory(
        traj_id, "g", "t", "synthetic", [turn], status="finished", won=True, info={"source": "expert"}
    )


def offline_data(root: Path, acfg: multi2.Config) -> OfflineData:
    return OfflineData(
        acfg,
        root,
        anchor_role="",
        seed=0,
        env_name="synthetic",
        train_split="train",
        group_size=2,
        temperature=1.0,
        train_ids=["t"],
        demonstrations=unused,
        collect=unused,
        sample=unused,
        log=unused,
        freeze_reference=None,
    )


def test_stored_data_are_their_own_source_with_a_later_reference_and_a_warm_up_in_steps(tmp_path):
    """One offline iteration, then online ones (reference read); 3 critic-only steps owed, counted down by each
    update's optimizer steps; the count is the checkpoint's ``offline_steps`` and a resume's start (0 where a
    checkpoint lacks it). Catches: the reference read offline, the count not kept or not restored."""
    acfg = multi2.Config(offline_iterations=1, online_groups=1, warmup_steps=3)
    data = offline_data(tmp_path, acfg)
    assert data.iteration_source(unused) is data and data.annotate is None
    assert not data.reference_at_warm_start and not data.critic_warmup_in_passes
    assert data.state() == {"offline_steps": 0}
    plan = UpdatePlan(seed=5, critic_warmup=2)
    assert data.update_plan(plan, 1) == replace(plan, reference=False, warmup_left=3)
    data.after_update({"optimizer_steps": 2.0, "loss": 0.5})
    assert data.update_plan(plan, 2) == replace(plan, reference=True, warmup_left=1)
    assert data.state() == {"offline_steps": 2}
    resumed = offline_data(tmp_path, acfg)
    resumed.restore({"iteration": 1, "version": 2, **data.state()})
    assert resumed.update_plan(plan, 2) == data.update_plan(plan, 2)
    resumed.restore({"iteration": 1, "version": 2})
    assert resumed.update_plan(plan, 2).warmup_left == 3


def test_stored_data_are_prepared_once_a_rebuilt_learner_leaves_them(tmp_path):
    """``prepare`` reads the cached dataset; a later call (a rebuilt learner group) neither reads nor builds it
    again (its expert demonstrations and collection would raise here)."""
    to_jsonl([won("a"), won("b")], tmp_path / "dataset.jsonl")
    (tmp_path / "manifest.json").write_text(json.dumps({"expert": 2}))
    data = offline_data(tmp_path, multi2.Config())
    data.prepare(0)
    assert [t.traj_id for t in data.dataset] == ["a", "b"]
    (tmp_path / "dataset.jsonl").unlink()
    data.prepare(3)
    assert [t.traj_id for t in data.dataset] == ["a", "b"]


# ------------------------------------------------------------------------------------------------------------
# HISR's reward models
# ------------------------------------------------------------------------------------------------------------


class Learner:
    """Records the checkpoints loaded into it."""

    def __init__(self) -> None:
        self.loaded: list[tuple[str, tuple[str, ...]]] = []

    def load_checkpoint(self, path: str, *, only: Any = None) -> None:
        self.loaded.append((Path(path).name, tuple(only)))


def reward_models(root: Path, learner: Learner) -> RewardModels:
    return RewardModels(
        hisr.Config(segmentation="turn"),
        root,
        None,
        agent="react",
        env_name="synthetic",
        max_seq_len=64,
        pad_id=0,
        seed=0,
        learner=learner,
        collect=unused,
        train_ids=[],
        log=unused,
    )


def test_reward_models_load_from_the_stage_cache_unless_the_learner_holds_an_rl_checkpoint(tmp_path):
    """Prepared on iter_0's learner (a fresh run, or a group rebuilt from iter_0): the stages are cached, so the
    models are loaded from ``models/``; on an RL checkpoint's learner they are there already. Everything else is
    the null stage's: it scores each update with ``annotate``."""
    learner = Learner()
    models = reward_models(tmp_path, learner)
    (tmp_path / "stages.json").write_text(json.dumps({"sprm": {}, "hindsight": {}}))
    models.prepare(2)
    assert learner.loaded == []
    models.prepare(0)
    assert learner.loaded == [("models", REWARD_MODELS)]
    plan = UpdatePlan(seed=0)
    assert models.annotate is not None and models.update_plan(plan, 1) == plan
    assert models.reference_at_warm_start and models.critic_warmup_in_passes
    assert models.state() == {"offline_steps": 0}
