"""Config: one set of defaults, presets and key=value only override, bad keys/values fail with one line."""

import dataclasses

import pytest

from launch.algos import ALGOS, get_algo
from launch.config import (
    PRESET_DIR,
    ConfigError,
    TrainConfig,
    apply_overrides,
    dump_yaml,
    flatten,
    resolve_algo_config,
    resolve_config,
)


def test_defaults_are_the_dataclass_defaults():
    assert resolve_config() == TrainConfig()


def test_cli_overrides_coerce_types():
    cfg = resolve_config(
        None, ["rollout.group_size=8", "learner.actor_lr=3e-4", "bc.enabled=false", "seed=7"]
    )
    assert cfg.rollout.group_size == 8 and isinstance(cfg.rollout.group_size, int)
    assert cfg.learner.actor_lr == pytest.approx(3e-4)
    assert cfg.bc.enabled is False and cfg.seed == 7
    assert cfg.env == TrainConfig().env  # untouched sections keep their defaults


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rollout.gruop_size=8", "did you mean rollout.group_size"),
        ("nonsense=1", "unknown config key"),
        ("rollout.group_size=abc", "expected an integer"),
        ("rollout.group_size=2.5", "expected an integer"),
        ("bc.enabled=maybe", "expected true/false"),
        ("iterations", "expected key=value"),
    ],
)
def test_bad_keys_and_values_fail_with_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as e:
        resolve_config(None, [override])
    assert "\n" not in str(e.value)


def test_algo_keys_are_validated_against_the_algorithm_dataclass():
    cfg = resolve_config(None, ["algo=hiper", "algo.c_keep=0.1"])
    algo_cfg = resolve_algo_config(get_algo(cfg.algo).Config, cfg.algo_overrides)
    assert algo_cfg.c_keep == pytest.approx(0.1)
    bad = resolve_config(None, ["algo=ppo", "algo.c_keep=0.1"])
    with pytest.raises(ConfigError, match=r"algo\.c_keep"):
        resolve_algo_config(get_algo(bad.algo).Config, bad.algo_overrides)


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().seed = 3  # type: ignore[misc]


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
def test_every_preset_resolves(preset):
    cfg = resolve_config(preset)
    assert cfg.algo in ALGOS
    resolve_algo_config(get_algo(cfg.algo).Config, cfg.algo_overrides)


def test_cli_beats_preset():
    cfg = resolve_config("hiper_alfworld", ["env.max_steps=7", "algo.c_keep=0.2"])
    assert cfg.env.max_steps == 7
    assert cfg.algo_overrides["c_keep"] == 0.2 and cfg.algo_overrides["lam_low"] == 0.95


def test_dumped_yaml_round_trips():
    import yaml

    cfg = resolve_config("hiper_synthetic_small")
    again = apply_overrides(TrainConfig(), flatten(yaml.safe_load(dump_yaml(cfg))))
    assert again == cfg


def test_every_rl_algorithm_scales_its_format_penalty_through_algo_overrides():
    from launch.algos import get_algo
    from launch.config import resolve_algo_config
    from launch.train import shaping_config

    for name in ("ppo", "grpo", "rloo", "gigpo", "hiper"):
        cfg = resolve_algo_config(get_algo(name).Config, {"format_penalty": 0.01})
        assert shaping_config(cfg).format_penalty == 0.01, name
