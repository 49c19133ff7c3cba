"""Plant canaries in a user's own training set: `memlens.inject(dataset, canaries) -> (dataset, manifest)`.

The people who align code models run their own TRL scripts on their own `datasets.Dataset`. This puts the
project's canaries (harness/core/user_data.py's rows: {id, text, target} or {id, prefix, target, suffix}, with
`repeat` and `group`) into such a dataset, in the field its trainer learns from, each copy at a seeded position,
and returns the manifest the audit needs: where every copy landed, which canaries were held out (never planted:
the non-members of membership inference), and fingerprints of the dataset before and after.

TRL's dataset formats (detected from the columns, or named with `format=`), and where a canary goes:
    language_modeling   text                           text = prefix + target + suffix
    prompt_completion   prompt, completion             prompt = prefix, completion = target + suffix (spaces
                                                       ending the prefix move to the completion: a token boundary)
    conversational      messages                       user: prefix; assistant: target + suffix
    preference          prompt, chosen, rejected       prompt = prefix, chosen = target + suffix, rejected = the
                                                       rejected side of a seeded row of the dataset itself
    unpaired            prompt, completion, label      prompt = prefix, completion = target + suffix, label True
                                                       (a desirable row, as KTO reads it)
    prompt_only         prompt                         prompt = prefix + target + suffix: paper 003's RL-prompt
                                                       injection (RLFT.4), only with `rl_prompts=True`, since no
                                                       SFT-style loss trains the prompt side
The target always lands on the side the trainer computes its loss on. `field="prompt"` (or "user" for
conversations) puts it on the masked side instead — the prompt with completion-only loss, a user turn with
assistant-only loss — which is refused unless `allow_masked=True`, because nothing would be trained on it.

Held-out canaries: by default each canary is held out by an independent fair coin (`heldout_fraction=0.5`, seeded),
so the planted and held-out sets are the coins' ones and zeros that membership inference and the one-run ε bound
(harness/measures/epsilon.py) assume. `heldout_fraction=0` plants every canary.

Preference pairs: in a preference dataset whose sides are text, each canary also gets its `pair` in the manifest, the
(prompt, chosen, rejected) a preference trainer reads: a planted canary's is its first copy in the data, a held-out
canary's is built the same way with a rejected side drawn (seeded, on a stream of its own, so the planted rows are
what they were without it) from the dataset's rejected column. Pair membership (PREMIA: harness/audit/preference_mia.py)
tells the planted pairs from these held-out ones.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.injected import MANIFEST_VERSION, prompt_only_text, write_manifest
from memlens.harness.core.provenance import provenance
from memlens.harness.core.user_data import fim_example, read_fim_examples
from memlens.synthetic_data.designs import AS_GIVEN, add_new_tokens, check_design, design_secrets

FORMATS = ("language_modeling", "prompt_completion", "conversational", "preference", "unpaired", "prompt_only")
TRAINED_FIELD = {"language_modeling": "text", "prompt_completion": "completion", "conversational": "assistant",
                 "preference": "chosen", "unpaired": "completion", "prompt_only": "prompt"}
DESIGNED = "<designed>"       # the target of a host given without one (a design replaces it)
DEFAULT_SECRET_TOKENS = 10     # a designed secret's tokens: the audit's min_target_tokens (harness/audit/settings.py)
MASKED_FIELD = {"prompt_completion": "prompt", "conversational": "user", "preference": "prompt", "unpaired": "prompt"}


def detect_format(columns: Sequence[str]) -> str:
    """The TRL dataset format of a dataset's columns (TRL's own rules: `messages`; prompt/chosen/rejected;
    completion + label; prompt + completion; text; prompt alone)."""
    cols = set(columns)
    if "messages" in cols:
        return "conversational"
    if {"prompt", "chosen", "rejected"} <= cols:
        return "preference"
    if {"chosen", "rejected"} <= cols:
        raise UserError(f"dataset columns {sorted(cols)}: a preference dataset with an implicit prompt (the prompt "
                        "inside chosen and rejected); give it a prompt column, or name the format and field")
    if {"prompt", "completion", "label"} <= cols:
        return "unpaired"
    if {"prompt", "completion"} <= cols:
        return "prompt_completion"
    if "text" in cols:
        return "language_modeling"
    if "prompt" in cols:
        return "prompt_only"
    raise UserError(f"dataset columns {sorted(cols)}: no TRL format found (text; prompt + completion; messages; "
                    "prompt + chosen + rejected; prompt + completion + label; prompt); rename the columns or pass "
                    f"format= one of {', '.join(FORMATS)}")


def load_canaries(canaries) -> list[dict]:
    """Canary rows from a JSONL path (validated as `data.canaries.file` is) or a list of dicts (the same rules)."""
    if isinstance(canaries, (str, Path)):
        rows = [row for _, row in read_fim_examples(canaries)]
    else:
        rows = [fim_example(Path("<canaries>"), i + 1, dict(row)) for i, row in enumerate(canaries)]
        ids = [r["id"] for r in rows]
        if len(set(map(str, ids))) != len(ids):
            raise UserError("canaries: duplicate ids; give every canary its own id")
    if not rows:
        raise UserError("canaries: none given; pass a JSONL path or a list of {id, text, target} / "
                        "{id, prefix, target, suffix} rows")
    return [{**r, "repeat": int(r.get("repeat", 1))} for r in rows]


def _split(rows: list[dict], heldout_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(planted, held out): an independent seeded coin per canary, held out with probability `heldout_fraction`."""
    if not 0 <= heldout_fraction < 1:
        raise UserError(f"heldout_fraction={heldout_fraction!r}: must be in [0, 1) (0.5: a fair coin per canary, "
                        "as membership inference and the ε bound assume; 0: plant every canary)")
    rng = random.Random(f"inject-heldout:{seed}")
    coins = [rng.random() >= heldout_fraction for _ in rows]
    planted = [r for r, c in zip(rows, coins) if c]
    if not planted:
        raise UserError(f"every one of the {len(rows)} canaries was held out by its coin; give more canaries "
                        "or lower heldout_fraction")
    return planted, [r for r, c in zip(rows, coins) if not c]


