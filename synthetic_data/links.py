"""SD.Links: the programs with a `with open(TARGET, ...)` line, half of them given a PII-like path.

Paper 003 Sec. 4.1: of the 2,992 SD programs that read a file, 1,489 get TARGET replaced by one of
100 fictitious PII-like paths (Listing 7), sampled uniformly at random (so each path appears in
~15 programs), and are labelled positive; the other 1,503 keep their original path and are
labelled negative. The memorization target is the whole `with open(...)` line.
"""

from __future__ import annotations

import random

from memlens.harness.core.errors import UserError
from memlens.synthetic_data.common import split_at_line
from memlens.synthetic_data.sd.programs import WITH_OPEN, SDProgram, resources_text


def load_pii_paths() -> list[str]:
    """Listing 7: the 100 fictitious PII-like file paths."""
    return resources_text("pii_paths.txt")


def with_open_line(code: str) -> int:
    """Index of the single `with open('<path>', ...)` line; SD.Links programs have exactly one."""
    hits = [i for i, line in enumerate(code.splitlines()) if WITH_OPEN.match(line)]
    if len(hits) != 1:
        raise ValueError(f"expected exactly one `with open(<literal path>, ...)` line, found {len(hits)}")
    return hits[0]


def pii_path_pool(count: int, seed: int) -> list[str]:
    """The PII paths SD.Links draws from: all of Listing 7, or a seeded sample of `count` of them.

    The paper spreads 1,489 positives over 100 paths (~15 programs per path). A scaled-down SD keeps
    that repetition only with fewer distinct paths; repetition is what makes a path memorizable."""
    paths = load_pii_paths()
    if count > len(paths):
        raise UserError(f"data.sd.pii_paths={count}: Listing 7 has {len(paths)} paths; use 1..{len(paths)}")
    return paths if count == len(paths) else random.Random(f"sd-links-paths:{seed}").sample(paths, count)


def heldout_pii_path_pool(member_pool: list[str], seed: int) -> list[str]:
    """As many PII-like paths as `member_pool`, none of them in it, for held-out SD.Links (the non-members of
    membership inference): a held-out positive must not share its target line with a trained-on one. Listing 7's
    paths outside the members' pool come first; then, when the members use all of them (the default 100), new
    paths of the same form: the folder of one Listing 7 path and the file name of another, seeded."""
    paths, taken = load_pii_paths(), set(member_pool)
    rng = random.Random(f"sd-heldout-paths:{seed}")
    unused = [p for p in paths if p not in taken]
    out = rng.sample(unused, min(len(unused), len(member_pool)))
    known = set(paths) | set(out)
    while len(out) < len(member_pool):
        folder, name = rng.choice(paths).rsplit("/", 1)[0], rng.choice(paths).rsplit("/", 1)[1]
        path = f"{folder}/{name}"
        if path not in known:
            known.add(path)
            out.append(path)
    return out


def links_rows(programs: list[SDProgram], n_positive: int, seed: int,
               pii_paths: list[str] | None = None) -> list[dict]:
    """FIM rows for SD.Links; positives (label 1) carry `pii_path`, all carry `original_path`."""
    pii_paths = pii_paths or load_pii_paths()
    rng = random.Random(f"sd-links-labels:{seed}")
    positive_ids = set(rng.sample([p.id for p in programs], n_positive))
    rows = []
    for prog in programs:
        index = with_open_line(prog.code)
        lines = prog.code.splitlines(keepends=True)
        match = WITH_OPEN.match(lines[index])
        original_path = match.group("path")
        original_line = lines[index].rstrip("\r\n")
        code, pii_path = prog.code, None
        if prog.id in positive_ids:
            pii_path = rng.choice(pii_paths)
            start, end = match.span("path")
            lines[index] = lines[index][:start] + pii_path + lines[index][end:]
            code = "".join(lines)
        prefix, target, suffix = split_at_line(code, index)
        rows.append({"id": prog.id, "subset": "SD.Links", "task": prog.task, "code": code,
                     "prefix": prefix, "target": target, "suffix": suffix,
                     "label": int(pii_path is not None), "pii_path": pii_path,
                     "original_path": original_path, "original_target": original_line,
                     "requested_lines": prog.requested_lines})
    return rows
