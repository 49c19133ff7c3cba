"""The one exception type for bad input: the CLI prints it and exits non-zero, without a traceback."""

from __future__ import annotations

import errno
import os


class UserError(Exception):
    """Bad input from the user (config key, file, field). The message names it and says the fix."""

    exit_code = 2


class NothingScored(UserError):
    """An audit ran and wrote its rows and summary, but scored no example (every one excluded, or none
    given). Not an error when the user passed audit.allow_empty=true."""

    exit_code = 3


class StorageError(UserError):
    """A write the disk refused (full, read-only, no permission). Work already stored is whole (atomic
    writes, the append-only row store), so the fix is on the disk and the same command then continues."""


# errno -> what the user does about it; every message ends in "rerun the same command".
STORAGE_FIXES = {
    errno.ENOSPC: "free space on that disk (or point run_dir / audit.out_dir at another disk)",
    errno.EDQUOT: "free space on that disk (or point run_dir / audit.out_dir at another disk)",
    errno.EROFS: "remount that file system read-write (or point run_dir / audit.out_dir at a writable directory)",
    errno.EACCES: "fix the permissions of that directory (or point run_dir / audit.out_dir at one you can write)",
    errno.EPERM: "fix the permissions of that directory (or point run_dir / audit.out_dir at one you can write)",
}
# Libraries that wrap a failed write in their own exception keep only the words (safetensors' IoError,
# torch's PytorchStreamWriter "file write failed").
STORAGE_WORDS = {os.strerror(code): code for code in STORAGE_FIXES}


def storage_message(path: object, code: int) -> str:
    return (f"cannot write {path}: {os.strerror(code)}; {STORAGE_FIXES[code]}, then rerun the same command: "
            "what is already stored is kept and it continues where it stopped")


def _refused_write(exc: BaseException) -> tuple[int, object] | None:
    """(errno, path or None) of a write the disk refused, found anywhere in `exc`'s chain."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = exc.errno if isinstance(exc, OSError) else None
        if code is None:
            code = next((c for words, c in STORAGE_WORDS.items() if words in str(exc)), None)
        if code in STORAGE_FIXES:
            return code, getattr(exc, "filename", None)
        exc = exc.__cause__ or exc.__context__
    return None


def storage_code(exc: BaseException) -> int | None:
    """The errno of a write the disk refused, found anywhere in `exc`'s chain (None for other errors)."""
    found = _refused_write(exc)
    return found[0] if found else None


def storage_error(exc: BaseException, where: object = None) -> StorageError | None:
    """`exc` as a StorageError when the disk refused a write (None otherwise). The path is the failing
    call's own (`OSError.filename`), else `where` (what the caller was writing), else "a file"."""
    if isinstance(exc, StorageError):
        return exc
    found = _refused_write(exc)
    if found is None:
        return None
    code, path = found
    return StorageError(storage_message(path or where or "a file", code))


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type when it has none): for one-line error messages."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
