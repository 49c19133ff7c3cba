"""Canary survival pre-flight: before step 1, does every planted copy of every canary reach the loss?

A canary that gets no loss cannot be memorized, and the "0 memorized" that follows would read as a finding. It
happens silently when the copy sits on a masked side (completion-only or assistant-only loss), when `max_length`
truncation cuts its target, when packing splits it, or when the tokenizer merges its first characters with the text
before it. This reads the trainer's *processed* training rows through the trainer's own data collator — the ids and
the loss mask the trainer will use — never the raw rows:

    trained families (SFT, DPO, CPO, ORPO, KTO, reward):  every token that carries the target's characters in the
        collated row of each planted copy (the chosen / desirable side: the collator's first row) must be under the
        loss (`labels` != -100, `completion_mask` == 1); a token the target shares with trained text around it is
        fine, one it shares with the masked prompt is the tokenizer's merge across the boundary
    prompt-only families (GRPO, RLOO):  the prompt of each planted copy must carry the canary's prefix whole, within
        `max_prompt_length` tokens; the audit then measures what the policy writes

Where rows no longer map to copies (packing merged them, or the trainer dropped the rows truncation left with no
loss), every processed row is read and each canary's whole copies are counted, a copy counting only inside one
packed sequence.

`memlens.preflight(trainer, manifest)` runs it on its own; `memlens.AuditCallback` runs it at `on_train_begin` and
refuses to train (`preflight="raise"`, the default) with the fix, or warns (`"warn"`), or skips it (`"off"`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.injected import read_manifest
from memlens.harness.core.io import read_json
from memlens.harness.model.load import load_tokenizer

SURVIVES = "survives"
MASKED = "masked"                 # present, but no loss on (some of) its tokens
TRUNCATED = "truncated"           # cut by max_length
MERGED = "merged"                 # the tokenizer joined its first characters with the text before it
SPLIT = "split by packing"
NO_PREFIX = "prefix missing"      # a prompt-only row that does not carry the canary's prefix whole
FIXES = {
    MASKED: "move the canary to the trained side (memlens.inject's default field), or pass allow_masked=True where "
            "your trainer does compute the loss there",
    TRUNCATED: "raise max_length (or max_prompt_length / max_completion_length), or shorten the canary's prefix",
    MERGED: "end the canary's prefix at a token boundary (a newline or a space moved into the target)",
    SPLIT: "turn packing off (packing=False), or raise max_length so a packed sequence holds each copy whole",
    NO_PREFIX: "raise max_prompt_length, or shorten the canary's prefix",
}


@dataclass
class CanarySurvival:
    """One canary's planted copies: how many reach the loss, and why the others do not."""

    id: str
    copies: int
    survived: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.survived == self.copies


def _ids(value) -> list[int]:
    return [int(x) for x in (value.tolist() if hasattr(value, "tolist") else value)]


def _collated(collator, row: dict) -> tuple[list[int], list[bool]]:
    """(ids, under-the-loss flags) of one processed row as the trainer's collator makes them; the first row of the
    batch is the chosen / desirable side for the preference collators."""
    batch = collator([row])
    if "chosen_input_ids" in batch:          # CPO / ORPO (trl.experimental): prompt + chosen, labels -100 on the prompt
        ids = _ids(batch["chosen_input_ids"][0])
        return ids, [int(x) != -100 for x in _ids(batch["chosen_labels"][0])]
    ids = _ids(batch["input_ids"][0])
    if "labels" in batch:
        mask = [int(x) != -100 for x in _ids(batch["labels"][0])]
    elif "completion_mask" in batch:
        mask = [bool(x) for x in _ids(batch["completion_mask"][0])]
    elif "attention_mask" in batch:          # a reward model reads the whole sequence: present is enough
        mask = [bool(x) for x in _ids(batch["attention_mask"][0])]
    else:
        raise UserError(f"preflight: the data collator gives {sorted(batch)}, none of labels, completion_mask or "
                        "attention_mask; cannot tell which tokens the loss reads (pass preflight='off' to skip)")
    return ids, mask


def _token_at(ids: list[int], tokenizer, char: int) -> int:
    """The index of the token whose decoded text covers character `char` of the row's decoded text (binary search
    on the lengths of decoded prefixes, which grow with the number of tokens)."""
    low, high = 0, len(ids) - 1
    while low < high:
        mid = (low + high) // 2
        if len(tokenizer.decode(ids[:mid + 1])) > char:
            high = mid
        else:
            low = mid + 1
    return low


