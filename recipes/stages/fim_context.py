"""FIM prompts that fit a model's context: the prefix and suffix trimmed around the middle so that the whole FIM example
fits `max_length` tokens (paper 003 App. A's PSM prompts, cut at their far ends), and left-padded prompt batches."""

from __future__ import annotations

from memlens.harness.model.encode import encode_texts

CONTEXT_MARGIN_TOKENS = 8     # FIM sentinels + BPE merge slack at the prompt's joins (fit_fim_context)


def left_padded_prompts(tokenizer, prompts: list[str]):
    """Prompt ids by the one encoding rule (memlens.harness.model.encode: BOS where the family adds one), left-padded so
    that every prompt ends where sampling starts (PPO's rollouts, the RL reward evaluation); tensors."""
    return tokenizer.pad({"input_ids": encode_texts(tokenizer, prompts)}, padding_side="left", return_tensors="pt")


def fit_fim_context(tokenizer, prefix: str, suffix: str, middle_tokens: int, max_length: int,
                    margin: int = CONTEXT_MARGIN_TOKENS) -> tuple[str, str, bool]:
    """Trim a FIM context (in tokens) so that `[PRE]prefix[SUF]suffix[MID]` + a middle of `middle_tokens`
    tokens fits `max_length`; returns (prefix, suffix, trimmed).

    PSM puts the middle last (paper 003 Sec. 2.2.1) and TRL's trainers cut a too-long text at its end,
    which would cut the middle: the canary an FT stage plants, the chosen/rejected lines IPO learns from.
    The context nearest the hole (the end of the prefix, the start of the suffix) is kept, each side
    getting at least half of the budget when it needs it. BPE merges across the joins may differ by a few
    tokens, hence the margin. One definition for every stage that trains on FIM rows (SFT, IPO).
    """
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    budget = max_length - middle_tokens - margin
    p, s = encode(prefix), encode(suffix)
    if len(p) + len(s) <= budget:
        return prefix, suffix, False
    keep_s = min(len(s), max(budget // 2, budget - len(p), 0))
    keep_p = max(budget - keep_s, 0)
    return (tokenizer.decode(p[len(p) - keep_p:]) if keep_p else ""), tokenizer.decode(s[:keep_s]), True
