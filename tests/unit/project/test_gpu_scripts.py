"""scripts/gpu_ladder.sh and scripts/gpu_smoke.sh on a lent GPU machine, which has no network (docs/gpu.md): with
PYTHON naming an interpreter they must not run scripts/setup.sh (it installs from the registries), they refuse when
torch sees no CUDA device, and they hand their arguments to the benchmark script. Each script runs from a copy of the
tree's layout whose setup.sh and interpreter are stand-ins that record what they were asked."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = {"gpu_ladder.sh": "benchmarks/gpu_ladder.py", "gpu_smoke.sh": "benchmarks/gpu_smoke.py"}
# What each script hands its benchmark for `--families codegemma`: the ladder adds its default output folder, the
# smoke run its device.
FORWARDED = {"gpu_ladder.sh": ["benchmarks/gpu_ladder.py", "--families", "codegemma", "--out", "runs/gpu_ladder"],
             "gpu_smoke.sh": ["benchmarks/gpu_smoke.py", "--device", "cuda", "--families", "codegemma"]}

# An interpreter that says CUDA is there (its `-c` check exits 0) and writes what it was asked to run.
CUDA_PYTHON = '#!/usr/bin/env bash\n[ "$1" = -c ] && exit 0\necho "$@" > "$(dirname "$0")/ran"\n'


def tree(tmp_path: Path, script: str) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / script, tmp_path / "scripts" / script)
    setup = tmp_path / "scripts" / "setup.sh"
    setup.write_text('touch setup_ran\nmkdir -p .venv/bin\ncat > .venv/bin/python <<\'EOF\'\n'
                     f'{CUDA_PYTHON}EOF\nchmod +x .venv/bin/python\n')
    return tmp_path


def run(root: Path, script: str, *args: str, python: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin"} | ({"PYTHON": python} if python else {})
    return subprocess.run(["bash", str(root / "scripts" / script), *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_with_python_set_no_setup_runs_and_no_cuda_is_refused(tmp_path, script):
    root = tree(tmp_path, script)
    done = run(root, script, python=sys.executable)        # this interpreter's torch is the CPU build
    assert done.returncode != 0
    assert "no CUDA device visible to torch" in done.stderr
    assert not (root / "setup_ran").exists()


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_with_python_set_the_arguments_reach_the_benchmark(tmp_path, script):
    root = tree(tmp_path, script)
    fake = tmp_path / "python3"
    fake.write_text(CUDA_PYTHON)
    fake.chmod(0o755)
    done = run(root, script, "--families", "codegemma", python=str(fake))
    assert done.returncode == 0, done.stderr
    assert not (root / "setup_ran").exists()
    assert (tmp_path / "ran").read_text().split() == FORWARDED[script]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_without_python_setup_makes_the_venv_it_then_uses(tmp_path, script):
    root = tree(tmp_path, script)
    done = run(root, script)
    assert done.returncode == 0, done.stderr
    assert (root / "setup_ran").exists()
    assert (root / ".venv/bin/ran").read_text().split()[0] == SCRIPTS[script]
