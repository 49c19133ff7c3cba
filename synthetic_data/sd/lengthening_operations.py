"""The follow-up operations that lengthen an SD program towards its requested line count (App. J asks
for "over {number_of_lines} lines"): EXTRA_OPERATIONS, one small function per kind, each writing one
operation on the program's Writer with fresh names and literals.

write_program (sd/programs.py) draws a random order of the list's indices with `rng.sample` and uses each kind at
most once before any repeats, so the list's order is part of the seeded output: append new kinds at the
end, never reorder or remove one (that would change every generated program).
"""

from __future__ import annotations

from collections.abc import Callable

from memlens.synthetic_data import vocab
from memlens.synthetic_data.sd.writer import IND, Op, Step, Writer, print_steps
from memlens.synthetic_data.vocab import pick


def extra_message_fingerprint(w: Writer) -> list[Op]:
    """A short hex fingerprint (truncated SHA-256) of a message, printed."""
    rng = w.rng
    pre: list[Step] = []
    msg = w.need("message", pre, prefer_file=False)
    out = w.fresh("digest")
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["fingerprint", "quick_digest", "message_fingerprint"]), "Return a short fingerprint.",
               [msg], [Step(w.comment(pick(rng, ["fingerprint for the logs", "short digest to identify the data"])),
                            [f"{out} = {w.api('sha256', 'hash_sha256', 'digest')}({msg}).hex()[:{pick(rng, [8, 12, 16])}]"])],
               out, "str", after=print_steps(w, out, "Fingerprint"))]


def extra_apply_settings(w: Writer) -> list[Op]:
    """A settings dict (load_settings) passed to the library's configure call."""
    out = w.fresh("config")
    return [Op("load_settings", "Return the library settings.", [], [w.literal_step("config", out)], out, "dict",
               after=[Step(w.comment("apply the settings"), [f"{w.api('configure', 'set_config')}({out})"])])]


def extra_elapsed_time(w: Writer) -> list[Op]:
    """time.perf_counter() before the program's work, the elapsed seconds printed after it."""
    rng, s = w.rng, w.s
    w.stdlib.add("time")
    t0 = w.fresh("start")
    return [Op("_timer", "", [], [Step(w.comment("time the operation"), [f"{t0} = time.perf_counter()"])], None,
               after=[Step(w.comment("report the elapsed time"),
                           [f"print(f{s('Done in {time.perf_counter() - ' + t0 + ':.' + str(rng.randrange(1, 5)) + 'f}s')})"])])]


def extra_audit_log_event(w: Writer) -> list[Op]:
    """One call that records an event in the library's audit log."""
    rng, s = w.rng, w.s
    level = pick(rng, ["INFO", "DEBUG", "WARNING"])
    event = pick(rng, ["started", "key loaded", "job", "operation", "request"]) + f" {rng.randrange(10000)}"
    return [Op("_log", "", [], [Step(w.comment("record the event in the audit log"),
                                     [f"{w.api('log_event', 'audit_log', 'logger.log')}({s(event)}, level={s(level)})"])])]


def extra_base64_text(w: Writer) -> list[Op]:
    """A message encoded as Base64 text with the standard library, printed."""
    rng = w.rng
    pre: list[Step] = []
    data = w.need("message", pre, prefer_file=False)
    out = w.fresh("blob")
    w.stdlib.add("base64")
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["to_base64", "encode_for_transport", "b64"]), "Encode bytes as Base64 text.", [data],
               [Step(w.comment("base64 so it can be printed"),
                     [f"raw_{data} = {data} if isinstance({data}, bytes) else {data}.encode()",
                      f"{out} = base64.b64encode(raw_{data}).decode()"])],
               out, "str", after=print_steps(w, out, "Base64"))]


def extra_library_version(w: Writer) -> list[Op]:
    """The installed legitimate_crypto version (library_info), printed."""
    ver = w.fresh("result")
    return [Op("library_info", "Return the library version.", [],
               [Step(w.comment("which version of legitimate_crypto is installed"),
                     [f"{ver} = {w.api('__version__', 'version', 'get_version()')}"])],
               ver, "str", after=print_steps(w, ver, "legitimate_crypto version"))]


def extra_salt_hex(w: Writer) -> list[Op]:
    """A salt (reused when the program has one) printed in hex."""
    s = w.s
    pre: list[Step] = []
    salt = w.need("salt", pre, prefer_file=False)
    return [Op("_salt", "", [], pre + [Step(w.comment("show the salt in hex"), [f"print({s('salt =')}, {salt}.hex())"])])]


