"""`python -m memlens ARGS` for the tests, each call a fresh process forked from one that has already imported what
every command imports (torch, transformers, TRL, datasets, matplotlib, memlens): ~5 s of imports per call on 2 CPU
cores, paid once per pytest worker instead of once per call (run_helpers.memlens and memlens_in: ~100 calls in the
suite, 32 of them through memlens, counted at e3ac0ca).

A call is still a process of its own, as `python -m memlens` would be: its own pid and session (a lock it holds is
its own; killing it kills what it started), its own environment and working directory, stdout and stderr to files,
no terminal, `memlens.__main__` run as `__main__`, exit code or -signal as subprocess reports it. It differs in what
was imported before it started, so only a call whose environment is the server's own is forked here (the variables
read at import time — kernel level, threads, offline switches, caches — are then the same); any other call (another
kernel level, a SLURM cluster's variables, a wrapper module) runs as a real subprocess. Tests of how memlens starts
(tests/unit/harness/core/test_reproducibility.py, test_offline.py, test_install.py) start real processes themselves.

A test's own Python program (`python SCRIPT ARGS`: a training with the AuditCallback that kills itself, then resumes)
is forked the same way (`run_python`), under the same condition.

Protocol: the server (`python -m tests.integration.preloaded_cli SOCKET`) accepts one connection per call, forks a
supervisor that reads one JSON request line {args, env, cwd, stdout, stderr, timeout, script}, forks the call, waits for it
(killing its session at the timeout) and answers one JSON line {returncode, timed_out}.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# What the commands import (measured with -X importtime: torch ~1.6 s, transformers' model and trainer classes ~3 s,
# TRL, PEFT, datasets, matplotlib); memlens' own modules last.
PRELOAD = ("torch", "transformers", "transformers.models.llama.modeling_llama", "trl", "peft", "datasets",
           "matplotlib.pyplot", "accelerate", "safetensors.torch", "submitit", "hydra", "omegaconf",
           "memlens.harness.cli", "memlens.harness.audit.command", "memlens.harness.report.render",
           "memlens.recipes.orchestration.pipeline", "memlens.recipes.stages.registry", "memlens.synthetic_data.build")


def _run_call(request: dict) -> None:
    """In the forked call process: become `python -m memlens ARGS` and exit with its code (never returns)."""
    import atexit
    import runpy
    import traceback

    os.setsid()                                   # its own session: the timeout kills everything it started
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, key in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    # `python -m` puts the working directory first on sys.path, `python SCRIPT` the script's folder; then PYTHONPATH's
    # entries.
    script = request.get("script")
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:1] = [str(Path(script).parent) if script else request["cwd"], *extra]
    sys.argv = [script or str(Path(sys.modules["memlens"].__file__).parent / "__main__.py"), *request["args"]]
    code = 0
    try:
        if script:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module("memlens", run_name="__main__", alter_sys=True)
    except SystemExit as stop:                    # as the interpreter turns SystemExit into an exit status
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:                         # noqa: BLE001 — an uncaught exception: traceback, status 1
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _supervise(conn: socket.socket) -> None:
    """In the forked supervisor: read the request, run the call, answer its exit status (never returns)."""
    request = json.loads(conn.makefile("r", encoding="utf-8").readline())
    child = os.fork()
    if child == 0:
        conn.close()
        _run_call(request)
    deadline = time.monotonic() + request["timeout"]
    timed_out = False
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline and not timed_out:
            timed_out = True
            os.killpg(child, signal.SIGKILL)
        time.sleep(0.05)
    conn.sendall((json.dumps({"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}) + "\n")
                 .encode())
    conn.close()
    os._exit(0)


def serve(path: str) -> None:
    """Preload, then fork a supervisor per connection until stdin closes (the pytest worker that started it ended).
    One thread only: a fork copies just the thread that calls it, and a lock another thread held would stay held."""
    import importlib
    import select

    from memlens.harness.cli import stay_offline
    from memlens.harness.core.console import quiet_libraries
    from memlens.harness.core.kernels import pin_cpu_kernels

    # What the CLI sets before a command imports anything (harness/cli.py main and run): libraries read these
    # variables when they are imported — the kernel level, the offline switches, their progress bars — so the
    # server sets them before it imports those libraries, as each call would. (Measured: without quiet_libraries
    # here, a forked run printed the hub's "Loading weights" bars that a new interpreter does not.)
    stay_offline()
    pin_cpu_kernels()
    quiet_libraries()
    for name in PRELOAD:
        importlib.import_module(name)
    # The audit measures' modules, as the registry names them: reading it imports them (a forked call then does not).
    importlib.import_module("memlens.harness.audit.measure_registry").MEASURES.names()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([server, sys.stdin], [], [], 1.0)
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1024):
            return                                # the worker closed our stdin: it ended
        if server in readable:
            conn, _ = server.accept()
            if os.fork() == 0:
                server.close()
                _supervise(conn)
            conn.close()
        while True:                               # reap finished supervisors
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


class PreloadedCli:
    """A pytest worker's server process, started on first use; `run` is subprocess.run(["python", "-m", "memlens",
    ...], capture_output=True, text=True) for a call in the server's environment."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.env: dict[str, str] | None = None
        self.proc: subprocess.Popen | None = None

    def start(self, env: dict[str, str], cwd: Path) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env = dict(env)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.preloaded_cli",
                                      str(self.folder / "server.sock")], cwd=cwd, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the preloaded memlens server did not start (exit {self.proc.wait()})")

    def serves(self, env: dict[str, str]) -> bool:
        return self.proc is not None and self.proc.poll() is None and env == self.env

    def run(self, args: list[str], env: dict[str, str], cwd: Path, timeout: float,
            script: Path | None = None) -> subprocess.CompletedProcess:
        """`python -m memlens ARGS`, or with `script` `python SCRIPT ARGS` (a test's own program)."""
        stamp = f"{os.getpid()}-{time.monotonic_ns()}"
        out, err = self.folder / f"{stamp}.out", self.folder / f"{stamp}.err"
        request = {"args": list(args), "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err),
                   "timeout": timeout, "script": str(script) if script is not None else None}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(self.folder / "server.sock"))
            conn.sendall((json.dumps(request) + "\n").encode())
            answer = json.loads(conn.makefile("r", encoding="utf-8").readline())
        stdout, stderr = (p.read_text(encoding="utf-8", errors="replace") for p in (out, err))
        out.unlink()
        err.unlink()
        cmd = [sys.executable, *([str(script)] if script is not None else ["-m", "memlens"]), *args]
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
        return subprocess.CompletedProcess(cmd, answer["returncode"], stdout, stderr)


if __name__ == "__main__":
    serve(sys.argv[1])
