"""The one tokenisation rule: how every stage and the audit turn a formatted text into token ids.

TRL's trainers encode a plain-text row with `tokenizer(text)`, i.e. with the tokenizer's own special
tokens: a BOS in front for the families whose tokenizer adds one (DeepSeek-Coder, CodeGemma, Llama),
nothing for the others (StarCoder2, Qwen2.5-Coder, the embedded tokenizer). Everything memlens encodes
itself — the audit's PSM prompts, the loss measures, the reward model's texts, PPO's rollouts, the RL
reward evaluation — goes through `encode_texts`, which gives those same ids, so a model is never trained
on one form of a text and queried on another (Gemma-family models degrade without their BOS).

An EOS is never appended by the tokenizer: a training text carries its EOS as text
(memlens.harness.text.fim.format_psm_training), and a prompt must not end with one.
"""

from __future__ import annotations

from collections.abc import Sequence


def adds_bos(tokenizer) -> bool:
    """Whether `tokenizer(text)` starts with the BOS that encoding without special tokens lacks."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    with_specials = tokenizer("a")["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    return bool(with_specials) and with_specials[0] == bos and without[:1] != [bos]


def encode_texts(tokenizer, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
    """Token ids of formatted texts (PSM prompts or PSM training texts), as TRL's trainers encode them.

    BOS first where the family adds one (once, even if the text spells it out); no EOS appended.
    `max_length`: a longer text keeps its *last* tokens after the BOS — for a PSM text the end is the
    completion and its EOS, the part a reward model must see (paper 003 Sec. 2.2.1 puts the middle last).
    """
    bos = tokenizer.bos_token_id if adds_bos(tokenizer) else None
    head = [bos] if bos is not None else []
    out = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        body = list(ids)
        if head and body[:1] == head:
            body = body[1:]
        if max_length is not None:
            keep = max(max_length - len(head), 0)
            body = body[len(body) - keep:] if keep else []
        out.append(head + body)
    return out


def cut_at_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """The ids before the first EOS (the EOS itself and anything after it are dropped)."""
    eos = set(eos_ids)
    out = []
    for t in ids:
        if t in eos:
            break
        out.append(int(t))
    return out


def pad_id_of(tokenizer) -> int:
    """The id that fills a batch row to the batch's width: the tokenizer's pad token, else 0. No real token
    attends to it (right-padded rows under causal attention, memlens.harness.model.logprobs; left-padded rows under an
    attention mask, memlens.harness.model.decode), so any id is correct; the pad token keeps a batch's dump readable."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
