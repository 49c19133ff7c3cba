"""Provenance recorded with every output: git commit, package versions, seed, dataset hashes.

Follows lm-evaluation-harness's practice of stamping every result file with what produced it, so a
number can be traced to its code, environment and data.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from memlens.harness.core.kernels import cpu_flags, cpuinfo, effective_kernels

TRACKED_PACKAGES = ("memlens", "torch", "transformers", "trl", "peft", "datasets", "tokenizers",
                    "accelerate", "rapidfuzz", "edlib", "hydra-core", "numpy")

_REPO_ROOT = Path(__file__).resolve().parents[2]


def package_version() -> str:
    """memlens's version as installed (pyproject.toml reads it from memlens/__init__.py, the one place it is
    written); read from the installed metadata, so this layer imports nothing above it."""
    try:
        return metadata.version("memlens")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: run scripts/setup.sh or pip install .)"


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


# The environment variables that choose kernels or thread counts, and so the last bits of every float result
# (docs/methods.md, "What reproduces where").
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_NUM_THREADS", "OMP_NUM_THREADS",
                    "ONEDNN_MAX_CPU_ISA", "CUBLAS_WORKSPACE_CONFIG")
ISA_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "sve")


@functools.cache   # the processor does not change while a process runs
def cpu_description() -> dict[str, Any]:
    """The processor as the kernels see it: model name, logical cores, and the vector extensions that decide
    which kernels torch, MKL and oneDNN pick (/proc/cpuinfo on Linux; platform.processor() elsewhere)."""
    info, flags = cpuinfo(), cpu_flags()
    model = next((info[key] for key in ("model name", "Model", "cpu model") if info.get(key)), None)
    return {"model": model or platform.processor() or None, "logical_cores": os.cpu_count(),
            "machine": platform.machine(), "vendor": info.get("vendor_id") or None,   # MKL honours its branch on Intel
            "isa": [f for f in ISA_FLAGS if f in flags]}


def torch_compute() -> dict[str, Any] | None:
    """torch's kernel choice and threads in this process; None when the process never loaded torch (then no
    tensor was computed here, and loading torch only to describe it would cost seconds)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    record = {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
              "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
              "blas": "mkl" if torch.backends.mkl.is_available() else None, "kernels": effective_kernels()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        record["cuda_device"] = torch.cuda.get_device_name()
    return record


def compute_environment() -> dict[str, Any]:
    """Where the numbers were computed (issue: a verdict flipped with torch's CPU kernels): the processor,
    torch's kernel level and threads, and the variables that choose them."""
    return {"cpu": cpu_description(), "torch": torch_compute(),
            "variables": {name: os.environ[name] for name in KERNEL_VARIABLES if name in os.environ}}


def environment() -> dict[str, Any]:
    """Code and environment identity: what every provenance block starts from."""
    return {
        "package": {"name": "memlens", "version": package_version()},   # the code that ran
        "git_commit": git_commit(),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "compute": compute_environment(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def provenance(seed: int | None = None, datasets: dict[str, str] | None = None,
               **settings: Any) -> dict[str, Any]:
    """A provenance record: environment + seed + {dataset name: sha256} + any named settings."""
    return {**environment(), "seed": seed, "datasets": dict(datasets or {}), **settings}
