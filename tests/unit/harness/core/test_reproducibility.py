"""What decides the last bits of a number is recorded and, by default, pinned: the processor, torch's CPU kernel
level and threads in every provenance record; `memlens` starting torch on kernels every x86-64 machine with AVX2
runs alike unless told otherwise; the NMT stability rerun's kernel level."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from memlens.harness.audit.nmt import second_kernel_level
from memlens.harness.core import kernels
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
    assert compute["torch"]["kernels"]["onednn_max_isa"] == os.environ.get("ONEDNN_MAX_CPU_ISA")
    assert compute["torch"]["kernels"]["mkl_branch"] in kernels.MKL_BRANCHES.values()


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
    """torch's kernel level, MKL's branch and oneDNN's cap in a fresh process that ran the CLI's pin first, as
    `memlens` does."""
    code = ("import os; from memlens.harness.core.kernels import pin_cpu_kernels, mkl_branch; pin_cpu_kernels(); "
            "import torch; print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR'), mkl_branch(), "
            "os.environ.get('ONEDNN_MAX_CPU_ISA'))")
    clean = {k: v for k, v in os.environ.items() if k not in (*kernels.PINNED_VARIABLES, kernels.KERNELS_VARIABLE)}
    return subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True)


def _native_capability() -> str:
    clean = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                          env=clean, capture_output=True, text=True, check=True).stdout.strip()


def _honoured(branch: str) -> str:
    """MKL's branch as MKL reports it: a branch other than COMPATIBLE is honoured on Intel processors only."""
    return branch if cpu_description()["vendor"] == "GenuineIntel" else "AUTO"


def test_memlens_starts_torch_on_the_portable_kernels_unless_told_otherwise():
    # Portable: ATen, MKL and oneDNN at AVX2 on a CPU that has it; the scalar kernels elsewhere.
    if "avx2" in cpu_description()["isa"]:
        assert _capability_after_pin({}).stdout.split() == ["AVX2", "AVX2", _honoured("AVX2"), "AVX2"]
    else:
        assert _capability_after_pin({}).stdout.split() == ["DEFAULT", "SSE4_2", _honoured("SSE4_2"), "SSE41"]
    assert (_capability_after_pin({kernels.KERNELS_VARIABLE: "default"}).stdout.split()
            == ["DEFAULT", "SSE4_2", _honoured("SSE4_2"), "SSE41"])
    native = _native_capability()
    assert _capability_after_pin({kernels.KERNELS_VARIABLE: "native"}).stdout.split() == [native, "None", "OFF", "None"]
    # The user's own ATEN_CPU_CAPABILITY names the level, and MKL and oneDNN follow it (a lone ATen pin crashed
    # bf16 attention on AMX processors); a variable the user set is kept.
    assert (_capability_after_pin({"ATEN_CPU_CAPABILITY": "default", kernels.KERNELS_VARIABLE: "native"}
                                  ).stdout.split() == ["DEFAULT", "SSE4_2", _honoured("SSE4_2"), "SSE41"])
    assert (_capability_after_pin({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}).stdout.split()
            == ["DEFAULT", "COMPATIBLE", "COMPATIBLE", "SSE41"])


