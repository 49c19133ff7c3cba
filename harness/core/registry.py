"""The one shape of an extension point: a named registry (lm-evaluation-harness's `register_*` as the model).

Stage recipes, preference objectives, MIA attacks, audit measures, reward functions and findings are each a
`Registry`; adding one is a module that calls `REGISTRY.register(name, entry)` (or decorates a function with
`@REGISTRY.register(name)`), and everything that lists, validates or labels them reads the registry: config
checks name the registered choices, the audit and the report iterate them in registration order.
docs/architecture.md lists each registry and the one place to add to it.

A registry whose built-in entries register in other modules is given a function that imports those modules by name
(`builtins`; direct imports, so a reader and an import-graph tool follow them) and the built-in names in their run
order (`order`): the first read calls it, checks every named entry arrived, and
lists the built-ins in that order, then any other entry (a user's plugin) in registration order. So every command
sees the same entries in the same order in a fresh process, whatever it happened to import (a `memlens report` that
imported no audit module saw no audit measures, and dropped their report sections).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from typing import Generic, TypeVar

from memlens.harness.core.errors import UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> entry, in registration order. Names are unique: a second registration of a name is refused
    (two modules claiming one name would otherwise replace each other silently, by import order)."""

    def __init__(self, kind: str, key: str, builtins: Callable[[], object] | None = None,
                 order: tuple[str, ...] = ()):
        self.kind = kind          # what an entry is, for messages: "MIA attack", "audit measure", ...
        self.key = key            # the config key (or field) that names entries, for messages
        self._entries: dict[str, T] = {}
        # imports the modules that register the built-in entries, called on the first read (not at import: those
        # modules import this registry to register)
        self._builtins = builtins
        self._order = order        # the built-in names, in run and report order
        self._loaded = builtins is None

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
        self._load()
        self.register(name, entry)
        try:
            yield entry
        finally:
            self.unregister(name)

    def _load(self) -> None:
        """Import the modules that register the built-in entries (once), and check each named one arrived."""
        if self._loaded:
            return
        self._loaded = True      # first: a module being imported may itself read the registry
        self._builtins()
        missing = [name for name in self._order if name not in self._entries]
        if missing:
            raise RuntimeError(f"{self.kind} registry: {', '.join(missing)} named as built-in but not registered "
                               f"by the modules {self._builtins.__module__}.{self._builtins.__qualname__} imports")

    def _ordered(self) -> dict[str, T]:
        """Every entry: the built-ins in their declared order, then the rest in registration order."""
        self._load()
        first = {name: self._entries[name] for name in self._order if name in self._entries}
        return first | {name: entry for name, entry in self._entries.items() if name not in first}

    def __getitem__(self, name: str) -> T:
        self._load()
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._ordered()))

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def names(self) -> tuple[str, ...]:
        return tuple(self._ordered())

    def items(self) -> list[tuple[str, T]]:
        return list(self._ordered().items())

    def values(self) -> list[T]:
        return list(self._ordered().values())

    def where(self, test: Callable[[T], bool]) -> tuple[str, ...]:
        """Names of the entries for which `test` holds, in order."""
        return tuple(name for name, entry in self._ordered().items() if test(entry))

    def __repr__(self) -> str:
        return f"Registry({self.kind}: {', '.join(self.names())})"


# --- plugins: where entries of yours come from -----------------------------------------------------------------

PLUGIN_GROUP = "memlens.plugins"     # the entry-point group an installed package declares its plugin modules under


def load_plugins(plugins: list[str], where: str = "plugins") -> list[str]:
    """Import every plugin module, so that it registers its entries (a stage, objective, attack, measure, reward
    function, finding...) before a command reads any registry: first those installed packages declare under the
    `memlens.plugins` entry-point group, then each of `plugins` (the config's root key `plugins`), a module name on
    the Python path or a path to a .py file (relative to the working directory). Importing is idempotent: a module
    imported before (a second sweep point, a test) is not run again, so nothing registers twice. Returns the names
    of the modules loaded, in order."""
    loaded = []
    for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name):
        loaded.append(_import_plugin(point.value, f"entry point {point.name!r} ({PLUGIN_GROUP})"))
    for i, plugin in enumerate(plugins):
        if not isinstance(plugin, str) or not plugin:
            raise UserError(f"{where}[{i}]={plugin!r}: give a module name (e.g. my_lab.memlens_plugin) or a .py file")
        loaded.append(_import_plugin(plugin, f"{where}[{i}]={plugin!r}"))
    return loaded


def _import_plugin(plugin: str, where: str) -> str:
    """Import one plugin (a module name, or a .py file loaded under a name derived from its resolved path)."""
    path = Path(plugin)
    if plugin.endswith(".py"):
        if not path.is_file():
            raise UserError(f"{where}: no such file; give the path of your plugin's .py file or its module name")
        resolved = path.resolve()
        name = f"memlens_plugin_{resolved.stem}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"
        if name in sys.modules:
            return name
        spec = importlib.util.spec_from_file_location(name, resolved)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise UserError(f"{where}: importing it raised {type(e).__name__}: {e}; fix the plugin") from e
        return name
    if plugin in sys.modules:
        return plugin
    try:
        importlib.import_module(plugin)
    except ModuleNotFoundError as e:
        if e.name != plugin and not plugin.startswith(f"{e.name}."):
            raise UserError(f"{where}: importing it raised {type(e).__name__}: {e}; fix the plugin") from e
        raise UserError(f"{where}: no module of that name on the Python path; install it, add its folder to "
                        "PYTHONPATH, or give the path of its .py file") from None
    except Exception as e:
        raise UserError(f"{where}: importing it raised {type(e).__name__}: {e}; fix the plugin") from e
    return plugin
