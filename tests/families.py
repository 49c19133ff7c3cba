"""Tiny stand-ins for the public code models behind the GPU presets: each family's real transformers
architecture class and its tokenizer conventions, random-initialised, built on CPU in seconds.

What a fixture reproduces, per family, and where each convention comes from (the model's public
tokenizer_config.json / tokenizer.json / config.json on the Hugging Face hub, read 2026-11-25; the FIM
sentinel spellings also in harness/text/fim.py):

- StarCoder2 (bigcode/starcoder2-3b): `Starcoder2ForCausalLM` (MLP `c_fc`/`c_proj`, biases on); tokenizer
  class `GPT2Tokenizer` (byte-level BPE, digits split one by one); `<|endoftext|>` is BOS, EOS and UNK at
  id 0 and no BOS is added; no pad token; `<fim_prefix>` `<fim_middle>` `<fim_suffix>` `<fim_pad>`
  `<repo_name>` `<file_sep>` ... at ids 1.. are all `special: true`; context 16,384.
- Qwen2.5-Coder (Qwen/Qwen2.5-Coder-0.5B): `Qwen2ForCausalLM` (tied embeddings at 0.5B); tokenizer class
  `Qwen2Tokenizer`; no BOS (`bos_token: null`); EOS = PAD = `<|endoftext|>` (special), right after the BPE
  vocabulary (id 151643), then `<|im_start|>`/`<|im_end|>` (special) and `<|fim_prefix|>` `<|fim_middle|>`
  `<|fim_suffix|>` `<|fim_pad|>` `<|repo_name|>` `<|file_sep|>` with `special: false` (ids 151659-151664);
  the embedding matrix is padded past the tokenizer (151,936 rows); context 32,768.
- DeepSeek-Coder (deepseek-ai/deepseek-coder-1.3b-base): `LlamaForCausalLM` with linear RoPE scaling x4;
  tokenizer_config names `LlamaTokenizerFast` with `add_bos_token: true`, but tokenizer.json is a byte-level
  BPE (transformers 5 then loads it as TokenizersBackend); `<｜begin▁of▁sentence｜>` (BOS, special) is added
  to every text; EOS `<｜end▁of▁sentence｜>` (special) is also the PAD; `<｜fim▁hole｜>` `<｜fim▁begin｜>`
  `<｜fim▁end｜>` `<pad>` `<|User|>` `<|Assistant|>` follow with `special: false`, then `<|EOT|>` (special);
  ids 32013-32021 after the BPE vocabulary, embedding padded to 32,256; context 16,384.
- CodeGemma (google/codegemma-2b): `GemmaForCausalLM` (tied embeddings, head_dim 256 at 2B); tokenizer
  class `GemmaTokenizer` (SentencePiece-style BPE with byte fallback, `▁` for spaces) with
  `add_bos_token: true`; `<pad>` 0, `<eos>` 1, `<bos>` 2, `<unk>` 3 (special); `<|fim_prefix|>`
  `<|fim_middle|>` `<|fim_suffix|>` `<|file_separator|>` at ids 67-70 with `special: false`; a middle ends
  with `<|file_separator|>` (ai.google.dev/gemma/docs/codegemma/prompt-structure); context 8,192.

Sizes are not the real ones (hidden 64, 2 layers, a few hundred BPE merges trained on standard-library
code); ids keep each family's layout (specials first or after the BPE vocabulary), not its numbers.
`build_family(name, out_dir)` writes a normal HF model directory that `model=<preset>
model.pretrained=<dir>` imports like the real model.
"""

from __future__ import annotations

import json
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HIDDEN, LAYERS, HEADS, KV_HEADS = 64, 2, 4, 2


