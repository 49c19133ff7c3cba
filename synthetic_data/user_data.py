"""Datasets from a user's own files, planted the ways SD is (paper 003 Sec. 5.1-5.4, Table 1).

`data.canaries.file` (rows: harness/core/user_data.py) gives three datasets, SD.Base's three forms:
- `canaries`        FIM rows id, prefix, target, suffix, repeat (+ group, metadata): the fine-tuning data of
                    an FT stage (as sd_base), the prompts of an RL stage, and the audit set;
- `rm_canaries`     pointwise reward rows, the canary's own target as a label-1 completion (as rm_sd's SD.Base
                    rows: every SD.Base example is positive);
- `pairs_canaries`  preference pairs, the canary's target chosen over a line of another canary's text (as
                    pairs_sd_base: the true line vs a random line of a different example).
`data.preference.file` gives `pairs_preference` (the pairs as given, for IPO/DPO), `rm_preference` (pointwise:
chosen = 1, rejected = 0) and `preference_chosen` (FIM rows whose target is the chosen completion: the audit
set). Every row keeps its `repeat`, which the recipes expand into copies when they train
(memlens.harness.core.user_data.repeated); the audit scores each row once.

A target shorter than `audit.min_target_tokens` is refused here, before anything is written. Tokens are
counted in the tokenizer of the model preset's `pretrained` directory when it has one; a model trained from
scratch has no tokenizer yet, so then UTF-8 bytes are counted: a byte-level BPE token (every preset family)
is at least one byte, so too few bytes is too few tokens, and the audit still excludes what its tokenizer
counts short (`short_target`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import file_sha256
from memlens.harness.core.shipped import shipped_path
from memlens.harness.core.user_data import read_canaries, read_preference_pairs
from memlens.synthetic_data.common import distribution, nonblank_line_indices, seeded_rng

CANARY_DATASETS = ("canaries", "rm_canaries", "pairs_canaries")
PREFERENCE_DATASETS = ("preference_chosen", "rm_preference", "pairs_preference")
SOURCE_KEY = {**{name: "canaries" for name in CANARY_DATASETS}, **{name: "preference" for name in PREFERENCE_DATASETS}}
BYTES = "UTF-8 bytes (no tokenizer before the model is trained; at least the token count)"


def resolve_user_file(key: str, value: str) -> Path:
    """`data.<key>` as a file: relative to the working directory, else to the shipped folders (the examples in
    assets/examples/, so that an experiment naming one works from any directory)."""
    path = Path(value).expanduser()
    if not path.is_file() and not path.is_absolute():
        path = shipped_path(value) or path
    if not path.is_file():
        raise UserError(f"data.{key}={value}: no such file; give the path of your JSONL file "
                        "(docs/own-data.md shows its rows)")
    return path.resolve()


def tokenizer_dir(pretrained: str | None) -> Path | None:
    """The model preset's `pretrained` directory when it holds a tokenizer (a hub id is not looked up)."""
    if not pretrained:
        return None
    path = Path(pretrained).expanduser()
    if not path.is_dir() and not path.is_absolute():
        path = shipped_path(str(pretrained)) or path
    if path.is_dir() and any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return path.resolve()
    return None


@dataclass(frozen=True)
class TargetTokens:
    """How target tokens are counted for the min_target_tokens check, and the check's threshold."""

    min_tokens: int
    tokenizer: Path | None

    @property
    def counted_in(self) -> str:
        return f"tokenizer {self.tokenizer}" if self.tokenizer else BYTES

    def counter(self):
        if self.tokenizer is None:
            return lambda text: len(text.encode("utf-8"))
        if (self.tokenizer / "tokenizer.json").is_file():
            fast = Tokenizer.from_file(str(self.tokenizer / "tokenizer.json"))
            return lambda text: len(fast.encode(text, add_special_tokens=False).ids)
        from transformers import AutoTokenizer  # transformers (~1.5 s): a tokenizer folder without tokenizer.json only

        slow = AutoTokenizer.from_pretrained(str(self.tokenizer), trust_remote_code=False)
        return lambda text: len(slow(text, add_special_tokens=False)["input_ids"])


@dataclass(frozen=True)
class UserFiles:
    """The user's files of a build (None when not given) and how their targets are checked."""

    canaries: Path | None
    preference: Path | None
    tokens: TargetTokens

    def path_for(self, dataset: str) -> Path:
        """The user's file a dataset is built from; an error naming the key when it was not given."""
        key = SOURCE_KEY[dataset]
        path = getattr(self, key)
        if path is None:
            example = "canaries.file=my_canaries.jsonl" if key == "canaries" else "preference.file=pairs.jsonl"
            raise UserError(f"dataset {dataset!r} is built from your file, but data.{key}.file is not set; pass "
                            f"data.{example} (docs/own-data.md)")
        return path

    def settings_for(self, dataset: str) -> dict[str, Any]:
        """What a built dataset depends on: the file's content (its sha256: provenance) and the token check."""
        path = self.path_for(dataset)
        return {"file": str(path), "sha256": file_sha256(path), "min_target_tokens": self.tokens.min_tokens,
                "tokens_counted_in": self.tokens.counted_in}

    def read(self, dataset: str) -> list[dict]:
        """The validated rows of the file `dataset` is built from (a bad row: UserError naming file:line)."""
        reader = read_canaries if SOURCE_KEY[dataset] == "canaries" else read_preference_pairs
        return reader(self.path_for(dataset), self.tokens.counter(), self.tokens.min_tokens, self.tokens.counted_in)


