"""A non-editable install (`pip install .`, or from a git URL) runs no code from the checkout: it must carry
conf/ and the shipped base itself (harness/core/shipped.py, pyproject.toml's data packages)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.core.shipped import CHECKOUT

pytestmark = pytest.mark.slow

# What the wheel is built from: the checkout minus what is not source.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "runs", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                                    ".hypothesis", ".benchmarks", "outputs", "multirun", "docs")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel of a copy of the checkout, installed into a target directory (no dependencies: those are
    this interpreter's)."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    shutil.copytree(CHECKOUT, source, ignore=NOT_SOURCE)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "wheel"), str(source)],
                   check=True, capture_output=True)
    wheel = next((root / "wheel").glob("memaudit-*.whl"))
    subprocess.run(pip + ["install", "--no-deps", "--target", str(root / "site"), str(wheel)],
                   check=True, capture_output=True)
    return root


def _run(installed: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    """Python from another working directory, with the installed copy first on the path."""
    cwd = installed / "elsewhere"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(installed / "site"), "HF_HUB_OFFLINE": "1"}
    env.pop("MEMAUDIT_CONF", None)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_installed_package_finds_its_configs_and_base_outside_the_checkout(installed):
    probe = _run(installed, "import json, harness, harness.cli as c; from recipes.models import resolve_pretrained;"
                            "print(json.dumps([harness.__file__, str(c.config_dir()),"
                            " resolve_pretrained('assets/base_tiny')]))")
    assert probe.returncode == 0, probe.stderr
    module, conf, base = (Path(p) for p in json.loads(probe.stdout.strip().splitlines()[-1]))
    site = installed / "site"
    assert module.is_relative_to(site), "the test must run the installed copy, not the checkout"
    assert conf == site / "memaudit_conf" and (conf / "config.yaml").is_file()
    shipped_conf = sorted(p.relative_to(CHECKOUT / "conf") for p in (CHECKOUT / "conf").rglob("*") if p.is_file())
    assert sorted(p.relative_to(conf) for p in conf.rglob("*") if p.is_file()) == shipped_conf
    assert base == site / "memaudit_assets" / "base_tiny" and (base / "model.safetensors").is_file()


def test_installed_memaudit_builds_the_smoke_datasets_from_another_directory(installed):
    run_dir = installed / "run"
    done = _run(installed, "import sys; from harness.cli import main; sys.exit(main())",
                "data", "experiment=smoke", f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    manifests = sorted(p.parent.name for p in (run_dir / "data").glob("*/manifest.json"))
    assert "sd_base" in manifests and "pd_1" in manifests


def test_wheel_lists_no_checkout_only_paths(installed):
    wheel = next((installed / "wheel").glob("memaudit-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith(("tests/", "runs/", "conf/", "assets/"))]
    assert "memaudit_conf/config.yaml" in names and "memaudit_assets/base_tiny/model.safetensors" in names
