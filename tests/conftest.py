"""Test-wide settings: nothing touches a model hub; torch uses the machine's 2 cores on the kernels `memlens` pins
by default (harness/core/kernels.py pin_cpu_kernels), set before anything loads torch; our folders are imported only as
subpackages of memlens."""

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _require_this_checkout_installed() -> None:
    """The tests import harness/, recipes/ and synthetic_data/ as memlens.* (pyproject.toml's package-dir): that needs
    memlens installed from this checkout, which scripts/setup.sh does. Without it, say so instead of an ImportError."""
    spec = importlib.util.find_spec("memlens.harness") if importlib.util.find_spec("memlens") else None
    fix = ("run `bash scripts/setup.sh` once (it creates .venv with memlens from this checkout and the test extras), "
           "then `bash scripts/test.sh` or `.venv/bin/python -m pytest`")
    if spec is None:
        pytest.exit(f"memlens is not installed in this Python ({sys.executable}): {fix}", returncode=4)
    where = Path(spec.origin).resolve().parents[1]
    if where != REPO:
        pytest.exit(f"this Python's memlens is installed from {where}, not from this checkout ({REPO}): {fix}",
                    returncode=4)


_require_this_checkout_installed()

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One torch thread in every test process and the CLI runs they start, set before torch loads, with or without
# xdist: scripts/test.sh runs two workers on the two cores, and the runs a test compares (the sequential smoke run
# against its SLURM and local jobs, which compute with `cpus_per_task` = 1 thread) must compute alike. Weights are
# the same at 1 and 2 threads on AMD processors, where MKL picks its path itself; on an Intel Xeon, where MKL honours
# MKL_CBWR, a plain `pytest -k slurm` (no xdist, so 2 threads) trained PT with other bits than its 1-thread job.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

from memlens.harness.core.kernels import pin_cpu_kernels  # noqa: E402  (after the variables above; it loads no torch)

pin_cpu_kernels()


class RefuseBareFolderNames(importlib.abc.MetaPathFinder):
    """pytest runs from the checkout, where `import recipes` would silently load recipes/ a second time, beside
    memlens.recipes; on a user's machine that name is another project's (torchtune's `recipes`, PyPI's `harness`
    and `synthetic-data`). Any such import, static or dynamic (importlib, a patch target), fails the test."""

    FOLDERS = ("harness", "recipes", "synthetic_data")

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.FOLDERS:
            raise ModuleNotFoundError(f"{fullname}: import it as memlens.{fullname} (the installed name)")
        return None


sys.meta_path.insert(0, RefuseBareFolderNames())


# --- two workers (scripts/test.sh: pytest -n 2): which tests run together and in what order, tests/scheduling.py ---
from tests.scheduling import start_rank, work_unit  # noqa: E402  (after the variables above)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False        # units start in the order the workers collected them (below)
    return ByFile(config, log)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):          # the order each worker reports is the order units start
        items.sort(key=lambda item: start_rank(work_unit(item.nodeid)))   # stable: a file's own order kept