@dataclass(frozen=True)
class Family:
    """One public model family as the fixtures reproduce it."""

    name: str                 # harness.text.fim family
    preset: str               # conf/model/<preset>.yaml
    architecture: str         # transformers class the real checkpoint's config.json names
    tokenizer_class: str      # tokenizer_class of the real tokenizer_config.json
    adds_bos: bool            # does tokenizer(text) start with BOS
    bos: str | None
    eos: str
    pad: str | None           # the tokenizer's own pad token (None: the real one has none)
    special: tuple[str, ...]      # added tokens marked special: true
    not_special: tuple[str, ...]  # added tokens marked special: false (FIM sentinels of three families)
    context: int              # max_position_embeddings of the real config


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("starcoder2", "starcoder2_3b", "Starcoder2ForCausalLM", "GPT2Tokenizer", adds_bos=False,
           bos="<|endoftext|>", eos="<|endoftext|>", pad=None,
           special=("<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<repo_name>",
                    "<file_sep>", "<issue_start>", "<issue_comment>", "<jupyter_start>", "<empty_output>"),
           not_special=(), context=16384),
    Family("qwen2.5-coder", "qwen2.5_coder_0.5b", "Qwen2ForCausalLM", "Qwen2Tokenizer", adds_bos=False,
           bos=None, eos="<|endoftext|>", pad="<|endoftext|>",
           special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
           not_special=("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                        "<|file_sep|>"), context=32768),
    Family("deepseek-coder", "deepseek_coder_1.3b", "LlamaForCausalLM", "LlamaTokenizerFast", adds_bos=True,
           bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>", pad="<｜end▁of▁sentence｜>",
           special=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
           not_special=("<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<pad>", "<|User|>",
                        "<|Assistant|>"),
           context=16384),
    Family("codegemma", "codegemma_2b", "GemmaForCausalLM", "GemmaTokenizer", adds_bos=True,
           bos="<bos>", eos="<eos>", pad="<pad>",
           special=("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"),
           not_special=("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|file_separator|>"),
           context=8192),
)}
DEEPSEEK_EOT = "<|EOT|>"      # special: true, after DeepSeek's non-special block (id 32021)


@lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    """Standard-library code to learn BPE merges from (sorted, so every build is identical)."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:40]
    return tuple(f.read_text(errors="replace")[:4000] for f in files)


def _train_bpe(pre_tokenizer, vocab_size: int, byte_fallback: bool = False, normalizer=None):
    """(vocab, merges) of a BPE trained on corpus() with the family's pre-tokenization."""
    from tokenizers import Tokenizer, models, trainers
    from tokenizers import pre_tokenizers as pre

    tok = Tokenizer(models.BPE(byte_fallback=byte_fallback))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    alphabet = pre.ByteLevel.alphabet() if not byte_fallback else []
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet,
                                                          show_progress=False))
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def _ordered_vocab(first: list[str], bpe_vocab: dict[str, int], last: list[str]) -> dict[str, int]:
    """`first` at ids 0.., then the BPE tokens in their order, then `last`."""
    vocab: dict[str, int] = {}
    for token in [*first, *sorted(bpe_vocab, key=bpe_vocab.get), *last]:
        vocab.setdefault(token, len(vocab))
    return vocab


def _mark_added(tokenizer, family: Family, extra_special: tuple[str, ...] = ()) -> None:
    """Register the family's added tokens with their `special` flags (ids already in the vocabulary)."""
    from tokenizers import AddedToken

    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in (*family.special, *extra_special)],
                         special_tokens=True)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.not_special])


def _starcoder2_tokenizer(family: Family):
    from tokenizers import pre_tokenizers as pre
    from transformers import GPT2Tokenizer

    bpe, merges = _train_bpe(pre.Sequence([pre.Digits(individual_digits=True), pre.ByteLevel(add_prefix_space=False)]),
                             500)
    tok = GPT2Tokenizer(vocab=_ordered_vocab(list(family.special), bpe, []), merges=merges,
                        bos_token=family.bos, eos_token=family.eos, unk_token=family.eos,
                        additional_special_tokens=list(family.special[1:]))
    tok.backend_tokenizer.pre_tokenizer = pre.Sequence([pre.Digits(individual_digits=True),
                                                        pre.ByteLevel(add_prefix_space=False)])
    _mark_added(tok, family)
    return tok


def _qwen_tokenizer(family: Family):
    from tokenizers import pre_tokenizers as pre
    from transformers import Qwen2Tokenizer

    bpe, merges = _train_bpe(pre.ByteLevel(add_prefix_space=False), 500)
    tok = Qwen2Tokenizer(vocab=_ordered_vocab([], bpe, [*family.special, *family.not_special]), merges=merges)
    _mark_added(tok, family)
    return tok


