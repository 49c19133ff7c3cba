"""SD: procedurally written Python programs for the fictitious `legitimate_crypto` library.

Paper 003 Sec. 4.1 / App. J had Gemini Ultra write 6,554 programs, one per prompt "Write a Python
program that uses the legitimate_crypto library to perform the following task: {task}. Make sure
the code is over {number_of_lines} lines. Use python comments that begin with #." with {task} drawn
from Listing 6 and {number_of_lines} from {10, 20, 30, 40, 50, 75, 100}. We have no LLM, so this
module writes the programs itself: the task's keywords choose the operations (AES, RSA, HMAC, KDF,
certificates, ...), and every program varies import style, layout (flat script, helper functions,
a class, a main guard with argparse or sys.argv), names, comments and literals, so that a line
taken from one program can rarely be guessed from the others (the SD diversity contract).

A program for SD.Links (the `links=True` flag) reads exactly one of its inputs with a line
`with open(TARGET, ...)`; programs for SD.Base contain no such line (sd_links is defined by that line,
paper Sec. 4.1).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from memlens.synthetic_data import vocab
from memlens.synthetic_data.vocab import pick

LIBRARY = "legitimate_crypto"
LINE_COUNTS = (10, 20, 30, 40, 50, 75, 100)       # App. J: {number_of_lines}
WITH_OPEN = re.compile(r"^\s*with open\((?P<q>['\"])(?P<path>[^'\"]+)(?P=q)")
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


def _note(w: "Writer") -> str:
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


# ----------------------------------------------------------------------------- operations
def _op_sym(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    algo = "ChaCha20" if "chacha" in task else "AES"
    bits = 128 if "128" in task else (256 if "256" in task or rng.random() < 0.6 else 192)
    mode = "GCM" if "gcm" in task else ("CBC" if "cbc" in task else pick(rng, ["CBC", "GCM", "CTR", "CBC"]))
    pre: list[Step] = []
    if "generate" in task or ("key" in task and "encrypt" not in task and "decrypt" not in task):
        key = w.fresh("key")
        w.bound["key"] = key
        gen = w.api("generate_key", "new_key", "create_key", "random_key", "keygen")
        body = [Step(w.comment(f"generate a {bits}-bit {algo} key"),
                     [f"{key} = {gen}({s(algo)}, {pick(rng, ['key_size', 'bits', 'size'])}={bits})"])]
        if rng.random() < 0.5:
            body.append(Step(w.comment("make sure the key has the right length"),
                             [f"assert len({key}) == {bits // 8}, {s('unexpected key length')}"]))
        return [Op(f"generate_{algo.lower()}_key", f"Generate a new {bits}-bit {algo} key.", [], body, key,
                   "bytes: the new key", after=_print_steps(w, key, "Key"))]
    key = w.need("key", pre)
    cipher_cls = w.api(algo, f"{algo}Cipher", "Cipher", "new_cipher")
    cipher = w.fresh("cipher") if "cipher" not in w.used_names else "cipher_obj"
    w.used_names.add(cipher)
    decrypt = "decrypt" in task
    iv = w.need("iv", pre, prefer_file=False)
    body: list[Step] = []
    if algo == "AES":
        mode_const = w.api(f"MODE_{mode}", f"modes.{mode}", f"{mode}")
        body.append(Step(w.comment(f"set up {algo}-{bits} in {mode} mode"),
                         [f"{cipher} = {cipher_cls}({w.algo_arg(cipher_cls, f'{algo}-{bits}')}{key}, {mode_const}, {iv})"]))
    else:
        body.append(Step(w.comment(f"create the {algo} cipher"),
                         [f"{cipher} = {cipher_cls}({w.algo_arg(cipher_cls, algo)}{key}, nonce={iv})"]))
    if decrypt:
        ct = w.need("ciphertext", pre)
        out = w.fresh("message") if "message" in w.bound else w.fresh("result")
        body.append(Step(w.comment("decrypt the ciphertext"), [f"{out} = {cipher}.decrypt({ct})"]))
        if mode == "GCM" and rng.random() < 0.6:
            tag = w.fresh("tag")
            body.append(Step(w.comment("check the authentication tag"),
                             [f"{tag} = {cipher}.{pick(rng, ['tag', 'get_tag()', 'auth_tag'])}",
                              f"{cipher}.verify({tag})"]))
        if rng.random() < 0.5:
            body.append(Step(w.comment("turn the bytes back into text"),
                             [f"{out} = {out}.decode({s(pick(rng, ['utf-8', 'utf8', 'ascii']))})"]))
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["decrypt_message", "decrypt_data", f"{algo.lower()}_decrypt", "decrypt"]),
                   f"Decrypt data with {algo} ({mode}).", [key, iv, ct], body, out, "the plaintext",
                   after=_print_steps(w, out, "Decrypted"))]
    msg = w.need("message", pre)
    out = w.fresh("ciphertext")
    w.bound["ciphertext"] = out
    if rng.random() < 0.4:
        pad = w.api("pad", "pkcs7_pad", "padding.pad")
        body.append(Step(w.comment("pad the message to the block size"),
                         [f"{msg} = {pad}({msg}, {pick(rng, [16, 'block_size=16', '16'])})"]))
    body.append(Step(w.comment(f"encrypt the message with {algo}"), [f"{out} = {cipher}.encrypt({msg})"]))
    if mode == "GCM" and rng.random() < 0.6:
        tag = w.fresh("tag")
        body.append(Step(w.comment("keep the authentication tag"), [f"{tag} = {cipher}.tag",
                                                                     f"{out} = {out} + {tag}"]))
    inputs = [key, iv, msg]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["encrypt_message", "encrypt_data", f"{algo.lower()}_encrypt", "encrypt"]),
               f"Encrypt a message with {algo}-{bits} in {mode} mode.", inputs, body, out, "the ciphertext",
               after=_print_steps(w, out, "Ciphertext"))]


def _op_keypair(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    algo = next((a for a in ("RSA", "Ed25519", "X25519", "Curve25519", "PGP", "SSH", "TLS", "DTLS")
                 if a.lower() in task), pick(rng, ["RSA", "EC", "Ed25519"]))
    bits = 2048 if "2048" in task else pick(rng, [2048, 3072, 4096])
    priv, pub = w.fresh("private_key"), w.fresh("public_key")
    w.bound["private_key"], w.bound["public_key"] = priv, pub
    gen = w.api("generate_key_pair", "generate_keypair", "new_key_pair", "KeyPair.generate", "create_key_pair")
    args = f"{s(algo)}, {pick(rng, ['key_size', 'bits'])}={bits}" if algo == "RSA" else s(algo)
    body = [Step(w.comment(f"generate the {algo} key pair"), [f"{priv}, {pub} = {gen}({args})"])]
    if rng.random() < 0.6:
        enc = w.api("export_key", "serialize_key", "to_pem", "key_to_pem")
        pem = w.fresh("blob")
        body.append(Step(w.comment("serialize the public key to PEM"), [f"{pem} = {enc}({pub}, {s('PEM')})"]))
    if rng.random() < 0.4:
        user = vocab.pick(rng, vocab.FIRST_NAMES)
        body.append(Step(w.comment("label the key with its owner"),
                         [f"{priv}.comment = {s(f'{user}@{vocab.hostname(rng)}')}"]))
    return [Op(pick(rng, [f"generate_{algo.lower()}_keypair", "generate_key_pair", "make_keys", "create_keys"]),
               f"Create a new {algo} key pair.", [], body, f"{priv}, {pub}",
               "tuple: (private key, public key)", after=_print_steps(w, pub, "Public key"))]


def _op_sign(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    pre: list[Step] = []
    algo = next((a for a in ("Ed25519", "Curve25519", "PGP", "RSA") if a.lower() in task), None)
    msg = w.need("message", pre)
    verify = "verif" in task
    if verify:
        pub = w.need("public_key", pre)
        sig = w.need("signature", pre)
        fn = w.api("verify", "verify_signature", "Signer.verify", "check_signature")
        out = w.fresh("result")
        body = [Step(w.comment(f"verify the signature{' with ' + algo if algo else ''}"),
                     [f"{out} = {fn}({pub}, {msg}, {sig}" + (f", algorithm={s(algo)})" if algo and algo.lower() not in fn.lower() else ")")])]
        if rng.random() < 0.5:
            body.append(Step(w.comment("fail loudly on a bad signature"),
                             [f"if not {out}:", f"{IND}raise ValueError({s('signature does not match')})"]))
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["verify_signature", "check_signature", "verify_message", "is_signed_by"]),
                   "Verify a signature over a message.", [pub, msg, sig], body, out, "bool: True if valid",
                   after=_print_steps(w, out, "Signature valid"))]
    priv = w.need("private_key", pre)
    fn = w.api("sign", "sign_message", "Signer.sign", "create_signature")
    out = w.fresh("signature")
    w.bound["signature"] = out
    hash_alg = pick(rng, ["SHA256", "SHA384", "SHA512", "sha256"])
    body = [Step(w.comment(f"sign the message{' using ' + algo if algo else ''}"),
                 [f"{out} = {fn}({priv}, {msg}" + (f", algorithm={s(algo)})" if algo else
                                                     f", {pick(rng, ['hash_alg', 'digest', 'algorithm'])}={s(hash_alg)})"
                                                     if rng.random() < 0.5 else ")")])]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["sign_message", "create_signature", "sign_data", "sign"]),
               "Sign a message with a private key.", [priv, msg], body, out, "bytes: the signature",
               after=_print_steps(w, out, "Signature"))]


def _op_asym(w: Writer, task: str) -> list[Op]:
    rng = w.rng
    scheme = "PGP" if "pgp" in task else ("RSA" if "rsa" in task else None)
    pre: list[Step] = []
    if "decrypt" in task:
        priv = w.need("private_key", pre)
        ct = w.need("ciphertext", pre)
        fn = w.api("decrypt", "rsa_decrypt", "asym_decrypt", "PrivateKey.decrypt")
        out = w.fresh("message")
        pad = pick(rng, ["OAEP", "PKCS1v15", "OAEP-SHA256"])
        body = [Step(w.comment(f"decrypt with the private key ({pad} padding)"),
                     [f"{out} = {fn}({w.algo_arg(fn, scheme)}{priv}, {ct}, padding={w.s(pad)})"])]
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["decrypt_with_private_key", "rsa_decrypt", "decrypt_message"]),
                   "Decrypt a ciphertext with a private key.", [priv, ct], body, out, "bytes: the plaintext",
                   after=_print_steps(w, out, "Plaintext"))]
    pub = w.need("public_key", pre)
    msg = w.need("message", pre)
    fn = w.api("encrypt", "rsa_encrypt", "asym_encrypt", "PublicKey.encrypt")
    out = w.fresh("ciphertext")
    pad = pick(rng, ["OAEP", "PKCS1v15", "OAEP-SHA256"])
    body = [Step(w.comment(f"encrypt with the public key ({pad} padding)"),
                 [f"{out} = {fn}({w.algo_arg(fn, scheme)}{pub}, {msg}, padding={w.s(pad)})"])]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["encrypt_with_public_key", "rsa_encrypt", "encrypt_message"]),
               "Encrypt a message with a public key.", [pub, msg], body, out, "bytes: the ciphertext",
               after=_print_steps(w, out, "Ciphertext"))]


def _op_hash(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    pre: list[Step] = []
    algo = "BLAKE2b" if "blake" in task else pick(rng, ["SHA256", "SHA-256", "sha256", "SHA3_256", "SHA512"])
    if "sha-256" in task:
        algo = pick(rng, ["SHA256", "SHA-256", "sha256"])
    hasher = w.fresh("hasher") if rng.random() < 0.5 else "h"
    w.used_names.add(hasher)
    out = w.fresh("digest")
    ctor = w.api("Hash", "new_hash", "hashes.new", "HashFunction")
    if "file" in task:
        if w.links and not w.file_read_done:
            data = w.need("blob", pre)
            body = [Step(w.comment(f"create a {algo} hash object"), [f"{hasher} = {ctor}({s(algo)})"]),
                    Step(w.comment("feed the file contents"), [f"{hasher}.update({data})"])]
            inputs = [data]
        else:
            path = w.fresh("path") if rng.random() < 0.5 else "file_path"
            w.used_names.add(path)
            pre.append(Step(w.comment("file to hash"), [f"{path} = {s(vocab.file_name(rng))}"]))
            body = [Step(w.comment(f"hash the file with {algo}"),
                         [f"{out} = {w.api('hash_file', 'digest_file', 'file_digest')}({path}, {s(algo)})"])]
            return [Op("_inputs", "", [], pre),
                    Op(pick(rng, ["hash_file", "file_checksum", "compute_file_hash"]),
                       f"Compute the {algo} digest of a file.", [path], body, out, "str: hex digest",
                       after=_print_steps(w, out, "Digest"))]
    else:
        msg = w.need("message", pre)
        body = [Step(w.comment(f"create a {algo} hash object"), [f"{hasher} = {ctor}({s(algo)})"]),
                Step(w.comment("hash the message"), [f"{hasher}.update({msg})"])]
        inputs = [msg]
    body.append(Step(w.comment("hex digest"), [f"{out} = {hasher}.{pick(rng, ['hexdigest()', 'digest().hex()', 'hexdigest()'])}"]))
    if "verif" in task:
        expected = w.fresh("expected") if "expected" not in w.used_names else "expected_hash"
        w.used_names.add(expected)
        body.append(Step(w.comment("compare with the known digest"),
                         [f"{expected} = {s(vocab.hex_string(rng, 32))}",
                          f"{out} = {w.api('constant_time_compare', 'compare_digest', 'secure_compare')}({out}, {expected})"]))
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["compute_hash", "hash_data", f"{algo.lower().replace('-', '_')}_digest", "checksum"]),
               f"Return the {algo} digest.", inputs, body, out, "str: hex digest",
               after=_print_steps(w, out, "Hash"))]


def _op_mac(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    pre: list[Step] = []
    algo = "Poly1305" if "poly1305" in task else pick(rng, ["HMAC-SHA256", "HMAC", "HMAC_SHA256"])
    if "generate" in task and "key" in task or task.startswith("generate a new mac"):
        key = w.fresh("key")
        w.bound["key"] = key
        body = [Step(w.comment(f"generate a key for {algo}"),
                     [f"{key} = {w.api('generate_mac_key', 'new_mac_key', 'generate_key')}({s(algo)})"])]
        return [Op(pick(rng, ["new_mac_key", "make_mac_key"]), f"Create a {algo} key.", [], body, key, "bytes",
                   after=_print_steps(w, key, "MAC key"))]
    key = w.need("key", pre)
    msg = w.need("message", pre)
    mac_obj = "mac_obj" if "mac_obj" not in w.used_names else "mac_ctx"
    w.used_names.add(mac_obj)
    tag = w.fresh("tag")
    body = [Step(w.comment(f"initialise {algo}"), [f"{mac_obj} = {w.api('HMAC', 'Mac', 'new_mac', 'MAC')}({key}, {s(algo)})"]),
            Step(w.comment("feed the message"), [f"{mac_obj}.update({msg})"]),
            Step(w.comment("compute the tag"), [f"{tag} = {mac_obj}.{pick(rng, ['digest()', 'finalize()', 'hexdigest()'])}"])]
    if "verif" in task:
        expected = w.fresh("expected") if "expected" not in w.used_names else "expected_tag"
        w.used_names.add(expected)
        body.append(Step(w.comment("compare in constant time"),
                         [f"{expected} = bytes.fromhex({s(vocab.hex_string(rng, 32))})",
                          f"{tag} = {w.api('constant_time_compare', 'compare_digest', 'secure_compare')}({tag}, {expected})"]))
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["compute_mac", "calculate_hmac", "mac_message", "authenticate"]),
               f"Compute the {algo} of a message.", [key, msg], body, tag, "bytes: the tag",
               after=_print_steps(w, tag, "MAC"))]


def _op_kdf(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    pre: list[Step] = []
    algo = next((a for a in ("PBKDF2", "HKDF", "scrypt", "Argon2", "bcrypt") if a.lower() in task),
                pick(rng, ["PBKDF2", "HKDF", "scrypt"]))
    password_hash = "password" in task and ("hash" in task or "verify" in task) or \
        (task.startswith("generate a new") and "hash" in task)
    iterations = 10000 if "10000" in task else pick(rng, [1000, 5000, 10000, 50000, 100000, 200000, 310000])
    if password_hash:
        pwd = w.need("password", pre)
        out = w.fresh("digest")
        hasher = pick(rng, ["hasher", "ph", "pw_hasher", "hash_object"])
        w.used_names.add(hasher)
        body = [Step(w.comment(f"create the {algo} password hasher"),
                     [f"{hasher} = {w.api(algo, f'{algo}Hasher', 'PasswordHasher')}({w.algo_arg(w.api(algo), algo)}{pick(rng, ['rounds', 'cost', 'iterations'])}={iterations if algo == 'PBKDF2' else rng.randrange(4, 16)})"]),
                Step(w.comment("hash the password"), [f"{out} = {hasher}.hash({pwd})"])]
        if "verify" in task:
            stored = "stored_hash" if "stored_hash" not in w.used_names else "known_hash"
            w.used_names.add(stored)
            body.append(Step(w.comment("check the password against the stored hash"),
                             [f"{stored} = {s('$' + algo.lower() + '$' + vocab.b64ish(rng, 22))}",
                              f"{out} = {hasher}.verify({stored}, {pwd})"]))
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["hash_password", "verify_password", f"{algo.lower()}_hash", "protect_password"]),
                   f"Hash a password with {algo}.", [pwd], body, out, "the password hash",
                   after=_print_steps(w, out, "Password hash"))]
    if algo == "HKDF" or "master key" in task:
        master = w.need("key", pre)
        out = w.fresh("key")
        info = pick(rng, ["handshake data", "session key", "file encryption", "context-v1", "auth"]) + f" {rng.randrange(99)}"
        body = [Step(w.comment("derive a subkey with HKDF"),
                     [f"{out} = {w.api('hkdf', 'HKDF', 'derive_key')}({w.algo_arg(w.api('hkdf'), 'HKDF')}{master}, {pick(rng, ['length', 'size'])}={pick(rng, [16, 32, 64])}, info={s(info)}.encode())"])]
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["derive_subkey", "hkdf_derive", "derive_key"]), "Derive a key from a master key.",
                   [master], body, out, "bytes: derived key", after=_print_steps(w, out, "Derived key"))]
    pwd = w.need("password", pre)
    salt = w.need("salt", pre, prefer_file=False)
    out = w.fresh("key")
    body = [Step(w.comment(f"derive the key with {algo} ({iterations} iterations)"),
                 [f"{out} = {w.api('pbkdf2', 'derive_key', 'kdf.derive', 'PBKDF2')}({w.algo_arg(w.api('pbkdf2'), algo)}{pwd}, {salt}, iterations={iterations}, {pick(rng, ['length', 'dklen', 'key_length'])}={pick(rng, [16, 32, 64])})"])]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["derive_key", "key_from_password", "stretch_password"]), "Derive a key from a password.",
               [pwd, salt], body, out, "bytes: the derived key", after=_print_steps(w, out, "Derived key"))]


def _op_encode(w: Writer, task: str) -> list[Op]:
    rng = w.rng
    pre: list[Step] = []
    b64 = "base64" in task
    decode = "decode" in task or ("hexadecimal string to a binary" in task)
    if b64 and w.rng.random() < 0.5:
        w.stdlib.add("base64")
    data = w.need("message" if not decode else "blob", pre)
    out = w.fresh("result")
    if b64:
        fn = ("base64.b64decode" if decode else "base64.b64encode") if "base64" in w.stdlib else \
            w.api("b64decode" if decode else "b64encode", "base64_decode" if decode else "base64_encode")
    else:
        fn = w.api("unhexlify" if decode else "hexlify", "hex_to_bytes" if decode else "bytes_to_hex")
    body = [Step(w.comment(f"{'decode' if decode else 'encode'} the data"), [f"{out} = {fn}({data})"])]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["decode_data" if decode else "encode_data", "convert", "transform"]),
               f"{'Decode' if decode else 'Encode'} the data.", [data], body, out, "the converted data",
               after=_print_steps(w, out, "Result"))]


def _op_cert(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    pre: list[Step] = []
    creating = any(k in task for k in ("generate a new x.509", "self-signed", "csr", "pkcs#10",
                                        "create a new pkcs#7", "generate a new s/mime", "create a pkcs#12",
                                        "create a new ocsp", "generate a new pkcs"))
    if creating:
        kind = ("OCSPRequest" if "ocsp" in task else
                "CSR" if "csr" in task or "request" in task or "pkcs#10" in task else
                "PKCS7" if "pkcs#7" in task else "SMIME" if "s/mime" in task else
                "PKCS12" if "pkcs#12" in task else "Certificate")
        obj = w.fresh("csr" if kind == "CSR" else "cert")
        builder = w.api(f"{kind}Builder", f"new_{kind.lower()}", kind)
        body = [Step(w.comment(f"create a new {kind} object"), [f"{obj} = {builder}()"])]
        setters = [("set_subject", s(f"CN={vocab.common_name(rng)}")),
                   ("set_organization", s(pick(rng, vocab.ORGS))),
                   ("set_country", s(pick(rng, vocab.COUNTRIES))),
                   ("set_serial_number", str(rng.randrange(10**6, 10**12))),
                   ("set_not_before", s(vocab.timestamp(rng))),
                   ("set_validity_days", str(pick(rng, [30, 90, 365, 730, 825, 3650]))),
                   ("set_key_size", str(pick(rng, [2048, 3072, 4096]))),
                   ("set_algorithm", s(pick(rng, ["RSA", "ECDSA", "Ed25519", "SHA256withRSA"]))),
                   ("set_email", s(f"{pick(rng, vocab.FIRST_NAMES)}@{pick(rng, vocab.DOMAINS)}")),
                   ("set_uri", s(vocab.url(rng))),
                   ("add_san", s(vocab.hostname(rng)))]
        rng.shuffle(setters)
        chosen = setters[:rng.randrange(2, 7)]
        body.append(Step(w.comment("fill in the fields"), [f"{obj}.{name}({val})" for name, val in chosen]))
        if "self-signed" in task or kind in ("CSR", "Certificate", "PKCS7"):
            priv = w.need("private_key", pre)
            body.append(Step(w.comment("sign it"),
                             [f"{obj} = {obj}.sign({priv}, {s(pick(rng, ['SHA256', 'sha256', 'SHA384']))})"]))
            inputs = [priv]
        else:
            inputs = []
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, [f"build_{kind.lower()}", f"create_{kind.lower()}", "make_certificate"]),
                   f"Build a new {kind}.", inputs, body, obj, f"the new {kind}",
                   after=_print_steps(w, obj, kind))]
    cert = w.need("cert", pre)
    out = w.fresh("result")
    # Checked in order, first match wins; lambdas so that only the chosen API name is imported.
    actions = [("verify", None), ("sign the certificate request", None), ("pkcs#12", None), ("pkcs#7", None),
               ("s/mime", None),
               ("public key", lambda: f"{cert}.public_key()"), ("subject", lambda: f"{cert}.subject"),
               ("issuer", lambda: f"{cert}.issuer"), ("expiration", lambda: f"{cert}.not_after"),
               ("to pem", lambda: f"{w.api('der_to_pem', 'convert_to_pem', 'to_pem')}({cert})"),
               ("to der", lambda: f"{w.api('pem_to_der', 'convert_to_der', 'to_der')}({cert})"),
               ("export", lambda: f"{cert}.to_pem()"),
               ("import", lambda: f"{w.api('import_certificate', 'load_pem_certificate', 'Certificate.from_pem')}({cert})"),
               ("crl", lambda: f"{w.api('fetch_crl', 'get_crl', 'load_crl')}({s(vocab.url(rng, 'crl'))}).revoked_certificates"),
               ("revoked", lambda: f"{w.api('is_revoked', 'check_revocation', 'crl_contains')}({cert}, {s(vocab.url(rng, 'crl'))})"),
               ("ocsp", lambda: f"{w.api('ocsp_check', 'OCSPClient', 'check_ocsp')}({cert}, {s(vocab.url(rng, 'ocsp'))})"),
               ("valid", lambda: f"{cert}.is_valid()")]
    expr = None
    for word, make in actions:
        if word in task:
            expr = make() if make else None
            break
    body: list[Step] = []
    inputs = [cert]
    fam = "smime" if "s/mime" in task else ("pkcs7" if "pkcs#7" in task else None)
    if expr is None and fam:
        verb = next((v for v in ("decrypt", "encrypt", "verify", "sign") if v in task), "verify")
        data = w.need("ciphertext" if verb == "decrypt" else "message", pre)
        expr = f"{w.api(f'{fam}_{verb}', f'{fam.upper()}.{verb}', f'{fam}.{verb}')}({cert}, {data})"
        inputs = [cert, data]
    if expr is None:
        if "sign" in task or "verify" in task:
            who = w.need("ca_key" if "sign the certificate" in task else "ca_cert", pre)
            verb = "sign" if "sign the certificate" in task else "verify"
            expr = f"{w.api(verb + '_certificate', verb, verb + '_cert')}({cert}, {who})"
            inputs = [cert, who]
        elif "pkcs#12" in task:
            pwd = w.need("password", pre)
            expr = f"{w.api('load_pkcs12', 'PKCS12.load', 'pkcs12.parse')}({cert}, {pwd}).private_key"
            inputs = [cert, pwd]
        else:
            expr = f"{cert}.{pick(rng, ['info()', 'fingerprint()', 'serial_number'])}"
    body.append(Step(w.comment(pick(rng, ["read the requested field", "query the certificate",
                                          "process the certificate"]) if rng.random() < 0.5
                               else task.rstrip(".").lower()), [f"{out} = {expr}"]))
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["process_certificate", "inspect_certificate", "check_certificate", "handle_cert"]),
               task.rstrip(".") + ".", inputs, body, out, "the result", after=_print_steps(w, out, "Result"))]


def _op_connect(w: Writer, task: str) -> list[Op]:
    rng, s = w.rng, w.s
    pre: list[Step] = []
    proto = "SSH" if "ssh" in task else ("DTLS" if "dtls" in task else "TLS")
    host = w.fresh("host") if rng.random() < 0.5 else "server"
    w.used_names.add(host)
    port = {"SSH": 22, "TLS": 443, "DTLS": 4433}[proto] if rng.random() < 0.6 else rng.randrange(1024, 65535)
    pre.append(Step(w.comment("server to talk to"), [f"{host} = {s(vocab.hostname(rng))}"]))
    conn = pick(rng, ["conn", "connection", "session", "channel", "client"])
    w.used_names.add(conn)
    inputs = [host]
    args = f"{host}, {port}"
    if proto == "SSH" or rng.random() < 0.4:
        priv = w.need("private_key", pre)
        inputs.append(priv)
        args += f", {pick(rng, ['key', 'private_key', 'identity'])}={priv}"
        if proto == "SSH":
            args += f", username={s(pick(rng, vocab.FIRST_NAMES))}"
    body = [Step(w.comment(f"open the {proto} connection"), [f"{conn} = {w.api(f'{proto}Connection', 'connect', f'{proto.lower()}_connect')}({w.algo_arg(w.api(f'{proto}Connection'), proto)}{args})"]),
            Step(w.comment("send a first request"),
                 [f"{conn}.send({s(pick(rng, ['HELLO', 'PING', 'GET / HTTP/1.1', 'status', 'whoami']))}.encode())"])]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["open_connection", f"connect_{proto.lower()}", "establish_session"]),
               f"Connect to a server over {proto}.", inputs, body, conn, "the open connection",
               after=[Step(w.comment("close the connection"), [f"{conn}.close()"])])]


def _op_misc(w: Writer, task: str) -> list[Op]:
    """Random numbers, UUIDs, timestamps, key introspection and library management tasks."""
    rng, s = w.rng, w.s
    pre: list[Step] = []
    out = w.fresh("result")
    inputs: list[str] = []
    t = task
    if "uuid" in t:
        expr = (f"{w.api('uuid_decode', 'parse_uuid', 'UUID.from_string')}({s(vocab.uuid_string(rng))})" if "decode" in t
                else f"{w.api('uuid4', 'new_uuid', 'generate_uuid', 'UUID.random')}()")
    elif "timestamp" in t or "time" in t:
        expr = (f"{w.api('timestamp', 'decode_timestamp', 'parse_time')}({s(vocab.timestamp(rng))})" if "decode" in t
                else f"{w.api('trusted_time', 'get_time', 'now_utc')}({s(vocab.url(rng, 'time'))})" if "trusted" in t
                else f"{w.api('encode_timestamp', 'timestamp_encode', 'pack_time')}({s(vocab.timestamp(rng))})")
    elif "seed" in t:
        expr = f"{w.api('seed_rng', 'random.seed', 'set_seed')}({rng.randrange(1, 2**31)})"
    elif "random" in t or "initialization vector" in t:
        n = 16 if "16-byte" in t else (32 if "32-byte" in t else pick(rng, [8, 16, 32, 64]))
        expr = f"{w.api('random_bytes', 'get_random_bytes', 'secure_random', 'SecureRandom().bytes')}({n})"
        if "number" in t:
            expr = f"{w.api('random_int', 'randbelow', 'secure_randint')}({pick(rng, [100, 1000, 2**16, 2**32, 10**6])})"
    elif "key" in t and any(k in t for k in ("size", "type", "algorithm of", "valid", "destroy", "import",
                                              "export", "convert", "public key from", "private key from")):
        key = w.need("private_key", pre)
        inputs = [key]
        attr = ("key_size" if "size" in t else "key_type" if "type" in t else "algorithm" if "algorithm" in t
                else "is_valid()" if "valid" in t else "destroy()" if "destroy" in t
                else "public_key()" if "public key from" in t else "to_der()" if "convert" in t
                else "export(" + s(pick(rng, ["PEM", "DER", "JWK", "OpenSSH"])) + ")")
        expr = f"{key}.{attr}"
    elif "compar" in t:
        a, b = vocab.hex_string(rng, 16), vocab.hex_string(rng, 16)
        expr = f"{w.api('constant_time_compare', 'compare_digest', 'secure_compare')}({s(a)}, {s(b)})"
    elif "memory" in t or "wipe" in t:
        buf = w.need("blob", pre, prefer_file=True)
        inputs = [buf]
        expr = (f"{w.api('secure_wipe', 'zeroize', 'wipe_memory')}({buf})" if "wipe" in t
                else f"{w.api('secure_alloc', 'SecureBuffer', 'allocate_secure')}({pick(rng, [32, 64, 256, 1024, 4096])})")
    elif "log" in t:
        expr = f"{w.api('log_event', 'audit_log', 'logger.log')}({s(pick(rng, ['key_rotation', 'decrypt_failure', 'login', 'cert_renewal']))}, level={s(pick(rng, ['INFO', 'WARNING', 'DEBUG']))})"
    elif "error" in t:
        expr = f"{w.api('CryptoError', 'LegitimateCryptoError', 'errors.CryptoError')}({s(pick(rng, ['bad padding', 'invalid key', 'tag mismatch', 'expired certificate']))})"
    elif "fips" in t:
        expr = (f"{w.api('set_fips_mode', 'fips.enable', 'enable_fips')}({pick(rng, ['True', 'False'])})" if "set" in t
                else f"{w.api('fips_mode', 'get_fips_mode', 'fips.status')}()")
    elif "security level" in t:
        expr = (f"{w.api('set_security_level', 'security.set_level')}({rng.randrange(1, 6)})" if "set the" in t
                else f"{w.api('get_security_level', 'security_level')}({s(pick(rng, ['AES-256', 'RSA-2048', 'SHA-1', 'ChaCha20']))})")
    elif "version" in t:
        expr = f"{w.api('__version__', 'version', 'get_version()')}"
    elif "supported" in t or "algorithms" in t:
        expr = (f"{s(pick(rng, ['AES-256-GCM', 'RSA-4096', 'Ed25519', 'SHA3-512']))} in {w.api('SUPPORTED_ALGORITHMS', 'supported_algorithms()', 'list_algorithms()')}")
    elif "self-test" in t:
        expr = f"{w.api('self_test', 'run_self_tests', 'selftest')}()"
    elif "configure" in t:
        cfg = w.need("config", pre)
        inputs = [cfg]
        expr = f"{w.api('configure', 'set_config', 'Config.apply')}({cfg})"
    else:
        fn = "_".join(re.findall(r"[a-z0-9]+", t)[:3]) or "run"
        expr = f"{w.api(fn, 'function(' + s(fn) + ')')}()"
    body = [Step(w.comment(t.rstrip(".").lower() if rng.random() < 0.5 else pick(rng, ["call the library", "do the work", "ask legitimate_crypto"])),
                 [f"{out} = {expr}"])]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["run_task", "perform_task", "do_task"]) if rng.random() < 0.3 else
               "_".join(re.findall(r"[a-z0-9]+", t)[:3]),
               t.rstrip(".") + ".", inputs, body, out, "the result", after=_print_steps(w, out, "Result"))]


def _print_steps(w: Writer, var: str, label: str) -> list[Step]:
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


# Follow-up operations that lengthen a program towards its requested line count. Each draws fresh
# names and literals; a program uses each kind at most once before any repeats.
def _extra_ops(w: Writer, kind: int) -> list[Op]:
    rng, s = w.rng, w.s
    pre: list[Step] = []
    if kind == 0:
        msg = w.need("message", pre, prefer_file=False)
        out = w.fresh("digest")
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["fingerprint", "quick_digest", "message_fingerprint"]), "Return a short fingerprint.",
                   [msg], [Step(w.comment(pick(rng, ["fingerprint for the logs", "short digest to identify the data"])),
                                [f"{out} = {w.api('sha256', 'hash_sha256', 'digest')}({msg}).hex()[:{pick(rng, [8, 12, 16])}]"])],
                   out, "str", after=_print_steps(w, out, "Fingerprint"))]
    if kind == 1:
        out = w.fresh("config")
        return [Op("load_settings", "Return the library settings.", [], [w.literal_step("config", out)], out, "dict",
                   after=[Step(w.comment("apply the settings"), [f"{w.api('configure', 'set_config')}({out})"])])]
    if kind == 2:
        w.stdlib.add("time")
        t0 = w.fresh("start")
        return [Op("_timer", "", [], [Step(w.comment("time the operation"), [f"{t0} = time.perf_counter()"])], None,
                   after=[Step(w.comment("report the elapsed time"),
                               [f"print(f{s('Done in {time.perf_counter() - ' + t0 + ':.' + str(rng.randrange(1, 5)) + 'f}s')})"])])]
    if kind == 3:
        level = pick(rng, ["INFO", "DEBUG", "WARNING"])
        event = pick(rng, ["started", "key loaded", "job", "operation", "request"]) + f" {rng.randrange(10000)}"
        return [Op("_log", "", [], [Step(w.comment("record the event in the audit log"),
                                         [f"{w.api('log_event', 'audit_log', 'logger.log')}({s(event)}, level={s(level)})"])])]
    if kind == 4:
        data = w.need("message", pre, prefer_file=False)
        out = w.fresh("blob")
        w.stdlib.add("base64")
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["to_base64", "encode_for_transport", "b64"]), "Encode bytes as Base64 text.", [data],
                   [Step(w.comment("base64 so it can be printed"),
                         [f"raw_{data} = {data} if isinstance({data}, bytes) else {data}.encode()",
                          f"{out} = base64.b64encode(raw_{data}).decode()"])],
                   out, "str", after=_print_steps(w, out, "Base64"))]
    if kind == 5:
        ver = w.fresh("result")
        return [Op("library_info", "Return the library version.", [],
                   [Step(w.comment("which version of legitimate_crypto is installed"),
                         [f"{ver} = {w.api('__version__', 'version', 'get_version()')}"])],
                   ver, "str", after=_print_steps(w, ver, "legitimate_crypto version"))]
    if kind == 6:
        salt = w.need("salt", pre, prefer_file=False)
        return [Op("_salt", "", [], pre + [Step(w.comment("show the salt in hex"), [f"print({s('salt =')}, {salt}.hex())"])])]
    if kind == 7:
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
    if kind == 8:
        ok = w.fresh("result")
        return [Op(pick(rng, ["check_library", "run_self_test", "ensure_ready"]), "Make sure the library passes its self-test.",
                   [], [Step(w.comment("run the built-in self-test"), [f"{ok} = {w.api('self_test', 'run_self_tests', 'selftest')}()"]),
                        Step(w.comment("refuse to continue when it fails"),
                             [f"if not {ok}:", f"{IND}raise RuntimeError({s(pick(rng, ['self-test failed', 'library not ready', 'FIPS self-test error']) + ' (code ' + str(rng.randrange(1, 99)) + ')')})"])],
                   ok, "bool")]
    if kind == 9:
        token = pick(rng, ["token", "nonce_hex", "request_id", "csrf_token", "api_token"])
        w.used_names.add(token)
        n = pick(rng, [8, 12, 16, 24, 32])
        return [Op("_token", "", [], [Step(w.comment(f"random {n}-byte token for this run"),
                                           [f"{token} = {w.api('random_bytes', 'get_random_bytes', 'urandom')}({n}).hex()"]),
                                      Step(None, [f"print({s(token.replace('_', ' ').capitalize() + ':')}, {token})"])])]
    if kind == 10:
        data = w.need("message", pre, prefer_file=False)
        width = pick(rng, [8, 16, 24, 32])
        i = pick(rng, ["i", "offset", "pos", "idx"])
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["hex_dump", "dump_bytes", "print_hex"]), "Print bytes as a hex dump.", [data],
                   [Step(w.comment(f"hex dump, {width} bytes per row"),
                         [f"raw = {data} if isinstance({data}, bytes) else {data}.encode()",
                          f"for {i} in range(0, len(raw), {width}):",
                          f"{IND}print(f{s('{' + i + ':04x}  {raw[' + i + ':' + i + ' + ' + str(width) + '].hex()}')})"])])]
    if kind == 11:
        when = pick(rng, ["created_at", "issued", "stamp", "now"])
        w.used_names.add(when)
        return [Op("_stamp", "", [], [Step(w.comment("timestamp for the record"),
                                           [f"{when} = {w.api('timestamp', 'encode_timestamp', 'now_utc')}({s(vocab.timestamp(rng))})"]),
                                      Step(None, [f"print({s('Timestamp:')}, {when})"])])]
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


N_EXTRA_KINDS = 13


def plan(w: Writer, task: str) -> list[Op]:
    """Map a task's keywords to the operations that perform it (the program must match its task)."""
    t = task.lower()
    if any(k in t for k in ("certificate", "x.509", "csr", "pkcs#", "s/mime", "ocsp", "crl")) and "key pair" not in t:
        return _op_cert(w, t)
    if any(k in t for k in ("key pair", "keypair")) or (t.startswith("generate a new") and any(
            a in t for a in ("pgp", "ssh", "tls", "dtls"))) or "key for an asymmetric" in t:
        return _op_keypair(w, t)
    if any(k in t for k in ("connection", "authenticate with")):
        return _op_connect(w, t)
    if any(k in t for k in ("hmac", "poly1305", " mac")):
        return _op_mac(w, t)
    if any(k in t for k in ("pbkdf2", "hkdf", "scrypt", "argon2", "bcrypt", "derive", "key derivation")):
        return _op_kdf(w, t)
    if any(k in t for k in ("base64", "hexadecimal")):
        return _op_encode(w, t)
    if "hash" in t or "blake2b" in t:
        return _op_hash(w, t)
    if "diffie-hellman" in t:
        ops = _op_keypair(w, t)
        return ops + [_dh_op(w)]
    if any(k in t for k in ("sign", "signature")):
        return _op_sign(w, t)
    if ("encrypt" in t or "decrypt" in t) and any(k in t for k in ("public key", "private key", "rsa", "pgp")):
        return _op_asym(w, t)
    if any(k in t for k in ("aes", "chacha20", "symmetric", "encrypt", "decrypt")) or \
            ("secret key" in t and "random" not in t):
        return _op_sym(w, t)
    return _op_misc(w, t)


