"""Test-wide settings: nothing touches a model hub; torch uses the machine's 2 cores on the kernels `memlens` pins
by default (harness/cli.py pin_cpu_kernels), set before anything loads torch; our folders are imported only as
subpackages of memlens."""

import importlib.abc
import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # scripts/test.sh runs two pytest-xdist workers on the two cores: one torch thread each (and in the CLI runs
    # they start), set before torch loads. Weights and audit rows are the same at 1 and 2 threads (measured,
    # docs/methods.md "What reproduces where"); tests compare runs made within one worker.
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"

from memlens.harness.cli import pin_cpu_kernels  # noqa: E402  (after the variables above; it loads no torch)

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


# --- two workers (scripts/test.sh: pytest -n 2 --dist loadgroup) ------------------------------------------------
# Tests of one file share its module- and session-scoped fixtures (a trained world, a pipeline run), so a file runs
# on one worker; in the files below every test builds its own run, so they spread test by test. Groups start
# longest first (measured durations, tests/README.md "Time"), so the two workers finish together.
SPREAD_FILES = {"test_experiments_at_toy_size.py", "test_model_families.py"}
LONGEST_FIRST = ("test_pipeline_smoke.py", "test_model_families.py", "test_experiments_at_toy_size.py",
                 "test_run_integrity.py", "test_reliability.py", "test_own_data.py", "test_nmt_pipeline.py",
                 "test_multiprocess_save.py", "test_report_render.py", "test_ppo_stage.py", "test_install.py",
                 "test_offline.py", "test_pipeline_resume.py")


def _group(item) -> str:
    return item.nodeid if item.path.name in SPREAD_FILES else item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))      # stable: file order kept within a group