def _deepseek_tokenizer(family: Family):
    """Byte-level BPE with a BOS template, saved under the LlamaTokenizerFast name as the real one is."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors
    from tokenizers import pre_tokenizers as pre
    from transformers import PreTrainedTokenizerFast

    pre_tok = pre.Sequence([pre.Digits(individual_digits=True), pre.ByteLevel(add_prefix_space=False)])
    bpe, merges = _train_bpe(pre_tok, 500)
    vocab = _ordered_vocab([], bpe, [*family.special, *family.not_special, DEEPSEEK_EOT])
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tok
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in family.special])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in family.not_special])
    backend.add_special_tokens([AddedToken(DEEPSEEK_EOT, special=True, normalized=False)])
    backend.post_processor = processors.TemplateProcessing(
        single=f"{family.bos} $A", pair=f"{family.bos} $A {family.bos} $B",
        special_tokens=[(family.bos, vocab[family.bos])])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=family.bos, eos_token=family.eos,
                                   pad_token=family.pad, add_bos_token=True)


def _gemma_tokenizer(family: Family):
    """Gemma's own class: BPE with byte fallback over `<0xNN>` tokens, spaces as `▁`."""
    from tokenizers import normalizers
    from tokenizers import pre_tokenizers as pre
    from transformers import GemmaTokenizer

    bpe, merges = _train_bpe(pre.Metaspace(replacement="▁", prepend_scheme="never"), 500, byte_fallback=True,
                             normalizer=normalizers.Replace(" ", "▁"))
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    vocab = _ordered_vocab([*family.special, *family.not_special, *byte_tokens], bpe, [])
    tok = GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True)
    _mark_added(tok, family)
    return tok


TOKENIZER_BUILDERS: dict[str, Callable[[Family], object]] = {
    "starcoder2": _starcoder2_tokenizer, "qwen2.5-coder": _qwen_tokenizer,
    "deepseek-coder": _deepseek_tokenizer, "codegemma": _gemma_tokenizer,
}


def _padded(n: int, multiple: int = 64) -> int:
    return -(-n // multiple) * multiple


def _model(family: Family, tokenizer, seed: int):
    """The family's causal LM class from its config class, sized to the tokenizer, seeded."""
    import torch
    import transformers

    ids = {k: tokenizer.convert_tokens_to_ids(v) if v else None
           for k, v in (("bos_token_id", family.bos), ("eos_token_id", family.eos), ("pad_token_id", family.pad))}
    common = dict(hidden_size=HIDDEN, intermediate_size=4 * HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=family.context,
                  **ids)
    if family.name == "starcoder2":
        config = transformers.Starcoder2Config(vocab_size=len(tokenizer), use_bias=True, **common)
    elif family.name == "qwen2.5-coder":
        config = transformers.Qwen2Config(vocab_size=_padded(len(tokenizer)), tie_word_embeddings=True, **common)
    elif family.name == "deepseek-coder":
        config = transformers.LlamaConfig(vocab_size=_padded(len(tokenizer)), tie_word_embeddings=False,
                                          rope_scaling={"rope_type": "linear", "factor": 4.0}, **common)
    else:
        config = transformers.GemmaConfig(vocab_size=len(tokenizer), head_dim=HIDDEN // HEADS,
                                          tie_word_embeddings=True, **common)
    torch.manual_seed(seed)
    model = getattr(transformers, family.architecture)(config).eval()
    assert type(model).__name__ == family.architecture
    return model


def _patch_tokenizer_config(out_dir: Path, family: Family) -> None:
    """The real tokenizer_config.json's class name and BOS flag (DeepSeek declares LlamaTokenizerFast)."""
    path = out_dir / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = family.tokenizer_class
    if family.adds_bos:
        config["add_bos_token"] = True
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")


def build_family(name: str, out_dir: str | Path, seed: int = 0) -> Path:
    """A model directory (safetensors + config + tokenizer) of family `name`, checked after a reload."""
    family = FAMILIES[name]
    out_dir = Path(out_dir)
    tokenizer = TOKENIZER_BUILDERS[name](family)
    model = _model(family, tokenizer, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    _patch_tokenizer_config(out_dir, family)
    check_conventions(name, out_dir)
    return out_dir


def check_conventions(name: str, model_dir: str | Path) -> None:
    """Reload the directory as a user would and assert the family's conventions hold."""
    from transformers import AutoTokenizer

    family = FAMILIES[name]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok("def f(x):\n    return x")["input_ids"]
    assert (ids[0] == tok.bos_token_id) == family.adds_bos, (name, "BOS", ids[:3])
    assert ids[-1] != tok.eos_token_id, (name, "no EOS appended")
    assert tok.eos_token == family.eos and tok.pad_token == family.pad, (name, tok.eos_token, tok.pad_token)
    added = {t.content: t.special for t in tok.added_tokens_decoder.values()}
    for token in family.special:
        assert added.get(token) is True, (name, token, added.get(token))
    for token in family.not_special:
        assert added.get(token) is False, (name, token, added.get(token))
        assert len(tok(token, add_special_tokens=False)["input_ids"]) == 1, (name, token)
    text = "x = {'a': 1}  # ünïcode\n\tif x:\n        pass\n"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text, (name, "round trip")
