"""`resolve("module:attr")`: what the registries use to name code without importing it.

The registries (strategies, all-reduce algorithms, models) must be importable without torch:
params validation and its CLI read them and stay small (the params CLI peaks under 200 MB; torch
alone is ~220 MB). So an entry names its code as "module:attr", imported on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def resolve(target: Any) -> Any:
    """A "module:attr" string -> that attribute (imported now); anything else as is."""
    if not isinstance(target, str):
        return target
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"expected 'module:attribute', got {target!r}")
    return getattr(importlib.import_module(module), attr)


class LiveNames(Sequence[str]):
    """A live, read-only view of one registry's names: modules validate against the registry
    itself (a name registered later, e.g. by a test, is valid too), never a copy of it."""

    def __init__(self, names: Callable[[], Iterable[str]]) -> None:
        self._names = names

    def __getitem__(self, i: Any) -> Any:
        return tuple(self._names())[i]

    def __len__(self) -> int:
        return len(tuple(self._names()))

    def __repr__(self) -> str:
        return repr(tuple(self._names()))


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A registry's rows as a markdown table: how docs/extending.md shows the built-ins (its
    tables are regenerated from the registries, and tests/test_registry.py checks they match)."""
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"
