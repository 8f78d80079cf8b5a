"""Resolution: dataclass defaults → preset (``launch/configs/<name>.yaml`` or a path; a top-level ``base: <preset>``
loads that preset first, one level) → CLI ``key=value``. Every key is checked against the dataclass tree: an
unknown key or a value of the wrong type fails at once with a one-line ``ConfigError`` that names the key (and the
closest valid key). The algorithm's own keys (``algo.*``) resolve against its ``Config`` (``resolve_algo_config``),
which checks its own values. Also the saved form of a run's config (``resolved_text``, ``read_run_config``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from launch.config.derived import behaviour_is_cap, engine_old_logprobs
from launch.config.schema import (
    PRESET_DIR,
    ConfigError,
    TrainConfig,
    one_line,
)


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
        args = typing.get_args(tp)
        if len(args) == 2:  # dict[str, float]: each value read as its type (YAML reads 1e-5 as a string)
            return {k: _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
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
            close = _closest_key(cfg, head)
            hint = (
                f" (did you mean {prefix}{close}?)"
                if close
                else f"; allowed: {', '.join(prefix + h for h in hints)}"
            )
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


def _closest_key(cfg: Any, name: str) -> str | None:
    """The field of ``cfg`` closest to an unknown key ``name``; the fields of its dataclass-valued fields count
    too, as ``<field>.<name>`` (so the pre-composition key ``algo.format_penalty`` points at
    ``algo.shaping.format_penalty``). A name that is a field of several nested dataclasses suggests none of them."""
    own = [f.name for f in dataclasses.fields(cfg)]
    nested: dict[str, list[str]] = {}
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        if dataclasses.is_dataclass(sub):
            for g in dataclasses.fields(sub):
                nested.setdefault(g.name, []).append(f"{f.name}.{g.name}")
    candidates = {n: n for n in own}
    candidates.update({n: keys[0] for n, keys in nested.items() if len(keys) == 1 and n not in candidates})
    if name in candidates:
        return candidates[name]
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return candidates[close[0]] if close else None


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; dict-typed leaf fields are kept whole by ``apply_overrides`` anyway."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        if isinstance(v, dict) and k not in (
            "options",
            "algo_overrides",
            "agent_options",
            "role_adapters",
            "adapter_lr",
        ):
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


def _preset_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    path = Path(name_or_path)
    if not path.suffix:
        return PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_absolute() and not path.exists() and relative_to is not None:
        return relative_to / path
    return path


def _read_preset(name_or_path: str, relative_to: Path | None = None) -> tuple[Path, dict[str, Any]]:
    path = _preset_path(name_or_path, relative_to)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise ConfigError(f"no preset {name_or_path!r} (known: {known})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"preset {path} must be a mapping")
    return path, data


def preset_chain(name_or_path: str) -> list[tuple[Path, dict[str, Any]]]:
    """The preset's files as (path, mapping), applied in order: its ``base:`` preset (one level) first, then
    the preset itself (without its ``base`` key)."""
    path, data = _read_preset(name_or_path)
    data = dict(data)
    base = data.pop("base", None)
    if base is None:
        return [(path, data)]
    if not isinstance(base, str) or not base:
        raise ConfigError(f"preset {path.stem}: base: expected a preset name, got {base!r}")
    base_path, base_data = _read_preset(base, relative_to=path.parent)
    if "base" in base_data:
        raise ConfigError(
            f"preset {path.stem}: its base {base_path.stem!r} has a base itself ({base_data['base']!r}); "
            "presets compose one level only"
        )
    if base_path.resolve() == path.resolve():
        raise ConfigError(f"preset {path.stem}: base: a preset cannot be its own base")
    return [(base_path, base_data), (path, data)]


def preset_layers(name_or_path: str) -> list[dict[str, Any]]:
    """The flat ``key: value`` layers of a preset, base first (see ``preset_chain``)."""
    return [flatten(data) for _, data in preset_chain(name_or_path)]


def load_preset(name_or_path: str) -> dict[str, Any]:
    """The preset's own keys, flat (without its base's; ``resolve_config`` applies both in order)."""
    return preset_layers(name_or_path)[-1]


def unknown_algo(name: Any) -> ConfigError:
    from learners.algos.registry import ALGOS

    return ConfigError(f"algo: unknown algorithm {name!r}; allowed: {', '.join(sorted(ALGOS))}")


def _carried_algo_overrides(overrides: dict[str, Any], new_algo: Any) -> dict[str, Any]:
    """The ``algo.*`` keys an earlier layer set that the newly chosen algorithm also has (a shaping constant
    such as ``shaping.format_penalty`` scales with the env, not with the algorithm, so it stays); the rest (e.g.
    HiPER's ``lam_low`` when switching to PPO) are dropped."""
    from learners.algos.registry import ALGOS, get_algo

    if str(new_algo) not in ALGOS:
        raise unknown_algo(new_algo)
    if not overrides:
        return {}
    names = {f.name for f in dataclasses.fields(get_algo(str(new_algo)).Config)}
    return {k: v for k, v in overrides.items() if k.partition(".")[0] in names}


def resolve_config(preset: str | None = None, cli: list[str] | None = None) -> TrainConfig:
    """Defaults → preset (its base first) → CLI overrides, all type-checked. Algorithm keys are checked by
    ``resolve_algo_config``, everything else by ``validate``. ``preset=None``: the dataclass defaults only (the
    ``hierarl train`` command loads ``DEFAULT_PRESET`` instead)."""
    cfg = TrainConfig()
    layers = preset_layers(preset) if preset else []
    layers.append(parse_cli_overrides(cli or []))
    for layer in layers:
        layer = _route_algo(layer)
        algo_over = layer.pop("algo_overrides", {})
        if not isinstance(algo_over, dict):
            raise ConfigError(f"algo_overrides: expected a mapping of algo.<field> values, got {algo_over!r}")
        # kept flat ({"shaping.c_keep": v}), so a later layer's nested key replaces one key, not the whole mapping
        algo_over = flatten(algo_over)
        # A layer that switches the algorithm keeps the earlier algo.* keys the new algorithm has (so a pair of
        # runs that differ in `algo` only share their shaping constants) and drops the others. A layer that
        # switches the env starts env.options clean (unless it sets them itself): options are per env.
        if "algo" in layer and layer["algo"] != cfg.algo:
            cfg = dataclasses.replace(
                cfg, algo_overrides=_carried_algo_overrides(cfg.algo_overrides, layer["algo"])
            )
        if "env.name" in layer and layer["env.name"] != cfg.env.name and "env.options" not in layer:
            cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, options={}))
        cfg = apply_overrides(cfg, layer)
        if algo_over:
            cfg = dataclasses.replace(cfg, algo_overrides={**cfg.algo_overrides, **algo_over})
    return cfg


