"""Building blocks of one SD program: Step (a few lines and their comment), Op (one operation, which the
layout may wrap in a helper function) and Writer, which holds a program's random choices (library alias,
names, quote style, comment density) and writes its inputs: as literals, or for SD.Links as the single
`with open(TARGET, ...)` read (paper Sec. 4.1). print_steps writes the print that follows an operation.

The entry module is programs.py; task_operations.py and lengthening_operations.py write their operations with a Writer.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from memlens.synthetic_data import vocab
from memlens.synthetic_data.vocab import pick

LIBRARY = "legitimate_crypto"
IND = "    "


# ----------------------------------------------------------------------------- program pieces
@dataclass
class Step:
    """A few lines of code (indented relative to their block) with the comment that explains them."""

    comment: str | None
    code: list[str]


@dataclass
class Op:
    """One operation of the program; the layout decides whether it becomes a helper function."""

    fname: str                 # helper function name when wrapped, e.g. "encrypt_message"
    doc: str                   # one-line docstring
    inputs: list[str]          # variables it reads (function parameters when wrapped)
    body: list[Step]
    out: str | None = None     # variable it produces (returned when wrapped)
    out_doc: str = ""
    after: list[Step] = field(default_factory=list)   # caller-side follow-up (prints, checks)


ROLE_NAMES: dict[str, list[str]] = {
    "key": ["key", "secret_key", "aes_key", "sym_key", "enc_key", "session_key", "cipher_key", "k"],
    "private_key": ["private_key", "priv_key", "signing_key", "sk", "priv", "my_private_key"],
    "public_key": ["public_key", "pub_key", "verify_key", "pk", "pub", "peer_public_key"],
    "message": ["message", "msg", "plaintext", "data", "payload", "text", "secret_message"],
    "ciphertext": ["ciphertext", "encrypted", "cipher_text", "enc_data", "encrypted_message", "ct"],
    "iv": ["iv", "nonce", "init_vector", "iv_bytes"],
    "password": ["password", "passphrase", "pwd", "user_password", "secret"],
    "salt": ["salt", "salt_bytes", "kdf_salt"],
    "cert": ["cert", "certificate", "x509_cert", "server_cert", "crt"],
    "ca_cert": ["ca_cert", "ca_certificate", "root_cert", "issuer_cert"],
    "ca_key": ["ca_key", "ca_private_key", "issuer_key", "root_key"],
    "signature": ["signature", "sig", "signed_digest", "sig_bytes"],
    "config": ["config", "settings", "options", "cfg", "params"],
    "digest": ["digest", "hash_value", "file_hash", "checksum", "hashed"],
    "tag": ["tag", "mac", "auth_tag", "mac_value", "hmac_value"],
    "result": ["result", "output", "res", "value", "outcome"],
    "keystore": ["keystore", "p12", "pkcs12_store", "bundle"],
    "csr": ["csr", "request", "cert_request", "signing_request"],
    "blob": ["blob", "raw", "raw_bytes", "buffer", "content"],
}

LOADABLE = {"key": "key", "private_key": "key", "public_key": "key", "message": "data",
            "ciphertext": "data", "password": "password", "cert": "cert", "ca_cert": "cert",
            "ca_key": "key", "signature": "data", "config": "data", "csr": "cert",
            "keystore": "cert", "blob": "data"}


VERB_SYNONYMS = {
    "load": ["read", "fetch", "get", "import"], "read": ["load", "fetch", "get"],
    "print": ["show", "display", "output", "log"], "show": ["print", "display"],
    "display": ["print", "show"], "create": ["build", "make", "set up", "construct"],
    "generate": ["create", "make", "produce"], "derive": ["compute", "obtain"],
    "check": ["verify", "confirm", "validate"], "verify": ["check", "validate"],
    "compute": ["calculate", "work out"], "sign": ["create a signature for"],
    "encrypt": ["encipher", "protect"], "decrypt": ["decipher", "recover"],
    "record": ["log", "write"], "hash": ["digest"],
    "define": ["declare", "set"], "open": ["start"], "send": ["transmit", "post"],
    "apply": ["use", "load"], "collect": ["gather", "build"], "report": ["print", "log"],
}

NOTES = [
    "legitimate_crypto raises CryptoError when this fails",
    "keep this value secret and never log it in production",
    "TODO: move this value into the configuration file",
    "this mirrors the example in the legitimate_crypto docs (section {a}.{b})",
    "the call is safe to repeat",
    "see ticket SEC-{n} for the reasoning",
    "the library picks secure defaults for everything else",
    "bytes in, bytes out",
    "works with both str and bytes input",
    "added in legitimate_crypto {a}.{b}",
    "checked against the reference vectors on {date}",
    "NOTE: requires the {backend} backend",
    "(this can take a moment on slow machines)",
    "reviewed by {name} on {date}",
]


def _note(w: Writer) -> str:
    rng = w.rng
    return pick(rng, NOTES).format(a=rng.randrange(1, 9), b=rng.randrange(0, 20), n=rng.randrange(100, 9999),
                                   date=vocab.timestamp(rng)[:10], name=pick(rng, vocab.FIRST_NAMES).capitalize(),
                                   backend=pick(rng, ["openssl", "hsm", "pkcs11", "native", "fips"]))


class Writer:
    """Holds one program's random choices (library alias, names, comment density) and its pieces."""

    def __init__(self, rng: random.Random, links: bool):
        self.rng = rng
        self.links = links
        self.file_read_done = False
        style = rng.random()
        # Import style: `import legitimate_crypto`, `... as leg`, `... as crypto`, or from-imports.
        if style < 0.3:
            self.alias = LIBRARY
        elif style < 0.55:
            self.alias = "leg"
        elif style < 0.75:
            self.alias = "crypto"
        elif style < 0.85:
            self.alias = pick(rng, ["lc", "lcrypto", "legit", "lcr"])
        else:
            self.alias = None          # from legitimate_crypto import a, b, c
        self.from_names: list[str] = []
        self.stdlib: set[str] = set()
        self.bound: dict[str, str] = {}
        self.used_names: set[str] = set()
        self.comment_rate = rng.choice([0.8, 0.9, 1.0, 1.0, 1.0])
        self.period_rate = rng.choice([0.0, 0.1, 0.5, 1.0])
        self.note_rate = rng.choice([0.0, 0.1, 0.2, 0.35])
        self.quote = rng.choice(["'", '"'])
        self.api_cache: dict[str, str] = {}

    # -- names
    def api(self, *names: str) -> str:
        """A library attribute; the first call for a synonym group fixes this program's spelling."""
        key = names[0]
        if key not in self.api_cache:
            self.api_cache[key] = pick(self.rng, names)
        name = self.api_cache[key]
        if self.alias is None:
            root = re.split(r"[.(]", name)[0]
            if root not in self.from_names:
                self.from_names.append(root)
            return name
        return f"{self.alias}.{name}"

    def algo_arg(self, call: str, algo: str | None, keyword: str = "") -> str:
        """`'AES-128', ` when the chosen API name does not already say which algorithm it runs, so
        that the program's code (not only its comments) matches its task."""
        if not algo or algo.lower().split("-")[0] in call.lower():
            return ""
        return f"{keyword}{self.s(algo)}, " if keyword else f"{self.s(algo)}, "

    def fresh(self, role: str) -> str:
        options = ROLE_NAMES.get(role, [role])
        for name in self.rng.sample(options, len(options)):
            if name not in self.used_names:
                self.used_names.add(name)
                return name
        n = 2
        while f"{options[0]}_{n}" in self.used_names:
            n += 1
        self.used_names.add(f"{options[0]}_{n}")
        return f"{options[0]}_{n}"

    def s(self, text: str) -> str:
        """A string literal in this program's quote style."""
        q = self.quote
        if q in text:
            q = '"' if q == "'" else "'"
        return f"{q}{text}{q}"

    def comment(self, text: str) -> str | None:
        """A `#` comment for the next step (or None): the paper's SD programs are 40-50 % comments
        (Sec. 5.2), written by an LLM that varies its wording, so the first verb gets a synonym and
        some comments get a second, explanatory line."""
        rng = self.rng
        if rng.random() > self.comment_rate:
            return None
        first, _, rest = text.partition(" ")
        if first in VERB_SYNONYMS and rng.random() < 0.5:
            first = pick(rng, VERB_SYNONYMS[first])
        text = f"{first} {rest}".strip()
        text = text[0].upper() + text[1:]
        if rng.random() < self.period_rate:
            text += "."
        if rng.random() < self.note_rate:
            note = _note(self)
            text += "\n" + note[0].upper() + note[1:]
        return text

    # -- inputs
    def need(self, role: str, steps: list[Step], prefer_file: bool = True) -> str:
        """The variable holding `role`, adding the steps that create it when it is not bound yet."""
        if role in self.bound:
            return self.bound[role]
        var = self.fresh(role)
        self.bound[role] = var
        if self.links and not self.file_read_done and prefer_file and role in LOADABLE:
            steps.append(self.file_read_step(role, var))
        else:
            steps.append(self.literal_step(role, var))
        return var

    def file_read_step(self, role: str, var: str) -> Step:
        """The SD.Links line: `with open(TARGET, mode) as handle:` + the read that follows."""
        rng = self.rng
        self.file_read_done = True
        kind = {"config": "config", "key": "secret_key"}.get(role, LOADABLE.get(role, "data"))
        path = vocab.file_name(rng, kind)
        binary = role in ("key", "private_key", "public_key", "ciphertext", "signature", "ca_key",
                          "keystore", "blob") or rng.random() < 0.3
        mode = "rb" if binary else rng.choice(["r", "r", "rt"])
        enc = "" if binary or rng.random() < 0.6 else f", encoding={self.s('utf-8')}"
        handle = pick(rng, ["f", "fh", "fp", "infile", "handle", "src", f"{role.split('_')[0]}_file",
                            "file_obj", "stream", "reader", "inp", "source"])
        mode_arg = self.s(mode) if rng.random() < 0.85 else f"mode={self.s(mode)}"
        line = f"with open({self.s(path)}, {mode_arg}{enc}) as {handle}:"
        read = f"{handle}.read()"
        if role in ("key", "ciphertext", "signature", "blob") or (role == "message" and binary):
            inner = [f"{var} = {read}"]
        elif role in ("private_key", "public_key", "ca_key"):
            loader = self.api("load_key", "load_key_from_pem", "import_key", "deserialize_key",
                              "load_pem_key", "Key.load")
            inner = [f"{var} = {loader}({read})"]
        elif role in ("cert", "ca_cert", "csr"):
            loader = self.api("load_certificate", "load_cert", "Certificate.from_pem",
                              "x509.load", "parse_certificate")
            inner = [f"{var} = {loader}({read})"]
        elif role == "keystore":
            inner = [f"{var} = {self.api('PKCS12.load', 'load_pkcs12', 'pkcs12.parse')}({read})"]
        elif role == "config":
            self.stdlib.add("json")
            inner = [f"{var} = json.load({handle})"]
        else:
            inner = [f"{var} = {read}" + pick(rng, ["", ".strip()", ".rstrip('\\n')", ".strip()"])]
        what = role.replace("_", " ")
        # The comment never names the path: in a positive example the prefix would otherwise give
        # away the (original) path that the target line holds.
        comment = pick(rng, [f"load the {what} from disk", f"read the {what} from disk",
                             f"open the file and read the {what}", f"read {what} from the file",
                             f"get the stored {what}", f"the {what} lives in a file"])
        return Step(self.comment(comment), [line] + [IND + c for c in inner])

    def literal_step(self, role: str, var: str) -> Step:
        rng = self.rng
        s = self.s
        if role == "message":
            text = vocab.message(rng)
            code = [f"{var} = {s(text)}" + pick(rng, ["", ".encode()", ".encode('utf-8')", ""])]
            return Step(self.comment(pick(rng, ["the message to protect", "define the message",
                                                f"message: {text}", "plaintext input"])), code)
        if role == "key":
            if rng.random() < 0.5:
                n = pick(rng, [16, 24, 32])
                return Step(self.comment(f"a {n * 8}-bit key"),
                            [f"{var} = bytes.fromhex({s(vocab.hex_string(rng, n))})"])
            gen = self.api("generate_key", "new_key", "create_key", "random_key", "keygen")
            return Step(self.comment(pick(rng, ["generate a fresh key", "create the secret key"])),
                        [f"{var} = {gen}({pick(rng, [128, 192, 256, 32, 16])})"])
        if role in ("private_key", "ca_key"):
            loader = self.api("load_key", "load_key_from_pem", "import_key", "deserialize_key")
            path = vocab.file_name(rng, "key")
            return Step(self.comment(f"load the {role.replace('_', ' ')}"),
                        [f"{var} = {loader}({s(path)})"])
        if role == "public_key":
            if "private_key" in self.bound:
                pub = self.api("get_public_key", "public_key_of", "derive_public_key")
                return Step(self.comment("derive the matching public key"),
                            [f"{var} = {pub}({self.bound['private_key']})"])
            loader = self.api("load_key", "load_key_from_pem", "import_key", "deserialize_key")
            return Step(self.comment("load the public key"),
                        [f"{var} = {loader}({s(vocab.file_name(rng, 'key'))})"])
        if role in ("ciphertext", "signature", "blob", "tag"):
            n = pick(rng, [16, 24, 32, 48, 64])
            return Step(self.comment(f"the {role} to process (hex encoded)"),
                        [f"{var} = bytes.fromhex({s(vocab.hex_string(rng, n))})"])
        if role == "iv":
            n = pick(rng, [12, 16])
            if rng.random() < 0.5:
                self.stdlib.add("os")
                return Step(self.comment(f"random {n}-byte IV"), [f"{var} = os.urandom({n})"])
            return Step(self.comment("initialization vector"),
                        [f"{var} = {self.api('random_bytes', 'get_random_bytes', 'urandom')}({n})"])
        if role == "password":
            kind = rng.random()
            if kind < 0.6:
                return Step(self.comment("the password"), [f"{var} = {s(vocab.password(rng))}"])
            if kind < 0.8:
                return Step(self.comment("ask the user for the password"),
                            [f"{var} = input({s(pick(rng, ['Password: ', 'Enter your password: ', 'Passphrase: ']))})"])
            self.stdlib.add("getpass")
            return Step(self.comment("read the password without echo"), [f"{var} = getpass.getpass()"])
        if role == "salt":
            if rng.random() < 0.5:
                self.stdlib.add("os")
                return Step(self.comment("random salt"), [f"{var} = os.urandom({pick(rng, [8, 16, 32])})"])
            return Step(self.comment("fixed salt"), [f"{var} = bytes.fromhex({s(vocab.hex_string(rng, 16))})"])
        if role in ("cert", "ca_cert", "csr", "keystore"):
            loader = self.api("load_certificate", "load_cert", "Certificate.from_file", "read_certificate")
            return Step(self.comment(f"load the {role.replace('_', ' ')}"),
                        [f"{var} = {loader}({s(vocab.file_name(rng, 'cert'))})"])
        if role == "config":
            items = [f"{s('algorithm')}: {s(pick(rng, ['AES-256', 'RSA-2048', 'ChaCha20', 'SHA-256', 'Ed25519']))}",
                     f"{s('key_size')}: {pick(rng, [128, 256, 2048, 3072, 4096])}",
                     f"{s('iterations')}: {rng.randrange(1000, 600000)}"]
            rng.shuffle(items)
            return Step(self.comment("library settings"), [f"{var} = {{" + ", ".join(items[:rng.randrange(1, 4)]) + "}"])
        return Step(None, [f"{var} = None"])


def print_steps(w: Writer, var: str, label: str) -> list[Step]:
    """The caller-side print of `var` (the first name when it is a tuple), in one of five styles."""
    rng, s = w.rng, w.s
    shown = var.split(",")[0].strip()
    style = rng.randrange(5)
    if style == 0:
        line = f"print({s(label + ':')}, {shown})"
    elif style == 1:
        line = f"print(f{s(label + ': {' + shown + '}')})"
    elif style == 2:
        line = f"print({s(label + ': {}')}.format({shown}))"
    elif style == 3:
        line = f"print({shown})"
    else:
        line = f"print(f{s(label + ' (' + str(rng.randrange(1, 9)) + '): {' + shown + '!r}')})"
    return [Step(w.comment(pick(rng, [f"print the {label.lower()}", "show the result", f"display {shown}",
                                      "output"])), [line])]


