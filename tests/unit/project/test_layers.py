"""Imports checked by reading the source (ast), so nothing is imported.

Everywhere (harness/, recipes/, synthetic_data/ together): no import circle among module-level imports, and every
function-level import carries a comment, on its line or the line above, saying why it is not at module top (a heavy
package loaded on first use, a circle, or the reason it gives).
harness/ alone is in one-way layers (docs/architecture.md): each layer imports only the layers below it, at module
top; a function-level import of ours remains only for a heavy dependency's wrapper (HEAVY_WRAPPERS); torch is imported
in the model layer alone. recipes/ and synthetic_data/ import only harness.core, harness.text and harness.model.
The folders install as subpackages of `memlens` (harness/ -> memlens.harness): an import names them so, and the
walk strips that prefix to compare with the folder a module lives in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGE = "memlens."          # the one import package the folders install under (pyproject.toml package-dir)
OWN_FOLDERS = ("harness", "recipes", "synthetic_data")
HARNESS = REPO / "harness"
# Bottom to top; the package root (cli.py, study_commands.py) sits above every layer.
LAYERS = ("core", "text", "model", "measures", "audit", "report")
TORCH = ("torch", "transformers", "peft", "safetensors", "accelerate")
CLIENT_ALLOWED = {"recipes": ("core", "text", "model"), "synthetic_data": ("core", "text")}
# harness modules that exist to hold a heavy dependency: imported inside functions, commented, on first use.
HEAVY_WRAPPERS = {"harness.text._window_kernel"}     # numba (~0.6 s import, a compiled kernel)
# harness modules that import ours inside functions, by name, on purpose: the CLI loads a command's module only when it
# runs (`memlens --help` stays fast, the scorer never loads the recipes), and a registry imports the modules that
# register its built-ins on its first read (they import the registry to register: a circle at module level).
DEFERRING = {"harness.cli", "harness.audit.measure_registry", "harness.report.findings.registry"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """Index in LAYERS of a harness module, len(LAYERS) for the package root (cli, study_commands)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return len(LAYERS)


def imports(path: Path) -> list[tuple[str, int, bool, str]]:
    """(imported module, line, at function level?, the source line and the one above) of every import."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    out = []
    package = module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    out.append((folder_relative(alias.name), child.lineno, in_function, context(child.lineno)))
            elif isinstance(child, ast.ImportFrom):
                base = folder_relative(child.module or "")
                if child.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - child.level + 1] + [base]).strip(".")
                targets = [f"{base}.{a.name}" for a in child.names] if base.split(".")[0] in OWN_FOLDERS else [base]
                for target in targets:
                    out.append((target, child.lineno, in_function, context(child.lineno)))
            visit(child, nested)

    def context(lineno: int) -> str:
        return "\n".join(lines[max(lineno - 2, 0):lineno])

    visit(tree, False)
    return out


def folder_relative(name: str) -> str:
    """`memlens.harness.core.io` -> `harness.core.io`: the module's path under the checkout."""
    return name[len(PACKAGE):] if name.startswith(PACKAGE) else name


def own_target(name: str, known: set[str]) -> str | None:
    """The module of ours an import refers to (`from harness.core import io` -> harness.core.io), None for another
    project's."""
    if name.split(".")[0] not in OWN_FOLDERS:
        return None
    while name and name not in known:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name or None


def harness_target(name: str, known: set[str]) -> str | None:
    """The harness module an import refers to, None for anything else."""
    return own_target(name, known) if name.startswith("harness") else None


SOURCES = sorted(HARNESS.rglob("*.py"))
KNOWN = {module_name(p) for p in SOURCES}
# Every module of ours: the circle and the function-level-import checks walk all three folders together.
ALL_SOURCES = sorted(p for folder in OWN_FOLDERS for p in (REPO / folder).rglob("*.py"))
ALL_KNOWN = {module_name(p) for p in ALL_SOURCES}


def test_every_module_lives_in_a_layer():
    stray = [module_name(p) for p in SOURCES
             if layer_of(module_name(p)) == len(LAYERS) and p.parent != HARNESS]
    top = sorted(p.name for p in HARNESS.glob("*.py"))
    assert not stray and top == ["__init__.py", "cli.py", "study_commands.py"], (stray, top)