# /proc/cpuinfo flags of the three processors this machine kind has come with (STACK-NOTES.md), trimmed to the
# vector extensions: an AMD EPYC with AVX2 only, an AMD EPYC with AVX512 (and AVX512-BF16, no AMX), and an Intel
# Xeon with AVX512-BF16, AVX512-FP16 and AMX.
BASE = {"sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}
AVX512 = {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"}
CPUS = {"amd-avx2": BASE, "amd-avx512": BASE | AVX512 | {"avx512_vp2intersect"},
        "intel-amx": BASE | AVX512 | {"avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"}}
# The order of the ISA names each library takes, lowest first (oneDNN's `dnnl_cpu_isa_t` order).
ONEDNN_ORDER = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16",
                "AVX512_CORE_FP16", "AVX512_CORE_AMX")
ATEN_ORDER = ("default", "avx2", "avx512")


def packs_for_amx(environ: dict[str, str], flags: set[str]) -> bool:
    """The crash condition measured on the AMX Xeon: oneDNN free to use AMX (no cap, or a cap at AMX) while ATen runs a
    build below AVX512, whose pack_vnni2 raises."""
    onednn_free = ONEDNN_ORDER.index(environ.get("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")) >= ONEDNN_ORDER.index(
        "AVX512_CORE_AMX")
    aten = environ.get("ATEN_CPU_CAPABILITY", "avx512")
    return "amx_tile" in flags and onednn_free and aten in ("default", "avx2")


@pytest.mark.parametrize("cpu", sorted(CPUS))
@pytest.mark.parametrize("requested", kernels.LEVELS)
def test_every_level_holds_the_three_libraries_together_on_each_processor(cpu, requested):
    flags = CPUS[cpu]
    if requested == "avx512" and "avx512f" not in flags:
        with pytest.raises(UserError, match="MEMLENS_CPU_KERNELS=avx512: this processor lacks avx512f"):
            kernels.pins_for(requested, flags, {})
        return
    pins = kernels.pins_for(requested, flags, {})
    if requested == "native":
        assert pins == {}                                # torch, MKL and oneDNN each pick from the hardware
    else:
        level = "avx2" if requested == "portable" else requested
        assert pins == kernels.LEVEL_PINS[level]
        # oneDNN never runs a path above the level ATen runs at: at AVX2 no VNNI/BF16/AMX, at AVX512 no BF16/AMX
        cap = ONEDNN_ORDER.index(pins["ONEDNN_MAX_CPU_ISA"])
        assert cap <= ONEDNN_ORDER.index({"default": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE"}[level])
    assert not packs_for_amx(pins, flags)
    # and a user's lone ATen pin gets the companions of its level (even one the processor lacks: the user's to
    # choose), so it cannot crash either
    for aten in ATEN_ORDER:
        assert not packs_for_amx({"ATEN_CPU_CAPABILITY": aten, **kernels.pins_for(requested, flags,
                                                                                  {"ATEN_CPU_CAPABILITY": aten})}, flags)


def test_the_crash_condition_is_what_the_old_pin_produced_on_the_amx_xeon():
    # The pin before this module (ATen alone, and MKL) on the Intel Xeon: the condition holds, so the check above
    # can fail; on the AMD processors it does not (no AMX), which is why the crash was never seen there.
    old = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
    assert packs_for_amx(old, CPUS["intel-amx"])
    assert not packs_for_amx(old, CPUS["amd-avx512"]) and not packs_for_amx(old, CPUS["amd-avx2"])


def test_portable_is_the_scalar_level_without_avx2_and_a_level_is_named_in_any_case():
    assert kernels.level_for("portable", {"sse4_2", "avx"}) == "default"
    assert kernels.level_for("portable", {"avx2"}) == "default"          # AVX2 without FMA: torch's AVX2 build needs both
    assert kernels.level_for(" AVX2 ", CPUS["amd-avx2"]) == "avx2"
    assert kernels.level_for("native", CPUS["intel-amx"]) is None


def test_an_unknown_kernel_level_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv(kernels.KERNELS_VARIABLE, "sse9")
    with pytest.raises(UserError, match="MEMLENS_CPU_KERNELS='sse9': use one of portable, default, avx2, avx512, native"):
        kernels.pin_cpu_kernels()


def test_pinning_after_torch_loaded_gives_children_the_parents_kernels(monkeypatch):
    # memlens called from a Python process that had already loaded torch: the pin cannot change this process,
    # so its children (launched trainers, the NMT rerun's parent env) compute as it does.
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("MKL_CBWR", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv(kernels.KERNELS_VARIABLE, raising=False)
    kernels.pin_cpu_kernels()
    assert os.environ["ATEN_CPU_CAPABILITY"] == torch.backends.cpu.get_cpu_capability().lower()


@pytest.mark.parametrize("setting, current, expected", [
    ("auto", "DEFAULT", "avx2"), ("auto", "AVX2", "default"), ("auto", "AVX512", "avx2"),
    ("default", "DEFAULT", "default"), ("avx512", "AVX2", "avx512")])
def test_the_stability_rerun_uses_another_kernel_level(setting, current, expected):
    assert second_kernel_level(setting, current) == expected
