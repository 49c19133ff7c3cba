"""scripts/setup.sh installs torch's CPU build wherever it runs: when pip, as configured, would resolve the pinned torch
to a build that brings nvidia-* packages (PyPI's Linux x86-64 wheel, a CUDA build of several GB), it takes torch from
PyTorch's CPU wheel index; where pip's own index serves a CPU build it keeps it. The decision is read from pip's
installation report; here pip is a stand-in that writes the report a given index would give (the real reports, from
PyPI alone and from this machine's index, were read by hand: docs/install.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def torch_source(tmp_path: Path, installed: list[str], env: dict[str, str] | None = None) -> str:
    report = {"version": "1", "install": [{"metadata": {"name": n, "version": "1"}} for n in installed]}
    fake_pip = tmp_path / "pip.sh"
    fake_pip.write_text("#!/usr/bin/env bash\n# writes the report after --report, as pip does\n"
                        "while [ $# -gt 0 ]; do [ \"$1\" = --report ] && { shift; cat \"$REPORT\" > \"$1\"; }; shift; done\n")
    fake_pip.chmod(0o755)
    (tmp_path / "report.json").write_text(json.dumps(report, indent=2))
    function = subprocess.run(["sed", "-n", "/^quiet()/p;/^torch_source()/,/^}/p", str(ROOT / "scripts/setup.sh")],
                              capture_output=True, text=True, check=True).stdout
    script = (f"set -euo pipefail\ncd {ROOT}\nCPU_INDEX=https://download.pytorch.org/whl/cpu\n"
              f"pip=({fake_pip})\n{function}\ntorch_source\n")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "REPORT": str(tmp_path / "report.json"), **(env or {})})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_cuda_build_from_pip_switches_to_the_cpu_index(tmp_path):
    assert torch_source(tmp_path, ["torch", "nvidia-cudnn-cu13", "triton"]) == "https://download.pytorch.org/whl/cpu"


def test_a_cpu_build_from_pip_is_kept(tmp_path):
    assert torch_source(tmp_path, ["torch", "sympy", "networkx"]) == ""


@pytest.mark.parametrize("given, expected", [("pip", ""), ("https://example.org/whl/cu126", "https://example.org/whl/cu126")])
def test_the_user_can_choose_the_index(tmp_path, given, expected):
    assert torch_source(tmp_path, ["torch", "nvidia-nccl-cu13"], {"MEMLENS_TORCH_INDEX": given}) == expected
