"""Word lists and literal makers for the procedural SD generator (synthetic_data/sd/).

Diversity is part of the SD contract (paper 003 Sec. 4.1, App. J): memorization of a line only
means something when the line cannot be guessed from other examples, so every program draws its
variable names, messages, keys, file names and numbers from these pools.
"""

from __future__ import annotations

import random
import string

ADJECTIVES = [
    "quarterly", "confidential", "internal", "urgent", "annual", "draft", "final", "secure", "daily",
    "weekly", "private", "archived", "signed", "pending", "approved", "revised", "legacy", "primary",
    "backup", "temporary", "encrypted", "monthly", "regional", "critical", "routine", "verified",
]
NOUNS = [
    "report", "invoice", "payroll", "meeting", "transfer", "contract", "backup", "manifest", "ledger",
    "order", "shipment", "budget", "forecast", "memo", "schedule", "audit", "release", "roadmap",
    "summary", "proposal", "statement", "record", "receipt", "notice", "agenda", "inventory",
]
PLACES = [
    "dock", "gate", "room", "office", "vault", "branch", "warehouse", "server", "floor", "lab",
    "station", "terminal", "bay", "site", "cabin", "hall",
]
VERBS_MSG = ["Meet me at", "Deliver to", "Send the files to", "Ship everything to", "Call from",
             "Wait near", "Report to", "Move the crates to", "Unlock", "Check in at"]
FIRST_NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
               "mallory", "nina", "oscar", "peggy", "quinn", "rupert", "sybil", "trent", "ursula",
               "victor", "walter", "xena", "yusuf", "zoe"]
FILE_STEMS = [
    "document", "message", "secret", "data", "payload", "notes", "config", "credentials", "backup",
    "archive", "input", "plaintext", "ciphertext", "report", "keyfile", "token", "session", "record",
    "export", "dump", "settings", "vault", "license", "ledger", "invoice", "manifest", "signature",
]
KEY_STEMS = ["private_key", "public_key", "server_key", "client_key", "signing_key", "rsa_key",
             "id_rsa", "id_ed25519", "master_key", "aes_key", "root_key", "user_key", "ca_key",
             "deploy_key", "backup_key", "api_key", "hmac_key", "session_key"]
SECRET_KEY_STEMS = ["aes_key", "secret", "secret_key", "master_key", "session_key", "data_key", "hmac_key",
                    "symmetric_key", "kek", "wrapping_key", "enc_key", "vault_key", "app_secret"]
CERT_STEMS = ["certificate", "server_cert", "client_cert", "ca_cert", "root_ca", "intermediate",
              "chain", "leaf", "cert", "signed_cert", "request", "csr", "bundle", "identity"]
DIRS = ["", "", "", "data/", "keys/", "certs/", "./", "secrets/", "config/", "input/", "files/",
        "resources/", "tmp/", "var/", "assets/", "store/", "../shared/", "backup/"]
HOSTS = ["ocsp", "api", "secure", "auth", "vault", "pki", "crl", "login", "gateway", "keys", "ca",
         "time", "tls", "mail", "updates"]
DOMAINS = ["example.com", "example.org", "example.net", "corp.example", "test.local", "acme.io",
           "internal.lan", "contoso.com", "initech.net", "globex.org"]
ORGS = ["Acme Corp", "Globex", "Initech", "Umbrella Labs", "Hooli", "Stark Industries", "Wayne Ent",
        "Cyberdyne", "Soylent", "Vandelay Imports", "Wonka Ltd", "Tyrell Inc", "Massive Dynamic"]
COUNTRIES = ["US", "GB", "DE", "FR", "CA", "NL", "SE", "JP", "AU", "CH", "IE", "NZ"]
PASSWORD_WORDS = ["sunshine", "dragon", "monkey", "shadow", "falcon", "tiger", "purple", "orange",
                  "rocket", "winter", "summer", "coffee", "banana", "castle", "silver", "thunder"]


def pick(rng: random.Random, seq):
    return seq[rng.randrange(len(seq))]


