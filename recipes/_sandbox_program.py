"""The program side of the `tests` reward (recipes/sandbox.py): runs inside its own OS sandbox, after the codec.

It applies its limits, takes the program (prefix + completion + suffix) from its first frame, runs it, says whether
it loaded, then answers the grader's calls: {"call": name, "args": [...], "kwargs": {...}} -> {"value": ...} or
{"raised": "<exception type>"}. It knows no test, expected value or verdict: the grader, in another sandbox, holds
those. Everything the program could do to this process (replace builtins, the codec, the answers) only changes
its own answers. The file's text is handed to the interpreter with -c, never read from disk inside the sandbox.
"""

import os
import resource
import sys


def apply_limits(limits):
    """Hard limits, set before any program code runs; an unprivileged process cannot raise them again."""
    for name, value in (("RLIMIT_AS", limits["memory_bytes"]), ("RLIMIT_CPU", limits["cpu_seconds"]),
                        ("RLIMIT_FSIZE", limits["file_bytes"]), ("RLIMIT_CORE", 0),
                        ("RLIMIT_NPROC", limits.get("processes"))):
        if value is not None:    # CPU: SIGXCPU at the soft limit, SIGKILL a second later
            soft_hard = (value, value + 1) if name == "RLIMIT_CPU" else (value, value)
            resource.setrlimit(getattr(resource, name), soft_hard)


def main():
    inbox, outbox = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):            # the program's prints go nowhere; the protocol keeps its own descriptors
        os.dup2(devnull, fd)
    job = read_frame(inbox, 1 << 24)
    apply_limits(job["limits"])
    frame_limit = job["limits"]["frame_bytes"]

    def send(message):
        outbox.write(encode_frame(message))
        outbox.flush()

    namespace = {"__name__": "__sandboxed__"}
    try:
        exec(compile(job["program"], "<completion>", "exec"), namespace)
    except BaseException as e:      # a syntax error, a failed top-level statement, SystemExit: it did not load
        send({"loaded": False, "error": type(e).__name__})
        return
    send({"loaded": True})
    while True:
        request = read_frame(inbox, frame_limit)
        if request is None:
            return
        try:
            function = namespace[request["call"]]
            args = [from_plain(a) for a in request["args"]]
            kwargs = {k: from_plain(v) for k, v in request["kwargs"].items()}
            reply = {"value": to_plain(function(*args, **kwargs))}
        except BaseException as e:
            reply = {"raised": type(e).__name__}
        send(reply)


main()
