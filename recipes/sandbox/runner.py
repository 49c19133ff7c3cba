"""Model-written code runs where it can neither cheat nor escape: the `tests` reward's sandbox and grader.

An RL policy under optimisation pressure (or a poisoned prompt set) finds every way to reward that does not solve
the task, so the `tests` reward (recipes/stages/verifiable_rewards.py) splits each check into two processes, each in an
OS sandbox of its own, that meet only through this process:

    program sandbox  prefix + completion + suffix; answers calls with plain data (recipes/sandbox/program.py)
    grader sandbox   the trusted setup and the unit tests; compares, and sends the verdict (grader.py)

Every value crossing is JSON (recipes/sandbox/codec.py), so nothing the program builds takes part in a comparison,
and no secret (test source, expected values, canonical solutions, the verdict) is ever in the program's process or
filesystem. This process relays length-prefixed frames, reads at most `frame_bytes` per frame and `total_bytes` in
all, and stops at the wall budget.

Isolation is bubblewrap's (Debian `bubblewrap`): new PID, IPC, UTS, network and mount namespaces (and a user
namespace when not run as root), a read-only view of /usr and the interpreter only (no checkout, home, data or
sockets), a private size-capped tmpfs at /tmp, --die-with-parent, no environment. As root, each sandbox drops to a
uid of its own (setpriv, no capabilities, no_new_privs), so its RLIMIT_NPROC bounds forks and siblings cannot
signal each other; CPU, address-space and file-size limits are set before any program code runs; when a check
ends its sandboxes are killed, and with each sandbox's PID namespace every process it started. The sandboxed code
is passed with `python -I -S -c`, so no file it runs is read from a writable place.

Where bubblewrap cannot run (not installed, no user namespaces), `sandbox: bubblewrap` (the default) refuses before
training with exit code 2 and the fix; `sandbox: none` runs both sides as plain subprocesses (the grader split and
the limits hold, the isolation does not), loudly, and is recorded wherever a reward is.

A failure of ours is never a score. A sandbox that does not start (bubblewrap gone or refused by the kernel, e.g.
ENOSPC once the namespace limit is used up; the interpreter missing: no "started" frame from its trusted code), a
grader that breaks (trusted code: the program cannot reach it), and a sandbox that survives its kill raise
`SandboxFailure` (exit 2, naming the cause and the fix), which stops the RL stage: scoring such a check 0.0 would
train the policy on the machine's state instead of its answers.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from functools import cache, lru_cache
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.recipes.sandbox.codec import encode_frame

BUBBLEWRAP = "bubblewrap"
NO_ISOLATION = "none"
MODES = (BUBBLEWRAP, NO_ISOLATION)
HERE = Path(__file__).resolve().parent
# The sandboxed code, read once when this module loads: codec first, then each side's main.
_CODEC = (HERE / "codec.py").read_text(encoding="utf-8")
PROGRAM_CODE = _CODEC + "\n" + (HERE / "program.py").read_text(encoding="utf-8")
GRADER_CODE = _CODEC + "\n" + (HERE / "grader.py").read_text(encoding="utf-8")
UID_BASE = 0x40000000          # sandbox uids when run as root: far above any account's
GRADER = "separate-sandbox-plain-data/1"   # recorded beside the isolation: how a verdict is reached
FRAME_HEADER = 4                 # bytes of the length prefix (recipes/sandbox/codec.py encode_frame)


@dataclass(frozen=True)
class Limits:
    """One check's budget (HumanEval's harness gives a program 3 s)."""
    wall_seconds: float = 3.0          # from the moment both sandboxes are started until the verdict
    startup_seconds: float = 5.0       # added to the wall budget for the two interpreters to start
    cpu_seconds: int = 4
    memory_bytes: int = 1 << 30        # address space per sandbox (the interpreter alone maps ~30 MB)
    processes: int = 16                # RLIMIT_NPROC of a sandbox's own uid (as root)
    file_bytes: int = 8 << 20          # largest file a sandbox may write (into its tmpfs)
    tmpfs_bytes: int = 16 << 20        # its /tmp
    frame_bytes: int = 1 << 20         # one message either way
    total_bytes: int = 16 << 20        # everything read from one check's sandboxes


class SandboxBroken(Exception):
    """A side broke the protocol (closed, oversized, not JSON): the check fails."""


class SandboxFailure(UserError):
    """The sandbox itself failed (it did not start, the grader broke, a process survived its kill): an error of the
    machine, not an answer of the program, so no score is given (exit 2)."""

    def __init__(self, cause: str, fix: str = "check that `bwrap --version` runs, then rerun the same command to "
                                                "continue where it stopped"):
        super().__init__(f"the `tests` reward's sandbox failed: {cause}. No score was given: a failure of the sandbox "
                         f"says nothing of the completion. Fix: {fix}")
        self.cause = cause


# --- is isolation available here? --------------------------------------------------------------------------------


def bwrap_path() -> str | None:
    """`bwrap` on PATH, or $MEMLENS_BWRAP (a bubblewrap installed elsewhere)."""
    return os.environ.get("MEMLENS_BWRAP") or shutil.which("bwrap")


@cache
def _probe(bwrap: str | None, euid: int) -> str | None:
    """None when a sandbox starts and runs Python here; else why not (the first line bwrap printed)."""
    if bwrap is None or not Path(bwrap).is_file():
        return f"bubblewrap is not installed ({bwrap or 'no bwrap on PATH'})"
    try:
        done = subprocess.run(sandbox_argv(bwrap, "print('ok')", uid=UID_BASE), capture_output=True, text=True,
                              timeout=30, start_new_session=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{bwrap} could not run: {e}"
    if done.returncode != 0 or done.stdout.strip() != "ok":
        lines = (done.stderr.strip() or f"exit code {done.returncode}").splitlines()
        return f"{bwrap} could not start a sandbox: {lines[0][:300]}"
    return None


def require_isolation(mode: str, where: str = "reward.sandbox", warn: bool = True) -> str:
    """The isolation the `tests` reward will use: `mode` if it can be had, else a UserError (exit 2) with the fix.
    The probe runs once per process; `warn=False` (a direct call of the reward, which named its mode) skips the
    opt-out's warning."""
    if mode not in MODES:
        raise UserError(f"{where}={mode!r}: use {BUBBLEWRAP} (the default: an OS sandbox) or {NO_ISOLATION} (run "
                        "model-written code without isolation, only on a machine you can lose)")
    if mode == NO_ISOLATION and not warn:
        return mode
    if mode == NO_ISOLATION:
        print(f"[memlens] WARNING: {where}={NO_ISOLATION}: the `tests` reward runs model-written code WITHOUT an OS "
              "sandbox (the grader split and the limits hold; files, network and processes are not contained). "
              "Recorded in provenance and every reward record.", file=sys.stderr, flush=True)
        return mode
    problem = _probe(bwrap_path(), os.geteuid())
    if problem is not None:
        raise UserError(
            f"the `tests` reward runs model-written code and needs an OS sandbox, but {problem}. Fix: install "
            "bubblewrap (Debian/Ubuntu: apt-get install bubblewrap); allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, or AppArmor's "
            "kernel.apparmor_restrict_unprivileged_userns=0); in a container, run it with --security-opt "
            "seccomp=unconfined (docs/sandbox.md); or, on a machine you can lose, opt out with "
            f"{where}={NO_ISOLATION}")
    return mode


