"""The report as typed blocks, and the two writers that lay a list of them out: report.md and a self-contained
report.html (figures embedded as base64). The sections (harness/report/sections.py, render.py) return blocks;
both files are written from the same list, so they always say the same thing.
"""

from __future__ import annotations

import base64
import html
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


# ---------------------------------------------------------------- document blocks
@dataclass(frozen=True)
class Heading:
    """A heading; level 2 is a section of the report (listed by Contents, anchored in report.html)."""
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    """Column labels (as the reader sees them) and rows of already formatted cells: build one with `table`."""
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Image:
    """A figure (a PNG under the report's directory) with its caption, which is also its alt text. `path` None: the
    figure was not drawn (report.figures=false), and the block renders as nothing."""
    path: Path | None
    alt: str


@dataclass(frozen=True)
class Contents:
    """The list of the document's sections (its level-2 headings)."""


@dataclass(frozen=True)
class Details:
    """A group a reader opens when they need it (HTML <details>; in report.md a level-3 heading)."""
    summary: str
    blocks: tuple[Block, ...]


Block = Heading | Paragraph | Table | Image | Contents | Details


# Column keys stay the keys of summary.json; a table shows them as words (COLUMN_LABELS, else the key with spaces).
COLUMN_LABELS = {
    "n_total": "examples", "n_excluded": "excluded", "excluded_by_reason": "excluded by reason", "n_scored": "scored",
    "n_memorized": "memorized", "rate": "rate", "ci95": "95 % CI", "pii_regurgitation_rate": "PII regurgitated",
    "control_pii_regurgitation_rate": "PII by control", "pii_counterfactual_rate": "PII counterfactual",
    "pii_counterfactual_ci95": "PII counterfactual 95 % CI", "pii_chance_level": "PII chance level",
    "ours": "this run", "claim": "finding", "p_value": "p", "why": "why (when not holds)",
    "evidence_ok": "evidence passed", "memorized_by_source": "memorized by source",
    "still_memorized": "still memorized", "auc": "AUC", "reward_model": "reward model", "attack_label": "attack",
    "auc_vs_loss": "AUC vs LOSS", "auc_vs_loss_ci95": "AUC vs LOSS 95 % CI", "tpr_at_fpr<1%_cp95": "TPR<1% exact 95 % CI",
    "auc_vs_blind": "AUC vs blind", "auc_vs_blind_ci95": "AUC vs blind 95 % CI", "degenerate_why": "why degenerate",
}


def _label(column: str) -> str:
    return COLUMN_LABELS.get(column, column.replace("_", " "))


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):                   # counts by key (e.g. exclusions by reason): the non-zero ones
        return ", ".join(f"{k}={_cell(x)}" for k, x in v.items() if x != 0) or "–"
    if isinstance(v, (list, tuple)):          # an interval: [low, high]
        return "[" + ", ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in v) + "]"
    return str(v)


def table(rows: list[dict], columns: list[str]) -> Table:
    """The given columns (summary.json keys) of dict rows as a Table: labelled headers, formatted cells."""
    return Table(tuple(_label(c) for c in columns), tuple(tuple(_cell(r.get(c)) for c in columns) for r in rows))


def contents(blocks: Sequence[Block]) -> list[str]:
    """The level-2 headings, in order: the report's contents."""
    return [b.text for b in blocks if isinstance(b, Heading) and b.level == 2]


# ---------------------------------------------------------------- report.md
def _md(text: str) -> str:
    """Text for report.md: names come from model and dataset directories and config values, so markup in
    them is shown, never rendered (as report.html escapes it): HTML's special characters as entities, the
    characters of Markdown links and table cells (and the backslash) backslash-escaped, line breaks as spaces."""
    text = html.escape(str(text), quote=False)
    text = re.sub(r"([\\\[\]|])", r"\\\1", text)
    return re.sub(r"[\r\n]+", " ", text)


