"""Which CPU kernels compute every float memlens produces, pinned before anything loads torch.

Three libraries inside torch pick their code paths from the processor, each on its own:
- ATen (torch's own kernels) reads ATEN_CPU_CAPABILITY once, at its first dispatch;
- MKL (BLAS: the fp32 matrix products) reads MKL_CBWR, its Conditional Numerical Reproducibility branch;
- oneDNN (bf16 matrix products, and the brgemm micro-kernels of the CPU flash attention) reads ONEDNN_MAX_CPU_ISA.
A pin of one alone is not a pin, and can break an op: with ATen held to AVX2 and oneDNN left to the hardware, an Intel
Xeon with AMX packs bf16 attention blocks for AMX through an ATen routine (pack_vnni2) that its AVX2 build lacks, so
bf16 SDPA's backward raises at sequence length >= 64 (measured on that Xeon; the same with ONEDNN_MAX_CPU_ISA=AVX2
passes). So a level names one instruction-set level for all three.

What each library does with its variable is not the same on every processor. MKL honours a branch other than
COMPATIBLE only on Intel processors: on an AMD EPYC it reports `MKL_CBWR=AVX2` as AUTO (measured through
mkl_cbwr_get) and keeps choosing its path per processor, so MKL's bits differ across vendors whatever is set, short
of COMPATIBLE (2x slower matrix products here). `effective_kernels` records what each library is actually doing,
and docs/methods.md ("What reproduces where") says what that makes identical across machines and what not.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Iterable, MutableMapping
from pathlib import Path

from memlens.harness.core.errors import UserError

KERNELS_VARIABLE = "MEMLENS_CPU_KERNELS"
ATEN, MKL, ONEDNN = "ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"
PINNED_VARIABLES = (ATEN, MKL, ONEDNN)

# level -> the variables that hold every library to it. `default` is torch's scalar (compiler-vectorised) kernels,
# with MKL and oneDNN held to SSE4 (the oldest path both keep); `avx512` keeps oneDNN off the bf16/VNNI/AMX paths
# (AVX512_CORE), so an AVX512 machine with and one without AMX run the same oneDNN code.
LEVEL_PINS: dict[str, dict[str, str]] = {
    "default": {ATEN: "default", MKL: "SSE4_2", ONEDNN: "SSE41"},
    "avx2": {ATEN: "avx2", MKL: "AVX2", ONEDNN: "AVX2"},
    "avx512": {ATEN: "avx512", MKL: "AVX512", ONEDNN: "AVX512_CORE"},
}
# `portable` (the default) is the highest level every x86-64 machine of the last decade has; `native` pins nothing.
LEVELS = ("portable", "default", "avx2", "avx512", "native")
# The /proc/cpuinfo flags a level needs: on a processor without them torch would silently drop to a lower level.
LEVEL_NEEDS = {"default": (), "avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq")}


def level_for(requested: str, flags: Iterable[str]) -> str | None:
    """The level MEMLENS_CPU_KERNELS=`requested` pins on a processor with these cpuinfo `flags` (None: `native`).
    `portable` is AVX2 where the processor has it, the scalar kernels elsewhere."""
    requested = requested.strip().lower()
    if requested not in LEVELS:
        raise UserError(f"{KERNELS_VARIABLE}={requested!r}: use one of {', '.join(LEVELS)} "
                        f"(portable, the default: AVX2 for torch, MKL and oneDNN where the processor has it)")
    if requested == "native":
        return None
    if requested == "portable":
        return "avx2" if set(LEVEL_NEEDS["avx2"]) <= set(flags) else "default"
    return requested


def pins_for(requested: str, flags: Iterable[str], environ: dict[str, str]) -> dict[str, str]:
    """The variables to add to `environ` for MEMLENS_CPU_KERNELS=`requested`: all three libraries at one level.
    A variable the user set is kept; an ATEN_CPU_CAPABILITY of the user's names the level the other two follow
    (a lone ATen pin is what crashed bf16 attention on AMX processors)."""
    user_level = environ.get(ATEN, "").strip().lower()
    level = user_level if user_level in LEVEL_PINS else level_for(requested, flags)
    if level is None:
        return {}
    flags = set(flags)
    missing = [flag for flag in LEVEL_NEEDS[level] if flags and flag not in flags]
    if missing and level != user_level:
        # torch would quietly compute at a lower level while the record said this one
        raise UserError(f"{KERNELS_VARIABLE}={requested.strip().lower()}: this processor lacks {', '.join(missing)}; "
                        "use portable (the default) or a level it has")
    return {name: value for name, value in LEVEL_PINS[level].items() if name not in environ}


@functools.cache   # the processor does not change while a process runs
def cpuinfo() -> dict[str, str]:
    """/proc/cpuinfo as {key: the first processor's value} ({} where there is none): the one reader of that file."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags() -> set[str]:
    """The processor's feature flags as /proc/cpuinfo lists them (`Features` on ARM; empty where there is none)."""
    info = cpuinfo()
    return set((info.get("flags") or info.get("Features") or "").split())


def pin_cpu_kernels(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the kernel variables for MEMLENS_CPU_KERNELS in `environ` (os.environ: child processes — launched
    trainers, SLURM jobs, sandboxes, the NMT stability rerun — inherit them); what was added. Called before
    anything loads torch. In a process that had loaded torch already (memlens called from a user's Python),
    nothing can change its kernels: its children get its ATen level, and the rest as it has them."""
    environ = os.environ if environ is None else environ
    requested = environ.get(KERNELS_VARIABLE, "portable")
    level_for(requested, ())                             # an unknown level is refused wherever it is read
    torch = sys.modules.get("torch")
    if torch is not None:
        added = {} if ATEN in environ else {ATEN: torch.backends.cpu.get_cpu_capability().lower()}
    else:
        added = pins_for(requested, cpu_flags(), dict(environ))
    environ.update(added)
    return added


def level_environment(level: str, environ: dict[str, str]) -> dict[str, str]:
    """`environ` with every library held to `level` (a child that must compute at another level than this
    process, such as the NMT stability rerun): the three variables replaced, whatever was set."""
    return {**environ, **LEVEL_PINS[level]}


# mkl_service.h's MKL_CBWR_* branch codes, as mkl_cbwr_get(MKL_CBWR_BRANCH) returns them.
MKL_BRANCHES = {1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
                10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}


def mkl_branch() -> str | None:
    """The CNR branch MKL is using in this process ('AVX2', 'AUTO': the request was not honoured, ...), read from
    the MKL inside torch; None where torch is not loaded or carries no MKL."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get          # MKL's own mkl_cbwr_get, under the name torch's static MKL exports
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    code = get(1)                            # MKL_CBWR_BRANCH
    return MKL_BRANCHES.get(code & 0xFFFF, str(code)) + (",STRICT" if code & 0x10000 else "")


def effective_kernels() -> dict[str, str | None] | None:
    """What each library computes with in this process (None where torch was never loaded): ATen's level as torch
    reports it, MKL's branch as MKL reports it, and oneDNN's ISA cap (oneDNN exposes no query: the variable it
    read, or None for the hardware's own)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return {"aten": torch.backends.cpu.get_cpu_capability(), "mkl_branch": mkl_branch(),
            "onednn_max_isa": os.environ.get(ONEDNN)}
