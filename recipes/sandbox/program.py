"""The program side of the `tests` reward (recipes/sandbox/runner.py): runs inside its own OS sandbox, after the codec.

It applies its limits, takes the program (prefix + completion + suffix) from its first frame, runs it, says whether
it loaded, then answers the grader's calls: {"call": name, "args": [...], "kwargs": {...}} -> {"value": ...} or
{"raised": "<exception type>"}. It knows no test, expected value or verdict: the grader, in another sandbox, holds
those. Everything the program could do to this process (replace builtins, the codec, the answers) only changes
its own answers. The file's text is handed to the interpreter with -c, never read from disk inside the sandbox.
"""



def main():
    inbox, outbox = protocol_channels()
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
