"""The import graph of memlens as installed (harness/ -> memlens.harness, recipes/ -> memlens.recipes, ...), read from
the source with `ast`: every `import` and `from ... import` statement, at module level or inside a function (the CLI
imports each command's module inside a small loader). It answers issue #69's question, "can a reader follow `memlens
run` to each trainer's config by imports alone?", with the shortest import path from one module to another.

    python benchmarks/import_graph.py                       # the path from memlens.harness.cli to each stage recipe
    python benchmarks/import_graph.py --unreached           # memlens modules no import path from the CLI reaches

Strings handed to importlib (a plugin's `module:object`) are not imports and are not followed: that is the point.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The installed name of each source folder (pyproject.toml [tool.setuptools.package-dir]).
PACKAGE_DIRS = {"memlens": "memlens", "harness": "memlens.harness", "recipes": "memlens.recipes",
                "synthetic_data": "memlens.synthetic_data"}
START = "memlens.harness.cli"


def modules(repo: Path = REPO) -> dict[str, Path]:
    """{installed module name: source file} for every .py file of the four source folders."""
    found = {}
    for folder, package in PACKAGE_DIRS.items():
        for path in sorted((repo / folder).rglob("*.py")):
            parts = list(path.relative_to(repo / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The memlens modules `name` imports (a `from package import submodule` counts as the submodule; importing
    a module also runs its packages' __init__)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in known)
    out.discard(name)
    return out


def graph(repo: Path = REPO) -> dict[str, set[str]]:
    known = modules(repo)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def shortest_path(edges: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """The shortest chain of imports from `start` to `goal` (None: no chain)."""
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if here == goal:
            path = [here]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            return path[::-1]
        for there in sorted(edges.get(here, ())):
            if there not in previous:
                previous[there] = here
                queue.append(there)
    return None


def reached(edges: dict[str, set[str]], start: str = START) -> set[str]:
    seen, queue = {start}, deque([start])
    while queue:
        for there in edges.get(queue.popleft(), ()):
            if there not in seen:
                seen.add(there)
                queue.append(there)
    return seen


def main(argv: list[str]) -> int:
    edges = graph()
    if "--unreached" in argv:
        for name in sorted(set(edges) - reached(edges)):
            print(name)
        return 0
    for name in sorted(n for n in edges if n.startswith("memlens.recipes.stages.") and n.split(".")[-1] in (
            "fim_pretrain", "sft", "reward", "rl", "ppo", "preference", "kto", "rlvr")):
        path = shortest_path(edges, START, name)
        print(f"{name}: " + (" -> ".join(p.removeprefix("memlens.") for p in path) if path else "NOT REACHED"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