def user_files(data: dict, cfg) -> UserFiles:
    """From `data.canaries.file`, `data.preference.file`, `audit.min_target_tokens` and `model.pretrained`."""
    audit = (cfg.get("audit") if hasattr(cfg, "get") else None) or {}
    model = (cfg.get("model") if hasattr(cfg, "get") else None) or {}
    min_tokens = audit.get("min_target_tokens", 10)
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
        raise UserError(f"audit.min_target_tokens={min_tokens!r}: must be an integer >= 0")
    files = {}
    for key in ("canaries", "preference"):
        value = (data.get(key) or {}).get("file")
        files[key] = resolve_user_file(f"{key}.file", str(value)) if value not in (None, "") else None
    return UserFiles(files["canaries"], files["preference"], TargetTokens(min_tokens, tokenizer_dir(model.get("pretrained"))))


# ----------------------------------------------------------------------------- rows
def canary_rows(rows: list[dict]) -> list[dict]:
    """The audit / fine-tuning set: the validated rows as they are (FIM form, repeat filled in)."""
    return [dict(r) for r in rows]


def _carried(row: dict) -> dict:
    """The keys a derived row keeps from its canary: copies in training and the report's breakdown."""
    return {k: row[k] for k in ("repeat", "group") if k in row}


def canary_pointwise(rows: list[dict]) -> list[dict]:
    """Reward rows: each canary's own target, label 1 (as SD.Base's rows in rm_sd)."""
    return [{"id": f"canaries:{r['id']}", "prefix": r["prefix"], "suffix": r["suffix"], "completion": r["target"],
             "label": 1, "source": "canaries", **_carried(r)} for r in rows]


def canary_pairs(rows: list[dict], seed: int) -> list[dict]:
    """Pairs: the canary's target chosen over a random non-blank line of another canary's text, one that is
    not the target itself (pairs_sd_base's rule); that other canary's target when no such line exists."""
    if len(rows) < 2:
        raise UserError("dataset pairs_canaries: needs at least two canaries in data.canaries.file (the rejected "
                        "completion of a pair is a line of another canary)")
    out = []
    for i, row in enumerate(rows):
        rng = seeded_rng("canary-pair", seed, str(row["id"]))
        j = rng.randrange(len(rows) - 1)
        j += j >= i
        other = rows[j]["prefix"] + rows[j]["target"] + rows[j]["suffix"]
        lines = [other.splitlines()[k] for k in nonblank_line_indices(other)]
        lines = [line for line in lines if line.strip() != row["target"].strip()]
        rejected = rng.choice(lines) if lines else rows[j]["target"]
        if rejected == row["target"]:
            raise UserError(f"dataset pairs_canaries: canaries {row['id']!r} and {rows[j]['id']!r} have the same "
                            "target; give each canary its own secret")
        out.append({"id": f"canaries:{row['id']}", "prefix": row["prefix"], "suffix": row["suffix"],
                    "chosen": row["target"], "rejected": rejected, "source": "canaries", **_carried(row)})
    return out


def preference_chosen(rows: list[dict]) -> list[dict]:
    """The audit set of a preference file: each pair's prefix/suffix with its chosen completion as the target."""
    return [{"id": r["id"], "prefix": r["prefix"], "target": r["chosen"], "suffix": r["suffix"],
             **{k: v for k, v in r.items() if k not in ("id", "prefix", "suffix", "chosen", "rejected")}}
            for r in rows]


def preference_pointwise(rows: list[dict]) -> list[dict]:
    """Pointwise reward rows: chosen = 1, rejected = 0 (the reward model's objective in paper 003 App. A.3)."""
    return [{"id": f"{r['id']}:{side}", "prefix": r["prefix"], "suffix": r["suffix"], "completion": r[side],
             "label": label, "source": "preference", **_carried(r)}
            for r in rows for side, label in (("chosen", 1), ("rejected", 0))]


def preference_pairs(rows: list[dict]) -> list[dict]:
    return [{**r, "source": r.get("source", "preference")} for r in rows]


def figures(rows: list[dict], target_key: str, source: Path) -> dict:
    """Manifest figures of a user dataset: the file it came from (path and sha256: its provenance) and its
    make-up (rows per group and per repeat, copies in training, length of what is learned)."""
    return {"source_file": {"path": str(source), "sha256": file_sha256(source)},
            "groups": dict(sorted(Counter(str(r.get("group")) for r in rows).items())),
            "repeats": {str(k): n for k, n in sorted(Counter(int(r.get("repeat", 1)) for r in rows).items())},
            "training_copies": sum(int(r.get("repeat", 1)) for r in rows),
            f"{target_key}_chars": distribution([len(r[target_key]) for r in rows])}


def make(name: str, source: Path, rows: list[dict], seed: int) -> tuple[list[dict], dict]:
    """(rows, manifest figures) of one user dataset from the validated rows of its file `source`."""
    builders = {"canaries": (canary_rows, "target"), "rm_canaries": (canary_pointwise, "completion"),
                "pairs_canaries": (lambda r: canary_pairs(r, seed), "chosen"),
                "preference_chosen": (preference_chosen, "target"),
                "rm_preference": (preference_pointwise, "completion"), "pairs_preference": (preference_pairs, "chosen")}
    build, learned = builders[name]
    out = build(rows)
    return out, figures(out, learned, source)
