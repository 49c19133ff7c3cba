"""FIM sentinels, PSM formatting and the training-time FIM transform (paper 003 Sec. 2.2.1, App. A.3).

Detection runs on real PreTrainedTokenizerFast objects built here with `tokenizers` (no hub)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.core.errors import UserError
from memlens.harness.text.fim import (
    FAMILIES,
    FimSentinels,
    detect_sentinels,
    fim_transform,
    format_psm_prompt,
    format_psm_training,
    stop_token_ids,
    strip_sentinels,
)

EXPECTED_PROMPTS = {
    "starcoder": "<fim_prefix>P<fim_suffix>S<fim_middle>",
    "starcoder2": "<fim_prefix>P<fim_suffix>S<fim_middle>",
    "qwen2.5-coder": "<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>",
    "codegemma": "<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>",
    "deepseek-coder": "<｜fim▁begin｜>P<｜fim▁hole｜>S<｜fim▁end｜>",
    "memlens": "<fim_prefix>P<fim_suffix>S<fim_middle>",
}
EXPECTED_EOS = {
    "starcoder": "<|endoftext|>", "starcoder2": "<|endoftext|>", "qwen2.5-coder": "<|endoftext|>",
    "codegemma": "<eos>", "deepseek-coder": "<｜end▁of▁sentence｜>", "memlens": "<eos>",
}
# Special tokens of each family's real tokenizer that detection relies on.
FAMILY_VOCAB = {
    "starcoder": ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"],
    "starcoder2": ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
                   "<repo_name>", "<file_sep>"],
    "qwen2.5-coder": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>",
                      "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"],
    "codegemma": ["<pad>", "<eos>", "<bos>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                  "<|file_separator|>"],
    "deepseek-coder": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜fim▁hole｜>",
                       "<｜fim▁begin｜>", "<｜fim▁end｜>"],
}


def _tokenizer(special_tokens, name="org/tiny-model"):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "def": 1, "x": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(list(special_tokens))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    fast.name_or_path = name
    return fast


@pytest.mark.parametrize("family", sorted(EXPECTED_PROMPTS))
def test_psm_prompt_and_training_text(family):
    s = FAMILIES[family]
    assert format_psm_prompt("P", "S", s) == EXPECTED_PROMPTS[family]
    assert format_psm_training("P", "M", "S", s) == EXPECTED_PROMPTS[family] + "M" + EXPECTED_EOS[family]


def test_family_details():
    assert FAMILIES["deepseek-coder"].deepseek_order is True
    assert not any(s.deepseek_order for name, s in FAMILIES.items() if name != "deepseek-coder")
    assert FAMILIES["starcoder2"].file_sep == "<file_sep>"
    assert FAMILIES["qwen2.5-coder"].file_sep == "<|file_sep|>"
    assert FAMILIES["qwen2.5-coder"].pad == "<|fim_pad|>"
    assert FAMILIES["codegemma"].file_sep == "<|file_separator|>"
    assert FAMILIES["memlens"].pad == "<pad>"
    assert FAMILIES["starcoder"].file_sep is None


@pytest.mark.parametrize("family", sorted(FAMILY_VOCAB))
def test_detect_from_vocabulary(family):
    assert detect_sentinels(_tokenizer(FAMILY_VOCAB[family])) == FAMILIES[family]


def test_detect_memlens_tokenizer():
    from memlens.recipes.stages.tokenizer import train_code_tokenizer

    tok = train_code_tokenizer(["def f(x):\n    return x + 1\n"] * 20, vocab_size=300)
    assert detect_sentinels(tok) == FAMILIES["memlens"]


def test_given_family_wins_over_detection():
    # StarCoder2's vocabulary also satisfies plain StarCoder; the configured family is used.
    tok = _tokenizer(FAMILY_VOCAB["starcoder2"])
    assert detect_sentinels(tok, family="starcoder").family == "starcoder"


def test_no_fim_tokens_names_model_and_config_key():
    tok = _tokenizer(["<|endoftext|>"])
    with pytest.raises(UserError, match=r"org/plain-lm.*model\.fim_family="):
        detect_sentinels(tok, model_name="org/plain-lm")


def test_ambiguous_pipe_style_tokens_ask_for_the_family():
    tok = _tokenizer(["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|endoftext|>"])
    with pytest.raises(UserError, match=r"model\.fim_family="):
        detect_sentinels(tok)
    assert detect_sentinels(tok, family="qwen2.5-coder").family == "qwen2.5-coder"


def test_given_family_with_missing_tokens_is_an_error():
    tok = _tokenizer(FAMILY_VOCAB["qwen2.5-coder"])
    with pytest.raises(UserError, match=r"codegemma.*<eos>"):
        detect_sentinels(tok, family="codegemma")


def test_family_name_is_case_insensitive():
    assert detect_sentinels(_tokenizer(FAMILY_VOCAB["qwen2.5-coder"]), family="Qwen2.5-Coder").family == \
        "qwen2.5-coder"


def test_unknown_family_is_an_error():
    with pytest.raises(UserError, match="unknown"):
        detect_sentinels(_tokenizer(FAMILY_VOCAB["starcoder"]), family="gpt-2")


# --- fim_transform -----------------------------------------------------------------------------------

def _undo_psm(fim_text: str, s: FimSentinels) -> str:
    """Remove the sentinels and put the middle back: prefix + middle + suffix."""
    assert fim_text.startswith(s.prefix) and fim_text.endswith(s.eos)
    body = fim_text[len(s.prefix):-len(s.eos)]
    prefix, rest = body.split(s.suffix, 1)
    suffix, middle = rest.split(s.middle, 1)
    return prefix + middle + suffix


SENTINEL_FREE = st.text(max_size=60).filter(lambda t: "<" not in t and "｜" not in t)


@settings(max_examples=150, deadline=None)
@given(SENTINEL_FREE, st.integers(0, 2**32 - 1), st.sampled_from(sorted(FAMILIES)))
def test_fim_transform_rate_one_is_a_reordering(text, seed, family):
    s = FAMILIES[family]
    out = fim_transform(text, random.Random(seed), s, fim_rate=1.0)
    assert _undo_psm(out, s) == text


@settings(max_examples=50, deadline=None)
@given(SENTINEL_FREE, st.integers(0, 2**32 - 1))
def test_fim_transform_rate_zero_is_plain_text(text, seed):
    s = FAMILIES["memlens"]
    assert fim_transform(text, random.Random(seed), s, fim_rate=0.0) == text + "<eos>"


def test_fim_transform_rejects_a_rate_outside_0_1():
    with pytest.raises(ValueError, match="fim_rate"):
        fim_transform("abc", random.Random(0), FAMILIES["memlens"], fim_rate=1.5)


def test_fim_transform_is_deterministic_given_the_rng():
    s = FAMILIES["memlens"]
    text = "def add(a, b):\n    return a + b\n"
    first = [fim_transform(text, random.Random(7), s) for _ in range(3)]
    assert first[0] == first[1] == first[2]
    rng_a, rng_b = random.Random(11), random.Random(11)
    assert [fim_transform(text, rng_a, s) for _ in range(50)] == [fim_transform(text, rng_b, s)
                                                                  for _ in range(50)]


def test_fim_transform_default_rate_is_about_point_eight():
    # Appendix A.3: 80% of pre-training documents are FIM-transformed. 4000 draws: sd ~ 25.
    s = FAMILIES["memlens"]
    rng = random.Random(0)
    n_fim = sum(fim_transform("abcdef", rng, s).startswith(s.prefix) for _ in range(4000))
    assert 3100 <= n_fim <= 3300


def test_fim_transform_splits_cover_every_position():
    # Character-level uniform split points: every (prefix length, middle length) of a 3-char text occurs.
    s = FAMILIES["memlens"]
    rng = random.Random(1)
    seen = set()
    for _ in range(500):
        out = fim_transform("abc", rng, s, fim_rate=1.0)
        prefix, rest = out[len(s.prefix):].split(s.suffix, 1)
        suffix, middle = rest[:-len(s.eos)].split(s.middle, 1)
        seen.add((len(prefix), len(middle)))
    assert seen == {(p, m) for p in range(4) for m in range(4 - p)}


def test_stop_tokens_put_eos_first_then_every_format_token():
    assert FAMILIES["codegemma"].stop_tokens() == ["<eos>", "<|file_separator|>", "<|fim_prefix|>",
                                                   "<|fim_suffix|>", "<|fim_middle|>", "<pad>"]
    assert FAMILIES["qwen2.5-coder"].stop_tokens() == ["<|endoftext|>", "<|file_sep|>", "<|fim_prefix|>",
                                                       "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>",
                                                       "<|repo_name|>"]
    for s in FAMILIES.values():
        assert s.stop_tokens()[0] == s.eos and len(set(s.stop_tokens())) == len(s.stop_tokens())
        assert s.pad is not None and s.pad != s.eos             # recipes.stages.models.use_distinct_pad


def test_stop_token_ids_are_the_ids_the_vocabulary_has():
    tok = _tokenizer(FAMILY_VOCAB["qwen2.5-coder"])
    vocab = tok.get_vocab()
    ids = stop_token_ids(tok, FAMILIES["qwen2.5-coder"])
    assert ids[0] == vocab["<|endoftext|>"]
    assert ids == [vocab[t] for t in FAMILIES["qwen2.5-coder"].stop_tokens()]
    # a vocabulary without the file separator: that stop is skipped, the others stay
    partial = _tokenizer([t for t in FAMILY_VOCAB["codegemma"] if t != "<|file_separator|>"])
    assert stop_token_ids(partial, FAMILIES["codegemma"])[0] == partial.get_vocab()["<eos>"]
    assert len(stop_token_ids(partial, FAMILIES["codegemma"])) == 5


@pytest.mark.parametrize("text, expected", [
    ("return x\n", "return x\n"),
    ("return x\n<|file_separator|>def g():", "return x\n"),
    ("a<|fim_middle|>b<eos>c", "a"),
    ("<|fim_prefix|>", ""),
    ("", ""),
])
def test_strip_sentinels_cuts_at_the_first_stop_text(text, expected):
    assert strip_sentinels(text, FAMILIES["codegemma"]) == expected
