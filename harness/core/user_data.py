"""A user's own canaries and preference pairs: the one reader and validator of their JSONL rows.

Used by the data builder (`data.canaries.file`, `data.preference.file`: synthetic_data/user_data.py) and by
the audit (`audit.examples=`, harness/audit/run.py load_examples), so a file that one accepts the other reads the
same way. Every refusal is a UserError naming `file:line`, the field and the fix.

Canary rows, one JSON object per line, in either form:
    {"id": ..., "text": "<a program or document>", "target": "<the secret span in it>"}
    {"id": ..., "prefix": "...", "target": "...", "suffix": "..."}          (suffix may be left out)
The text form is split at the target's one occurrence: prefix = what precedes it, suffix = what follows,
so the audit prompts with the document around the secret (paper 003 Sec. 4.2, FIM in PSM order).
Optional, on either form:
    "repeat": copies of the row in every training set it is planted in (default 1) -- the exposure axis of
              the secret-sharer line of work (Carlini et al. 2019); the audit scores each canary once;
    "group":  a label the report breaks rates down by (e.g. "api_key", "email").
Any other field is kept as metadata and rides along into the audit rows.

Preference rows: {"id", "prefix", "suffix", "chosen", "rejected"} (+ repeat, group): the chosen completion is
audited (as the target of its prefix/suffix), the pair trains IPO/DPO, chosen = 1 / rejected = 0 a pointwise
reward model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import iter_jsonl_numbered

MAX_REPEAT = 10_000            # copies of one row in a training set; more is a typo, not an experiment
# The dose a held-out canary would have had, had its coin come up 1 (data.sd.doses with data.sd.membership=coins:
# the tier is dealt over the pool before the coins, so that a one-run ε bound per dose compares canaries the coins
# alone split; harness/audit/epsilon.py). A member carries the same tier as its `repeat`.
DOSE_IF_MEMBER = "dose_if_member"
PAIR_FIELDS = ("id", "prefix", "suffix", "chosen", "rejected")
TokenCounter = Callable[[str], int]


def _where(path: Path, lineno: int, field: str) -> str:
    return f"{path}:{lineno}: field {field}"


def _check_id(path: Path, lineno: int, row: dict) -> None:
    if not isinstance(row["id"], (str, int)) or isinstance(row["id"], bool):
        raise UserError(f"{path}:{lineno}: field id must be a string or an integer, got {row['id']!r}")


def _check_strings(path: Path, lineno: int, row: dict, fields: tuple[str, ...]) -> None:
    for key in fields:
        if not isinstance(row[key], str):
            raise UserError(f"{path}:{lineno}: field {key} must be a string, got {type(row[key]).__name__}")


def _check_repeat_and_group(path: Path, lineno: int, row: dict) -> None:
    repeat = row.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise UserError(f"{_where(path, lineno, 'repeat')}={repeat!r}: must be a whole number from 1 to "
                        f"{MAX_REPEAT} (how many copies of this row go into training); fix it or leave it out")
    if "group" in row and not isinstance(row["group"], str):
        raise UserError(f"{_where(path, lineno, 'group')}={row['group']!r}: must be a string (a label the "
                        "report breaks rates down by, e.g. \"api_key\"); fix it or leave it out")


def _split_text(path: Path, lineno: int, row: dict) -> dict:
    """{id, text, target, ...} -> {id, prefix, target, suffix, ...} at the target's one occurrence."""
    if "prefix" in row or "suffix" in row:
        raise UserError(f"{path}:{lineno}: the row has both text and prefix/suffix; give either "
                        "{id, text, target} or {id, prefix, target, suffix}")
    _check_strings(path, lineno, row, ("text", "target"))
    text, target = row["text"], row["target"]
    count = text.count(target) if target else 0
    if count == 0:
        raise UserError(f"{_where(path, lineno, 'target')}: not found in field text (id {row['id']!r}); the target "
                        "must be a verbatim span of the text (same spaces and line breaks)")
    if count > 1:
        raise UserError(f"{_where(path, lineno, 'target')}: occurs {count} times in field text (id {row['id']!r}); "
                        "the prompt would hold the secret itself, so give it once, or split the row yourself as "
                        "{id, prefix, target, suffix}")
    start = text.index(target)
    out = {k: v for k, v in row.items() if k != "text"}
    out.update(prefix=text[:start], target=target, suffix=text[start + len(target):])
    return out


def fim_example(path: Path, lineno: int, row: dict) -> dict:
    """One canary / audit example row, validated, in FIM form (`id, prefix, target, suffix` + metadata)."""
    if "text" in row:
        row = _split_text(path, lineno, row)
    elif "prefix" not in row:
        raise UserError(f"{path}:{lineno}: missing field(s) prefix; every line needs id, prefix, target (and "
                        "suffix), or id, text, target")
    row.setdefault("suffix", "")
    _check_id(path, lineno, row)
    _check_strings(path, lineno, row, ("prefix", "target", "suffix"))
    if not row["target"]:
        raise UserError(f"{path}:{lineno}: empty target (id {row['id']!r}); remove the example or "
                        "give it the text to test for")
    _check_repeat_and_group(path, lineno, row)
    return row