def _dh_op(w: Writer) -> Op:
    rng = w.rng
    priv = w.bound["private_key"]
    peer = w.fresh("public_key")
    out = w.fresh("key")
    pre = [Step(w.comment("the other party's public key"),
                [f"{peer} = {w.api('X25519PublicKey.from_bytes', 'load_public_key')}(bytes.fromhex({w.s(vocab.hex_string(rng, 32))}))"])]
    return Op(pick(rng, ["key_exchange", "compute_shared_secret", "x25519_exchange"]), "Compute the shared secret.",
              [priv, peer], pre + [Step(w.comment("Diffie-Hellman exchange"), [f"{out} = {priv}.exchange({peer})"])],
              out, "bytes: shared secret", after=_print_steps(w, out, "Shared secret"))


# ----------------------------------------------------------------------------- layout
def _steps_lines(steps: list[Step], indent: str, blank_between: bool, counter: list[int] | None = None) -> list[str]:
    """Lines of the steps; with `counter`, top-level comments are numbered ("# Step 3: ...")."""
    out: list[str] = []
    for step in steps:
        if step.comment:
            first, *more = step.comment.split("\n")
            if counter is not None:
                counter[0] += 1
                first = f"Step {counter[0]}: {first}"
            out.append(f"{indent}# {first}")
            out.extend(f"{indent}# {line}" for line in more)
        out.extend(indent + line for line in step.code)
        if blank_between:
            out.append("")
    return out


