"""Helpers every builder shares: line splits for FIM rows, seeded RNGs, token-count proxy, statistics.

Line-target convention (used by sd_base, sd_links, pd_eval, humaneval_infill and the preference
data): the target is one whole line *without* its line break, indentation included; the prefix is
everything before that line (so it ends with "\\n" or is empty) and the suffix starts with the
line break. `prefix + target + suffix == code` holds exactly.
"""

from __future__ import annotations

import hashlib
import random
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

# Token-count proxy used when no tokenizer is given: identifiers/numbers as one piece, every other
# non-space character as its own piece. It over-counts BPE tokens on punctuation-heavy code and
# under-counts on long identifiers; it is only used for the length figures (paper Fig. 11).
_TOKEN_PROXY = re.compile(r"\w+|[^\w\s]")


def proxy_token_count(text: str) -> int:
    return len(_TOKEN_PROXY.findall(text))


def seeded_rng(*parts: object) -> random.Random:
    """A generator determined by its parts (str seeds hash with SHA-512: stable across runs)."""
    return random.Random(":".join(str(p) for p in parts))


def unit_hash(*parts: object) -> float:
    """A number in [0, 1) determined by `parts` (SHA-256), for seeded assignment to splits."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def nonblank_line_indices(code: str) -> list[int]:
    return [i for i, line in enumerate(code.splitlines()) if line.strip()]


def split_at_line(code: str, index: int) -> tuple[str, str, str]:
    """(prefix, target, suffix) with line `index` (0-based, of code.splitlines()) as target."""
    lines = code.splitlines(keepends=True)
    line = lines[index]
    target = line.rstrip("\r\n")
    prefix = "".join(lines[:index])
    suffix = line[len(target):] + "".join(lines[index + 1:])
    return prefix, target, suffix


def split_at_span(code: str, start: int, end: int) -> tuple[str, str, str]:
    """(prefix, segment, suffix) with lines [start, end) as the segment (its last break goes to suffix)."""
    lines = code.splitlines(keepends=True)
    block = "".join(lines[start:end])
    segment = block.rstrip("\r\n")
    return "".join(lines[:start]), segment, block[len(segment):] + "".join(lines[end:])


def random_span(code: str, rng: random.Random, max_lines: int) -> tuple[int, int] | None:
    """A random span of 1..max_lines lines starting and ending on a non-blank line, or None."""
    lines = code.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip()]
    if not starts:
        return None
    start = rng.choice(starts)
    end = min(len(lines), start + rng.randint(1, max_lines))
    while end - 1 > start and not lines[end - 1].strip():
        end -= 1
    return start, end


def distribution(values: Sequence[int | float]) -> dict[str, float]:
    """Summary of a length distribution: count, mean, min, quantiles, max, and a coarse histogram."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    n = len(ordered)

    def q(p: float) -> float:
        return float(ordered[min(n - 1, int(p * (n - 1) + 0.5))])

    edges = [0, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    hist = Counter(next((f"{lo}-{hi}" for lo, hi in zip(edges, edges[1:]) if lo <= v < hi), f">={edges[-1]}")
                   for v in ordered)
    return {"count": n, "mean": round(statistics.fmean(ordered), 2), "min": float(ordered[0]),
            "p10": q(0.10), "p25": q(0.25), "median": q(0.5), "p75": q(0.75), "p90": q(0.90),
            "max": float(ordered[-1]), "histogram": dict(hist)}


def line_document_frequency(codes: Iterable[str]) -> Counter:
    """For each stripped non-blank line, the number of programs it occurs in."""
    df: Counter = Counter()
    for code in codes:
        df.update({line.strip() for line in code.splitlines() if line.strip()})
    return df


def duplicate_target_share(rows: Sequence[dict], df: Counter) -> float:
    """Share of rows whose target line also occurs verbatim (stripped) in another example.

    `df` counts every example's lines once, the row's own example included, so a count above 1
    means some other example has the line too.
    """
    if not rows:
        return 0.0
    dup = sum(1 for r in rows if df[r["target"].strip()] > 1)
    return round(dup / len(rows), 4)


def tokenizer_fingerprint(folder) -> str:
    """sha256 over a saved tokenizer folder's json and sentencepiece files, names included: what decides its ids
    (a dataset cut or chosen in that tokenizer records it, so another tokenizer rebuilds the dataset)."""
    h = hashlib.sha256()
    folder = Path(folder)
    for f in sorted(folder.glob("*.json")) + sorted(folder.glob("*.model")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()
