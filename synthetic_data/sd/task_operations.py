"""The task operations of an SD program: `plan` maps a Listing 6 task's keywords to the operations that
perform it (symmetric and asymmetric encryption, key pairs, signatures, hashes, MACs, KDFs, encodings,
certificates, connections and library housekeeping), so that each program does what its task asks (App. J
prompt: "uses the legitimate_crypto library to perform the following task: {task}").

The follow-up operations that lengthen a program are in lengthening_operations.py; the entry module is programs.py.
"""

from __future__ import annotations

import re

from memlens.synthetic_data import vocab
from memlens.synthetic_data.sd.writer import IND, Op, Step, Writer, print_steps
from memlens.synthetic_data.vocab import pick


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
                   "bytes: the new key", after=print_steps(w, key, "Key"))]
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
                   after=print_steps(w, out, "Decrypted"))]
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
               after=print_steps(w, out, "Ciphertext"))]


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
               "tuple: (private key, public key)", after=print_steps(w, pub, "Public key"))]


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
                   after=print_steps(w, out, "Signature valid"))]
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
               after=print_steps(w, out, "Signature"))]


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
                   after=print_steps(w, out, "Plaintext"))]
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
               after=print_steps(w, out, "Ciphertext"))]


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
                       after=print_steps(w, out, "Digest"))]
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
               after=print_steps(w, out, "Hash"))]


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
                   after=print_steps(w, key, "MAC key"))]
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
               after=print_steps(w, tag, "MAC"))]


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
                   after=print_steps(w, out, "Password hash"))]
    if algo == "HKDF" or "master key" in task:
        master = w.need("key", pre)
        out = w.fresh("key")
        info = pick(rng, ["handshake data", "session key", "file encryption", "context-v1", "auth"]) + f" {rng.randrange(99)}"
        body = [Step(w.comment("derive a subkey with HKDF"),
                     [f"{out} = {w.api('hkdf', 'HKDF', 'derive_key')}({w.algo_arg(w.api('hkdf'), 'HKDF')}{master}, {pick(rng, ['length', 'size'])}={pick(rng, [16, 32, 64])}, info={s(info)}.encode())"])]
        return [Op("_inputs", "", [], pre),
                Op(pick(rng, ["derive_subkey", "hkdf_derive", "derive_key"]), "Derive a key from a master key.",
                   [master], body, out, "bytes: derived key", after=print_steps(w, out, "Derived key"))]
    pwd = w.need("password", pre)
    salt = w.need("salt", pre, prefer_file=False)
    out = w.fresh("key")
    body = [Step(w.comment(f"derive the key with {algo} ({iterations} iterations)"),
                 [f"{out} = {w.api('pbkdf2', 'derive_key', 'kdf.derive', 'PBKDF2')}({w.algo_arg(w.api('pbkdf2'), algo)}{pwd}, {salt}, iterations={iterations}, {pick(rng, ['length', 'dklen', 'key_length'])}={pick(rng, [16, 32, 64])})"])]
    return [Op("_inputs", "", [], pre),
            Op(pick(rng, ["derive_key", "key_from_password", "stretch_password"]), "Derive a key from a password.",
               [pwd, salt], body, out, "bytes: the derived key", after=print_steps(w, out, "Derived key"))]


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
               after=print_steps(w, out, "Result"))]


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
                   after=print_steps(w, obj, kind))]
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
               task.rstrip(".") + ".", inputs, body, out, "the result", after=print_steps(w, out, "Result"))]


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
               t.rstrip(".") + ".", inputs, body, out, "the result", after=print_steps(w, out, "Result"))]


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
              out, "bytes: shared secret", after=print_steps(w, out, "Shared secret"))
