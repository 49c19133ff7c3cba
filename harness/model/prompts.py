"""How an audit prompts a model with an example (prefix, target, suffix): the prompt formats.

Paper 003 audits FIM code models, so its prompt is PSM, `[PRE]prefix[SUF]suffix[MID]` (memlens.harness.text.fim, one
entry per model family). A user's own fine-tune (memlens.inject, harness/audit/callback.py) trains the canary
the way its TRL format lays it out, and the extraction test must ask the way the model learned:

    psm      a FIM family's sentinels (memlens.harness.text.fim.FAMILIES; detected from the vocabulary, or named)
    prefix   the prefix alone, left to right: language modelling, prompt-completion, preference, unpaired and
             prompt-only rows (memlens.inject puts prefix and target in that order; the spaces ending a prefix
             move to the completion there, so the prompt is the prefix without them, as trained)
    chat     the user turn through the tokenizer's chat template with the generation prompt: conversational
             rows (user: prefix, assistant: target + suffix)

Every format answers the same four questions: `family` (its name in cache keys and settings), `prompt(prefix,
suffix)`, `stop_tokens()` (decoding stops at the first) and `eos`. The suffix is shown only by PSM.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from memlens.harness.core.errors import UserError
from memlens.harness.model.encode import adds_bos
from memlens.harness.text.fim import FAMILIES, canonical_family, detect_sentinels

LEFT_TO_RIGHT = ("prefix", "chat")      # the formats beside the FIM families
_SLOT = "\u2063memlens-slot\u2063"        # an invisible separator no template or canary holds


@dataclass(frozen=True)
class PrefixPrompt:
    """The prefix, left to right; completions stop at EOS."""

    eos: str | None
    family: str = "prefix"

    def prompt(self, prefix: str, suffix: str) -> str:
        # memlens.inject moves the spaces ending a prefix to the completion (a BPE boundary): prompt as trained.
        return prefix.rstrip(" \t")

    def stop_tokens(self) -> list[str]:
        return [self.eos] if self.eos else []


@dataclass(frozen=True)
class ChatPrompt:
    """The chat template around one user turn: `head + prefix + tail`, where `tail` ends with the generation
    prompt; completions stop at EOS or the token that ends an assistant turn."""

    head: str
    tail: str
    eos: str | None
    end_of_turn: tuple[str, ...] = ()
    family: str = "chat"

    def prompt(self, prefix: str, suffix: str) -> str:
        return self.head + prefix + self.tail

    def stop_tokens(self) -> list[str]:
        return list(dict.fromkeys(t for t in (self.eos, *self.end_of_turn) if t))


def prompt_format_name(family: str) -> str:
    """`psm`, `prefix` or `chat`: the kind of prompt a format's `family` (a cache-key field) stands for."""
    kind = family.split(":")[0]
    return kind if kind in LEFT_TO_RIGHT else "psm"


def chat_prompt(tokenizer, name: str) -> ChatPrompt:
    """The tokenizer's chat template cut around the user's text (rendered once with a placeholder), so that
    every prompt is exactly what `apply_chat_template(..., add_generation_prompt=True)` gives."""
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"{name}: prompt format `chat` but its tokenizer has no chat template; save the tokenizer "
                        "your trainer used (with its chat_template), or use prompt format `prefix`")
    user = tokenizer.apply_chat_template([{"role": "user", "content": _SLOT}], tokenize=False,
                                         add_generation_prompt=True)
    if user.count(_SLOT) != 1:
        raise UserError(f"{name}: its chat template does not show the user's text once, verbatim; the chat "
                        "prompt cannot be built from it (use prompt format `prefix`)")
    head, tail = user.split(_SLOT)
    bos = tokenizer.bos_token
    if bos and head.startswith(bos) and adds_bos(tokenizer):
        head = head[len(bos):]       # the encoder adds it (memlens.harness.model.encode): once, as a trainer has it
    turn = tokenizer.apply_chat_template([{"role": "user", "content": "x"}, {"role": "assistant", "content": _SLOT}],
                                         tokenize=False)
    after = turn.split(_SLOT, 1)[1] if _SLOT in turn else ""
    ends = tuple(t for t in tokenizer.get_added_vocab() if t and t in after and t != tokenizer.eos_token)
    digest = hashlib.sha256((head + _SLOT + tail).encode("utf-8")).hexdigest()[:12]
    return ChatPrompt(head, tail, tokenizer.eos_token, ends, family=f"chat:{digest}")


def prompt_format(tokenizer, family: str | None = None, model_name: str = "",
                  config_key: str = "audit.fim_family"):
    """The prompt format of an audit: `prefix`, `chat`, a FIM family's name, or None (detect the FIM family)."""
    if family == "prefix":
        return PrefixPrompt(tokenizer.eos_token)
    if family == "chat":
        return chat_prompt(tokenizer, model_name or getattr(tokenizer, "name_or_path", "") or "the model")
    try:
        return detect_sentinels(tokenizer, family, model_name, config_key)
    except UserError as e:
        if family is None:   # no FIM vocabulary: say that a left-to-right format exists
            raise UserError(f"{e}; or, for a model trained left to right (not FIM), set {config_key}=prefix "
                            "(the prefix alone) or chat (the tokenizer's chat template)") from None
        if canonical_family(family) not in FAMILIES:
            raise UserError(f"{config_key}={family!r} is unknown; use prefix, chat or a FIM family "
                            f"({', '.join(FAMILIES)})") from None
        raise