def _target_spans(ids: list[int], tokenizer, target: str) -> list[tuple[int, int]]:
    """(first, last) token of every place the row's decoded text holds the target's characters."""
    text = tokenizer.decode(ids)
    spans, start = [], text.find(target)
    while start >= 0:
        spans.append((_token_at(ids, tokenizer, start), _token_at(ids, tokenizer, start + len(target) - 1)))
        start = text.find(target, start + 1)
    return spans


def _verdicts(ids: list[int], mask: list[bool], target: str, tokenizer, bounds) -> list[str]:
    """One verdict per place the target's characters are in the row: SURVIVES when every token that carries them is
    under the loss and inside one packed sequence (a token shared with loss-carrying text around it is fine);
    MERGED when the token carrying its first characters is not under the loss but the rest is (the tokenizer joined
    them with the prompt's end); MASKED otherwise; TRUNCATED alone when its characters are nowhere in the row
    (inject put them in the raw row, so they were cut)."""
    out = []
    for first, last in _target_spans(ids, tokenizer, target):
        if not any(a <= first and last < b for a, b in bounds):
            out.append(SPLIT)
        elif all(mask[first:last + 1]):
            out.append(SURVIVES)
        elif not mask[first] and all(mask[first + 1:last + 1]) and last > first:
            out.append(MERGED)
        else:
            out.append(MASKED)
    return out or [TRUNCATED]


def _segments(row: dict, n: int) -> list[tuple[int, int]]:
    """(start, end) of each packed sequence of a row (`seq_lengths`), or the whole row."""
    bounds, start = [], 0
    for length in row.get("seq_lengths") or [n]:
        bounds.append((start, start + int(length)))
        start += int(length)
    return bounds


def _scan(dataset, collator, tokenizer, canaries: list[dict], packed: bool) -> list[CanarySurvival]:
    """Whole copies of each canary found anywhere in the processed rows, where rows no longer map to copies (packing
    merged them, or the trainer dropped rows that truncation left with no loss): a copy counts inside one packed
    sequence only, with every token of its target under the loss. Copies not found at all were cut: by packing, or
    by truncation (with the rows it emptied)."""
    counts = {c["id"]: {} for c in canaries}
    for row in dataset:
        ids, mask = _collated(collator, row)
        bounds = _segments(row, len(ids))
        for c in canaries:
            for verdict in _verdicts(ids, mask, c["target"], tokenizer, bounds):
                if verdict != TRUNCATED:
                    counts[c["id"]][verdict] = counts[c["id"]].get(verdict, 0) + 1
    out = []
    for c in canaries:
        copies = len(c.get("positions") or [])
        s = CanarySurvival(c["id"], copies, min(counts[c["id"]].get(SURVIVES, 0), copies))
        left = copies - s.survived
        for reason in (MASKED, MERGED, SPLIT):
            n = min(left, counts[c["id"]].get(reason, 0))
            if n:
                s.reasons[reason], left = n, left - n
        if left:
            s.reasons[SPLIT if packed else TRUNCATED] = left
        out.append(s)
    return out


def _prompt_only(dataset, tokenizer, canaries: list[dict], max_prompt_length: int | None) -> list[CanarySurvival]:
    out = []
    for c in canaries:
        s = CanarySurvival(c["id"], len(c.get("positions") or []))
        for position in c.get("positions") or []:
            prompt = dataset[position]["prompt"]
            text = prompt if isinstance(prompt, str) else "\n".join(m.get("content", "") for m in prompt)
            length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if c["prefix"] not in text or (max_prompt_length is not None and length > max_prompt_length):
                s.reasons[NO_PREFIX] = s.reasons.get(NO_PREFIX, 0) + 1
            else:
                s.survived += 1
        out.append(s)
    return out


