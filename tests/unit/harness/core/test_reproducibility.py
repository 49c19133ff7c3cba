"""What decides the last bits of a number is recorded and, by default, pinned: the processor, torch's CPU kernel
level and threads in every provenance record; `memlens` starting torch on kernels every x86-64 machine with AVX2
runs alike unless told otherwise; the NMT stability rerun's kernel level."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from memlens.harness import cli
from memlens.harness.audit.nmt import second_kernel_level
from memlens.harness.core.errors import UserError
from memlens.harness.core.provenance import compute_environment, cpu_description, environment
from memlens.harness.report.analyses import computed_on


def test_provenance_records_the_processor_and_torchs_kernels():
    compute = environment()["compute"]
    assert compute == compute_environment() | {"variables": compute["variables"]}
    assert compute["torch"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert compute["torch"]["threads"] == torch.get_num_threads()
    assert compute["torch"]["deterministic_algorithms"] == torch.are_deterministic_algorithms_enabled()
    assert compute["cpu"]["logical_cores"] == os.cpu_count()
    if os.path.exists("/proc/cpuinfo"):
        assert compute["cpu"]["model"]                       # what /proc/cpuinfo names
        flags = open("/proc/cpuinfo").read()
        assert ("avx2" in compute["cpu"]["isa"]) == (" avx2" in flags)
    # The tests pin the kernels as memlens does (tests/conftest.py): the variables are recorded beside what torch
    # did with them.
    assert compute["variables"]["ATEN_CPU_CAPABILITY"] == os.environ["ATEN_CPU_CAPABILITY"]
    assert compute["torch"]["cpu_capability"] == os.environ["ATEN_CPU_CAPABILITY"].upper()
    assert compute["variables"].get("MKL_CBWR") == os.environ.get("MKL_CBWR")


def test_a_process_that_never_loaded_torch_records_no_kernels():
    code = ("import json, sys; from memlens.harness.core.provenance import compute_environment; "
            "print(json.dumps(compute_environment())); assert 'torch' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert '"torch": null' in out
    assert cpu_description()["machine"] in out


def test_computed_on_reads_a_record_by_hand():
    prov = {"compute": {"cpu": {"model": "AMD EPYC", "machine": "x86_64", "logical_cores": 2, "isa": ["avx2"]},
                        "torch": {"cpu_capability": "DEFAULT", "threads": 2},
                        "variables": {"ATEN_CPU_CAPABILITY": "default"}}}
    assert computed_on(prov) == "AMD EPYC (x86_64, 2 cores) · torch kernels DEFAULT (pinned) · 2 threads"
    prov["compute"]["variables"] = {}
    prov["compute"]["torch"]["cpu_capability"] = "AVX2"
    assert computed_on(prov) == "AMD EPYC (x86_64, 2 cores) · torch kernels AVX2 · 2 threads"
    assert computed_on({"git_commit": "abc"}) == "not recorded"      # a run from before this was recorded


def _capability_after_pin(env: dict[str, str]) -> subprocess.CompletedProcess:
    """torch's kernel level in a fresh process that ran the CLI's pin first, as `memlens` does."""
    code = ("import os; from memlens.harness.cli import pin_cpu_kernels; pin_cpu_kernels(); import torch; "
            "print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR'))")
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", cli.CPU_KERNELS_VARIABLE)}
    return subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True)


def _native_capability() -> str:
    clean = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                          env=clean, capture_output=True, text=True, check=True).stdout.strip()


def test_memlens_starts_torch_on_the_portable_kernels_unless_told_otherwise():
    # Portable: AVX2 kernels, with MKL held to its AVX2 path, on a CPU that has AVX2; the scalar kernels elsewhere.
    avx2 = "avx2" in cpu_description()["isa"]
    assert _capability_after_pin({}).stdout.split() == (["AVX2", "AVX2"] if avx2 else ["DEFAULT", "None"])
    assert _capability_after_pin({cli.CPU_KERNELS_VARIABLE: "default"}).stdout.split() == ["DEFAULT", "None"]
    native = _native_capability()
    assert _capability_after_pin({cli.CPU_KERNELS_VARIABLE: "native"}).stdout.split() == [native, "None"]
    # The user's own ATEN_CPU_CAPABILITY wins over memlens's pin, and then memlens sets nothing else.
    assert _capability_after_pin({"ATEN_CPU_CAPABILITY": "default", cli.CPU_KERNELS_VARIABLE: "native"}
                                 ).stdout.split() == ["DEFAULT", "None"]
    assert _capability_after_pin({"ATEN_CPU_CAPABILITY": "default"}).stdout.split() == ["DEFAULT", "None"]


def test_an_unknown_kernel_level_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv(cli.CPU_KERNELS_VARIABLE, "sse9")
    with pytest.raises(UserError, match="MEMLENS_CPU_KERNELS='sse9': use one of portable, default, avx2, avx512, native"):
        cli.pin_cpu_kernels()


def test_pinning_after_torch_loaded_gives_children_the_parents_kernels(monkeypatch):
    # memlens called from a Python process that had already loaded torch: the pin cannot change this process,
    # so its children (launched trainers, the NMT rerun's parent env) compute as it does.
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("MKL_CBWR", raising=False)
    monkeypatch.delenv(cli.CPU_KERNELS_VARIABLE, raising=False)
    cli.pin_cpu_kernels()
    assert os.environ["ATEN_CPU_CAPABILITY"] == torch.backends.cpu.get_cpu_capability().lower()


@pytest.mark.parametrize("setting, current, expected", [
    ("auto", "DEFAULT", "avx2"), ("auto", "AVX2", "default"), ("auto", "AVX512", "avx2"),
    ("default", "DEFAULT", "default"), ("avx512", "AVX2", "avx512")])
def test_the_stability_rerun_uses_another_kernel_level(setting, current, expected):
    assert second_kernel_level(setting, current) == expected