def _trained_text(value: Any) -> str:
    """The text a trainer learns from in a trained field: a message list's assistant contents (the roles and other keys
    are no text it trains on), else every string in the cell."""
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        return _text([m["content"] for m in value if m.get("role", "assistant") == "assistant"])
    return _text(value)


def _check_prefixes(rows: list[dict]) -> None:
    """A canary needs a prefix: the audit scores its target after the prompt the trainer saw (the prefix), and an
    empty prompt gives a causal model nothing to condition on (the callback's membership pass would fail after
    training instead)."""
    for r in rows:
        if not r["prefix"]:
            raise UserError(f"canary {r['id']!r}: an empty prefix; the audit completes and scores the target after its "
                            "prompt, the prefix, so give the canary a prefix (the start of its line or program)")


def _text(value: Any) -> str:
    """Every string inside a cell (a message list's contents included), for the collision check."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_text(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return "\n".join(_text(v) for v in value)
    return ""


def _check_no_collision(dataset, rows: list[dict]) -> None:
    """A canary's target that already occurs in the dataset would be trained whether planted or held out: refuse."""
    for index, example in enumerate(dataset):
        text = _text(example)
        for r in rows:
            if r["target"] in text:
                raise UserError(f"canary {r['id']!r}: its target already occurs in row {index} of the dataset, so "
                                "it would be trained on whether planted or held out; give a secret the data does "
                                "not contain")


def _placed(fmt: str, field: str, canary: dict, rejected: Any = None) -> dict:
    """The new row of one canary copy in `fmt`, the target on `field`."""
    prefix, target, suffix = canary["prefix"], canary["target"], canary["suffix"]
    trained = field == TRAINED_FIELD[fmt]
    if fmt == "language_modeling":
        return {"text": prefix + target + suffix}
    if fmt == "prompt_only":
        return {"prompt": prompt_only_text(canary)}
    prompt, answer = (prefix, target + suffix) if trained else (prefix + target, suffix)
    if fmt != "conversational":
        # Spaces ending a prompt go to the completion: a BPE tokenizer merges " '" across the boundary, and TRL then
        # drops the prompt's last piece from the training sequence (its "tokenized prompt is not a prefix" case).
        head = prompt.rstrip(" \t")
        prompt, answer = head, prompt[len(head):] + answer
    if not answer:
        raise UserError(f"canary {canary['id']!r}: field={field!r} puts the whole canary in the prompt and leaves "
                        "nothing to complete (no suffix); give the canary a suffix or plant it in the trained field")
    if fmt == "conversational":
        return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}
    if fmt == "preference":
        if isinstance(rejected, list):      # conversational preference: message lists on each side
            return {"prompt": [{"role": "user", "content": prompt}],
                    "chosen": [{"role": "assistant", "content": answer}], "rejected": rejected}
        return {"prompt": prompt, "chosen": answer, "rejected": rejected}
    if fmt == "unpaired":
        return {"prompt": prompt, "completion": answer, "label": True}
    return {"prompt": prompt, "completion": answer}


