"""The tests' preloaded CLI (tests/integration/preloaded_cli.py): a call forked from it is what a new `python -m memlens`
interpreter would be — the same exit code, output and files — and the calls the suite makes are forked at all (an
environment variable that drifted after the session started would silently send every call to a new interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.conftest import audit_overrides
from tests.integration.run_helpers import OFFLINE, environment_drift, forkable, preloaded_cli, user_directory_env

pytestmark = pytest.mark.slow


def fresh(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlens", *args], cwd=cwd, env={**os.environ, **OFFLINE},
                          capture_output=True, text=True, timeout=600)


def test_the_suites_calls_are_forked_after_torch_set_its_cache_variable():
    """torch sets TORCHINDUCTOR_CACHE_DIR in the worker the first time anything asks for its cache folder (a test's
    training does), scikit-learn two KMP_* variables when it is imported (the blind baseline's tests do): measured,
    before they were ignored every call after that went to a new interpreter (the suite took 2 minutes longer)."""
    import sklearn  # noqa: F401  (its import sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK)
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    cache_dir()
    assert "TORCHINDUCTOR_CACHE_DIR" in os.environ and "KMP_INIT_AT_FORK" in os.environ

    assert environment_drift({**os.environ, **OFFLINE}) == []                                # run_helpers.memlens
    if os.environ.get("OMP_NUM_THREADS") == "1":        # the workers of scripts/test.sh (tests/conftest.py)
        assert environment_drift(user_directory_env()) == []                                 # run_helpers.memlens_in
    assert not forkable({**os.environ, **OFFLINE, "MEMLENS_CPU_KERNELS": "default"})      # read before torch loads


def test_a_forked_call_writes_and_prints_what_a_new_interpreter_does(audit_world, tmp_path):
    server = preloaded_cli()
    if server is None:
        pytest.skip("MEMLENS_TEST_FRESH_PROCESSES=1: no preloaded server")
    env = {**os.environ, **OFFLINE}
    forked = server.run(["audit", *audit_overrides(audit_world, tmp_path / "via_fork")], env, tmp_path, 600)
    new = fresh(["audit", *audit_overrides(audit_world, tmp_path / "via_new")], tmp_path)
    assert forked.returncode == new.returncode == 0, forked.stderr[-2000:]
    assert forked.stdout.replace("via_fork", "via_new") == new.stdout
    rows = sorted(p.relative_to(tmp_path / "via_new") for p in (tmp_path / "via_new").rglob("*.jsonl"))
    assert rows == sorted(p.relative_to(tmp_path / "via_fork") for p in (tmp_path / "via_fork").rglob("*.jsonl"))
    for path in rows:
        assert (tmp_path / "via_fork" / path).read_bytes() == (tmp_path / "via_new" / path).read_bytes(), path

    bad = ["audit", *audit_overrides(audit_world, tmp_path / "bad"), "audit.k=2"]
    refused_forked, refused_new = server.run(bad, env, tmp_path, 600), fresh(bad, tmp_path)
    assert refused_forked.returncode == refused_new.returncode == 2
    assert refused_forked.stderr == refused_new.stderr and refused_forked.stderr.startswith("memlens: error: ")


def test_a_forked_call_past_its_timeout_is_killed(audit_world, tmp_path):
    server = preloaded_cli()
    if server is None:
        pytest.skip("MEMLENS_TEST_FRESH_PROCESSES=1: no preloaded server")
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(["audit", *audit_overrides(audit_world, tmp_path / "out")], {**os.environ, **OFFLINE}, tmp_path, 0.5)


def test_a_forked_script_sees_what_python_script_would(tmp_path):
    """`run_python` (a test's own program, forked): its name is __main__, its arguments and its folder first on the
    path as `python SCRIPT ARGS` gives them, and its exit status and output, whether forked or new."""
    from tests.integration.run_helpers import run_python

    if preloaded_cli() is None:
        pytest.skip("MEMLENS_TEST_FRESH_PROCESSES=1: no preloaded server")
    script = tmp_path / "probe.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], sys.path[0])\nprint('to stderr', file=sys.stderr)\n"
                      "sys.exit(3)\n")
    env = {**os.environ, **OFFLINE}
    forked = run_python(script, ["a", "b c"], env, tmp_path, 60)
    new = subprocess.run([sys.executable, str(script), "a", "b c"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert forked.returncode == new.returncode == 3
    assert forked.stdout == new.stdout == f"__main__ ['a', 'b c'] {tmp_path}\n"
    assert forked.stderr == new.stderr == "to stderr\n"