def check_survival(args, dataset, collator, tokenizer, manifest) -> list[CanarySurvival]:
    """Every planted canary's survival in the trainer's processed rows (this module's docstring)."""
    manifest = read_manifest(manifest)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)          # a processor wraps its tokenizer
    canaries = manifest["canaries"]
    columns = set(getattr(dataset, "column_names", None) or [])
    if not any(c.endswith("input_ids") or c.endswith("_ids") for c in columns):
        return _prompt_only(dataset, tokenizer, canaries, getattr(args, "max_prompt_length", None))
    packed = bool(getattr(args, "packing", False))
    if packed or len(dataset) != (manifest.get("dataset") or {}).get("rows_after", len(dataset)):
        return _scan(dataset, collator, tokenizer, canaries, packed)
    out = []
    for c in canaries:
        s = CanarySurvival(c["id"], len(c.get("positions") or []))
        for position in c.get("positions") or []:
            ids, mask = _collated(collator, dataset[position])
            found = _verdicts(ids, mask, c["target"], tokenizer, [(0, len(ids))])
            verdict = SURVIVES if SURVIVES in found else found[0]
            if verdict == SURVIVES:
                s.survived += 1
            else:
                s.reasons[verdict] = s.reasons.get(verdict, 0) + 1
        out.append(s)
    return out


# ------------------------------------------------------------------------------------------------ new-token canaries
def _trained_rows(module) -> set[int] | None:
    """The rows of an embedding module (a plain nn.Embedding / lm_head, or PEFT's wrappers of one) that training
    updates: None for every row (a trainable weight, a ModulesToSaveWrapper's trainable copy, a LoRA embedding
    adapter), else the set of rows PEFT's trainable tokens update (empty: frozen)."""
    rows: set[int] = set()
    for sub in module.modules():
        indices = getattr(sub, "token_indices", None)
        if isinstance(indices, dict):                  # peft TrainableTokensLayer: {adapter: [row, ...]}
            for listed in indices.values():
                rows.update(int(i) for i in listed)
    if any(p.requires_grad for name, p in module.named_parameters() if "trainable_tokens_delta" not in name):
        return None
    return rows


def _embedding_rows(model) -> int:
    embeddings = model.get_input_embeddings()
    return embeddings.weight.shape[0] if hasattr(embeddings, "weight") else embeddings.num_embeddings


def new_token_refusal(model, tokenizer, manifest, ref_model=None) -> str | None:
    """Why training would not learn a new-token canary (synthetic_data/designs.py, `new_token`), or None: the tokenizer
    lacks the tokens, the embeddings were not resized to hold them, or their rows are frozen (LoRA without the
    embeddings: they keep their initial values, and the audit would measure noise, not memorization); or a preference
    trainer's reference model (`ref_model`) cannot embed them (TRL loads it from the model's path, unresized, when
    none is given: the first step would fail with an index error)."""
    added = new_tokens_of(manifest)
    if not added:
        return None
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    if tokenizer is None:
        return ("pre-flight: the trainer has no processing_class, so the new-token canaries cannot be checked; pass "
                "processing_class=<the tokenizer memlens.inject(design='new_token', tokenizer=...) extended>")
    ids = [tokenizer.convert_tokens_to_ids(t) for t in added]
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        return ("pre-flight: the trainer's tokenizer lacks the new-token canaries' tokens; train with the tokenizer "
                "memlens.inject(design='new_token', tokenizer=...) extended")
    embeddings = model.get_input_embeddings()
    rows = _embedding_rows(model)
    if max(ids) >= rows:
        return (f"pre-flight: the model's embeddings have {rows} rows and the new-token canaries need {max(ids) + 1}; "
                "call model.resize_token_embeddings(len(tokenizer)) before training")
    frozen = []
    for side, module in (("input", embeddings), ("output", model.get_output_embeddings())):
        trained = _trained_rows(module) if module is not None else None
        if trained is not None and not set(ids) <= trained:
            frozen.append(side)
    if frozen:
        return (f"pre-flight: the {' and '.join(frozen)} embedding rows of the new-token canaries are frozen, so they "
                "keep their initial values and the audit would measure noise, not memorization; train them: PEFT "
                "LoraConfig(modules_to_save=['embed_tokens', 'lm_head']) or trainable_token_indices=<their ids>, or "
                "leave the embeddings trainable")
    if ref_model is not None and max(ids) >= _embedding_rows(ref_model):
        return (f"pre-flight: the trainer's reference model has {_embedding_rows(ref_model)} embedding rows and the "
                f"new-token canaries need {max(ids) + 1} (TRL loads the reference from the model's path, without them, "
                "when none is given); pass ref_model=<the base, resized the same way>")
    return None