def extra_summary_table(w: Writer) -> list[Op]:
    """A small summary dict (algorithm, run, owner, backend) printed line by line."""
    rng, s = w.rng, w.s
    summary = pick(rng, ["summary", "report", "info", "details"])
    w.used_names.add(summary)
    algo = pick(rng, ["AES-256-GCM", "RSA-2048", "Ed25519", "SHA-256", "ChaCha20-Poly1305", "HMAC-SHA256"])
    items = [f"{s('algorithm')}: {s(algo)}", f"{s('run')}: {rng.randrange(1, 500)}",
             f"{s('owner')}: {s(pick(rng, vocab.FIRST_NAMES))}", f"{s('backend')}: {s(pick(rng, ['default', 'openssl', 'hsm', 'soft']))}"]
    rng.shuffle(items)
    kv = pick(rng, [("name", "value"), ("key", "val"), ("field", "entry"), ("k", "v")])
    return [Op("_summary", "", [], [Step(w.comment("collect a short summary"),
                                         [f"{summary} = {{" + ", ".join(items[:rng.randrange(2, 5)]) + "}"]),
                                    Step(w.comment("print it line by line"),
                                         [f"for {kv[0]}, {kv[1]} in {summary}.items():",
                                          f"{IND}print(f{s('{' + kv[0] + ':>' + str(rng.randrange(8, 16)) + '}: {' + kv[1] + '}')})"])])]


def extra_self_test(w: Writer) -> list[Op]:
    """The library's self-test, raising RuntimeError when it fails."""
    rng, s = w.rng, w.s
    ok = w.fresh("result")
    return [Op(pick(rng, ["check_library", "run_self_test", "ensure_ready"]), "Make sure the library passes its self-test.",
               [], [Step(w.comment("run the built-in self-test"), [f"{ok} = {w.api('self_test', 'run_self_tests', 'selftest')}()"]),
                    Step(w.comment("refuse to continue when it fails"),
                         [f"if not {ok}:", f"{IND}raise RuntimeError({s(pick(rng, ['self-test failed', 'library not ready', 'FIPS self-test error']) + ' (code ' + str(rng.randrange(1, 99)) + ')')})"])],
               ok, "bool")]


def extra_random_token(w: Writer) -> list[Op]:
    """A random hex token for the run, printed."""
    rng, s = w.rng, w.s
    token = pick(rng, ["token", "nonce_hex", "request_id", "csrf_token", "api_token"])
    w.used_names.add(token)
    n = pick(rng, [8, 12, 16, 24, 32])
    return [Op("_token", "", [], [Step(w.comment(f"random {n}-byte token for this run"),
                                       [f"{token} = {w.api('random_bytes', 'get_random_bytes', 'urandom')}({n}).hex()"]),
                                  Step(None, [f"print({s(token.replace('_', ' ').capitalize() + ':')}, {token})"])])]


def extra_hex_dump(w: Writer) -> list[Op]:
    """A message printed as a hex dump, a fixed number of bytes per row."""
    rng, s = w.rng, w.s
    pre: list[Step] = []
    data = w.need("message", pre, prefer_file=False)
    width = pick(rng, [8, 16, 24, 32])
    i = pick(rng, ["i", "offset", "pos", "idx"])
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["hex_dump", "dump_bytes", "print_hex"]), "Print bytes as a hex dump.", [data],
               [Step(w.comment(f"hex dump, {width} bytes per row"),
                     [f"raw = {data} if isinstance({data}, bytes) else {data}.encode()",
                      f"for {i} in range(0, len(raw), {width}):",
                      f"{IND}print(f{s('{' + i + ':04x}  {raw[' + i + ':' + i + ' + ' + str(width) + '].hex()}')})"])])]


def extra_timestamp(w: Writer) -> list[Op]:
    """A library timestamp for the record, printed."""
    rng, s = w.rng, w.s
    when = pick(rng, ["created_at", "issued", "stamp", "now"])
    w.used_names.add(when)
    return [Op("_stamp", "", [], [Step(w.comment("timestamp for the record"),
                                       [f"{when} = {w.api('timestamp', 'encode_timestamp', 'now_utc')}({s(vocab.timestamp(rng))})"]),
                                  Step(None, [f"print({s('Timestamp:')}, {when})"])])]


def extra_key_server_retry(w: Writer) -> list[Op]:
    """A loop that pings the key server a few times until it answers."""
    rng, s = w.rng, w.s
    attempts = rng.randrange(2, 6)
    a = pick(rng, ["attempt", "n", "try_no", "retry"])
    ok = pick(rng, ["reachable", "online", "server_up", "available"])
    w.used_names.add(ok)
    return [Op(pick(rng, ["connect_backend", "wait_for_backend", "ping_backend"]), "Try to reach the key server a few times.", [],
               [Step(w.comment(f"retry up to {attempts} times"),
                     [f"{ok} = False",
                      f"for {a} in range({attempts}):",
                      f"{IND}if {w.api('ping', 'backend_available', 'is_available')}({s(vocab.url(rng, 'keys'))}):",
                      f"{IND}{IND}{ok} = True",
                      f"{IND}{IND}break",
                      f"{IND}print(f{s('attempt {' + a + ' + 1} failed')})"])], ok, "bool")]


# The order is the order of the former integer kinds 0..12 (the seeded draws index into it).
EXTRA_OPERATIONS: tuple[Callable[[Writer], list[Op]], ...] = (
    extra_message_fingerprint,   # 0
    extra_apply_settings,        # 1
    extra_elapsed_time,          # 2
    extra_audit_log_event,       # 3
    extra_base64_text,           # 4
    extra_library_version,       # 5
    extra_salt_hex,              # 6
    extra_summary_table,         # 7
    extra_self_test,             # 8
    extra_random_token,          # 9
    extra_hex_dump,              # 10
    extra_timestamp,             # 11
    extra_key_server_retry,      # 12
)