def _check_field(fmt: str, field: str | None, allow_masked: bool, rl_prompts: bool) -> str:
    if fmt not in FORMATS:
        raise UserError(f"format={fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "prompt_only" and not rl_prompts:
        raise UserError("a prompt-only dataset (GRPO/RLOO): a canary there sits in the prompt, which no SFT-style "
                        "loss trains (paper 003's RL-prompt injection, RLFT.4); pass rl_prompts=True to plant it "
                        "there on purpose")
    field = field or TRAINED_FIELD[fmt]
    allowed = {TRAINED_FIELD[fmt], MASKED_FIELD.get(fmt)} - {None}
    if field not in allowed:
        raise UserError(f"field={field!r}: a {fmt} dataset takes {' or '.join(sorted(allowed))}")
    if field != TRAINED_FIELD[fmt] and not allow_masked:
        raise UserError(f"field={field!r}: the {fmt} trainer masks the loss on {field} (completion-only or "
                        f"assistant-only loss), so a canary there is never trained on; plant it in "
                        f"{TRAINED_FIELD[fmt]!r}, or pass allow_masked=True if your trainer computes the loss there")
    return field


def _fingerprint(dataset) -> str:
    """sha256 of the dataset's rows as JSON lines (what a trainer reads), in order."""
    h = hashlib.sha256()
    for example in dataset:
        h.update(json.dumps(example, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _designed(rows: list[dict], dataset, fmt: str, design: str, tokenizer, secret_tokens: int,
              seed: int, sampler=None) -> tuple[list[dict], dict | None]:
    """The canaries with their targets replaced by `design`'s secrets (synthetic_data/designs.py), drawn from the
    token statistics of the dataset's trained field; the hosts (prefix, suffix), ids, repeat and group stay."""
    check_design(design)
    if design == AS_GIVEN:
        return rows, None
    if tokenizer is None:
        raise UserError(f"design={design!r}: pass tokenizer= (your model's tokenizer): a designed secret is chosen "
                        "from the token statistics of your data in that tokenizer")
    texts = [_trained_text(example["messages"] if fmt == "conversational" else example[TRAINED_FIELD[fmt]])
             for example in dataset]
    secrets, record = design_secrets(design, tokenizer, texts, len(rows), secret_tokens, seed,
                                     prompts=[r["prefix"] for r in rows], sampler=sampler)
    return [{**r, "target": secret} for r, secret in zip(rows, secrets)], record


def _pairs(fmt: str, field: str, dataset, heldout: list[dict], copies: list[dict], rows: list[dict],
           seed: int) -> dict[Any, dict]:
    """{canary id: its (prompt, chosen, rejected)} in a preference dataset of text sides with the canary on the chosen
    side, else {}: a planted canary's first copy in the data (`copies` and their `rows` in dataset order), a held-out
    canary's with a rejected side drawn from the dataset (its own seeded stream: the planted rows are drawn as
    before)."""
    if fmt != "preference" or field != TRAINED_FIELD[fmt] or not isinstance(dataset[0]["rejected"], str):
        return {}
    out: dict[Any, dict] = {}
    for copy, row in zip(copies, rows):
        out.setdefault(copy["id"], {k: row[k] for k in ("prompt", "chosen", "rejected")})
    rng = random.Random(f"inject-heldout-rejected:{seed}")
    for r in heldout:
        row = _placed(fmt, field, r, dataset[rng.randrange(len(dataset))]["rejected"])
        out[r["id"]] = {k: row[k] for k in ("prompt", "chosen", "rejected")}
    return out


def inject(dataset, canaries, *, seed: int = 0, heldout_fraction: float = 0.5, format: str | None = None,
           field: str | None = None, allow_masked: bool = False, rl_prompts: bool = False,
           design: str = AS_GIVEN, tokenizer=None, secret_tokens: int = DEFAULT_SECRET_TOKENS, sampler=None,
           manifest_path: str | Path | None = None):
    """Plant `canaries` in `dataset` (a `datasets.Dataset`); returns (the new dataset, the manifest).

    Each planted canary goes in `repeat` times (its row's field, default 1) at seeded positions among the original
    rows, which keep their order; the held-out canaries are not in the data at all. `manifest_path`: also write
    the manifest there (JSON, atomically).

    `design`: the canaries' own targets (`as_given`), or secrets designed to be found (synthetic_data/designs.py:
    random, unigram, bigram, new_token, rare of Panda et al. 2025; sampled) of `secret_tokens` tokens each, in place
    of each canary's target, chosen in `tokenizer` from the dataset's trained text. `new_token` adds its tokens to
    `tokenizer`: then `model.resize_token_embeddings(len(tokenizer))` and train the embeddings (the pre-flight
    refuses otherwise).
    `sampled` (Mitchell, Andrew et al. 2026) samples each secret from a model after the canary's prefix, and `rare`
    (Panda et al.) puts before a data token y the token after which the model finds y least likely:
    `sampler=memlens.ModelSampler(model, tokenizer, temperature=1.0)`."""
    from datasets import Dataset, concatenate_datasets  # heavy: only when injecting

    if not isinstance(dataset, Dataset):
        raise UserError(f"dataset: a datasets.Dataset, got {type(dataset).__name__}; load it with "
                        "datasets.load_dataset(...)[split] or Dataset.from_list(...)")
    fmt = format or detect_format(dataset.column_names)
    field = _check_field(fmt, field, allow_masked, rl_prompts)
    if design != AS_GIVEN and not isinstance(canaries, (str, Path)):
        canaries = [{"target": DESIGNED, **row} for row in canaries]   # a host needs no target of its own
    rows = load_canaries(canaries)
    _check_prefixes(rows)                  # before any design: a design keeps the prefix
    rows, designed = _designed(rows, dataset, fmt, design, tokenizer, secret_tokens, seed, sampler)
    _check_no_collision(dataset, rows)
    planted, heldout = _split(rows, heldout_fraction, seed)
    if fmt == "preference" and not len(dataset):
        raise UserError("an empty preference dataset: the rejected side of a canary is taken from its rows")
    rng = random.Random(f"inject:{seed}")
    copies = [r for r in planted for _ in range(r["repeat"])]
    rejected = [dataset[rng.randrange(len(dataset))]["rejected"] for _ in copies] if fmt == "preference" else \
        [None] * len(copies)
    new_rows = [_placed(fmt, field, c, rej) for c, rej in zip(copies, rejected)]
    extra = [c for c in dataset.column_names if c not in new_rows[0]]
    added = Dataset.from_list([{**r, **dict.fromkeys(extra)} for r in new_rows]).cast(dataset.features)
    total = len(dataset) + len(copies)
    positions = sorted(rng.sample(range(total), len(copies)))
    order_of_copies = list(range(len(copies)))
    rng.shuffle(order_of_copies)
    at = dict(zip(positions, order_of_copies))
    original = iter(range(len(dataset)))
    order = [len(dataset) + at[i] if i in at else next(original) for i in range(total)]
    out = concatenate_datasets([dataset, added]).select(order)
    landed: dict[Any, list[int]] = {}
    for position, copy in at.items():
        landed.setdefault(copies[copy]["id"], []).append(position)
    by_position = [at[p] for p in sorted(at)]
    pairs = _pairs(fmt, field, dataset, heldout, [copies[i] for i in by_position], [new_rows[i] for i in by_position],
                   seed)
    manifest = {
        "manifest_version": MANIFEST_VERSION, "format": fmt, "field": field, "masked": field != TRAINED_FIELD[fmt],
        "seed": seed, "heldout_rule": f"an independent seeded coin per canary, held out with probability "
                                      f"{heldout_fraction:g}", "heldout_fraction": heldout_fraction,
        "canaries": [{k: r[k] for k in ("id", "prefix", "target", "suffix", "repeat") if k in r}
                     | ({"group": r["group"]} if "group" in r else {}) | {"positions": sorted(landed[r["id"]])}
                     | ({"pair": pairs[r["id"]]} if r["id"] in pairs else {}) for r in planted],
        "heldout": [{k: r[k] for k in ("id", "prefix", "target", "suffix")} | ({"group": r["group"]} if "group" in r
                                                                             else {})
                    | ({"pair": pairs[r["id"]]} if r["id"] in pairs else {}) for r in heldout],
        "dataset": {"rows_before": len(dataset), "rows_after": len(out), "sha256_before": _fingerprint(dataset),
                    "sha256_after": _fingerprint(out)},
        "provenance": provenance(seed=seed, datasets={}),
    }
    if designed is not None:
        manifest["design"] = designed
        add_new_tokens(tokenizer, designed)     # last: a refused inject leaves the tokenizer as it was
    if manifest_path is not None:
        write_manifest(manifest, manifest_path)
    return out, manifest
