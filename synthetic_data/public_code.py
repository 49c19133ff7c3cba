"""PD: a public-code corpus cut into examples and split per pipeline stage, disjointly by source file.

Paper 003 App. A.1 scraped 525k permissively licensed Python examples and split them into PD.1
(SFT), PD.2 (reward model, + validation) and PD.3 (RL prompts, + validation); the base model was
pre-trained on other public code. Our default corpus is the running interpreter's standard library
(always present, permissively licensed, no download); any directory of .py files or a local
`datasets` dataset can replace it. Splits: pd_pt (pre-training the embedded base model), pd_1,
pd_2 + pd_2_val, pd_3 + pd_3_val, pd_eval (held out; FIM rows with one random line as target).

Splitting by source file (not by chunk) keeps near-duplicate code of one file out of two splits,
so held-out rows are really held out.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.synthetic_data.common import nonblank_line_indices, seeded_rng, split_at_line, unit_hash

SPLITS = ("pd_pt", "pd_1", "pd_2", "pd_2_val", "pd_3", "pd_3_val", "pd_eval")
# Which source files an experiment may use (data.pd.use_files): every file, only the shipped base model's
# pre-training pool, or only the files outside it (every experiment that starts from the shipped base).
USE_FILES = ("all", "base_pool", "outside_base_pool")


@dataclass
class Corpus:
    """Source files as (name, text) plus what was skipped and why."""

    files: list[tuple[str, str]]
    skipped: list[dict] = field(default_factory=list)
    description: str = ""


def default_source_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _matches(rel: str, patterns) -> bool:
    # fnmatch's "*" also crosses "/", so "test/*" excludes the whole test/ tree.
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def in_base_pool(name: str, share: float) -> bool:
    """Whether a source file belongs to the shipped base model's pre-training pool.

    The hash ignores the seed on purpose: one shipped base serves every seed, so no seed of an
    experiment that starts from it may fine-tune, reward or audit on a file the base was trained on.
    """
    return unit_hash("pd-base-pool", name) < share


def select_files(names: list[str], use_files: str, base_pool_share: float) -> list[str]:
    """The names an experiment may use under data.pd.use_files (see USE_FILES)."""
    if use_files == "all":
        return list(names)
    want_pool = use_files == "base_pool"
    return [n for n in names if in_base_pool(n, base_pool_share) == want_pool]


def list_source_files(root: Path, include, exclude, max_files: int | None, seed: int, use_files: str = "all",
                      base_pool_share: float = 0.0) -> list[str]:
    """Relative POSIX paths under `root` matching include and not exclude, restricted to `use_files`;
    a seeded sample if capped."""
    if not root.is_dir() or not os.access(root, os.R_OK | os.X_OK):
        raise UserError(f"data.pd.source_dir: {root} is not a readable directory; point it at a folder "
                        "of .py files or set it to null for the Python standard library")
    rels = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Prune excluded folders (e.g. site-packages) instead of walking them: "<dir>/" matches
        # "test/*" because "*" also matches the empty string.
        base = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not _matches(
            f"{d}/" if base == "." else f"{base}/{d}/", exclude))
        for name in sorted(filenames):
            rel = Path(dirpath, name).relative_to(root).as_posix()
            if _matches(rel, include) and not _matches(rel, exclude):
                rels.append(rel)
    rels = select_files(rels, use_files, base_pool_share)
    if max_files is not None and len(rels) > max_files:
        # A seeded sample rather than the first N, which would be alphabetically biased.
        rels = sorted(sorted(rels, key=lambda r: unit_hash("pd-sample", seed, r))[:max_files])
    return rels


def corpus_fingerprint(root: Path, rels: list[str]) -> str:
    """Identity of the corpus (names and sizes) for the rebuild check."""
    h = hashlib.sha256()
    for rel in rels:
        h.update(f"{rel}\0{(root / rel).stat().st_size}\n".encode())
    return h.hexdigest()


def load_directory(root: Path, rels: list[str]) -> Corpus:
    files, skipped = [], []
    for rel in rels:
        try:
            files.append((rel, (root / rel).read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError) as e:
            skipped.append({"file": rel, "reason": type(e).__name__})
    return Corpus(files, skipped, f"directory {root}")


def load_hf_dataset(path: str, text_field: str, source_field: str | None, max_files: int | None,
                    seed: int, use_files: str = "all", base_pool_share: float = 0.0) -> Corpus:
    """A local `datasets` dataset: a save_to_disk folder, or local json/jsonl/parquet/csv files."""
    import datasets  # datasets (~0.7 s): a data.pd.hf_dataset source only

    p = Path(path)
    if not p.exists():
        raise UserError(f"data.pd.hf_dataset: {path} does not exist (a local save_to_disk folder or data "
                        "file; memlens never downloads from the hub)")
    try:
        if p.is_dir() and ((p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists()):
            ds = datasets.load_from_disk(str(p))
        else:
            suffix = p.suffix.lstrip(".") if p.is_file() else "json"
            builder = {"jsonl": "json", "json": "json", "parquet": "parquet", "csv": "csv"}.get(suffix, suffix)
            files = str(p) if p.is_file() else [str(f) for f in sorted(p.glob("*.json*"))]
            ds = datasets.load_dataset(builder, data_files=files)
    except Exception as e:  # datasets raises many types for a bad folder
        raise UserError(f"data.pd.hf_dataset: cannot load {path}: {e}") from None
    if isinstance(ds, datasets.DatasetDict):
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    if text_field not in ds.column_names:
        raise UserError(f"data.pd.text_field: column {text_field!r} not in {path} (columns: "
                        f"{', '.join(ds.column_names)})")
    if source_field is not None and source_field not in ds.column_names:
        raise UserError(f"data.pd.source_field: column {source_field!r} not in {path}")
    names = [str(ds[i][source_field]) if source_field else f"row-{i:07d}" for i in range(len(ds))]
    texts = ds[text_field]
    files, skipped = [], []
    allowed = set(select_files(names, use_files, base_pool_share))
    order = [i for i in range(len(ds)) if names[i] in allowed]
    if max_files is not None and len(order) > max_files:
        order = sorted(sorted(order, key=lambda i: unit_hash("pd-sample", seed, names[i]))[:max_files])
    for i in order:
        if isinstance(texts[i], str):
            files.append((names[i], texts[i]))
        else:
            skipped.append({"file": names[i], "reason": f"{text_field} is not a string"})
    return Corpus(files, skipped, f"datasets {path}")


# ----------------------------------------------------------------------------- chunking
def _hard_cut(text: str, max_chars: int) -> list[str]:
    return [text[i:i + max_chars] for i in range(0, len(text), max_chars)]


def _cap(lines: list[str], max_chars: int) -> list[str]:
    """Pack whole lines into chunks of at most max_chars (an overlong single line is cut)."""
    chunks, current, size = [], [], 0
    for line in lines:
        if len(line) > max_chars:
            if current:
                chunks.append("".join(current))
                current, size = [], 0
            chunks.extend(_hard_cut(line, max_chars))
            continue
        if size + len(line) > max_chars and current:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        chunks.append("".join(current))
    return chunks


def top_level_boundaries(tree: ast.Module, lines: list[str]) -> list[int]:
    """0-based first lines of top-level functions/classes (with decorators and the comment above)."""
    starts = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
            starts.append(start)
    return starts


def chunk_source(text: str, max_chars: int, min_chars: int, window_lines: int) -> list[str]:
    """Top-level def/class chunks (the module's other statements form chunks between them); files
    that do not parse fall back to windows of `window_lines` lines; every chunk <= max_chars."""
    lines = text.splitlines(keepends=True)
    try:
        tree = ast.parse(text)
        cuts = sorted({0, *top_level_boundaries(tree, lines), len(lines)})
        segments = [lines[a:b] for a, b in zip(cuts, cuts[1:])]
    except (SyntaxError, ValueError):
        segments = [lines[i:i + window_lines] for i in range(0, len(lines), window_lines)]
    chunks = []
    for seg in segments:
        for chunk in _cap(seg, max_chars):
            chunk = chunk.strip("\n") + "\n"
            if len(chunk.strip()) >= min_chars:
                chunks.append(chunk)
    return chunks


# ----------------------------------------------------------------------------- splits
def assign_split(source_file: str, proportions: dict[str, float], seed: int) -> str:
    """The split of a source file: a seeded hash of its name against cumulative proportions."""
    u, acc = unit_hash("pd-split", seed, source_file), 0.0
    for name in SPLITS:
        acc += proportions[name]
        if u < acc:
            return name
    return next(name for name in reversed(SPLITS) if proportions[name] > 0)


@dataclass
class PDResult:
    splits: dict[str, list[dict]]          # code rows per split (pd_eval as code rows too)
    stats: dict


def build_pd(corpus: Corpus, proportions: dict[str, float], seed: int, max_chars: int, min_chars: int,
             window_lines: int) -> PDResult:
    """Chunk, deduplicate by content hash (first occurrence wins), split by source file."""
    seen: set[str] = set()
    splits: dict[str, list[dict]] = {name: [] for name in SPLITS}
    n_chunks = n_dupes = 0
    files_per_split = {name: 0 for name in SPLITS}
    for source_file, text in corpus.files:
        split = assign_split(source_file, proportions, seed)
        kept = 0
        for chunk in chunk_source(text, max_chars, min_chars, window_lines):
            n_chunks += 1
            digest = hashlib.sha256(chunk.encode()).hexdigest()
            if digest in seen:
                n_dupes += 1
                continue
            seen.add(digest)
            rows = splits[split]
            rows.append({"id": f"{split}-{len(rows):06d}", "text": chunk, "source_file": source_file})
            kept += 1
        files_per_split[split] += bool(kept)
    stats = {"corpus": corpus.description, "files": len(corpus.files), "skipped_files": corpus.skipped,
             "chunks": n_chunks, "duplicate_chunks_dropped": n_dupes, "files_per_split": files_per_split,
             "rows_per_split": {k: len(v) for k, v in splits.items()}}
    return PDResult(splits, stats)


def eval_rows(code_rows: list[dict], seed: int) -> list[dict]:
    """pd_eval as FIM rows: a random non-blank line of each chunk is the target."""
    rows = []
    for row in code_rows:
        rng = seeded_rng("pd-eval-target", seed, row["id"])
        prefix, target, suffix = split_at_line(row["text"], rng.choice(nonblank_line_indices(row["text"])))
        rows.append({"id": row["id"], "prefix": prefix, "target": target, "suffix": suffix,
                     "source_file": row["source_file"]})
    return rows
