"""Driver stages (``launch/driver/stages.py``): which stage kind each algorithm's record names, what a kind
(``launch.driver.stage_kinds``) builds from its config sections alone, the learner models and config rules it brings,
and the hooks of the two stages in the tree, HISR's reward models (``launch/driver/hisr_rewards.py``) and the stored
data of STEP-HRL and Multi2 (``launch/driver/offline_data.py``), without Ray. Their place among the loop's calls:
``tests/unit/launch/test_loop.py``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from actors.trajectory import Trajectory, Turn, to_jsonl
from launch.config import ConfigError, resolve_algo_config, resolve_config, validate
from launch.driver import stage_kinds
from launch.driver.hisr_rewards import REWARD_MODELS, RewardModels
from launch.driver.offline_data import OfflineData
from launch.driver.stage_kinds import STAGE_KINDS, check_run, register_stage, stage_kind
from launch.driver.stages import DriverStage, StageKind
from launch.driver.update_plan import UpdatePlan
from launch.driver.wiring import learner_spec
from learners.algos import hisr, multi2
from learners.algos.registry import ALGOS, get_algo
from learners.learner_spec import CriticSpec
from tests.unit.stage_inputs import stage_inputs, unused


def test_each_record_names_a_registered_stage_hisr_and_the_offline_methods_their_own():
    assert {name: a.driver_stage for name, a in ALGOS.items() if a.driver_stage} == {
        "hisr": "reward_models",
        "step_hrl": "offline_data",
        "multi2": "offline_data",
    }
    for algo in ALGOS.values():
        assert stage_kind(algo) is STAGE_KINDS[algo.driver_stage]
        # the learner-side flag of the same methods agrees with the stage they name
        assert algo.offline == (algo.driver_stage == "offline_data")


def test_an_unregistered_stage_is_refused_and_a_taken_name_too(monkeypatch):
    with pytest.raises(
        ValueError, match=r"^algorithm 'ppo': unknown driver_stage 'nope'; known: '', 'offline_data'"
    ):
        stage_kind(replace(get_algo("ppo"), driver_stage="nope"))
    monkeypatch.setattr(stage_kinds, "STAGE_KINDS", dict(STAGE_KINDS))
    with pytest.raises(ValueError, match="driver stage 'offline_data' is already registered"):
        register_stage("offline_data", StageKind())
    with pytest.raises(TypeError, match="expected a StageKind, got function"):
        register_stage("nope", lambda inputs: DriverStage())
    kind = StageKind()
    assert register_stage("nope", kind) is kind
    assert stage_kind(replace(get_algo("ppo"), driver_stage="nope")) is kind


KINDS = [
    ("ppo_synthetic_small", [], DriverStage, None),
    ("hisr_synthetic_multi", [], RewardModels, "hisr"),
    ("step_hrl_synthetic_multi", [], OfflineData, "offline"),
    ("multi2_synthetic_multi", ["algo.online_groups=1"], OfflineData, "offline"),  # online: a KL term
]
"""A preset of every stage kind in the tree: (preset, overrides, the stage it builds, the folder it makes)."""


def kind_inputs(cfg: Any, sections: dict[str, Any], run_dir: Path) -> Any:
    """The inputs ``build_run`` gives a stage of ``cfg``'s algorithm, with ``sections`` of its config."""
    algo = get_algo(cfg.algo)
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    return stage_inputs(algo, algo_cfg, run_dir, seed=cfg.seed, sections=sections, train_ids=["t"])


def test_the_presets_cover_every_stage_kind():
    assert {get_algo(resolve_config(p, o).algo).driver_stage for p, o, _, _ in KINDS} == set(STAGE_KINDS)


@pytest.mark.parametrize(("preset", "overrides", "built", "folder"), KINDS)
def test_every_stage_kind_builds_from_its_config_sections_alone(tmp_path, preset, overrides, built, folder):
    """The builder sees the sections its kind declares and no other part of the run config; without one of them
    it fails. Catches a builder reading a section its kind does not declare (or declaring one it never needs is
    harmless, but each declared one is read here)."""
    cfg = resolve_config(preset, overrides)
    kind = stage_kind(get_algo(cfg.algo))
    inputs = kind_inputs(cfg, kind.sections_of(cfg), tmp_path)
    stage = kind.build(inputs)
    assert type(stage) is built
    assert [p.name for p in tmp_path.iterdir()] == ([folder] if folder else [])
    if isinstance(stage, OfflineData):  # the online phase's KL reference, where there is a KL term
        assert (
            (stage.freeze_reference is unused)
            == inputs.algo.uses_reference(inputs.algo_cfg)
            == (preset == "multi2_synthetic_multi")
        )
    for name in kind.sections:
        fewer = {k: v for k, v in kind.sections_of(cfg).items() if k != name}
        with pytest.raises(KeyError, match=f"section '{name}' is not among the stage kind's"):
            kind.build(kind_inputs(cfg, fewer, tmp_path / "fewer"))


