"""Every time or cost figure README.md states names its record (issue: the quickstart's time read 10–25 min, 13:27,
"within 15 minutes" and ~20 min in four places, none of them tied to a run). A paragraph or table row that gives a
duration links the file that records it: docs/results.md, benchmarks/README.md or a file in benchmarks/results/.
Generated tables (between BEGIN/END generated marks) and code blocks are left out: a command regenerates the first,
and the second states no figure."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RECORDS = ("docs/results.md", "benchmarks/README.md", "benchmarks/results/")
# A duration: "16 min 16 s", "~5 min", "27 minutes", "+64 s", "1.5 h", "9-minute".
DURATION = re.compile(r"(?<![\w.])[~+]?\d+(?:[.,]\d+)?(?:\s?(?:min|minutes?|hours?|h)\b|-minute\b|\s?s\b(?![-\w]))")


def blocks(text: str) -> list[str]:
    """Paragraphs and table rows of `text`, without code blocks and generated tables."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!-- BEGIN generated.*?<!-- END generated -->", "", text, flags=re.S)
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        rows = paragraph.splitlines()
        out += rows if rows and rows[0].startswith("|") else [paragraph]
    return out


def unrecorded(text: str) -> list[str]:
    return [block for block in blocks(text) if DURATION.search(block) and not any(r in block for r in RECORDS)]


def test_every_readme_duration_links_its_record():
    missing = unrecorded(README)
    assert not missing, "a README figure without its record:\n\n" + "\n\n".join(m[:300] for m in missing)


def test_the_check_finds_a_figure_without_a_record():
    assert unrecorded("The quickstart takes ~20 min on 2 cores.\n\nIt runs `memlens run`.")
    assert unrecorded("| `findings` | F1–F8 (~35 min) |")
    assert not unrecorded("It took 16 min 16 s ([record](benchmarks/README.md#quickstart-wall-time)).")
    assert not unrecorded("Five models at 64 steps; α 0.005 and 3 seeds.")     # counts, not durations
