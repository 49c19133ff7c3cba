"""One writer per directory: every `memlens` command that writes a run (or an audit out_dir) holds an
exclusive lock on it for as long as it runs.

The lock is `fcntl.flock` on `<dir>/.memlens.lock`, taken without waiting: a second process gets a
UserError (exit 2) naming the holder's pid, host and command, read from the lock file. The one exception is a
bounded wait a caller asks for (`wait_s`): a launcher's job that only reads the run's data waits while the
launcher's driver checks or builds it, instead of failing the job. The OS releases
a flock when its process dies, however it dies, so the file a killed holder leaves behind never blocks
anyone: only a live process can hold the lock. A holder unlinks the file when it releases it, and a
taker checks that the file it locked is still the one at the path (else a releasing holder unlinked it
in between, and it tries again), so two processes never both hold a directory.

Under `accelerate launch` / torchrun every process of one launch runs the same command: process 0 holds
the lock, and the others wait until the lock file names a live process 0 of their own launch (same
rendezvous address, port and run id and, on one host, the same launcher process as parent), then go on
without a lock of their own.

A lock is exclusive (a writer of the directory) or shared (a reader, or one of several writers of separate parts
of it): `memlens train stage=<model>` holds its run shared, its model exclusive and the models it starts from
shared, so two sweep points of one run train at once while a `memlens run` of the run, a second training of the
same model or a retraining of a model someone trains from is refused (flock's LOCK_SH / LOCK_EX). Shared holders
write their records beside the lock file (`.memlens.lock.readers/`, one file each, removed on release) and leave
the lock file when they release (another may still hold it); a refusal names every live holder.
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
READERS_DIR = ".memlens.lock.readers"    # one record per shared holder
LAUNCH_WAIT_SECONDS = 300      # how long processes 1..N-1 of a launch wait for process 0 to take the lock
EXCLUSIVE, SHARED = "exclusive", "shared"
WAIT_POLL_S = 0.2              # how often a patient taker (wait_s > 0) tries a held lock again


@dataclass
class HeldLock:
    path: Path                                          # the lock file
    fd: int
    created: list[Path] = field(default_factory=list)   # directories made to hold it, outermost first
    exclusive: bool = True
    record: Path | None = None                          # a shared holder's own record file

    def release(self) -> None:
        """Unlink the file while holding it exclusively (the next taker makes a fresh one), then let go, and remove
        the directories made for the lock if the command left them empty (a refused command writes nothing). A
        shared holder first drops its record and tries to turn its lock exclusive: it unlinks the file only if no
        other process holds it (flock's conversion is not atomic, but a taker that meets an unlinked file retries)."""
        if self.record is not None:
            with contextlib.suppress(OSError):
                self.record.unlink()
            with contextlib.suppress(OSError):
                self.record.parent.rmdir()              # the last reader out removes the folder
        last = self.exclusive
        if not last:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                last = True
            except OSError:
                last = False
        if last:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self.fd)
        for directory in reversed(self.created):
            try:
                directory.rmdir()
            except OSError:
                break


@contextlib.contextmanager
def hold_directories(directories: list[tuple], command: str) -> Iterator[None]:
    """Hold the lock of every `(config key, directory)`, `(config key, directory, SHARED | EXCLUSIVE)` (default
    exclusive) or `(config key, directory, mode, wait_s)` for the duration of the block (the key names what to
    change in the error). A lock held by another process is refused at once, or after `wait_s` seconds of
    waiting for it (a launcher's job waits for the driver that is building its data). The same directory named
    twice is locked once, exclusively if either asks so, waiting as long as the more patient asks."""
    unique: dict[Path, tuple[str, str, float]] = {}
    for key, directory, *rest in directories:
        path = Path(os.path.abspath(directory))
        wanted = rest[0] if rest else EXCLUSIVE
        wait_s = rest[1] if len(rest) > 1 else 0.0
        if wanted not in (EXCLUSIVE, SHARED):
            raise ValueError(f"lock mode {wanted!r}: use {EXCLUSIVE!r} or {SHARED!r}")
        old = unique.get(path)
        unique[path] = (old[0] if old else key, EXCLUSIVE if EXCLUSIVE in (wanted, old and old[1]) else SHARED,
                        max(float(wait_s), old[2] if old else 0.0))
    held: list[HeldLock] = []
    try:
        for directory, (key, mode, wait_s) in sorted(unique.items()):
            if _rank() > 0:
                _wait_for_launch_holder(directory, key)
            else:
                held.append(_acquire(directory, key, command, mode, wait_s))
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


