"""What the registries share: `resolve("module:attr")` names code without importing it,
`Registry` holds one concept's entries by name, `lazy_getattr` loads a package's names on use.

The registries (strategies, all-reduce algorithms, models) must be importable without torch:
params validation and its CLI read them and stay small (the params CLI peaks under 200 MB; torch
alone is ~220 MB). So an entry names its code as "module:attr", imported on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar


class _Named(Protocol):
    name: str


E = TypeVar("E", bound=_Named)


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


class Registry(dict[str, E], Generic[E]):
    """One concept's entries by name (all-reduce algorithms, strategies): a name is registered
    once, so two modules can never silently define the same strategy twice.

    A registry is a leaf: it imports none of its plugins. Plugins register into it, as
    torch.distributed's rendezvous handlers do: `plugins` names modules (e.g.
    "ddlstudy.frameworks") imported on the first read, and packages installed beside ddlstudy
    can add theirs under the entry-point group `ddlstudy.<what>s`.
    """

    def __init__(self, what: str, plugins: Sequence[str] = ()) -> None:
        super().__init__()
        self.what = what
        self._plugins = tuple(plugins)
        self._loaded = not self._plugins

    def load_plugins(self) -> None:
        """Import the plugin modules once (each registers its entries); safe to call again."""
        if self._loaded:
            return
        self._loaded = True
        from importlib.metadata import entry_points

        for module in self._plugins:
            importlib.import_module(module)
        for ep in entry_points(group=f"ddlstudy.{self.what.replace(' ', '_')}s"):
            if ep.module not in self._plugins:
                ep.load()

    def __getitem__(self, name: str) -> E:
        self.load_plugins()
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return super().__contains__(name)

    def __iter__(self) -> Any:
        self.load_plugins()
        return super().__iter__()

    def __len__(self) -> int:
        self.load_plugins()
        return super().__len__()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self.load_plugins()
        return super().get(name, default)

    def keys(self) -> Any:  # type: ignore[override]
        self.load_plugins()
        return super().keys()

    def values(self) -> Any:  # type: ignore[override]
        self.load_plugins()
        return super().values()

    def items(self) -> Any:  # type: ignore[override]
        self.load_plugins()
        return super().items()

    def register(self, entry: E) -> E:
        """Add `entry` under `entry.name`; raises ValueError if that name is taken."""
        if dict.__contains__(self, entry.name):
            raise ValueError(f"{self.what} {entry.name!r} is already registered")
        self[entry.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove a name if present (tests and the docs' examples register toys, then clean up)."""
        self.pop(name, None)


def lazy_getattr(package: str, table: dict[str, tuple[str, ...]],
                 views: dict[str, Callable[[], Any]] | None = None) -> Callable[[str], Any]:
    """A package's module-level `__getattr__`: a name in `table` (module -> names) is imported
    from `package.module` on first use, so importing the package loads no torch; a name in
    `views` is computed on each access (live views of a registry)."""
    where = {name: module for module, names in table.items() for name in names}
    views = views or {}

    def getattr_(name: str) -> Any:
        if name in views:
            return views[name]()
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return getattr_
