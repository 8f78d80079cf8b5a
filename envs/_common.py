"""Small helpers shared by the environment adapters (pure Python, no benchmark imports).

Adapters must never raise on model text (``envs.base``); ``clean_action`` is the one place that turns arbitrary
input (non-strings, huge strings, control characters, unicode) into a bounded, normalised command.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

MAX_ACTION_CHARS = 200
"""Longer actions are cut: no real command is this long, and regexes over 10k-char strings waste time."""

_SPACES = re.compile(r"\s+")
_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")


def clean_action(action: Any, max_chars: int = MAX_ACTION_CHARS) -> str:
    """Lower-cased, single-spaced, printable-ASCII command; ``""`` for anything unusable.

    Only the first line counts (models often append reasoning after a newline); a trailing period is dropped.
    """
    if not isinstance(action, str):
        return ""
    first_line = action.strip().split("\n", 1)[0]
    text = _PRINTABLE_ASCII.sub(" ", first_line[: max_chars * 2])
    text = _SPACES.sub(" ", text).strip().lower().rstrip(".").strip()
    return text[:max_chars]


def make_info(
    *,
    task: str,
    task_id: str,
    task_type: str,
    split: str,
    admissible_actions: list[str] | None = None,
    won: bool = False,
    score: float = 0.0,
    valid_action: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """An info dict carrying every key of ``envs.base.INFO_KEYS`` (plus ``extra`` keys: the optional
    ``OPTIONAL_INFO_KEYS`` such as ``task_info``, and adapter-specific ones)."""
    info: dict[str, Any] = {
        "task": task,
        "admissible_actions": admissible_actions,
        "won": bool(won),
        "score": float(score),
        "valid_action": bool(valid_action),
        "task_id": task_id,
        "task_type": task_type,
        "split": split,
    }
    info.update(extra)
    return info


def stable_hash(text: str) -> int:
    """Process-independent hash (Python's ``hash`` is salted per process), for splits and seeded shuffles."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def choose_task(task_ids: list[str], seed: int | None, rng: random.Random) -> str:
    """The task a ``reset(task_id=None, seed=...)`` plays: seeded choice, else the env's own RNG."""
    if not task_ids:
        raise ValueError("no tasks in this split")
    if seed is not None:
        return task_ids[random.Random(seed).randrange(len(task_ids))]
    return task_ids[rng.randrange(len(task_ids))]
