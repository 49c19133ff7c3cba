"""What both sandboxed sides share (their text is prepended to each): the plain-data codec, the frames, the limits.

Plain data across the sandbox boundary (recipes/sandbox/runner.py): every value a test passes to the program and every
value the program returns is encoded to JSON here and decoded on the other side into plain Python objects, so no
object of the program's making (with its own __eq__, __hash__ or __del__) ever reaches the grader's comparisons.

JSON keeps list, str, int, float (with inf and nan), bool and None; the rest that HumanEval-style tests pass and
return is tagged: {"~": "tuple" | "set" | "frozenset" | "dict" | "bytes" | "complex", "v": ...}. Anything else
cannot be encoded and fails the call.
"""

import json
import os
import resource

_TAGGED = {"tuple": tuple, "set": set, "frozenset": frozenset}
MAX_DEPTH = 64       # deeper nesting fails the call (a value built to exhaust the decoder's stack)


class Unencodable(TypeError):
    pass


def to_plain(value, depth=0):
    if depth > MAX_DEPTH:
        raise Unencodable("nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [to_plain(v, depth + 1) for v in value]
    for name, cls in _TAGGED.items():
        if kind is cls:
            items = [to_plain(v, depth + 1) for v in value]
            return {"~": name, "v": items if cls is tuple else sorted(items, key=repr)}
    if kind is dict:
        return {"~": "dict", "v": [[to_plain(k, depth + 1), to_plain(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"~": "bytes", "v": value.hex()}
    if kind is complex:
        return {"~": "complex", "v": [value.real, value.imag]}
    raise Unencodable(f"a {kind.__name__} cannot cross the sandbox boundary")


def from_plain(value, depth=0):
    if depth > MAX_DEPTH:
        raise Unencodable("nested too deeply")
    if isinstance(value, list):
        return [from_plain(v, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    tag, items = value.get("~"), value.get("v")
    if tag in _TAGGED:
        return _TAGGED[tag](from_plain(v, depth + 1) for v in items)
    if tag == "dict":
        return {from_plain(k, depth + 1): from_plain(v, depth + 1) for k, v in items}
    if tag == "bytes":
        return bytes.fromhex(items)
    if tag == "complex":
        return complex(float(items[0]), float(items[1]))
    raise Unencodable(f"unknown tag {tag!r}")


def encode_frame(message) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return len(body).to_bytes(4, "big") + body


def read_frame(stream, limit):
    """One length-prefixed JSON message from a binary stream, or None at its end."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    size = int.from_bytes(head, "big")
    if size > limit:
        raise ValueError(f"frame of {size} bytes over the {limit}-byte limit")
    body = stream.read(size)
    if len(body) < size:
        return None
    return json.loads(body.decode("utf-8"))


def protocol_channels():
    """(inbox, outbox): private copies of stdin and stdout for the frames; fds 0-2 then point at /dev/null, so
    whatever the sandboxed code prints goes nowhere. Its first frame says the sandbox started: sent by trusted code
    before any program or test code runs, so a side that never sends it failed to start (bubblewrap, the kernel, the
    interpreter), which recipes/sandbox/runner.py reports as an error and never as a score."""
    inbox, outbox = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    outbox.write(encode_frame({"started": True}))
    outbox.flush()
    return inbox, outbox


def apply_limits(limits):
    """Hard limits, set before any program or test code runs; an unprivileged process cannot raise them again.
    CPU: SIGXCPU at the soft limit, SIGKILL a second later (recipes/sandbox/runner.py reads either as a time-out)."""
    for name, value in (("RLIMIT_AS", limits["memory_bytes"]), ("RLIMIT_CPU", limits["cpu_seconds"]),
                        ("RLIMIT_FSIZE", limits["file_bytes"]), ("RLIMIT_CORE", 0),
                        ("RLIMIT_NPROC", limits.get("processes"))):
        if value is not None:
            resource.setrlimit(getattr(resource, name), (value, value + 1) if name == "RLIMIT_CPU" else (value, value))
