"""Fill-in-the-middle (FIM) sentinels per model family, PSM formatting and the training-time FIM transform.

Paper 003 Sec. 2.2.1 (PSM prompts) and Appendix A.3 (FIM rate 0.8 in pre-training, following CodeGemma);
Bavarian et al. 2022 (character-level random splits).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from memlens.harness.core.errors import UserError


@dataclass(frozen=True)
class FimSentinels:
    """The special strings of one FIM model family.

    `prefix`, `suffix` and `middle` are the sentinels that *introduce* the prefix, the suffix and the
    middle. For DeepSeek-Coder that is `<｜fim▁begin｜>`, `<｜fim▁hole｜>` and `<｜fim▁end｜>`, whose layout
    begin·prefix·hole·suffix·end·middle is then the same PSM layout; `deepseek_order` records it.
    """

    family: str
    prefix: str
    suffix: str
    middle: str
    eos: str | None
    file_sep: str | None = None
    pad: str | None = None         # a padding token distinct from EOS (see `pad` below)
    deepseek_order: bool = False
    other: tuple[str, ...] = ()    # further format tokens a completion must never contain (repo name, ...)

    def prompt(self, prefix: str, suffix: str) -> str:
        """The PSM inference prompt of an example (memlens.harness.model.prompts: every prompt format has one)."""
        return format_psm_prompt(prefix, suffix, self)

    def required_tokens(self) -> list[str]:
        return [t for t in (self.prefix, self.suffix, self.middle, self.eos) if t is not None]

    def stop_tokens(self) -> list[str]:
        """Where a completion ends: EOS first (drafts end with it), then every format token of the family.

        A FIM model ends a middle with EOS, or with the file separator (CodeGemma's prompt-structure guide;
        StarCoder2's repository format), and a model that runs on emits the next sentinel. Qwen2.5-Coder,
        CodeGemma and DeepSeek-Coder mark their sentinels `special: false`, so skip_special_tokens would
        leave them in the text: decoding stops at any of these instead, and `strip_sentinels` cuts a
        decoded text at the first one."""
        tokens = [self.eos, self.file_sep, self.prefix, self.suffix, self.middle, self.pad, *self.other]
        return list(dict.fromkeys(t for t in tokens if t))


# Sentinel spellings, checked against public sources (2026-11-22):
# - StarCoder / StarCoder2: bigcode tokenizers (`<fim_prefix>`, `<fim_suffix>`, `<fim_middle>`, EOS
#   `<|endoftext|>`; StarCoder2 adds `<file_sep>`), e.g. sourcegraph/cody's StarCoder stop sequences and
#   the StarCoder2 paper's repository-context format (arXiv 2402.19173 Sec. 5).
# - Qwen2.5-Coder: QwenLM/Qwen2.5-Coder README, "file-level code completion (fill-in-the-middle)":
#   `<|fim_prefix|>`, `<|fim_suffix|>`, `<|fim_middle|>`, `<|fim_pad|>`, `<|repo_name|>`, `<|file_sep|>`,
#   EOS `<|endoftext|>`.
# - CodeGemma: ai.google.dev/gemma/docs/codegemma/prompt-structure -- the same three pipe-style FIM
#   tokens plus `<|file_separator|>`; Gemma's EOS is `<eos>`.
# - DeepSeek-Coder: deepseek-ai/DeepSeek-Coder README (code insertion example):
#   `<｜fim▁begin｜>`prefix`<｜fim▁hole｜>`suffix`<｜fim▁end｜>`; EOS `<｜end▁of▁sentence｜>` (fullwidth
#   bars U+FF5C and U+2581 "▁", not ASCII).
# - memlens: recipes/stages/tokenizer.py (StarCoder spelling, EOS `<eos>`, pad `<pad>`).
# Pads distinct from EOS, from the public tokenizer configs (2026-11-25): StarCoder/StarCoder2 `<fim_pad>`
# (id 4, special), Qwen2.5-Coder `<|fim_pad|>` (151662), CodeGemma `<pad>` (0), DeepSeek-Coder `<pad>` (32018).
# Three of them ship PAD = EOS or no PAD: a sequence classifier then scores the token before the final EOS
# (memlens.recipes.stages.models.load_tokenizer sets this pad instead).
FAMILIES: dict[str, FimSentinels] = {s.family: s for s in (
    FimSentinels("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>", pad="<fim_pad>"),
    FimSentinels("starcoder2", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>",
                 file_sep="<file_sep>", pad="<fim_pad>", other=("<repo_name>",)),
    FimSentinels("qwen2.5-coder", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|endoftext|>",
                 file_sep="<|file_sep|>", pad="<|fim_pad|>", other=("<|repo_name|>",)),
    FimSentinels("codegemma", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<eos>",
                 file_sep="<|file_separator|>", pad="<pad>"),
    FimSentinels("deepseek-coder", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", "<｜end▁of▁sentence｜>",
                 pad="<pad>", deepseek_order=True),
    FimSentinels("memlens", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<eos>", pad="<pad>"),
)}


def canonical_family(family: str | None) -> str | None:
    """`family` as FAMILIES keys it (lower-cased)."""
    return None if family is None else family.lower()


def _family_from_vocab(vocab) -> str | None:
    """Which family a vocabulary belongs to, or None when it has no (or ambiguous) FIM sentinels.

    Qwen2.5-Coder and CodeGemma share the pipe-style FIM tokens and differ in the file separator;
    memlens and StarCoder share the underscore style and differ in the EOS (`<eos>`).
    """
    if "<｜fim▁begin｜>" in vocab:
        return "deepseek-coder"
    if "<|fim_prefix|>" in vocab:
        if "<|file_sep|>" in vocab:
            return "qwen2.5-coder"
        if "<|file_separator|>" in vocab:
            return "codegemma"
        return None
    if "<fim_prefix>" in vocab:
        if "<eos>" in vocab:
            return "memlens"
        return "starcoder2" if "<file_sep>" in vocab else "starcoder"
    return None


def detect_sentinels(tokenizer, family: str | None = None, model_name: str = "",
                     config_key: str = "model.fim_family") -> FimSentinels:
    """The FIM sentinels of `tokenizer`: from `family` (the config key `config_key`) or its vocabulary."""
    vocab = tokenizer.get_vocab()
    name = model_name or getattr(tokenizer, "name_or_path", "") or "the model"
    known = ", ".join(FAMILIES)
    if family is None:
        family = _family_from_vocab(vocab)
        if family is None:
            raise UserError(f"{name}: cannot detect the FIM sentinels from its tokenizer's vocabulary; "
                            f"set {config_key}=<one of {known}> (or use a FIM-trained model)")
    family = canonical_family(family)
    if family not in FAMILIES:
        raise UserError(f"{config_key}={family!r} is unknown; use one of {known}")
    sentinels = FAMILIES[family]
    missing = [t for t in sentinels.required_tokens() if t not in vocab]
    if missing:
        raise UserError(f"{name}: {config_key}={family} but its tokenizer lacks {missing}; "
                        f"set {config_key} to the model's real family (one of {known})")
    return sentinels


def stop_token_ids(tokenizer, s: FimSentinels) -> list[int]:
    """Ids of `s.stop_tokens()` that are single tokens of `tokenizer` (EOS first): decoding stops at any."""
    vocab = tokenizer.get_vocab()
    return list(dict.fromkeys(vocab[t] for t in s.stop_tokens() if t in vocab))


def strip_sentinels(text: str, s: FimSentinels) -> str:
    """`text` up to the first stop token written out as text (a completion ends there, as decoding does)."""
    cut = min((i for i in (text.find(t) for t in s.stop_tokens()) if i >= 0), default=len(text))
    return text[:cut]


def format_psm_prompt(prefix: str, suffix: str, s: FimSentinels) -> str:
    """Inference prompt `[PRE]prefix[SUF]suffix[MID]` (Sec. 2.2.1); the completion is the middle."""
    return f"{s.prefix}{prefix}{s.suffix}{suffix}{s.middle}"


def format_psm_training(prefix: str, middle: str, suffix: str, s: FimSentinels) -> str:
    """Training text: the PSM prompt, then the middle, then EOS (so the model learns where to stop)."""
    return format_psm_prompt(prefix, suffix, s) + middle + (s.eos or "")


def fim_transform(text: str, rng: random.Random, s: FimSentinels, fim_rate: float = 0.8) -> str:
    """With probability `fim_rate`, PSM text from two uniform character-level split points; else text+EOS.

    Appendix A.3 uses fim_rate 0.8 for pre-training (following CodeGemma); Bavarian et al. 2022 split at
    character level. Deterministic given `rng`.
    """
    if not 0.0 <= fim_rate <= 1.0:
        raise ValueError(f"fim_transform: fim_rate={fim_rate} must be in [0, 1]")
    if rng.random() >= fim_rate:
        return text + (s.eos or "")
    lo, hi = sorted((rng.randint(0, len(text)), rng.randint(0, len(text))))
    return format_psm_training(text[:lo], text[lo:hi], text[hi:], s)