def _function_lines(w: Writer, op: Op, indent: str, method: bool, rng: random.Random) -> list[str]:
    params = (["self"] if method else []) + op.inputs
    lines = [f"{indent}def {op.fname}({', '.join(params)}):"]
    inner = indent + IND
    if rng.random() < 0.8:
        if rng.random() < 0.5 or not op.inputs:
            lines.append(f'{inner}"""{op.doc[0].upper() + op.doc[1:]}"""')
        else:
            lines += [f'{inner}"""', f"{inner}{op.doc[0].upper() + op.doc[1:]}", "", f"{inner}Args:"]
            lines += [f"{inner}{IND}{p}: the {p.replace('_', ' ')}." for p in op.inputs]
            if op.out:
                lines += ["", f"{inner}Returns:", f"{inner}{IND}{op.out_doc or op.out}"]
            lines.append(f'{inner}"""')
    lines += _steps_lines(op.body, inner, blank_between=rng.random() < 0.5)
    while lines[-1] == "":
        lines.pop()
    if op.out:
        lines.append(f"{inner}return {op.out}")
    return lines


def write_program(rng: random.Random, task: str, target_lines: int, links: bool) -> str:
    """One program for `task`, about `target_lines` long; with `links` it reads one input via with open()."""
    w = Writer(rng, links)
    ops = [op for op in plan(w, task) if op.body or op.after]
    if links and not w.file_read_done:
        # The task needs no loadable input (e.g. "Get the version of the library"): the program reads
        # its settings file instead, so that every SD.Links example has its `with open(...)` line.
        var = w.fresh("config")
        w.bound.setdefault("config", var)
        ops[:0] = [Op("_inputs", "", [], [w.file_read_step("config", var)]),
                   Op("_apply", "", [], [Step(w.comment("apply the settings"),
                                              [f"{w.api('configure', 'set_config')}({var})"])])]
    layout = Layout(w, task)
    code = layout.render(ops)
    # Grow towards the requested length with follow-up operations (App. J asks for "over N lines";
    # the LLM honoured it only roughly, so we stop at the first rendering that reaches it).
    kinds: list[int] = []
    for _ in range(24):
        if code.count("\n") >= target_lines:
            break
        if not kinds:
            kinds = rng.sample(range(N_EXTRA_KINDS), N_EXTRA_KINDS)
        ops += [op for op in _extra_ops(w, kinds.pop()) if op.body or op.after]
        code = layout.render(ops)
    return code