def resolve_algo_config(algo_config_cls: type, overrides: dict[str, Any]) -> Any:
    """Build the algorithm's frozen config with ``algo.*`` overrides (unknown keys and values the Config
    rejects fail with one line)."""
    try:
        return apply_overrides(algo_config_cls(), flatten(overrides), prefix="algo.")
    except ConfigError as e:
        if str(e).startswith("unknown config key") and "allowed:" not in str(e):
            name = algo_config_cls.__module__.rsplit(".", 1)[-1]
            default = algo_config_cls()
            keys = ", ".join(
                f"{f.name}.*" if dataclasses.is_dataclass(getattr(default, f.name)) else f.name
                for f in dataclasses.fields(algo_config_cls)
            )
            raise ConfigError(f"{e}; {name} has: {keys}") from e
        raise
    except ValueError as e:  # the Config's own __post_init__ checks
        msg = one_line(e)
        raise ConfigError(msg if msg.startswith("algo.") else f"algo: {msg}") from e


def read_run_config(run_dir: str | Path) -> TrainConfig:
    """The run config a run saved as ``<run_dir>/config.yaml`` (the part before ``resolved_algo:``, which is repr()
    text, not YAML: e.g. the nested shaping constants print as a dict of tuples)."""
    text = (Path(run_dir) / "config.yaml").read_text()
    raw = yaml.safe_load(text.split("\nresolved_algo:\n", 1)[0]) or {}
    raw.pop("resolved_algo", None)
    return apply_overrides(TrainConfig(), flatten(raw))


def _resolved_lines(cfg: Any, indent: str) -> list[str]:
    """``key: repr(value)`` per field; a dataclass-valued field (e.g. ``shaping``) as an indented block."""
    lines: list[str] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            lines += [f"{indent}{f.name}:\n", *_resolved_lines(value, indent + "  ")]
        else:
            lines.append(f"{indent}{f.name}: {value!r}\n")
    return lines


def resolved_text(cfg: TrainConfig, algo_cfg: Any, device: str | None = None) -> str:
    """The resolved run config as YAML plus the resolved algorithm config (what a run prints and saves), then the
    values a ``null`` default stands for in this run on ``device`` (None: this process's; ``read_run_config`` keeps
    the ``null``: a resumed run derives them again) and the env's success reward, the unit of every shaping
    amount."""
    from envs.base import success_reward

    text = dump_yaml(cfg) + "resolved_algo:\n" + "".join(_resolved_lines(algo_cfg, "  "))
    return text + (
        f"derived:\n  env.success_reward: {success_reward(cfg.env.name, cfg.env.options)!r}\n"
        f"  learner.behaviour_is_cap: {behaviour_is_cap(cfg, device)!r}\n"
        f"  learner.old_logprobs: {'engine' if engine_old_logprobs(cfg, device) else 'recompute'}\n"
    )


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
