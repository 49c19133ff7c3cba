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


# --- scripts/gpu_session.sh: the two device calls (install, machine record, the steps, records packed into $OUT) ---

def session_tree(tmp_path: Path, ladder_exit: int = 0) -> Path:
    """A copy of the layout with stand-ins for the steps: the ladder writes a record, weights and a dataset; the
    callback timing and the smoke write the result file they are given."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "benchmarks").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_session.sh", root / "scripts")
    (root / "scripts" / "gpu_ladder.sh").write_text(
        'out=runs/gpu_ladder; mkdir -p $out/run/models/PT $out/run/data/sd_base\n'
        'echo "{}" > $out/ladder.json; echo w > $out/run/models/PT/model.safetensors\n'
        'echo "{}" > $out/run/data/sd_base/rows.jsonl; echo "[ladder] F2 inconclusive"\n'
        f'exit {ladder_exit}\n')
    (root / "scripts" / "gpu_smoke.sh").write_text(
        'while [ $# -gt 0 ]; do [ "$1" = --out ] && echo "{}" > "$2"; shift; done; echo smoke-ran\n')
    (root / "benchmarks" / "callback_timing.py").write_text(
        'import sys; from pathlib import Path\n'
        'Path(sys.argv[sys.argv.index("--result") + 1]).write_text("{}")\n'
        'work = Path(sys.argv[sys.argv.index("--work") + 1]); work.mkdir(parents=True)\n'
        '(work / "model.safetensors").write_text("w"); print("timing-ran")\n')
    return root


def session(root: Path, part: str, out: Path, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(root / "scripts" / "gpu_session.sh"), part], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": python, "OUT": str(out)}, timeout=300)


def packed(archive: Path) -> set[str]:
    return set(subprocess.run(["tar", "tzf", str(archive)], capture_output=True, text=True, check=True)
               .stdout.split())


def test_the_ladder_call_packs_its_records_without_weights_and_keeps_its_exit(tmp_path):
    root = session_tree(tmp_path, ladder_exit=3)
    done = session(root, "ladder", tmp_path / "out")
    assert done.returncode == 3, done.stderr                 # a stopped ladder says so; its records come back
    names = packed(tmp_path / "out" / "gpu_ladder.tgz")
    assert {"runs/gpu_ladder/ladder.json", "runs/gpu_ladder/console.log", "runs/gpu_ladder/machine.txt"} <= names
    assert not [n for n in names if n.endswith(".safetensors") or "/data/" in n]
    assert "[ladder] F2 inconclusive" in (root / "runs/gpu_ladder/console.log").read_text()
    machine = (root / "runs/gpu_ladder/machine.txt").read_text()
    assert "torch " in machine and "commit: unknown" in machine and "nvidia-smi" in machine


def test_the_extras_call_packs_both_results_and_no_work_folder(tmp_path):
    root = session_tree(tmp_path)
    done = session(root, "extras", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    names = packed(tmp_path / "out" / "gpu_extras.tgz")
    assert {"runs/gpu_extras/callback_timing_cuda.json", "runs/gpu_extras/gpu_smoke_cuda.json",
            "runs/gpu_extras/console.log"} <= names
    assert not [n for n in names if "work" in n or n.endswith(".safetensors")]
    console = (root / "runs/gpu_extras/console.log").read_text()
    assert console.index("timing-ran") < console.index("smoke-ran")


def test_without_memlens_or_wheels_the_session_stops_before_any_step(tmp_path):
    root = session_tree(tmp_path)
    no_memlens = tmp_path / "python3"
    no_memlens.write_text('#!/usr/bin/env bash\nexit 1\n')
    no_memlens.chmod(0o755)
    done = session(root, "ladder", tmp_path / "out", python=str(no_memlens))
    assert done.returncode == 2
    assert "benchmarks/gpu_wheels.sh" in done.stderr and "carry .whl" in done.stderr
    assert not (root / "runs/gpu_ladder/ladder.json").exists() and not (tmp_path / "out").exists()


def test_an_unknown_part_is_refused_with_the_usage(tmp_path):
    done = session(session_tree(tmp_path), "all", tmp_path / "out")
    assert done.returncode == 2 and "ladder|extras" in done.stderr
