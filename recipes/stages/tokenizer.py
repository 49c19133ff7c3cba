"""The embedded default's tokenizer: byte-level BPE trained from scratch on code, with FIM sentinels.

Sentinels follow the StarCoder spelling (`<fim_prefix>`, `<fim_middle>`, `<fim_suffix>`) so that
harness/text/fim.py detects them like any public FIM model; `<eos>` ends a completion, `<pad>` pads.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<pad>", "<eos>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>"]


def train_code_tokenizer(texts: Iterable[str], vocab_size: int = 4096):
    """Train a byte-level BPE tokenizer on `texts`; returns a transformers PreTrainedTokenizerFast."""
    # transformers (~1.5 s): pretrain.py imports tokenizer.py when the plan is composed
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                   additional_special_tokens=SPECIAL_TOKENS[2:])
