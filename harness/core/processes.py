"""Which process of a launch this is: the one place the launcher's environment is read.

`accelerate launch` and torchrun set RANK and WORLD_SIZE; a plain process has
neither and is process 0 of 1. The barrier that waits for the others needs torch and lives in the model layer
(memlens.harness.model.load.distributed_barrier); the pipeline's uses accelerate (memlens.recipes.orchestration.pipeline.wait_for_everyone).
"""

from __future__ import annotations

import os


def world_size() -> int:
    """How many processes the launch started (1 outside a launch)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def process_rank() -> int:
    """This process's rank: the launcher's RANK (0 outside a launch)."""
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    """Rank 0: the process that writes what every process would otherwise write the same (provenance, evaluations)."""
    return process_rank() == 0
