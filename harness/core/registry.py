"""The one shape of an extension point: a named registry (lm-evaluation-harness's `register_*` as the model).

Stage recipes, preference objectives, MIA attacks, audit measures, reward functions and findings are each a
`Registry`; adding one is a module that calls `REGISTRY.register(name, entry)` (or decorates a function with
`@REGISTRY.register(name)`), and everything that lists, validates or labels them reads the registry: config
checks name the registered choices, the audit and the report iterate them in registration order.
docs/architecture.md lists each registry and the one place to add to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> entry, in registration order. Names are unique: a second registration of a name is refused
    (two modules claiming one name would otherwise replace each other silently, by import order)."""

    def __init__(self, kind: str, key: str):
        self.kind = kind          # what an entry is, for messages: "MIA attack", "audit measure", ...
        self.key = key            # the config key (or field) that names entries, for messages
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T | None = None):
        """Register `entry` under `name`; without `entry`, a decorator that registers what it decorates."""
        if entry is None:
            def decorate(obj: T) -> T:
                self.register(name, obj)
                return obj
            return decorate
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice; pick another name")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        self._entries.pop(name)

    @contextmanager
    def registered(self, name: str, entry: T) -> Iterator[T]:
        """`entry` registered under `name` for the duration of a `with` block (tests, notebooks)."""
        self.register(name, entry)
        try:
            yield entry
        finally:
            self.unregister(name)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return list(self._entries.items())

    def values(self) -> list[T]:
        return list(self._entries.values())

    def where(self, test: Callable[[T], bool]) -> tuple[str, ...]:
        """Names of the entries for which `test` holds, in registration order."""
        return tuple(name for name, entry in self._entries.items() if test(entry))

    def __repr__(self) -> str:
        return f"Registry({self.kind}: {', '.join(self._entries)})"