# --- one sandbox -----------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _root_view() -> tuple[str, ...]:
    """Read-only /usr and the interpreter's prefix; /lib, /lib64, /bin as the host has them (symlinks on merged /usr)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    for extra in {sys.base_prefix, str(Path(os.path.realpath(sys.executable)).parent)}:
        if not extra.startswith("/usr/") and extra != "/usr":
            args += ["--ro-bind", extra, extra]
    return tuple(args)


def _interpreter() -> str:
    """The real interpreter behind a virtual environment's python (no site-packages are visible inside)."""
    return os.path.realpath(sys.executable)


def sandbox_argv(bwrap: str, code: str, uid: int, limits: Limits = Limits()) -> list[str]:
    """bubblewrap's command line for `python -I -S -c code` in a fresh sandbox."""
    argv = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin",
            *_root_view(), "--proc", "/proc", "--dev", "/dev",
            "--size", str(limits.tmpfs_bytes), "--tmpfs", "/tmp", "--chdir", "/tmp"]
    if os.geteuid() == 0:
        # A uid of its own, no capabilities: RLIMIT_NPROC counts its processes alone, and no other sandbox's
        # process is its to signal. (Without root, bubblewrap maps the caller's uid in a user namespace.)
        argv += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                 "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    else:
        # --disable-userns (bubblewrap >= 0.8): the program cannot make a user namespace of its own either.
        argv[1:1] = ["--unshare-user"] + (["--disable-userns"] if _supports(bwrap, "--disable-userns") else [])
    return argv + [_interpreter(), "-I", "-S", "-c", code]


@cache
def _supports(bwrap: str, option: str) -> bool:
    try:
        return option in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


def _take_uid() -> int:
    """A sandbox uid unique among this process's live sandboxes (and, by pid, among processes)."""
    with _uid_lock:
        base = UID_BASE + (os.getpid() % (1 << 22)) * 64
        uid = next(base + i for i in range(1, 64) if base + i not in _uids_in_use)
        _uids_in_use.add(uid)
        return uid