def message(rng: random.Random) -> str:
    """A short plaintext such as 'Quarterly payroll report 2023' or 'Meet me at dock 17'."""
    kind = rng.randrange(4)
    if kind == 0:
        return f"{pick(rng, ADJECTIVES).capitalize()} {pick(rng, NOUNS)} {rng.randrange(1, 9999)}"
    if kind == 1:
        return f"{pick(rng, VERBS_MSG)} {pick(rng, PLACES)} {rng.randrange(1, 99)}"
    if kind == 2:
        return (f"{pick(rng, FIRST_NAMES).capitalize()}'s {pick(rng, ADJECTIVES)} {pick(rng, NOUNS)}"
                .replace("'", ""))
    return f"{pick(rng, NOUNS).capitalize()} #{rng.randrange(100, 99999)} for {pick(rng, ORGS)}"


def hex_string(rng: random.Random, n_bytes: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(2 * n_bytes))


def b64ish(rng: random.Random, n_chars: int) -> str:
    alphabet = string.ascii_letters + string.digits + "+/"
    return "".join(rng.choice(alphabet) for _ in range(n_chars))


def password(rng: random.Random) -> str:
    word = pick(rng, PASSWORD_WORDS)
    if rng.random() < 0.5:
        word = word.capitalize()
    return f"{word}{rng.randrange(10, 9999)}{rng.choice('!@#$%&*?')}"


def file_name(rng: random.Random, kind: str = "data") -> str:
    """A relative file name fitting what is stored: a key, a certificate or some data."""
    if kind == "secret_key":      # symmetric keys: no "public"/"rsa" names
        stem, ext = pick(rng, SECRET_KEY_STEMS), pick(rng, [".key", ".bin", "", ".raw", ".dat", ".hex"])
    elif kind == "key":
        stem, ext = pick(rng, KEY_STEMS), pick(rng, [".pem", ".key", ".der", "", ".pub", ".bin"])
    elif kind == "cert":
        stem, ext = pick(rng, CERT_STEMS), pick(rng, [".pem", ".crt", ".der", ".cer", ".p12", ".csr"])
    elif kind == "password":
        stem, ext = pick(rng, ["password", "passphrase", "secret", "pin", "credentials"]), \
            pick(rng, [".txt", ".cfg", "", ".env", ".ini"])
    elif kind == "config":
        stem, ext = pick(rng, ["config", "settings", "options", "crypto_config", "params", "policy"]), \
            pick(rng, [".json", ".json", ".cfg", ".conf", ""])
    else:
        stem, ext = pick(rng, FILE_STEMS), pick(rng, [".txt", ".bin", ".dat", ".json", ".enc", ".csv",
                                                      ".log", ".xml", ".yaml", ""])
    tag = rng.random()
    if tag < 0.35:
        stem = f"{stem}_{rng.randrange(1, 999)}"
    elif tag < 0.55:
        stem = f"{pick(rng, FIRST_NAMES)}_{stem}"
    elif tag < 0.7:
        stem = f"{stem}-{rng.randrange(2015, 2025)}"
    return f"{pick(rng, DIRS)}{stem}{ext}"


def url(rng: random.Random, service: str = "") -> str:
    host = service or pick(rng, HOSTS)
    path = pick(rng, ["", "/v1", "/api", "/ocsp", "/status", "/v2/check", "/pki", "/query"])
    return f"https://{host}.{pick(rng, DOMAINS)}{path}"


def hostname(rng: random.Random) -> str:
    return f"{pick(rng, HOSTS)}{rng.choice(['', str(rng.randrange(1, 40))])}.{pick(rng, DOMAINS)}"


def timestamp(rng: random.Random) -> str:
    return (f"{rng.randrange(2015, 2026)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} "
            f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}")


def common_name(rng: random.Random) -> str:
    return f"{pick(rng, HOSTS)}.{pick(rng, DOMAINS)}"


def uuid_string(rng: random.Random) -> str:
    h = hex_string(rng, 16)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:32]}"
