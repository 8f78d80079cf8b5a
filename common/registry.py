"""Adding an entry to one of the name tables (algorithms, agent protocols): the checks both make."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def register(table: dict[str, Any], entry: T, *, kind: str, expected: str, record: type, caller: str) -> T:
    """``table[entry.name] = entry`` after checking that ``entry`` is a ``record`` (``expected`` says what that is,
    for the error) and that its name is free; the errors name the ``kind`` of entry and the ``caller``."""
    if not isinstance(entry, record):
        raise TypeError(f"{caller} takes {expected}, got {entry!r}")
    name = entry.name  # type: ignore[attr-defined]
    if name in table:
        raise ValueError(f"{kind} {name!r} is already registered")
    table[name] = entry
    return entry
