"""scripts/gpu_ladder.sh and scripts/gpu_smoke.sh on a lent GPU machine, which has no network (docs/gpu.md): with
PYTHON naming an interpreter they must not run scripts/setup.sh (it installs from the registries), they refuse when
torch sees no CUDA device, and they hand their arguments to the benchmark script. Each script runs from a copy of the
tree's layout whose setup.sh and interpreter are stand-ins that record what they were asked."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
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
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""} | ({"PYTHON": python} if python else {})
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


# --- scripts/gpu_session.sh: the device calls (install, machine record, the steps under a deadline, records packed) ---

def session_tree(tmp_path: Path, ladder: str = "", timing_exit: int = 0) -> Path:
    """A copy of the layout with stand-ins for the steps. The ladder writes a record, weights, a dataset's rows and
    manifest, then runs `ladder` (shell); the callback timing writes its result, weights and rows into the packed
    folder and work beside it, then exits `timing_exit`; the smoke writes the result it is given."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "benchmarks").mkdir()
    shutil.copy(ROOT / "scripts" / "gpu_session.sh", root / "scripts")
    (root / "scripts" / "gpu_ladder.sh").write_text(
        'out=runs/gpu_ladder; mkdir -p $out/run/models/PT $out/run/data/sd_base\n'
        'echo "{}" > $out/ladder.json; echo w > $out/run/models/PT/model.safetensors\n'
        'echo "{}" > $out/run/data/sd_base/rows.jsonl; echo "{}" > $out/run/data/sd_base/manifest.json\n'
        f'echo "[ladder] F2 inconclusive"\n{ladder}\n')
    (root / "scripts" / "gpu_smoke.sh").write_text(
        'while [ $# -gt 0 ]; do [ "$1" = --out ] && echo "{}" > "$2"; shift; done; echo smoke-ran\n')
    (root / "benchmarks" / "callback_timing.py").write_text(
        "import sys; from pathlib import Path\n"
        "arg = lambda name: Path(sys.argv[sys.argv.index(name) + 1])\n"
        "arg('--result').write_text('{}')\n"
        "arg('--work').mkdir(parents=True); (arg('--work') / 'model.safetensors').write_text('w')\n"
        "data = Path('runs/gpu_extras/run/data/sd_base'); data.mkdir(parents=True)\n"
        "(data / 'rows.jsonl').write_text('{}'); (data / 'manifest.json').write_text('{}')\n"
        "Path('runs/gpu_extras/model.safetensors').write_text('w')\n"
        f"print('timing-ran'); sys.exit({timing_exit})\n")
    interpreter(tmp_path / "python", cuda=True, versions=True)
    interpreter(tmp_path / "quick_python", cuda=True, versions=False)
    return root


def interpreter(path: Path, cuda: bool, versions: bool) -> str:
    """The test's interpreter (memlens installed, CPU torch) behind a shim: with `cuda` it answers the CUDA check as
    a GPU machine would; without `versions` it answers the machine record's version line itself (that import of
    torch, transformers, TRL and datasets takes seconds; one test reads the real line)."""
    cases = ('*cuda.is_available*) exit 0 ;;\n' if cuda else '') + \
        ('' if versions else '*"import torch, transformers"*) echo "torch (stand-in)"; exit 0 ;;\n')
    path.write_text(f'#!/usr/bin/env bash\ncase "${{2:-}}" in\n{cases}esac\nexec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return str(path)


def session(root: Path, part: str, out: Path, python: str | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(root / "scripts" / "gpu_session.sh"), part], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": python or str(root.parent / "quick_python"),
                               "OUT": str(out), **env}, timeout=300)


def packed(archive: Path) -> set[str]:
    return set(subprocess.run(["tar", "tzf", str(archive)], capture_output=True, text=True, check=True)
               .stdout.split())


def test_the_ladder_call_packs_its_records_without_weights_or_rows_and_keeps_its_exit(tmp_path):
    root = session_tree(tmp_path, ladder="exit 3")
    done = session(root, "ladder", tmp_path / "out", python=str(tmp_path / "python"), COMMIT="abc1234")
    assert done.returncode == 3, done.stderr                 # a stopped ladder says so; its records come back
    names = packed(tmp_path / "out" / "gpu_ladder.tgz")
    assert {"runs/gpu_ladder/ladder.json", "runs/gpu_ladder/console.log", "runs/gpu_ladder/machine.txt",
            "runs/gpu_ladder/run/data/sd_base/manifest.json"} <= names
    assert not [n for n in names if n.endswith((".safetensors", ".jsonl"))]
    assert "[ladder] F2 inconclusive" in (root / "runs/gpu_ladder/console.log").read_text()
    machine = (root / "runs/gpu_ladder/machine.txt").read_text()
    assert "torch 2." in machine and " trl " in machine and "commit: abc1234" in machine
    assert "nvidia-smi: not found" in machine or "GPU 0" in machine


