"""A script of benchmarks/ loaded as a module, for the tests of its rules and tables (the scripts are not a package:
they run as `python benchmarks/<name>.py`). A helper module: it holds no test."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_script(name: str) -> ModuleType:
    """benchmarks/<name>.py, executed as a fresh module named `name`."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
