"""Where the files that ship beside the code live: conf/ (the Hydra configs) and assets/ (the shipped base).

In a checkout, or an editable install (`pip install -e .`), they are the project's own folders. A
non-editable install (`pip install .` or from a git URL) runs no code from the checkout, so the wheel carries
them as the data packages `memlens.conf` and `memlens.assets` (pyproject.toml maps conf/ and assets/ onto
them); this module finds whichever is present, the checkout first.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
SHIPPED = ("conf", "assets")


def shipped_dir(name: str) -> Path | None:
    """The `conf` or `assets` folder: the checkout's, else the installed data package's, else None."""
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not a shipped folder; one of {SHIPPED}")
    local = CHECKOUT / name
    if local.is_dir():
        return local
    spec = importlib.util.find_spec(f"memlens.{name}")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return None


def shipped_path(relative: str) -> Path | None:
    """A path such as `assets/base_tiny` inside a shipped folder, if it exists there."""
    head, _, rest = relative.replace("\\", "/").partition("/")
    if head not in SHIPPED:
        return None
    root = shipped_dir(head)
    path = root / rest if root is not None else None
    return path if path is not None and path.exists() else None
