"""Files: atomic writes, validated JSONL reading, and an append-only row store that survives kills.

Every result, manifest or index is written to a temporary file in the same directory and renamed
into place, so a reader never sees half a file and a killed job leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.errors import UserError


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` via a temp file + rename (atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def jsonl_line(row: Any) -> str:
    """One JSONL line: the ONE way rows are written (UTF-8 kept readable, `\n` only at the end).

    json.dumps escapes every control character below U+0020 (so `\n`, `\r`, `\x0b`, `\x0c`,
    `\x1c`-`\x1e` never appear raw), but with ensure_ascii=False it keeps U+0085, U+2028 and U+2029
    as they are. That is valid JSONL as long as readers split on `\n` only, which `iter_jsonl` does
    (str.splitlines would cut such a row in two).
    """
    return json.dumps(row, ensure_ascii=False) + "\n"


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(jsonl_line(r) for r in rows))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                        "save it as UTF-8") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None


def _json_error(e: json.JSONDecodeError, line: str) -> str:
    """A JSON error of one JSONL line in words: a line that ends inside the object is called cut off."""
    if e.pos >= len(line.rstrip(" \t\r")) or e.msg.startswith("Unterminated string"):
        return (f"the line ends before its JSON object does ({e.msg.lower()} at column {e.colno}), "
                "so it looks cut off")
    return f"{e.msg} at column {e.colno}"


def iter_jsonl_numbered(path: str | os.PathLike, required: Sequence[str] = ()) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file: the ONE JSONL reader.

    Lines are split on `\n` only (never str.splitlines, which also splits on U+0085, U+2028, U+2029,
    `\x1c`-`\x1e`, ... that a JSON string may hold raw); a `\r` before the `\n` (CRLF files) is
    JSON whitespace. Bad bytes, bad JSON, a non-object and a missing field raise a UserError naming
    file:line and the fix.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: file not found (expected a JSONL file, one JSON object per line)")
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):      # binary files iterate on b"\n" only
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                f"{len(raw[:e.start].decode('utf-8', 'replace')) + 1}); save the file as "
                                "UTF-8 or fix that line") from None
            line = line.rstrip("\n")
            if not line.strip(" \t\r"):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{lineno}: not valid JSON ({_json_error(e, line)}); "
                                "fix or remove that line") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            missing = [k for k in required if k not in row]
            if missing:
                raise UserError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}; "
                                f"every line needs {', '.join(required)}")
            yield lineno, row


def iter_jsonl(path: str | os.PathLike, required: Sequence[str] = ()) -> Iterator[dict]:
    """Yield the objects of a JSONL file; a bad line raises UserError naming file and line number."""
    for _, row in iter_jsonl_numbered(path, required):
        yield row


def read_jsonl(path: str | os.PathLike, required: Sequence[str] = ()) -> list[dict]:
    return list(iter_jsonl(path, required))


def sha256_json(obj: Any) -> str:
    """sha256 of an object's canonical JSON (sorted keys): the fingerprint of what a cached result covers."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class RowStore:
    """Append-only JSONL store keyed by a row field; a killed writer loses at most the line in flight.

    On open, a torn last line (no trailing newline, from a kill mid-write) is cut off, and the keys
    already present are loaded, so a rerun appends only the rows that are missing: no row is lost
    and none is duplicated.
    """

    def __init__(self, path: str | os.PathLike, key: str = "id"):
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_torn_tail()
        self.done: set = {row[key] for row in self.rows()}

    def _repair_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as f:
                f.truncate(cut)

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        return read_jsonl(self.path)

    def append(self, rows: Iterable[dict]) -> None:
        fresh = [r for r in rows if r[self.key] not in self.done]
        if not fresh:
            return
        with self.path.open("a", encoding="utf-8") as f:
            for r in fresh:
                f.write(jsonl_line(r))
            f.flush()
            os.fsync(f.fileno())
        self.done.update(r[self.key] for r in fresh)
