"""A whole-run audit across processes: under `accelerate launch --config_file launch/cpu_2proc.yaml -m memlens audit
experiment=...` (or any launcher that sets RANK/WORLD_SIZE, e.g. torchrun or multi_gpu.yaml) each process audits every
N-th example into its own shard directory (rows and completion caches), then process 0 merges the shards into the run's
audit directory (keyed by example id: nothing duplicated). The rows are the same as a single-process run's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from memlens.harness.audit.run import META_SUFFIX
from memlens.harness.core.io import RowStore, atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from memlens.harness.core.processes import process_rank, world_size


def distributed() -> tuple[int, int]:
    return process_rank(), world_size()


def shard_examples(examples: Path, shard_dir: Path, rank: int, world: int) -> Path:
    """Every world-th example from `rank` on, written to the shard's own examples file."""
    path = shard_dir / "examples" / examples.parent.name / "rows.jsonl"
    if not path.exists():
        atomic_write_jsonl(path, read_jsonl(examples)[rank::world])
    return path


def merge_shards(shards_root: Path, out_dir: Path) -> None:
    """Fold every shard's rows into the run's audit dir (keyed by id: a rerun merges nothing twice).

    Shard completion caches stay under shards/rank-*/cache: their fingerprints cover the shard's own
    example file, so a rerun with the same number of processes regenerates nothing."""
    for shard in sorted(shards_root.glob("rank-*")):
        shard_audit = shard / "audit"
        for meta in sorted(shard_audit.rglob(f"*{META_SUFFIX}")):
            rel = meta.relative_to(shard_audit)
            rows_file = meta.with_name(meta.name[:-len(META_SUFFIX)] + ".jsonl")
            merged_meta = out_dir / rel
            if not merged_meta.exists():
                m = read_json(meta)
                m["examples_sha256"] = None  # each shard saw part of the set; the merged rows cover all of it
                m["merged_from_processes"] = True
                atomic_write_json(merged_meta, m)
            RowStore(out_dir / rel.parent / rows_file.name).append(RowStore(rows_file).rows())
        shutil.rmtree(shard_audit, ignore_errors=True)