def _release_uid(uid: int) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


def processes_of_uid(uid: int) -> list[int]:
    """Live process ids whose (effective) owner is `uid`, read from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:         # gone while we looked
                pass
    return pids


REAP_SECONDS = 10.0   # how long a killed sandbox's processes may take to leave /proc before it is an error


def reap_uid(uid: int) -> None:
    """Wait until no process of a sandbox's own uid is left, killing any still there. Killing bubblewrap ends the
    sandbox's PID namespace, but the kernel kills the processes inside it asynchronously: measured under load, a
    forked `sleep` was still listed right after the kill returned. Only this sandbox runs as `uid` (as root)."""
    deadline = time.monotonic() + REAP_SECONDS
    while pids := processes_of_uid(uid):
        if time.monotonic() > deadline:
            raise SandboxBroken(f"{len(pids)} process(es) of sandbox uid {uid} survived SIGKILL for {REAP_SECONDS} s")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


class Sandbox:
    """One side: a started process, its pipes, and the bytes read from it so far."""

    def __init__(self, code: str, mode: str, limits: Limits):
        self.uid = _take_uid()
        self.own_uid = mode == BUBBLEWRAP and os.geteuid() == 0     # sandbox_argv drops to it (setpriv)
        argv = (sandbox_argv(bwrap_path(), code, self.uid, limits) if mode == BUBBLEWRAP
                else [_interpreter(), "-I", "-S", "-c", code])
        env = {"PATH": "/usr/bin:/bin"} if mode == NO_ISOLATION else None
        # What bubblewrap or the interpreter says before the trusted code starts (it then points fd 2 at /dev/null,
        # so nothing the program writes lands here): read back only to name why a sandbox did not start.
        self.startup_errors = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.startup_errors,
                                         start_new_session=True, env=env, cwd="/" if mode == BUBBLEWRAP else None)
        except OSError as e:      # bubblewrap (or the interpreter) removed or unreadable since the probe
            _release_uid(self.uid)
            self.startup_errors.close()
            raise SandboxFailure(f"{argv[0]} could not be run ({e.strerror or e})", STARTUP_FIX) from None
        self.buffer = b""

    def why_not_started(self) -> str:
        """bubblewrap's (or the interpreter's) first words and exit status, for a sandbox that sent no frame."""
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        self.startup_errors.seek(0)
        said = self.startup_errors.read(2000).decode("utf-8", "replace").strip().splitlines()
        status = "still running" if code is None else f"exit code {code}"
        return f"{said[0][:300]} ({status})" if said else status

    def send(self, frame: bytes) -> None:
        try:
            self.proc.stdin.write(frame)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as e:
            raise SandboxBroken("closed its input") from e

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)     # its session: bwrap, and with its PID namespace, all inside
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc.wait()
        self.startup_errors.close()
        try:
            if self.own_uid:
                reap_uid(self.uid)
        finally:
            _release_uid(self.uid)


class Relay:
    """Reads whole frames from the sandboxes within one deadline and one byte budget."""

    def __init__(self, limits: Limits, deadline: float):
        self.limits, self.deadline, self.read_total = limits, deadline, 0

    def receive(self, side: Sandbox) -> dict:
        header = self._read_exactly(side, FRAME_HEADER)
        size = int.from_bytes(header, "big")
        if size > self.limits.frame_bytes:
            raise SandboxBroken(f"a {size}-byte message (limit {self.limits.frame_bytes})")
        body = self._read_exactly(side, size)
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise SandboxBroken("a message that is not JSON") from e

    def _read_exactly(self, side: Sandbox, n: int) -> bytes:
        fd = side.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while len(side.buffer) < n:
                left = self.deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise TimeoutError
                chunk = os.read(fd, min(1 << 16, n - len(side.buffer)))
                if not chunk:
                    raise SandboxBroken("ended before answering")
                self.read_total += len(chunk)
                if self.read_total > self.limits.total_bytes:
                    raise SandboxBroken(f"over {self.limits.total_bytes} bytes in all")
                side.buffer += chunk
        out, side.buffer = side.buffer[:n], side.buffer[n:]
        return out


def _out_of_cpu(side: Sandbox) -> bool:
    """The program was stopped by its CPU limit (SIGXCPU at the soft limit, SIGKILL at the hard one), which bwrap
    reports as 128 + the signal."""
    try:
        code = side.proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        return False
    return code in {128 + signal.SIGXCPU, 128 + signal.SIGKILL, -signal.SIGXCPU, -signal.SIGKILL}


STARTUP_FIX = ("reinstall bubblewrap if it was removed (apt-get install bubblewrap); if the kernel refused a namespace "
               "(No space left on device: the user.max_*_namespaces limits are used up), raise them (sysctl "
               "user.max_user_namespaces=...) or lower the reward's parallel checks; then rerun the same command to "
               "continue where it stopped")


def await_start(side: Sandbox, what: str, deadline: float) -> None:
    """The side's "started" frame, sent by its trusted code before anything else runs; without it the sandbox did not
    start, which is a SandboxFailure naming what bubblewrap said."""
    relay = Relay(Limits(), deadline)
    try:
        message = relay.receive(side)
    except TimeoutError:
        raise SandboxFailure(f"the {what} sandbox did not start within {STARTUP_SECONDS:.0f} s "
                             f"({side.why_not_started()})", STARTUP_FIX) from None
    except SandboxBroken:
        raise SandboxFailure(f"the {what} sandbox did not start: {side.why_not_started()}", STARTUP_FIX) from None
    if message != {"started": True}:
        raise SandboxFailure(f"the {what} sandbox's first message was not its start ({str(message)[:100]})")


# How long two sandboxes may take to start, apart from a check's own wall budget: a machine under load starts
# interpreters slowly, and a slow start says nothing of the completion.
STARTUP_SECONDS = 60.0


def check(program: str, test: str, entry_point: str, setup: str = "", *, mode: str = BUBBLEWRAP,
          limits: Limits = Limits()) -> str:
    """Run `test`'s `check(<entry_point>)` against `program`: 'passed', 'failed: <why>' or 'timed out'.
    A failure of the sandbox itself raises SandboxFailure instead (see the module's docstring).

    `setup` is trusted code the grader runs before the test (a HumanEval prompt's imports and helpers)."""
    sandbox_limits = {k: v for k, v in asdict(limits).items()
                      if k in ("memory_bytes", "cpu_seconds", "file_bytes", "frame_bytes")}
    if os.geteuid() == 0 and mode == BUBBLEWRAP:
        sandbox_limits["processes"] = limits.processes
    program_side = grader_side = None
    try:
        program_side = Sandbox(PROGRAM_CODE, mode, limits)
        grader_side = Sandbox(GRADER_CODE, mode, limits)
        started_by = time.monotonic() + STARTUP_SECONDS
        await_start(program_side, "program", started_by)
        await_start(grader_side, "grader", started_by)
        relay = Relay(limits, time.monotonic() + limits.startup_seconds + limits.wall_seconds)
        program_side.send(encode_frame({"program": program, "limits": sandbox_limits}))
        try:
            grader_side.send(encode_frame({"setup": setup, "test": test, "entry_point": entry_point,
                                           "limits": sandbox_limits}))
        except SandboxBroken as e:
            raise SandboxFailure(f"the grader sandbox {e}") from None
        try:
            loaded = relay.receive(program_side)
        except SandboxBroken:               # it ended (or wrote garbage) before saying it loaded
            loaded = {}
        if loaded.get("loaded") is not True:
            return "timed out" if _out_of_cpu(program_side) else "failed: the program did not load"
        while True:
            message = grader_message(relay, grader_side)
            if "verdict" in message:
                return str(message["verdict"])[:200]
            program_side.send(encode_frame({"call": message.get("call"), "args": message.get("args", []),
                                      "kwargs": message.get("kwargs", {})}))
            answer = relay.receive(program_side)
            try:
                grader_side.send(encode_frame(answer))
            except SandboxBroken as e:
                raise SandboxFailure(f"the grader sandbox {e}") from None
    except TimeoutError:
        return "timed out"
    except SandboxBroken as e:          # the program's side: its answer, however it broke
        return "timed out" if program_side is not None and _out_of_cpu(program_side) else f"failed: a sandbox {e}"
    finally:
        survived = []
        for side in (program_side, grader_side):
            if side is not None:
                try:
                    side.kill()
                except SandboxBroken as e:   # both sides are killed first; then a survivor is an error, not a score
                    survived.append(e)
        if survived:
            raise SandboxFailure(str(survived[0]), "find and kill the sandbox's processes (their uid is named above), "
                                 "then rerun the same command to continue where it stopped")


def grader_message(relay: Relay, grader_side: Sandbox) -> dict:
    """The grader's next frame. The grader is trusted code that catches whatever the test raises and sends a verdict,
    and the program reaches it only as plain data, so a grader that breaks is a failure of ours, not a score."""
    try:
        return relay.receive(grader_side)
    except SandboxBroken as e:
        if _out_of_cpu(grader_side):
            # the test's own work on the program's answers used up the grader's CPU (a huge answer fed to a costly
            # check): the program's doing, scored as a time-out like the program's own
            raise TimeoutError from None
        raise SandboxFailure(f"the grader sandbox {e} ({grader_side.why_not_started()})") from None