def instant_python(tmp_path: Path) -> str:
    """An interpreter stand-in that answers every `-c` check at once (installed, CUDA, the machine's versions), so
    that a deadline counted from the call's start is left to the step alone."""
    shim = tmp_path / "instant_python"
    shim.write_text('#!/usr/bin/env bash\n[ "$1" = -c ] && { echo "torch (stand-in)"; exit 0; }\nexit 9\n')
    shim.chmod(0o755)
    return str(shim)


def test_a_step_past_the_calls_deadline_is_stopped_and_what_it_wrote_comes_back(tmp_path):
    root = session_tree(tmp_path, ladder="sleep 60")
    started = time.monotonic()
    done = session(root, "ladder", tmp_path / "out", python=instant_python(tmp_path), CALL_LIMIT="31")
    assert done.returncode == 124, done.stderr                # 31 s less the 25 kept: ~6 s for the step, not 60
    assert time.monotonic() - started < 40                    # the sleeping grandchild was killed with it
    assert "runs/gpu_ladder/ladder.json" in packed(tmp_path / "out" / "gpu_ladder.tgz")


def test_a_step_with_no_time_left_does_not_start(tmp_path):
    root = session_tree(tmp_path)
    done = session(root, "ladder", tmp_path / "out", python=instant_python(tmp_path), CALL_LIMIT="10")
    assert done.returncode == 124
    assert "no time left in this call" in (root / "runs/gpu_ladder/console.log").read_text()
    assert not (root / "runs/gpu_ladder/ladder.json").exists()


def test_the_extras_call_runs_both_steps_packs_both_results_and_no_work_or_weights(tmp_path):
    root = session_tree(tmp_path, timing_exit=5)
    done = session(root, "extras", tmp_path / "out")
    assert done.returncode == 5, done.stderr                 # the failed step's exit; the smoke ran after it
    names = packed(tmp_path / "out" / "gpu_extras.tgz")
    assert {"runs/gpu_extras/callback_timing_cuda.json", "runs/gpu_extras/gpu_smoke_cuda.json",
            "runs/gpu_extras/console.log", "runs/gpu_extras/run/data/sd_base/manifest.json"} <= names
    assert not [n for n in names if "work" in n or n.endswith((".safetensors", ".jsonl"))]
    console = (root / "runs/gpu_extras/console.log").read_text()
    assert console.index("timing-ran") < console.index("smoke-ran")


def test_an_archive_too_big_to_come_back_keeps_only_the_small_records(tmp_path):
    root = session_tree(tmp_path, ladder="head -c 200000 /dev/urandom | od -x > runs/gpu_ladder/run/audit.log.big")
    done = session(root, "ladder", tmp_path / "out", GPU_PACK_LIMIT_KIB="16")
    assert done.returncode == 0, done.stderr
    assert "packed again" in done.stderr
    names = {n for n in packed(tmp_path / "out" / "gpu_ladder.tgz") if not n.endswith("/")}
    assert "runs/gpu_ladder/ladder.json" in names and "runs/gpu_ladder/console.log" in names
    assert all(n.endswith((".json", ".log", ".txt")) for n in names)


def test_without_memlens_or_wheels_the_session_stops_before_any_step(tmp_path):
    root = session_tree(tmp_path)
    no_memlens = tmp_path / "python3"
    no_memlens.write_text('#!/usr/bin/env bash\nexit 1\n')
    no_memlens.chmod(0o755)
    done = session(root, "ladder", tmp_path / "out", python=str(no_memlens))
    assert done.returncode == 2
    assert "benchmarks/gpu_wheels.sh" in done.stderr and "carry .whl" in done.stderr
    assert not (root / "runs/gpu_ladder/ladder.json").exists() and not (tmp_path / "out").exists()


def test_without_cuda_no_step_runs_and_the_machine_record_comes_back(tmp_path):
    root = session_tree(tmp_path)
    no_cuda = interpreter(tmp_path / "no_cuda_python", cuda=False, versions=False)   # the real check, CPU torch
    done = session(root, "extras", tmp_path / "out", python=no_cuda, CUDA_VISIBLE_DEVICES="")
    assert done.returncode != 0 and "no CUDA device visible to torch" in done.stderr
    assert "runs/gpu_extras/machine.txt" in packed(tmp_path / "out" / "gpu_extras.tgz")
    assert not (root / "runs/gpu_extras/callback_timing_cuda.json").exists()


def test_pack_alone_packs_what_a_cut_call_left(tmp_path):
    root = session_tree(tmp_path)
    (root / "runs/gpu_extras").mkdir(parents=True)
    (root / "runs/gpu_extras/console.log").write_text("cut here\n")
    done = session(root, "pack", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert packed(tmp_path / "out" / "gpu_extras.tgz") >= {"runs/gpu_extras/console.log"}
    assert not (tmp_path / "out" / "gpu_ladder.tgz").exists()          # no ladder folder, no archive


def test_an_unknown_part_is_refused_with_the_usage(tmp_path):
    done = session(session_tree(tmp_path), "all", tmp_path / "out")
    assert done.returncode == 2 and "ladder|extras|pack" in done.stderr