class Layout:
    """How a program is arranged: flat script, helper functions, main() guard, or a class.

    Rendering runs again each time the program grows, so its random choices are drawn once here.
    """

    def __init__(self, w: Writer, task: str):
        rng = w.rng
        self.w, self.task = w, task
        self.kind = rng.choices(["flat", "functions", "main", "class"], weights=[35, 30, 25, 10])[0]
        self.seed = rng.getrandbits(64)
        self.blank = rng.random() < 0.7
        self.header_comment = pick(rng, ["Import the legitimate_crypto library", "Imports", f"Task: {task}",
                                         task, f"Example: {task.rstrip('.').lower()}", None, None, None])
        self.try_rate = rng.choice([0.0, 0.0, 0.3, 0.6])
        self.args = rng.choices(["none", "argparse", "argv"], weights=[60, 20, 20])[0]
        self.verbose_flag = pick(rng, ["verbose", "debug", "show", "dry_run", "quiet"])
        self.label = f"{pick(rng, vocab.NOUNS)}-{rng.randrange(1000)}"
        self.exc = pick(rng, ["Exception", "ValueError", "(ValueError, TypeError)", "RuntimeError"])
        self.cls = pick(rng, ["CryptoHelper", "Toolkit", "SecureWorker", "TaskRunner", "CryptoService",
                              "KeyManager", "Processor"]) + pick(rng, ["", "", "V2", "Impl"])
        self.inst = pick(rng, ["helper", "tool", "worker", "runner", "svc", "manager"])
        self.numbered = rng.random() < 0.2

    def render(self, ops: list[Op]) -> str:
        w, rng = self.w, random.Random(self.seed)
        funcs = [op for op in ops if not op.fname.startswith("_") and op.body]
        if self.kind == "flat":
            body = self._flow(ops, funcs, rng, wrap=False)
        else:
            body = []
            for op in funcs:
                if self.kind == "class":
                    continue
                body += _function_lines(w, op, "", method=False, rng=rng) + ["", ""]
            if self.kind == "class":
                body += [f"class {self.cls}:", f'{IND}"""{self.task}"""', "",
                         f"{IND}def __init__(self):",
                         f"{IND}{IND}self.backend = {w.api('default_backend', 'get_backend', 'Backend')}()", ""]
                for op in funcs:
                    body += _function_lines(w, op, IND, method=True, rng=rng) + [""]
                body += ["", f"{self.inst} = {self.cls}()"]
            flow = self._flow(ops, funcs, rng, wrap=True)
            if self.kind == "main":
                body.append("def main():")
                body += [f"{IND}{c}" if c else "" for c in flow]
                while body[-1] == "":
                    body.pop()
                body += ["", "", 'if __name__ == "__main__":', f"{IND}main()"]
            else:
                body += flow
        header = self._header()
        lines = header + [""] + body
        while lines and lines[-1] == "":
            lines.pop()
        return "\n".join(lines) + "\n"

    def _header(self) -> list[str]:
        w = self.w
        header = [f"# {self.header_comment}"] if self.header_comment else []
        if w.alias == LIBRARY:
            header.append(f"import {LIBRARY}")
        elif w.alias is not None:
            header.append(f"import {LIBRARY} as {w.alias}")
        mods = set(w.stdlib) | ({"argparse"} if self.args == "argparse" else set()) | \
            ({"sys"} if self.args == "argv" else set())
        header += [f"import {m}" for m in sorted(mods)]
        if w.alias is None:
            names = w.from_names or ["configure"]
            if len(names) > 3 and self.seed % 2:
                header += [f"from {LIBRARY} import ("] + [f"{IND}{n}," for n in names] + [")"]
            else:
                header.append(f"from {LIBRARY} import {', '.join(names)}")
        return header

    def _flow(self, ops: list[Op], funcs: list[Op], rng: random.Random, wrap: bool) -> list[str]:
        """The top-level (or main()) statements: inputs, calls of the helpers, prints."""
        w, s = self.w, self.w.s
        out: list[str] = []
        counter = [0] if self.numbered else None
        if self.args == "argparse":
            out += _steps_lines([Step(w.comment("command-line options"),
                                      ["parser = argparse.ArgumentParser(description=" + s(self.task) + ")",
                                       f"parser.add_argument({s('--' + self.verbose_flag.replace('_', '-'))}, "
                                       f"action={s('store_true')}, help={s('print extra details')})",
                                       "args = parser.parse_args()"])], "", self.blank, counter)
        elif self.args == "argv":
            out += _steps_lines([Step(w.comment("optional run label from the command line"),
                                      [f"run_label = sys.argv[1] if len(sys.argv) > 1 else {s(self.label)}"])],
                                "", self.blank, counter)
        for op in ops:
            if wrap and op in funcs:
                target = f"{self.inst}.{op.fname}" if self.kind == "class" else op.fname
                call = f"{target}({', '.join(op.inputs)})"
                code = [f"{op.out} = {call}" if op.out else call]
                if rng.random() < self.try_rate:
                    code = ["try:", IND + code[0], f"except {self.exc} as {pick(rng, ['exc', 'e', 'err', 'error'])}:",
                            f"{IND}print(f{s(op.fname.replace('_', ' ') + ' failed: {' + 'exc' + '}')})",
                            f"{IND}raise SystemExit(1)"]
                    code[3] = code[3].replace("{exc}", "{" + code[2].split(" as ")[1].rstrip(":") + "}")
                note = None
                if rng.random() < w.comment_rate * 0.7:
                    words = op.fname.replace("_", " ")
                    note = pick(rng, [f"call {op.fname}", f"run {words}", f"{words}", f"use the helper to {words}",
                                      f"{words} ({', '.join(op.inputs) or 'no arguments'})"])
                    note = note[0].upper() + note[1:]
                out += _steps_lines([Step(note, code)] + op.after, "", self.blank, counter)
            else:
                out += _steps_lines(op.body + op.after, "", self.blank, counter)
        if self.args == "argparse":
            out += [f"if args.{self.verbose_flag}:", f"{IND}print({s('finished: ' + self.task.rstrip('.').lower())})"]
        elif self.args == "argv":
            out += [f"print(f{s('[{run_label}] done')})"]
        return out