def test_the_stage_kind_brings_its_learner_models(monkeypatch):
    """HISR's kind puts the hindsight adapter beside the policy's (the one adapter named ``default``) and the SPRM
    beside the critic; an algorithm without a stage adds nothing. Catches the generic wiring dropping them."""
    import transformers

    monkeypatch.setattr(
        transformers.AutoConfig, "from_pretrained", lambda path: SimpleNamespace(hidden_size=16)
    )

    def spec(overrides: list[str]) -> Any:
        cfg = resolve_config(None, overrides)
        algo = get_algo(cfg.algo)
        return cfg, learner_spec(cfg, algo, validate(cfg), "model", "cpu")

    cfg, hisr_spec = spec(["algo=hisr", "rollout.agent=react"])
    acfg = resolve_algo_config(hisr.Config, cfg.algo_overrides)
    assert hisr_spec.adapters == (("default", cfg.learner.actor_lr), ("hindsight", acfg.hindsight_lr))
    assert hisr_spec.extra_critics == (CriticSpec("sprm", 1, 16, acfg.sprm_lr),)
    _, ppo_spec = spec(["algo=ppo"])
    assert ppo_spec.adapters == () and ppo_spec.extra_critics == ()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algo=hisr", "rollout.agent=react", "algo.segmentation=subgoal"],
            "algo.segmentation: 'subgoal' needs a protocol that states subgoals",
        ),
        (
            [
                "algo=hisr",
                "rollout.agent=react",
                "learner.zero_stage=3",
                "learner.micro_batch_size=32",
                "learner.kl_reference=base",
            ],
            "learner.zero_stage: algo=hisr's SPRM shares the policy's base",
        ),
        (
            ["algo=step_hrl", "rollout.agent=step_hrl", "one_step_off=true"],
            "one_step_off: algo=step_hrl trains",
        ),
        (
            ["algo=multi2", "rollout.agent=multi2", "algo.online_groups=2", "learner.kl_reference=base"],
            "learner.kl_reference: algo=multi2's KL term is to π_off",
        ),
    ],
)
def test_a_stage_kinds_rules_are_checked_by_hierarl_train_not_by_the_generic_validation(overrides, message):
    """The rules are the kind's (``StageKind.check``): ``check_run``, which ``hierarl train`` and sweeps call,
    refuses the config in one line; ``launch.config.validate`` alone, which names no algorithm, lets it through."""
    cfg = resolve_config(None, overrides)
    validate(cfg)
    with pytest.raises(ConfigError) as e:
        check_run(cfg)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------------------
# The stored data (STEP-HRL, Multi2)
# ------------------------------------------------------------------------------------------------------------


def won(traj_id: str = "w") -> Trajectory:
    turn = Turn([1, 2], [5], [-1.0], env_reward=1.0, role="executor")
    return Trajectory(
        traj_id, "g", "t", "synthetic", [turn], status="finished", won=True, info={"source": "expert"}
    )


def offline_data(run_dir: Path, acfg: multi2.Config) -> OfflineData:
    return OfflineData(
        stage_inputs(replace(get_algo("multi2"), anchor_role=""), acfg, run_dir, train_ids=["t"])
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
    data = offline_data(tmp_path, multi2.Config())
    to_jsonl([won("a"), won("b")], tmp_path / "offline" / "dataset.jsonl")
    (tmp_path / "offline" / "manifest.json").write_text(json.dumps({"expert": 2}))
    data.prepare(0)
    assert [t.traj_id for t in data.dataset] == ["a", "b"]
    (tmp_path / "offline" / "dataset.jsonl").unlink()
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


def reward_models(run_dir: Path, learner: Learner) -> RewardModels:
    return RewardModels(
        stage_inputs(get_algo("hisr"), hisr.Config(segmentation="turn"), run_dir, learner=learner)
    )


def test_reward_models_load_from_the_stage_cache_unless_the_learner_holds_an_rl_checkpoint(tmp_path):
    """Prepared on iter_0's learner (a fresh run, or a group rebuilt from iter_0): the stages are cached, so the
    models are loaded from ``models/``; on an RL checkpoint's learner they are there already. Everything else is
    the null stage's: it scores each update with ``annotate``."""
    learner = Learner()
    models = reward_models(tmp_path, learner)
    (tmp_path / "hisr" / "stages.json").write_text(json.dumps({"sprm": {}, "hindsight": {}}))
    models.prepare(2)
    assert learner.loaded == []
    models.prepare(0)
    assert learner.loaded == [("models", REWARD_MODELS)]
    plan = UpdatePlan(seed=0)
    assert models.annotate is not None and models.update_plan(plan, 1) == plan
    assert models.reference_at_warm_start and models.critic_warmup_in_passes
    assert models.state() == {}
