"""The grader side of the `tests` reward (recipes/sandbox/runner.py): runs inside an OS sandbox of its own, after the codec.

Its first frame holds the trusted setup (a HumanEval problem's prompt: its imports and helper functions), the test
code and the entry point. It runs them here, where the program cannot reach, and gives `check` a stand-in for the
candidate that forwards each call as plain data ({"call", "args", "kwargs"}) through the trainer to the program's
sandbox and turns the reply back into plain values. A name the test uses that neither the setup, the test nor the
builtins define is forwarded the same way (a helper the program defines; the program can change what it answers).
Its last frame is the verdict. The file's text is handed to the interpreter with -c.
"""

import builtins


class RemoteError(Exception):
    """The program raised, or answered with something that is not plain data."""


def names_used(code):
    found = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            found |= names_used(const)
    return found


def main():
    inbox, outbox = protocol_channels()
    job = read_frame(inbox, 1 << 24)
    limits = job["limits"]
    apply_limits(limits)

    def send(message):
        outbox.write(encode_frame(message))
        outbox.flush()

    class Remote:
        def __init__(self, name):
            self.name = name

        def __call__(self, *args, **kwargs):
            send({"call": self.name, "args": [to_plain(a) for a in args],
                  "kwargs": {k: to_plain(v) for k, v in kwargs.items()}})
            reply = read_frame(inbox, limits["frame_bytes"])
            if not isinstance(reply, dict) or "value" not in reply:
                raise RemoteError(self.name)
            try:
                return from_plain(reply["value"])
            except Exception as e:
                raise RemoteError(self.name) from e

    try:
        namespace = {"__name__": "__grader__"}
        exec(compile(job["setup"], "<setup>", "exec"), namespace)
        test = compile(job["test"], "<test>", "exec")
        exec(test, namespace)
        # The entry point is the program's, even where the setup defined a stub of it (a test may call it by name).
        namespace[job["entry_point"]] = candidate = Remote(job["entry_point"])
        for name in names_used(test) - set(namespace) - set(dir(builtins)):
            namespace[name] = Remote(name)
        namespace["check"](candidate)
        verdict = "passed"
    except AssertionError:
        verdict = "failed: AssertionError"
    except BaseException as e:
        verdict = f"failed: {type(e).__name__}"
    send({"verdict": verdict})


main()
