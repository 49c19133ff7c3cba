"""Test-wide settings: nothing touches a model hub; torch uses the machine's 2 cores on the kernels `memlens` pins
by default (harness/cli.py pin_cpu_kernels), set before anything loads torch; our folders are imported only as
subpackages of memlens."""

import importlib.abc
import os
import sys

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


# --- two workers (scripts/test.sh: pytest -n 2) -----------------------------------------------------------------
# Tests of one file share its module- and session-scoped fixtures (a trained world, a pipeline run), so a file runs
# on one worker; in the files below every test builds its own run (on the session's audit world or the family
# fixtures, built once per worker) or reads the smoke run both workers share (tests/integration/conftest.py
# `smoke`, built once), so they spread test by test. Files start longest first (measured durations,
# tests/README.md "Time"), so the two workers finish together. (xdist's own `--dist loadgroup` marks do not group
# under pytest 9.2 with xdist 3.8: measured, every test ran as its own group; this scheduler is xdist's documented
# hook instead.)
SPREAD_FILES = {"test_experiments_at_toy_size.py", "test_reliability.py", "test_run_integrity.py",
                "test_pipeline_smoke.py"}
# ... and in these, the tests of one parameter go together: test_model_families.py's `family_run` is a module-scoped
# fixture per family (a trimmed smoke run, ~45 s), which a worker builds for every family it meets; spread test by
# test, each family's run was built on both workers (measured at 36d7c68: 8 builds for 4 families, ~180 s).
SPREAD_BY_PARAMETER = {"test_model_families.py"}
LONGEST_FIRST = ("test_pipeline_smoke.py", "test_model_families.py", "test_experiments_at_toy_size.py",
                 "test_run_integrity.py", "test_reliability.py", "test_own_data.py", "test_audit_callback.py",
                 "test_nmt_pipeline.py", "test_formal_languages.py",
                 "test_multiprocess_save.py", "test_report_render.py", "test_ppo_stage.py", "test_install.py",
                 "test_offline.py", "test_pipeline_resume.py")


def work_unit(nodeid: str) -> str:
    """What one worker runs together: the test's file, the test alone in a SPREAD_FILES file, or every test of one
    parameter (`test_x[<param>]`) in a SPREAD_BY_PARAMETER file."""
    path = nodeid.split("::")[0]
    name = path.rsplit("/", 1)[-1]
    if name in SPREAD_BY_PARAMETER and nodeid.endswith("]") and "[" in nodeid:
        return f"{path}[{nodeid[nodeid.rindex('[') + 1:-1]}]"
    return nodeid if name in SPREAD_FILES else path


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByFile(config, log)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):          # the order each worker reports is the order units start
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: a file's own order kept
