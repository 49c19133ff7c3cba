"""Every dotted name of our code the docs show (`memlens.harness.model.load.safe_from_pretrained`) is the one a reader
can import or grep for: it starts with `memlens.` (a bare `harness.model...` imports nothing, tests/unit/project/
test_layers.py) and names a module of the package and, after it, a name that module defines at its top (and a
class's own attribute). Read from the source, not imported: nothing here loads torch."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
        ROOT / "tests" / "README.md"]
# `memlens.<folder>` installs from these folders (pyproject.toml [tool.setuptools.package-dir]).
PACKAGE_DIRS = {"memlens": ROOT / "memlens", "memlens.harness": ROOT / "harness", "memlens.recipes": ROOT / "recipes",
                "memlens.synthetic_data": ROOT / "synthetic_data"}
DATA_PACKAGES = {"memlens.conf", "memlens.assets"}           # shipped files, no code
NOT_MODULES = {"memlens.plugins"}                            # the entry-point group a plugin package declares
DOTTED = re.compile(r"(?<![\w./-])((?:memlens\.)?(?:harness|recipes|synthetic_data)(?:\.\w+)+|memlens(?:\.\w+)+)")


def documented_names() -> list[tuple[str, str]]:
    """(doc, dotted name) for every dotted name of ours inside a code span or block."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for code in re.findall(r"```.*?```|`[^`\n]+`", text, flags=re.S):
            found += [(doc.relative_to(ROOT).as_posix(), name) for name in DOTTED.findall(code)]
    return found


def top_level_names(node: ast.AST) -> set[str]:
    """The names a module (or class body) defines: functions, classes, assignments and imports."""
    names: set[str] = set()
    for item in ast.iter_child_nodes(node):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(item, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in item.names}
        if isinstance(item, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in item.targets):
            names |= set(ast.literal_eval(item.value))      # memlens/__init__.py's lazy names (its __getattr__)
    return names


def unresolved(name: str) -> str | None:
    """Why `name` names nothing of the package (None when it does)."""
    if name in DATA_PACKAGES | NOT_MODULES:
        return None
    parts = name.split(".")
    root = max((p for p in PACKAGE_DIRS if name == p or name.startswith(p + ".")), key=len)
    path, rest = PACKAGE_DIRS[root], parts[len(root.split(".")):]
    while rest and (path / rest[0]).is_dir():
        path, rest = path / rest[0], rest[1:]
    if not rest:
        return None if (path / "__init__.py").is_file() else f"{path} is no package"
    module = path / f"{rest[0]}.py"
    if module.is_file():
        rest = rest[1:]
    elif (path / "__init__.py").is_file():
        module = path / "__init__.py"
    else:
        return f"no module {path / rest[0]}.py"
    node: ast.AST = ast.parse(module.read_text(encoding="utf-8"))
    for attr in rest:
        if attr not in top_level_names(node):
            return f"{module.relative_to(ROOT)} defines no {attr!r}"
        node = next((c for c in ast.iter_child_nodes(node) if isinstance(c, ast.ClassDef) and c.name == attr), None)
        if node is None:
            break        # a function or a value: what follows it is no longer ours to check
    return None


def test_the_docs_name_our_code_by_the_path_it_imports_from():
    names = documented_names()
    assert ("docs/architecture.md", "memlens.recipes.stages.contract.Recipe") in names     # the reader finds them
    bare = sorted({f"{doc}: {name}" for doc, name in names if not name.startswith("memlens")})
    assert not bare, f"write these as memlens.<name> (the importable path): {bare}"
    wrong = sorted({f"{doc}: {name}: {why}" for doc, name in names if (why := unresolved(name))})
    assert not wrong, wrong