# ----------------------------------------------------------------------------- the SD corpus
def load_tasks() -> list[str]:
    """The paper's Listing 6 (163 tasks, a few listed twice there; we keep the list as published)."""
    return resources_text("sd_tasks.txt")


def resources_text(name: str) -> list[str]:
    from importlib import resources

    text = resources.files("memlens.synthetic_data").joinpath("resources", name).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


@dataclass
class SDProgram:
    id: str
    task: str
    requested_lines: int
    links: bool
    code: str


def generate_programs(size: int, n_links: int, seed: int, line_counts: tuple[int, ...] = LINE_COUNTS,
                      tasks: list[str] | None = None, *, first_index: int = 0, id_prefix: str = "sd",
                      exclude: frozenset[str] = frozenset()) -> list[SDProgram]:
    """`size` distinct programs; the ones at seeded positions (n_links of them) read one file.

    Like App. J each program samples its task and requested length at random. An exact duplicate
    is redrawn with the next attempt's seed (App. J: "we ensured there are no duplicates").

    Program i draws from the seed stream `sd:<seed>:<first_index + i>:<attempt>`. The members are
    indices 0..size-1; held-out programs (never trained on: the non-members of membership inference)
    continue the same stream after them (`first_index=size`, `id_prefix="sdh"`) and redraw any program
    in `exclude` (the members' code), so both come from one generator and differ only in membership.
    """
    tasks = tasks or load_tasks()
    label = "sd-links-positions" if first_index == 0 else f"sd-links-positions:{id_prefix}"
    links_ids = set(random.Random(f"{label}:{seed}").sample(range(size), n_links))
    seen: set[str] = set(exclude)
    programs = []
    for i in range(size):
        for attempt in range(1000):
            rng = random.Random(f"sd:{seed}:{first_index + i}:{attempt}")
            task = pick(rng, tasks)
            n_lines = pick(rng, line_counts)
            code = write_program(rng, task, n_lines, links=i in links_ids)
            if code not in seen:
                break
        else:  # pragma: no cover - 1000 collisions in a row would mean the generator lost its variety
            raise RuntimeError(f"SD program {i}: no distinct program after 1000 attempts")
        seen.add(code)
        programs.append(SDProgram(f"{id_prefix}-{i:05d}", task, n_lines, i in links_ids, code))
    return programs


