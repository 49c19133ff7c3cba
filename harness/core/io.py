"""Files: atomic writes, validated JSONL reading, and an append-only row store that survives kills.

Every result, manifest or index is written to a temporary file in the same directory and renamed
into place, so a reader never sees half a file and a killed job leaves nothing half-written.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import StorageError, UserError, storage_code, storage_message


def umask() -> int:
    """The process umask, read without changing it (os.umask can only be read by setting it, which would
    give a file another thread creates meanwhile the wrong mode)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` via a temp file + rename (atomic on POSIX).

    The file gets the mode of any new file (0666 less the umask, as the rows beside it), not mkstemp's
    0600. A write the disk refuses raises StorageError naming `path`; no temp file is left behind.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        code = storage_code(e)
        if code is not None:
            raise StorageError(storage_message(path, code)) from None
        raise


def require_creatable_dir(key: str, path: Path) -> Path:
    """`path` if it is a directory or can be created as one; checked without creating anything, so a
    refused job leaves nothing behind (a file in the way or a read-only parent is named with its key)."""
    path = Path(path)
    for _ in range(100):     # a parent another process removes between two of our looks is looked for again
        probe = _nearest_existing(path)
        if probe.exists() and not probe.is_dir():
            where = "it is" if probe == path else f"{probe} is"
            raise UserError(f"{key}={path}: cannot be a directory, {where} a file; set {key} to a directory "
                            "path (or move that file away)")
        if os.access(probe, os.W_OK | os.X_OK):
            return path
        if probe.exists():
            break
    read_only = bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
    why = "is on a read-only file system" if read_only else "is not writable"
    raise UserError(f"{key}={path}: cannot be created or written ({probe} {why}); set {key} "
                    "to a directory you can write")


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


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
        yield from parse_jsonl_lines(path, f, required=required)   # binary files iterate on b"\n" only


def parse_jsonl_lines(path: Path, lines: Iterable[bytes], first_lineno: int = 1,
                      required: Sequence[str] = ()) -> Iterator[tuple[int, dict]]:
    """The objects of raw JSONL lines (each ending in b"\n" but perhaps the last) read from `path`."""
    for lineno, raw in enumerate(lines, start=first_lineno):
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
        if isinstance(row, list):
            raise UserError(f"{path}:{lineno}: expected a JSON object, got a JSON array; a JSONL file holds one "
                            "object per line, not an array: write each element of the array on a line of its own")
        if not isinstance(row, dict):
            raise UserError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}; write one "
                            "{...} object per line")
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


def unique_rows(rows: Iterable[dict], key: str = "id") -> list[dict]:
    """`rows` with each key once, the first stored copy winning: how every reader counts a rows file
    (files from before the store refused duplicates may hold an id twice)."""
    seen: set = set()
    out = []
    for row in rows:
        if row[key] not in seen:
            seen.add(row[key])
            out.append(row)
    return out


class RowStore:
    """Append-only JSONL store keyed by a row field; a killed writer loses at most the line in flight.

    Each key is stored once, whoever appends: every append holds an exclusive lock on the file
    (fcntl.flock, released by the OS when a process dies), first reads what other writers appended since
    this store last looked, cuts a torn last line (a writer killed mid-line) and then appends only the
    keys that are still missing. So a rerun appends only the rows that are missing, and two writers that
    ever meet on one file still leave each key once.
    """

    def __init__(self, path: str | os.PathLike, key: str = "id"):
        self.path = Path(path)
        self.key = key
        self.done: set = set()
        self._read_to = 0            # bytes of the file whose keys are in self.done
        self._lines_read = 0         # and their lines (for file:line in errors)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                with self.path.open("r+b") as f:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
                    self._catch_up(f)
        except OSError as e:
            self._raise_storage(e)

    def _catch_up(self, f) -> None:
        """Read the keys appended since `_read_to`; cut a torn last line. Called with the lock held."""
        size = os.fstat(f.fileno()).st_size
        if size < self._read_to:          # replaced or cut by someone else: read it all again
            self.done, self._read_to, self._lines_read = set(), 0, 0
        if size == self._read_to:
            return
        f.seek(self._read_to)
        data = f.read(size - self._read_to)
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            f.truncate(self._read_to + whole)
        lines = data[:whole].split(b"\n")[:-1]
        self.done.update(row[self.key] for _, row in parse_jsonl_lines(self.path, (ln + b"\n" for ln in lines),
                                                                     self._lines_read + 1))
        self._read_to += whole
        self._lines_read += len(lines)

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        return unique_rows(read_jsonl(self.path), self.key)

    def append(self, rows: Iterable[dict]) -> None:
        fresh = [r for r in unique_rows(rows, self.key) if r[self.key] not in self.done]
        if not fresh:
            return
        try:
            with self.path.open("a+b") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
                self._catch_up(f)
                fresh = [r for r in fresh if r[self.key] not in self.done]
                if not fresh:
                    return
                f.write("".join(jsonl_line(r) for r in fresh).encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
                self._read_to = f.tell()
        except OSError as e:
            self._raise_storage(e)
        self.done.update(r[self.key] for r in fresh)

    def _raise_storage(self, e: OSError):
        code = storage_code(e)
        if code is None:
            raise e
        raise StorageError(storage_message(self.path, code)) from None
