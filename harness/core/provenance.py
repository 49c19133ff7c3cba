"""Provenance recorded with every output: git commit, package versions, seed, dataset hashes.

Follows lm-evaluation-harness's practice of stamping every result file with what produced it, so a
number can be traced to its code, environment and data.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import memlens

TRACKED_PACKAGES = ("memlens", "torch", "transformers", "trl", "peft", "datasets", "tokenizers",
                    "accelerate", "rapidfuzz", "edlib", "hydra-core", "numpy")

_REPO_ROOT = Path(__file__).resolve().parents[2]


def git_commit() -> str | None:
    """The commit of the memlens checkout, with '-dirty' when the tree has uncommitted changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_REPO_ROOT, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment() -> dict[str, Any]:
    """Code and environment identity: what every provenance block starts from."""
    return {
        "package": {"name": "memlens", "version": memlens.__version__},   # the code that ran (0.1.x: "memaudit")
        "git_commit": git_commit(),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def provenance(seed: int | None = None, datasets: dict[str, str] | None = None,
               **settings: Any) -> dict[str, Any]:
    """A provenance record: environment + seed + {dataset name: sha256} + any named settings."""
    return {**environment(), "seed": seed, "datasets": dict(datasets or {}), **settings}