def to_markdown(blocks: Sequence[Block], out_dir: Path) -> str:
    """report.md: figures linked relative to out_dir (the report's directory)."""
    lines: list[str] = []
    for block in blocks:
        match block:
            case Heading(level, text):
                lines += ["#" * level + " " + _md(text), ""]
            case Paragraph(text):
                lines += [_md(text), ""]
            case Table(columns, rows):
                lines += ["| " + " | ".join(_md(c) for c in columns) + " |", "|" + "---|" * len(columns)]
                lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
                lines.append("")
            case Image(None, _):
                pass
            case Image(path, alt):
                link = urllib.parse.quote(Path(path).relative_to(out_dir).as_posix())
                lines += [f"![{_md(alt)}]({link})", ""]
            case Contents():
                lines += [f"- {_md(text)}" for text in contents(blocks)] + [""]
            case Details(summary, inner):
                lines += [f"### {_md(summary)}", "", to_markdown(inner, out_dir)]
            case _:
                raise TypeError(f"not a report block: {block!r}")
    return "\n".join(lines)


# ---------------------------------------------------------------- report.html
def _anchor(text: str) -> str:
    return "s-" + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# Tables fit the page (1400 px and narrower): cells wrap anywhere, a wide table gets its own scroll box rather
# than widening the page; long evidence strings wrap in their cell (benchmarks/report_screenshots.py checks it).
_STYLE = ("body{font-family:sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;line-height:1.35}"
          "table{border-collapse:collapse;font-size:13px;margin:.5em 0 1em}"
          "td,th{border:1px solid #bbb;padding:3px 6px;vertical-align:top;overflow-wrap:anywhere}"
          "th{background:#eee;text-align:left;overflow-wrap:normal}td.short{white-space:nowrap}"
          ".tablebox{max-width:100%;overflow-x:auto}"
          "td.status-holds{background:#dff0d8}td.status-inconclusive,td.status-inconclusive-unstable{background:#fcf8e3}"
          "td.status-not-reproduced{background:#f2dede}"
          "details{margin:.4em 0;border:1px solid #ddd;padding:.3em .6em}summary{cursor:pointer;font-weight:bold}"
          "img{max-width:100%}nav ol{columns:2}")


SHORT_CELL = 16          # characters: "not reproduced", "[0.492, 0.77]", "checkpoint-450"


def _html_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    status = columns.index("status") if "status" in columns else None
    parts = ["<div class='tablebox'><table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>"]
    for row in rows:
        # A short value (a status, a number, an interval) stays on one line; long text wraps.
        cells = [f"<td class='short status-{_anchor(c)[2:]}'>" if i == status else
                 "<td class='short'>" if len(c) <= SHORT_CELL else "<td>" for i, c in enumerate(row)]
        parts.append("<tr>" + "".join(f"{td}{html.escape(c)}</td>" for td, c in zip(cells, row)) + "</tr>")
    parts.append("</table></div>")
    return parts


def _html_blocks(blocks: Sequence[Block], all_blocks: Sequence[Block]) -> list[str]:
    """The HTML of `blocks`; Contents lists the sections of `all_blocks` (the whole document)."""
    parts = []
    for block in blocks:
        match block:
            case Heading(level, text):
                anchor = f" id='{_anchor(text)}'" if level == 2 else ""
                parts.append(f"<h{level}{anchor}>{html.escape(text)}</h{level}>")
            case Paragraph(text):
                parts.append(f"<p>{html.escape(text)}</p>")
            case Table(columns, rows):
                parts += _html_table(columns, rows)
            case Image(None, _):
                pass
            case Image(path, alt):
                data = base64.b64encode(Path(path).read_bytes()).decode()
                parts.append(f"<figure><img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"
                             f"<figcaption>{html.escape(alt)}</figcaption></figure>")
            case Contents():
                items = "".join(f"<li><a href='#{_anchor(t)}'>{html.escape(t)}</a></li>" for t in contents(all_blocks))
                parts.append(f"<nav><strong>Contents</strong><ol>{items}</ol></nav>")
            case Details(summary, inner):
                parts.append(f"<details><summary>{html.escape(summary)}</summary>")
                parts += _html_blocks(inner, all_blocks)
                parts.append("</details>")
            case _:
                raise TypeError(f"not a report block: {block!r}")
    return parts


def to_html(blocks: Sequence[Block], title: str) -> str:
    """report.html: one self-contained page, figures embedded."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_STYLE}</style></head><body>"]
    parts += _html_blocks(blocks, blocks)
    parts.append("</body></html>")
    return "\n".join(parts)
