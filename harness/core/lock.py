"""One writer per directory: every `memlens` command that writes a run (or an audit out_dir) holds an
exclusive lock on it for as long as it runs.

The lock is `fcntl.flock` on `<dir>/.memlens.lock`, taken without waiting: a second process gets a
UserError (exit 2) naming the holder's pid, host and command, read from the lock file. The OS releases
a flock when its process dies, however it dies, so the file a killed holder leaves behind never blocks
anyone: only a live process can hold the lock. A holder unlinks the file when it releases it, and a
taker checks that the file it locked is still the one at the path (else a releasing holder unlinked it
in between, and it tries again), so two processes never both hold a directory.

Under `accelerate launch` / torchrun every process of one launch runs the same command: process 0 holds
the lock, and the others wait until the lock file names a live process 0 of their own launch (same
rendezvous address, port and run id and, on one host, the same launcher process as parent), then go on
without a lock of their own.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memlens.harness.core.errors import UserError, storage_error
from memlens.harness.core.io import require_creatable_dir
from memlens.harness.core.processes import process_rank, world_size

LOCK_FILE = ".memlens.lock"
LAUNCH_WAIT_SECONDS = 300      # how long processes 1..N-1 of a launch wait for process 0 to take the lock


@dataclass
class HeldLock:
    path: Path                                          # the lock file
    fd: int
    created: list[Path] = field(default_factory=list)   # directories made to hold it, outermost first

    def release(self) -> None:
        """Unlink the file while still holding it (the next taker makes a fresh one), then let go, and remove
        the directories made for the lock if the command left them empty (a refused command writes nothing)."""
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        for directory in reversed(self.created):
            try:
                directory.rmdir()
            except OSError:
                break


@contextlib.contextmanager
def hold_directories(directories: list[tuple[str, Path]], command: str) -> Iterator[None]:
    """Hold the lock of every `(config key, directory)` for the duration of the block (the key names what
    to change in the error). The same directory named twice is locked once."""
    unique: dict[Path, str] = {}
    for key, directory in directories:
        unique.setdefault(Path(os.path.abspath(directory)), key)
    held: list[HeldLock] = []
    try:
        for directory, key in sorted(unique.items()):
            if _rank() > 0:
                _wait_for_launch_holder(directory, key)
            else:
                held.append(_acquire(directory, key, command))
        yield
    finally:
        for lock in reversed(held):
            lock.release()


def _rank() -> int:
    """The rank that names a lock's holder: 0 in a single process, whatever RANK an outer launcher left behind."""
    return process_rank() if world_size() > 1 else 0


def _launch_id() -> str | None:
    """What every process of one `accelerate launch` / torchrun shares (None outside a launch)."""
    if world_size() <= 1:
        return None
    return "{}:{}/{}".format(os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", ""),
                             os.environ.get("TORCHELASTIC_RUN_ID", ""))


def _missing_parents(directory: Path) -> list[Path]:
    """The directories `mkdir -p directory` would create, outermost first."""
    missing = []
    probe = directory
    while not probe.exists() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    return list(reversed(missing))


def _make_dir(directory: Path, attempts: int = 100) -> None:
    """`mkdir -p`, tolerating a race: a process that lost the lock removes the empty directories it created
    (_remove_empty), which can happen between another's failed mkdir (EEXIST) and its is_dir() check."""
    for _ in range(attempts - 1):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return
        except FileExistsError:
            continue
    directory.mkdir(parents=True, exist_ok=True)


def _acquire(directory: Path, key: str, command: str) -> HeldLock:
    require_creatable_dir(key, directory)
    created = _missing_parents(directory)
    path = directory / LOCK_FILE
    try:
        _make_dir(directory)
        for attempt in itertools.count():
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except FileNotFoundError:
                # A releasing holder removed the directory it had created (_remove_empty) after our mkdir.
                if attempt >= 100:
                    raise
                _make_dir(directory)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_record(fd)
                os.close(fd)
                raise UserError(_busy_message(directory, key, holder)) from None
            if _same_file(fd, path):
                break
            os.close(fd)           # a releasing holder unlinked it after we opened it: take the new one
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "launch": _launch_id(), "parent": os.getppid()}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        except OSError:            # e.g. a full disk: leave neither the lock nor its file
            HeldLock(path, fd).release()
            raise
    except UserError:
        _remove_empty(created)
        raise
    except OSError as e:
        _remove_empty(created)
        raise (storage_error(e, path) or e) from None
    return HeldLock(path, fd, created)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _remove_empty(created: list[Path]) -> None:
    for directory in reversed(created):
        try:
            directory.rmdir()
        except OSError:
            break


def _read_record(fd: int) -> dict:
    """The holder's record; a holder that has just taken the lock may not have written it yet."""
    for _ in range(20):
        try:
            data = os.pread(fd, 65536, 0)
            if data.strip():
                return json.loads(data)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return {}


def _busy_message(directory: Path, key: str, holder: dict) -> str:
    pid = holder.get("pid", "unknown")
    where = f" on {holder['host']}" if holder.get("host") else ""
    since = f", since {holder['started']}" if holder.get("started") else ""
    what = f": {holder['command']}" if holder.get("command") else ""
    return (f"{directory} is in use by another memlens process (pid {pid}{where}{since}{what}); two processes "
            "writing one directory would mix their results. Wait for it to finish, or stop it "
            f"(kill {pid}) and rerun this command; to run both at once, give this one another {key}")


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_for_launch_holder(directory: Path, key: str) -> None:
    """Processes 1..N-1 of a launch: go on once process 0 of this launch holds `directory`; refuse when a
    live process of another launch (or a plain one) holds it."""
    launch, host = _launch_id(), socket.gethostname()
    deadline = time.monotonic() + LAUNCH_WAIT_SECONDS
    path = directory / LOCK_FILE
    while time.monotonic() < deadline:
        try:
            holder = json.loads(path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            holder = {}
        same_host = holder.get("host") == host
        live = not same_host or _alive(holder.get("pid"))
        ours = holder.get("launch") == launch and (not same_host or holder.get("parent") == os.getppid())
        if holder and live and ours:
            return
        if holder and live and same_host:
            raise UserError(_busy_message(directory, key, holder))
        time.sleep(0.1)
    raise UserError(f"{directory}: process 0 of this launch did not take its lock within {LAUNCH_WAIT_SECONDS} s; "
                    "see its error above and rerun the launch")