def _acquire(directory: Path, key: str, command: str, mode: str = EXCLUSIVE, wait_s: float = 0.0) -> HeldLock:
    require_creatable_dir(key, directory)
    created = _missing_parents(directory)
    path = directory / LOCK_FILE
    deadline = time.monotonic() + wait_s
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
                fcntl.flock(fd, (fcntl.LOCK_EX if mode == EXCLUSIVE else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() < deadline:     # a patient taker: try again until its wait is over
                    os.close(fd)
                    time.sleep(WAIT_POLL_S)
                    continue
                holders = _read_records(fd, path)
                os.close(fd)
                raise UserError(_busy_message(directory, key, holders, wait_s)) from None
            if _same_file(fd, path):
                break
            os.close(fd)           # a releasing holder unlinked it after we opened it: take the new one
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "launch": _launch_id(), "parent": os.getppid(),
                  "mode": mode}
        try:
            record_path = _write_record(fd, path, record, mode)
        except OSError:            # e.g. a full disk: leave neither the lock nor its file
            HeldLock(path, fd, exclusive=mode == EXCLUSIVE).release()
            raise
    except UserError:
        _remove_empty(created)
        raise
    except OSError as e:
        _remove_empty(created)
        raise (storage_error(e, path) or e) from None
    return HeldLock(path, fd, created, exclusive=mode == EXCLUSIVE, record=record_path)


def _write_record(fd: int, path: Path, record: dict, mode: str) -> Path | None:
    """An exclusive holder writes its record into the lock file; a shared one into a file of its own in
    READERS_DIR (returned, removed when it releases), since several hold the lock at once."""
    line = (json.dumps(record) + "\n").encode("utf-8")
    if mode == EXCLUSIVE:
        os.ftruncate(fd, 0)
        os.pwrite(fd, line, 0)
        return None
    readers = path.parent / READERS_DIR
    readers.mkdir(exist_ok=True)
    own = readers / f"{record['host']}-{record['pid']}-{time.monotonic_ns()}.json"
    tmp = own.with_suffix(".tmp")
    tmp.write_bytes(line)
    tmp.replace(own)
    return own


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


def _parse_records(data: bytes) -> list[dict]:
    records = []
    for line in data.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def _all_records(lock_file: Path, fd: int | None = None) -> list[dict]:
    """The exclusive holder's record (in the lock file) and every shared holder's (READERS_DIR)."""
    records = []
    with contextlib.suppress(OSError):
        records += _parse_records(os.pread(fd, 1 << 20, 0) if fd is not None else lock_file.read_bytes())
    with contextlib.suppress(OSError):
        for reader in sorted((lock_file.parent / READERS_DIR).glob("*.json")):
            with contextlib.suppress(OSError):
                records += _parse_records(reader.read_bytes())
    return records


def _read_records(fd: int, lock_file: Path) -> list[dict]:
    """The live holders' records (records of processes gone from this host are dropped); a holder that has just
    taken the lock may not have written its record yet."""
    host = socket.gethostname()
    for _ in range(20):
        records = _all_records(lock_file, fd)
        live = [r for r in records if r.get("host") != host or process_alive(r.get("pid"))]
        if live:
            return live
        time.sleep(0.05)
    return []


def holders(directory: Path) -> list[dict]:
    """The processes holding `directory`, read from their records without taking the lock (`memlens status`): a
    record of a process gone from this host is dropped; one from another host is kept (it cannot be checked here)."""
    host = socket.gethostname()
    return [r for r in _all_records(Path(directory) / LOCK_FILE) if r.get("host") != host or process_alive(r.get("pid"))]


def _describe(holder: dict) -> str:
    where = f" on {holder['host']}" if holder.get("host") else ""
    since = f", since {holder['started']}" if holder.get("started") else ""
    what = f": {holder['command']}" if holder.get("command") else ""
    return f"pid {holder.get('pid', 'unknown')}{where}{since}{what}"


def _busy_message(directory: Path, key: str, holders: list[dict], waited_s: float = 0.0) -> str:
    holders = holders or [{}]
    pids = " ".join(str(h.get("pid", "unknown")) for h in holders)
    who = ("another memlens process" if len(holders) == 1 else f"{len(holders)} other memlens processes")
    still = f" (still, after waiting {waited_s:.0f} s)" if waited_s else ""
    return (f"{directory} is in use by {who}{still} ({'; '.join(_describe(h) for h in holders)}); two processes "
            "writing one directory would mix their results. Wait for it to finish, or stop it "
            f"(kill {pids}) and rerun this command; to run both at once, give this one another {key}")


def process_alive(pid: object) -> bool:
    """Whether process `pid` of this host lives (a process we may not signal lives too)."""
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
        records = _all_records(path)
        live = [r for r in records if r.get("host") != host or process_alive(r.get("pid"))]
        if any(r.get("launch") == launch and (r.get("host") != host or r.get("parent") == os.getppid())
               for r in live):
            return
        others = [r for r in live if r.get("host") == host and r.get("mode", EXCLUSIVE) == EXCLUSIVE]
        if others:
            raise UserError(_busy_message(directory, key, others))
        time.sleep(0.1)
    raise UserError(f"{directory}: process 0 of this launch did not take its lock within {LAUNCH_WAIT_SECONDS} s; "
                    "see its error above and rerun the launch")
