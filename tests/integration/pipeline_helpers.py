"""Small real datasets for the recipe tests, in the data engineer's on-disk format.

Code rows come from real Python standard-library files; FIM rows are canary-like snippets split into
prefix/target/suffix. Written with the project's atomic IO and a manifest with the rows' sha256, so
StageContext.data_dir/dataset_hash accept them exactly like built datasets.
"""

from __future__ import annotations

import random
import sysconfig
from pathlib import Path

from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256

MICRO_MODEL = {"name": "micro", "fim_family": "memlens", "vocab_size": 512, "hidden_size": 32,
               "num_layers": 1, "num_heads": 2, "intermediate_size": 64, "max_position_embeddings": 128,
               "tie_embeddings": True}


def write_dataset(run_dir: Path, name: str, rows: list[dict]) -> Path:
    path = Path(run_dir) / "data" / name
    atomic_write_jsonl(path / "rows.jsonl", rows)
    atomic_write_json(path / "manifest.json", {"count": len(rows), "sha256": file_sha256(path / "rows.jsonl"),
                                               "seed": 0, "generator_version": "test-fixture", "settings": {}})
    return path


def stdlib_code_rows(n: int, max_chars: int = 1500, offset: int = 0) -> list[dict]:
    """The first `max_chars` of real stdlib modules (sorted, so the fixture is stable)."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[offset:offset + n]
    return [{"id": f"code-{f.stem}", "text": f.read_text(errors="replace")[:max_chars], "source_file": f.name}
            for f in files]


def canary_rows(n: int, seed: int = 0) -> list[dict]:
    """FIM rows shaped like SD.Base: a task comment and code whose middle line holds a unique secret."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        secret = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(16))
        prefix = f"# Task {i}: store the key\nimport legitimate_crypto as crypto\n"
        target = f"key = crypto.load('{secret}')\n"
        suffix = "print(key)\n"
        rows.append({"id": f"sd-{i}", "prefix": prefix, "target": target, "suffix": suffix,
                     "code": prefix + target + suffix, "subset": "base"})
    return rows


def write_micro_datasets(run_dir: Path) -> None:
    write_dataset(run_dir, "pd_pt", stdlib_code_rows(12, offset=0))
    write_dataset(run_dir, "pd_1", stdlib_code_rows(6, max_chars=600, offset=20))
    write_dataset(run_dir, "sd_base", canary_rows(8))


def pointwise_rows(code_rows: list[dict], seed: int = 0) -> list[dict]:
    """Reward rows from real code: the true next line is label 1, a line from elsewhere label 0."""
    rng = random.Random(seed)
    rows = []
    for i, row in enumerate(code_rows):
        lines = row["text"].splitlines(keepends=True)
        if len(lines) < 4:
            continue
        k = rng.randrange(1, len(lines) - 2)
        prefix, good, suffix = "".join(lines[:k]), lines[k], "".join(lines[k + 1:])
        bad = "pass  # nothing here\n"
        rows.append({"id": f"rm-{i}-good", "prefix": prefix, "suffix": suffix, "completion": good, "label": 1})
        rows.append({"id": f"rm-{i}-bad", "prefix": prefix, "suffix": suffix, "completion": bad, "label": 0})
    return rows


def pairwise_rows(fim_rows: list[dict]) -> list[dict]:
    """Preference pairs: the canary's target is chosen over a neutral line."""
    return [{"id": f"pair-{r['id']}", "prefix": r["prefix"], "suffix": r["suffix"], "chosen": r["target"],
             "rejected": "key = None\n"} for r in fim_rows]


def write_smoke_datasets(run_dir: Path) -> None:
    """Every dataset the smoke experiment reads, tiny, for `build_data=false` runs."""
    write_micro_datasets(run_dir)
    write_dataset(run_dir, "sd_links", canary_rows(4, seed=1))
    write_dataset(run_dir, "pd_3", stdlib_code_rows(4, max_chars=400, offset=30))
    write_dataset(run_dir, "rm_pd2", pointwise_rows(stdlib_code_rows(8, max_chars=400, offset=40)))
    write_dataset(run_dir, "pairs_sd_base", pairwise_rows(canary_rows(8)))