def new_tokens_of(manifest) -> list[str]:
    """The tokens a new-token design added (synthetic_data/designs.py), none for any other manifest."""
    return (read_manifest(manifest).get("design") or {}).get("new_tokens") or []


def control_refusal(control: str, manifest) -> str | None:
    """Why `control` cannot score new-token canaries, or None: 'base' (a PEFT model's base on disk never had the rows
    resized, nor its tokenizer the tokens), or a control directory whose tokenizer lacks them or whose embeddings
    were not resized to hold them (config.json's vocab_size)."""
    added = new_tokens_of(manifest)
    if not added:
        return None
    fix = ("give the control the same extended tokenizer and resized embeddings, never trained on the canaries "
           "(the base model after model.resize_token_embeddings(len(tokenizer)), saved with that tokenizer)")
    if str(control) == "base":
        return f"AuditCallback(control='base'): the new-token canaries' rows are not in the PEFT base on disk; {fix}"
    tokenizer = load_tokenizer(control)
    ids = [tokenizer.convert_tokens_to_ids(t) for t in added]
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        return f"AuditCallback(control={str(control)!r}): its tokenizer lacks the new-token canaries' tokens; {fix}"
    rows = read_json(Path(control) / "config.json").get("vocab_size") or 0
    if max(ids) >= rows:
        return (f"AuditCallback(control={str(control)!r}): its embeddings have {rows} rows and the new tokens need "
                f"{max(ids) + 1}; {fix}")
    return None


def check_new_tokens(model, tokenizer, manifest, log=print, raise_on_failure: bool = True, ref_model=None) -> None:
    """Refuse (UserError with the fix) or warn when training would not learn the new-token canaries."""
    why = new_token_refusal(model, tokenizer, manifest, ref_model) if model is not None else None
    if why and raise_on_failure:
        raise UserError(why)
    if why:
        log(f"[memlens] warning: {why}")


def survival_table(results: list[CanarySurvival], trainer_name: str) -> str:
    """The pre-flight's table, one row per canary."""
    lines = [f"[memlens] pre-flight ({trainer_name}): planted copies whose target reaches the loss",
             f"  {'canary':<24} {'copies':>6} {'survive':>7}  why not"]
    for s in results:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(s.reasons.items())) or "–"
        lines.append(f"  {s.id:<24} {s.copies:>6} {s.survived:>7}  {why}")
    return "\n".join(lines)


def refusal(results: list[CanarySurvival]) -> str | None:
    """The error a failed pre-flight raises (None when every copy survives): the canaries, why, and each fix."""
    failed = [s for s in results if not s.ok]
    if not failed:
        return None
    reasons = sorted({r for s in failed for r in s.reasons})
    return (f"pre-flight: {len(failed)} of {len(results)} planted canaries have copies that get no loss, so the audit "
            f"would read their non-memorization as a finding ({', '.join(s.id for s in failed[:5])}"
            f"{', ...' if len(failed) > 5 else ''}). " + " ".join(f"{r}: {FIXES[r]}." for r in reasons)
            + " To train anyway, pass preflight='warn' (or 'off') to memlens.AuditCallback.")


def preflight(trainer, manifest, log=print, raise_on_failure: bool = True) -> list[CanarySurvival]:
    """Check, before training, that every planted copy of the manifest's canaries reaches `trainer`'s loss; print the
    table and raise (UserError, with the fix) when one does not, unless `raise_on_failure` is false."""
    check_new_tokens(trainer.model, trainer.processing_class, manifest, log, raise_on_failure,
                     getattr(trainer, "ref_model", None))
    results = check_survival(trainer.args, trainer.train_dataset, trainer.data_collator,
                             trainer.processing_class, manifest)
    return report(results, type(trainer).__name__, log, raise_on_failure)


def report(results: list[CanarySurvival], trainer_name: str, log, raise_on_failure: bool) -> list[CanarySurvival]:
    log(survival_table(results, trainer_name))
    why = refusal(results)
    if why and raise_on_failure:
        raise UserError(why)
    if why:
        log(f"[memlens] warning: {why}")
    return results


def dataloader_parts(dataloader) -> tuple[Any, Any]:
    """(processed dataset, collator) of a trainer's train dataloader, as `on_train_begin` receives it."""
    return getattr(dataloader, "dataset", None), getattr(dataloader, "collate_fn", None)