def _own_modules_imported_without_the_package(path: Path) -> list[str]:
    """Imports of harness/recipes/synthetic_data by their folder name, which is another project's on PyPI."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        bad += [f"{path.relative_to(REPO)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in OWN_FOLDERS]
    return bad


def test_every_import_of_our_folders_goes_through_the_memlens_package():
    """`harness`, `recipes` and `synthetic_data` are PyPI distributions of other projects and torchtune installs a
    top-level `recipes`: our code, tests and benchmarks import the folders only as memlens.<folder>."""
    sources = [p for top in (*OWN_FOLDERS, "memlens", "tests", "benchmarks") for p in sorted((REPO / top).rglob("*.py"))]
    bad = [line for path in sources for line in _own_modules_imported_without_the_package(path)]
    assert sources and not bad, "\n".join(bad)


def test_no_upward_import_and_no_function_level_harness_import():
    bad = []
    for path in SOURCES:
        me = module_name(path)
        for name, line, in_function, context in imports(path):
            target = harness_target(name, KNOWN)
            if target is None:
                continue
            if in_function and not ((target in HEAVY_WRAPPERS or me in DEFERRING) and "#" in context):
                bad.append(f"{me}:{line} imports {target} inside a function")
            elif layer_of(target) > layer_of(me):
                bad.append(f"{me}:{line} imports {target} from a layer above")
    assert not bad, "\n".join(bad)


def module_level_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports at module level (its own package excluded: that is its parent)."""
    graph: dict[str, set[str]] = {m: set() for m in ALL_KNOWN}
    for path in ALL_SOURCES:
        me = module_name(path)
        for name, _, in_function, _ in imports(path):
            target = own_target(name, ALL_KNOWN)
            if target and not in_function and target != me and not me.startswith(target + "."):
                graph[me].add(target)
    return graph


def first_circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle (a -> b -> ... -> a) of a depth-first walk, [] when there is none."""
    state: dict[str, int] = {}      # 1: on the walk's stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (circle := visit(nxt)):
                return circle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (circle := visit(node)):
            return circle
    return []


def test_no_import_circle():
    """harness/, recipes/ and synthetic_data/ together: recipes import harness, so a circle may cross folders."""
    circle = first_circle(module_level_graph())
    assert not circle, "import circle: " + " -> ".join(circle)


def test_every_function_level_import_says_why():
    """In all three folders a function-level import (ours or another project's) is commented on its line or the line
    above: the heavy package it defers, or the circle it avoids."""
    uncommented = [f"{module_name(p)}:{line} {name}" for p in ALL_SOURCES for name, line, in_function, ctx in imports(p)
                   if in_function and "#" not in ctx]
    assert not uncommented, f"{len(uncommented)} uncommented:\n" + "\n".join(uncommented)


def test_torch_is_imported_by_the_model_layer_alone():
    users = sorted({f"{module_name(p)}: {name}" for p in SOURCES for name, *_ in imports(p)
                    if name.split(".")[0] in TORCH and layer_of(module_name(p)) != LAYERS.index("model")})
    assert not users, users


@pytest.mark.parametrize("client", sorted(CLIENT_ALLOWED))
def test_recipes_and_data_builders_import_only_the_low_layers(client):
    allowed = CLIENT_ALLOWED[client]
    bad = []
    for path in sorted((REPO / client).rglob("*.py")):
        for name, line, *_ in imports(path):
            target = harness_target(name, KNOWN)
            if target is None:
                continue
            layer = layer_of(target)
            if layer == len(LAYERS) or LAYERS[layer] not in allowed:
                bad.append(f"{module_name(path)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_no_test_module_imports_another():
    """Shared fixtures live in conftest.py and shared helpers in modules that hold no test (tests/README.md): a test
    module imported by another would run its tests' module-level code twice and tie two files' fixtures together."""
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offenders += [(path.relative_to(REPO).as_posix(), name) for name in names
                          if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")]
    assert not offenders, offenders


# recipes/'s own layers, bottom to top; formal/ and nmt/ share a level and do not import each other.
RECIPES_LAYERS = {"sandbox": 0, "stages": 1, "formal": 2, "nmt": 2, "orchestration": 3}


def test_recipes_subpackages_import_only_their_own_and_lower_layers():
    """sandbox < stages < formal, nmt < orchestration (docs/architecture.md's layout): a stage never imports the
    pipeline that runs it, the sandbox knows no stage, and each study's training side stands on the stages alone."""
    assert {p.name for p in (REPO / "recipes").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(RECIPES_LAYERS)
    upward = []
    for me, targets in module_level_graph().items():
        parts = me.split(".")
        if parts[0] != "recipes" or len(parts) < 3:
            continue
        for target in targets:
            other = target.split(".")
            if other[0] == "recipes" and len(other) > 1 and other[1] in RECIPES_LAYERS and other[1] != parts[1] \
                    and RECIPES_LAYERS[other[1]] >= RECIPES_LAYERS[parts[1]]:
                upward.append(f"{me} -> {target}")
    assert not upward, upward
