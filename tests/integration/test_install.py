"""The wheel users install: one import package (`memlens`) and one command (`memlens`), next to other projects
that own the names of our folders. A non-editable install runs no code from the checkout, so it must carry conf/
and the shipped base itself (harness/core/shipped.py, pyproject.toml's package-dir and data packages).

PyPI has distributions named `harness`, `recipes` and `synthetic-data`, and torchtune installs a top-level
`recipes` whose `__init__` raises ModuleNotFoundError: the wheel is installed into a fresh virtual environment
that already holds such decoys, ahead of everything else on the path, and the command must still work there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import memlens
from memlens.harness.core.shipped import CHECKOUT

pytestmark = pytest.mark.slow

# What the wheel is built from: the checkout minus what is not source.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "runs", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                                    ".hypothesis", ".benchmarks", "outputs", "multirun", "docs")
# Other projects' top-level packages named like our folders; each raises on import, as torchtune's `recipes` does.
DECOYS = ("harness", "recipes", "synthetic_data")
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(CHECKOUT, source, ignore=NOT_SOURCE)
    subprocess.run(PIP + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(source)],
                   check=True, capture_output=True)
    wheels = list((root / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment: the decoys in its site-packages, then the wheel (no dependencies: a .pth
    line lends it this interpreter's packages, after its own, so the decoys come first on the path)."""
    env = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = Path(subprocess.run([env / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    for name in DECOYS:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(f"raise ModuleNotFoundError('decoy {name}: another project')\n")
    (site / "zz_lent_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(PIP + ["--python", str(env / "bin" / "python"), "install", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    return env


def _in_venv(venv: Path, *argv: str) -> subprocess.CompletedProcess:
    """A command of the fresh environment, run from a directory outside the checkout."""
    cwd = venv.parent / "elsewhere"
    cwd.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEMLENS_CONF")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True)


def test_wheel_installs_one_import_name_and_one_command(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        info = f"memlens-{memlens.__version__}.dist-info"
        top_level = whl.read(f"{info}/top_level.txt").decode().split()
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert wheel.name.startswith(f"memlens-{memlens.__version__}-")
    assert top_level == ["memlens"]
    assert sorted({n.split("/")[0] for n in names}) == sorted(["memlens", info])
    scripts = [line.split("=")[0].strip() for line in entry_points.split("[console_scripts]")[1].splitlines()
               if "=" in line and not line.startswith("[")]
    assert scripts == ["memlens"] and "memlens.harness.cli:main" in entry_points
    assert not [n for n in names if n.startswith(("memlens/tests/", "memlens/runs/"))]
    assert "memlens/conf/config.yaml" in names and "memlens/assets/base_tiny/model.safetensors" in names


def test_the_decoys_are_in_the_way(venv):
    for name in DECOYS:
        probe = _in_venv(venv, venv / "bin" / "python", "-c", f"import {name}")
        assert probe.returncode != 0 and f"decoy {name}" in probe.stderr, probe


def test_installed_package_finds_its_configs_and_base_outside_the_checkout(venv):
    probe = _in_venv(venv, venv / "bin" / "python", "-c",
                     "import json, memlens, memlens.harness.cli as c; "
                     "from memlens.recipes.stages.models import resolve_pretrained; "
                     "print(json.dumps([memlens.__version__, memlens.__file__, str(c.config_dir()), "
                     "resolve_pretrained('assets/base_tiny')]))")
    assert probe.returncode == 0, probe.stderr
    version, module, conf, base = json.loads(probe.stdout.strip().splitlines()[-1])
    package = Path(module).parent
    assert version == memlens.__version__
    assert not package.is_relative_to(CHECKOUT) and package.is_relative_to(venv), \
        "the test must run the installed copy, not the checkout"
    assert Path(conf) == package / "conf" and (Path(conf) / "config.yaml").is_file()
    shipped_conf = sorted(p.relative_to(CHECKOUT / "conf") for p in (CHECKOUT / "conf").rglob("*") if p.is_file())
    assert sorted(p.relative_to(conf) for p in Path(conf).rglob("*") if p.is_file()) == shipped_conf
    assert Path(base) == package / "assets" / "base_tiny" and (Path(base) / "model.safetensors").is_file()


def test_memlens_command_builds_the_smoke_data_beside_the_decoys(venv):
    run_dir = venv.parent / "run"
    done = _in_venv(venv, venv / "bin" / "memlens", "data", "experiment=smoke", f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    manifests = sorted(p.parent.name for p in (run_dir / "data").glob("*/manifest.json"))
    assert "sd_base" in manifests and "pd_1" in manifests


@pytest.mark.parametrize("model", ["tiny", "tiny_base"])
def test_memlens_check_passes_beside_the_decoys(venv, model):
    """model=tiny checks the stage lengths; tiny_base also reads the shipped base's tokenizer and config."""
    done = _in_venv(venv, venv / "bin" / "memlens", "check", f"model={model}", "experiment=smoke")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


def test_python_dash_m_memlens_is_the_command(venv):
    done = _in_venv(venv, venv / "bin" / "python", "-m", "memlens", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: memlens"), done