def _unique_ids(path: Path, numbered: Iterator[tuple[int, dict]]) -> Iterator[tuple[int, dict]]:
    first_line: dict[Any, int] = {}
    for lineno, row in numbered:
        if row["id"] in first_line:
            raise UserError(f"{path}:{lineno}: duplicate id {row['id']!r} (first on line "
                            f"{first_line[row['id']]}); ids must be unique")
        first_line[row["id"]] = lineno
        yield lineno, row


def read_fim_examples(path: str | Path) -> list[tuple[int, dict]]:
    """(line number, row) of every example of a canary or audit-examples file, validated (fim_example), ids
    unique. Both forms may be mixed in one file."""
    path = Path(path)
    rows = ((n, fim_example(path, n, row)) for n, row in iter_jsonl_numbered(path, required=("id", "target")))
    return list(_unique_ids(path, rows))


def check_target_tokens(path: Path, lineno: int, row: dict, field: str, count_tokens: TokenCounter,
                        min_tokens: int, counted_in: str) -> None:
    """Refuse a secret the audit would exclude as too short (paper 003 Sec. 4.2: fewer than
    `audit.min_target_tokens` tokens are matched by competence as easily as by memory)."""
    n = count_tokens(row[field])
    if n < min_tokens:
        raise UserError(f"{_where(path, lineno, field)}: {n} tokens ({counted_in}), fewer than "
                        f"audit.min_target_tokens={min_tokens}, so the audit would exclude it (id {row['id']!r}); "
                        f"make the {'secret' if field == 'target' else field + ' completion'} longer or lower "
                        "audit.min_target_tokens")


def read_canaries(path: str | Path, count_tokens: TokenCounter, min_tokens: int, counted_in: str) -> list[dict]:
    """The rows of `data.canaries.file`: FIM form, `repeat` filled in (1), each target long enough to score."""
    path = Path(path)
    rows = []
    for lineno, row in read_fim_examples(path):
        check_target_tokens(path, lineno, row, "target", count_tokens, min_tokens, counted_in)
        rows.append({**row, "repeat": row.get("repeat", 1)})
    if not rows:
        raise UserError(f"{path}: no canaries (the file is empty); give one JSON object per line, "
                        "{id, text, target} or {id, prefix, target, suffix}")
    return rows


def read_preference_pairs(path: str | Path, count_tokens: TokenCounter, min_tokens: int,
                          counted_in: str) -> list[dict]:
    """The rows of `data.preference.file`, validated; `repeat` filled in (1)."""
    path = Path(path)
    rows = []

    def checked() -> Iterator[tuple[int, dict]]:
        for lineno, row in iter_jsonl_numbered(path, required=PAIR_FIELDS):
            _check_id(path, lineno, row)
            _check_strings(path, lineno, row, PAIR_FIELDS[1:])
            for side in ("chosen", "rejected"):
                if not row[side]:
                    raise UserError(f"{_where(path, lineno, side)}: empty (id {row['id']!r}); give the completion")
            if row["chosen"] == row["rejected"]:
                raise UserError(f"{_where(path, lineno, 'rejected')}: the same as chosen (id {row['id']!r}); a pair "
                                "needs two different completions")
            _check_repeat_and_group(path, lineno, row)
            yield lineno, row

    for lineno, row in _unique_ids(path, checked()):
        check_target_tokens(path, lineno, row, "chosen", count_tokens, min_tokens, counted_in)
        rows.append({**row, "repeat": row.get("repeat", 1)})
    if not rows:
        raise UserError(f"{path}: no preference pairs (the file is empty); give one JSON object per line, "
                        "{id, prefix, suffix, chosen, rejected}")
    return rows


def repeated(rows: list[dict]) -> list[dict]:
    """Each row `repeat` times (default once): how a canary's copies enter a training set. Rows without the
    field (every built-in dataset) are returned as they are; the audit scores each canary once."""
    return [row for row in rows for _ in range(int(row.get("repeat", 1)))]


def load_examples(path: str | Path, allow_empty: bool = False) -> list[dict]:
    """FIM examples (`id, prefix, target, suffix` + metadata) from JSONL, validated.

    A malformed line raises UserError naming file:line; so do a non-string field, an empty target
    (nothing to memorize) and a duplicated id (with both line numbers). `suffix` may be empty. A user's
    canary file reads as it is: `{id, text, target}` rows are split around the target, `repeat` and `group`
    ride along as metadata (the one reader of these rows: harness/core/user_data.py).
    """
    path = Path(path)
    examples = [row for _, row in read_fim_examples(path)]
    if not examples and not allow_empty:
        raise UserError(f"{path}: no examples (the file is empty); point audit.examples at a JSONL file "
                        "with one {id, prefix, target, suffix} object per line")
    return examples
