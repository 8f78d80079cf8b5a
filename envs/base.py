"""The one text-environment interface every benchmark adapter implements, and the registry behind ``envs.make``.

Contract (gymnasium-like, text in / text out)::

    reset(*, task_id=None, seed=None) -> (observation: str, info: dict)
    step(action: str) -> (observation: str, reward: float, terminated: bool, truncated: bool, info: dict)
    close() -> None
    expert_action() -> str | None        # optional: the benchmark's expert / gold next action from this state
    task_ids(split=None) -> list[str]    # the task ids of a split, for seeding groups and evaluation
    task_stratum(task_id) -> str         # optional: a coarse kind of task, for stratified demonstration draws

``info`` always carries the keys in ``INFO_KEYS``: ``task`` (instruction text), ``admissible_actions`` (list of
str, or None where the benchmark has no list), ``won`` (bool), ``score`` (the benchmark's own score),
``valid_action`` (bool: False when the last action was not understood), ``task_id``, ``task_type``, ``split``.
Optional keys (``OPTIONAL_INFO_KEYS``): ``task_info`` (str; absent or "" where the env has none): what the task needs
beyond its sentence and the reset observation shows once (TextCraft's "Crafting commands:" block), the same text on
reset and every step; the agent protocols show it after the task on every turn whose prompt holds no observation
containing it.  ``prompt_actions`` (list of str): what the prompts list instead of ``admissible_actions``
(ScienceWorld's action templates).  Adapters add their own keys beside these (``make_info``'s ``extra``).
``SUCCESS_REWARD`` (class attribute): R, the reward of a won episode (``success_reward``).

Rewards are the benchmark's own; every shaping term lives in ``reward/``.  ``terminated`` means the task reached a
terminal state (won or lost); ``truncated`` means the step limit (``max_steps``) cut the episode.
Adapters never raise on a bad action string: it yields an observation saying the action was invalid.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

INFO_KEYS: tuple[str, ...] = (
    "task",
    "admissible_actions",
    "won",
    "score",
    "valid_action",
    "task_id",
    "task_type",
    "split",
)
OPTIONAL_INFO_KEYS: tuple[str, ...] = ("task_info", "prompt_actions")
"""Keys an env's info may carry and the agent protocols read (module docstring)."""


@runtime_checkable
class TextEnv(Protocol):
    """Structural type of every environment (see module docstring for the contract)."""

    name: str
    max_steps: int
    SUCCESS_REWARD: float

    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]: ...

    def close(self) -> None: ...

    def task_ids(self, split: str | None = None) -> list[str]: ...


# name -> "module:factory" (``register_env`` adds one at run time); modules are imported lazily so that a
# missing optional benchmark package only fails when that benchmark is asked for, with a message naming the
# extra to install.
_REGISTRY: dict[str, tuple[str, str]] = {
    "synthetic": ("envs.synthetic:SyntheticHierEnv", "(built in)"),
    "alfworld": ("envs.alfworld:AlfWorldEnv", "hierarl[alfworld]"),
    "scienceworld": ("envs.scienceworld:ScienceWorldEnv", "hierarl[scienceworld]"),
    "webshop": ("envs.webshop:WebShopEnv", "hierarl[webshop]"),
    "virtualhome": ("envs.virtualhome:VirtualHomeEnv", "hierarl[virtualhome]"),
    "textcraft": ("envs.textcraft:TextCraftEnv", "hierarl[textcraft]"),
}


def env_names() -> list[str]:
    return sorted(_REGISTRY)


def register_env(name: str, target: str, extra: str = "(built in)") -> None:
    """Add ``name`` → ``"module:factory"`` to this process's registry (``extra``: what to install when the
    module's import fails). Tests and scripts that build envs in this process use it; a training run plays
    its envs in rollout workers and env subprocesses that import this module afresh, so an env it trains on is
    a line of ``_REGISTRY`` above. A taken name is refused."""
    module_name, sep, attr = target.partition(":")
    if not (sep and module_name and attr):
        raise ValueError(f"env {name!r}: target must be 'module:factory', got {target!r}")
    if name in _REGISTRY:
        raise ValueError(f"environment {name!r} is already registered ({_REGISTRY[name][0]})")
    _REGISTRY[name] = (target, extra)


def resolve(name: str) -> Callable[..., TextEnv]:
    """The factory registered under ``name`` (clear error for unknown names and missing extras)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(env_names())}")
    target, extra = _REGISTRY[name]
    module_name, attr = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"environment {name!r} needs `pip install '{extra}'` ({e})") from e
    return getattr(module, attr)


def success_reward(name: str, options: Mapping[str, Any] | None = None) -> float:
    """R: what env ``name`` with ``options`` pays for a won episode (its class's ``SUCCESS_REWARD`` unless an
    option ``success_reward`` sets it). Every shaping amount is a fraction of it (``reward.shaping``)."""
    return float((options or {}).get("success_reward", resolve(name).SUCCESS_REWARD))


def make(name: str, **options: Any) -> TextEnv:
    """Build environment ``name`` with adapter-specific ``options`` (e.g. ``max_steps``, ``split``, data paths)."""
    return resolve(name)(**options)