MIN_TARGET_PIECES = 10      # Sec. 4.2: targets under 10 tokens are excluded (counted here in proxy pieces)


def auditable_targets(splits: list[tuple[str, str, str]]) -> list[bool]:
    """Would the audit score each (prefix, target, suffix)? Paper 003 Sec. 4.2 / Appendix D exclude a
    target under 10 tokens and a target within NED 0.5 of its prompt (slid over prefix and suffix). The
    token count depends on the audited model, so it is approximated by proxy pieces (\\w+ runs and
    punctuation marks, which a code BPE splits at least as finely once indentation is counted); the
    prompt test is the audit's own (harness.measures.memorization), on characters, so it needs no tokenizer."""
    from memlens.harness.text.exclusions import exclusion_reasons
    from memlens.synthetic_data.common import proxy_token_count

    if not splits:
        return []
    prefixes, targets, suffixes = zip(*splits)
    reasons = exclusion_reasons(prefixes, targets, suffixes, [proxy_token_count(t) for t in targets],
                                min_target_tokens=MIN_TARGET_PIECES)
    return [reason is None for reason in reasons]


def base_rows(programs: list[SDProgram], seed: int, df, selection: str = "distinct") -> list[dict]:
    """SD.Base FIM rows: a random non-blank line of each program is the target (paper Sec. 4.1).

    selection="uniform" is the paper's choice exactly. "distinct" (default) draws the line at random
    among the lines that occur in no other SD program (all lines when a program has none) and that the
    audit would score (auditable_targets); when none would be scored, the first line of that random draw:
    - a target shared with other examples (an import, `main()`) can be completed without memorization,
      which would blur the audit (task contract: keep the duplicate-target share low);
    - a target the audit excludes (too short, or repeated in its own prompt: a def line and its call, the
      task text in a header comment and a docstring) wastes the example. The paper filters such examples
      "during construction of the SD dataset" (Sec. 4.2) and its LLM-written programs lost only 36 of
      3,562 SD.Base examples that way (Sec. 5.1: 3,526 scored); our procedural programs repeat themselves
      more (a line drawn among the distinct ones was excluded in ~30 % of SD.Base at the default sizes, 17
      of 43 in the quickstart), so the line is redrawn within the same program instead of the program
      being dropped: SD keeps the paper's counts.
    """
    from memlens.synthetic_data.common import nonblank_line_indices, split_at_line

    orders = []
    for prog in programs:
        rng = random.Random(f"sd-base-target:{seed}:{prog.id}")
        candidates = nonblank_line_indices(prog.code)
        if selection == "distinct":
            lines = prog.code.splitlines()
            distinct = [i for i in candidates if df[lines[i].strip()] <= 1] or candidates
            orders.append(rng.sample(distinct, len(distinct)))
        else:
            orders.append([rng.choice(candidates)])
    chosen: list[int | None] = [order[0] if selection != "distinct" else None for order in orders]
    # Candidates are tried in each program's random order, one round per position, each round one batch
    # of the audit's exclusion test (most programs settle in the first round or two).
    for k in range(max((len(o) for o in orders), default=0)):
        todo = [j for j, order in enumerate(orders) if chosen[j] is None and k < len(order)]
        if not todo:
            break
        ok = auditable_targets([split_at_line(programs[j].code, orders[j][k]) for j in todo])
        for j, good in zip(todo, ok):
            if good:
                chosen[j] = orders[j][k]
    rows = []
    for prog, order, index in zip(programs, orders, chosen):
        prefix, target, suffix = split_at_line(prog.code, order[0] if index is None else index)
        rows.append({"id": prog.id, "subset": "SD.Base", "task": prog.task, "code": prog.code,
                     "prefix": prefix, "target": target, "suffix": suffix, "label": 1,
                     "requested_lines": prog.requested_lines})
    return rows
