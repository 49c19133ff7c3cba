"""Which process of a launch this is: the one place the launcher's environment is read; and a child that ends with
its parent.

`accelerate launch` and torchrun set RANK and WORLD_SIZE; a plain process has
neither and is process 0 of 1. The barrier that waits for the others needs torch and lives in the model layer
(memlens.harness.model.load.distributed_barrier); the pipeline's uses accelerate (memlens.recipes.orchestration.pipeline.wait_for_everyone).
"""

from __future__ import annotations

import ctypes
import os
import signal


def world_size() -> int:
    """How many processes the launch started (1 outside a launch)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def process_rank() -> int:
    """This process's rank: the launcher's RANK (0 outside a launch)."""
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """Rank 0: the process that writes what every process would otherwise write the same (provenance, evaluations)."""
    return process_rank() == 0


def end_with_parent(parent_pid: int) -> None:
    """Called first in a child that must not outlive the process that started it (the NMT stability rerun, which
    writes into a folder the next command resumes): the kernel sends it SIGTERM when its parent dies (Linux's
    PR_SET_PDEATHSIG), and a parent that died before that ends it at once. Where there is no prctl, a no-op."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(1, signal.SIGTERM)                 # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:           # orphaned before the line above: no signal would come
        os.kill(os.getpid(), signal.SIGTERM)
