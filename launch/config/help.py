"""``hierarl train --help``: every key of the run config with its default and the docstring written after its
field."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import json
import textwrap
from typing import Any

from launch.config.schema import DEFAULT_PRESET, TrainConfig


def attribute_docs(cls: type) -> dict[str, str]:
    """{field: docstring} from the string literals written after a dataclass's fields (its bases' too)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in itertools.pairwise(body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _short(value: Any, width: int = 22) -> str:
    if isinstance(value, tuple):
        value = list(value)
    text = json.dumps(value) if isinstance(value, dict | list) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def config_keys(cfg: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, first line of its docstring) for every leaf field of a config dataclass."""
    docs = attribute_docs(type(cfg))
    out: list[tuple[str, Any, str]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += config_keys(value, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", value, (docs.get(f.name, "").splitlines() or [""])[0]))
    return out


def _key_lines(rows: list[tuple[str, Any, str]], indent: str = "  ") -> list[str]:
    width = max((len(key) for key, _, _ in rows), default=0)
    return [f"{indent}{key:<{width}}  {_short(value):<22}  {doc}".rstrip() for key, value, doc in rows]


def config_help() -> str:
    """``hierarl train --help``: usage, then every run-config key, every algorithm's ``algo.*`` keys and the
    shaping constants, with defaults and the first line of each docstring."""
    from learners.algos.registry import ALGOS, get_algo
    from reward.shaping import ShapingConstants

    lines = [
        "usage: hierarl train [PRESET] [key=value ...]            run (PRESET: a name in launch/configs or a",
        "                                                          YAML path; default: "
        + DEFAULT_PRESET
        + ")",
        "       hierarl train --dry-run [PRESET] [key=value ...]  print the resolved config, check it, exit",
        "       hierarl train --help",
        "",
        "Resolution: dataclass defaults -> PRESET (a `base: <preset>` key loads that preset first) -> key=value.",
        "Values are YAML scalars; lists as a,b or [a, b]; mappings as JSON. `hierarl presets` lists the presets.",
        "Everything is checked before Ray starts; a bad key or value exits 2 with one line.",
        "",
        "run config keys (launch/config/schema.py; default, doc):",
        *_key_lines(
            [
                (key, value, f"The algorithm: {', '.join(ALGOS)}." if key == "algo" else doc)
                for key, value, doc in config_keys(TrainConfig())
            ]
        ),
        "",
        "algo.<field> keys, per algorithm (learners/algos/<algo>.py Config; `--dry-run algo=<name>` resolves them):",
    ]
    for name in sorted(ALGOS):
        algo_cfg = get_algo(name).Config()
        own = [r for r in config_keys(algo_cfg) if not r[0].startswith("shaping.")]
        has_shaping = isinstance(getattr(algo_cfg, "shaping", None), ShapingConstants)
        lines.append(f"  {name}{' + the shaping.* constants below' if has_shaping else ''}:")
        lines += _key_lines(own, indent="    ")
    lines += [
        "",
        "shaping constants, algo.shaping.<name> of every RL algorithm (reward/shaping.py; applied per "
        "algo.reward_terms):",
        *_key_lines(config_keys(ShapingConstants(), "shaping."), indent="    "),
    ]
    return "\n".join(lines)
