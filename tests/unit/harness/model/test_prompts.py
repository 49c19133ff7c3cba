"""harness/model/prompts.py: how an audit asks a model for an example — PSM for FIM families, the prefix alone or the
chat template for a model fine-tuned left to right (memlens.inject's formats), each with its stop tokens."""

from __future__ import annotations

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.model.cache import completion_fingerprint
from memlens.harness.model.encode import encode_texts
from memlens.harness.model.prompts import ChatPrompt, PrefixPrompt, prompt_format, prompt_format_name
from memlens.harness.text.fim import FAMILIES
from tests.tiny import tiny_tokenizer

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(["def f():\n    key = 'sk-1'\n    return key\n"] * 4, vocab_size=300)


@pytest.fixture
def chat_tok(tok):
    import copy

    t = copy.deepcopy(tok)
    t.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    t.chat_template = CHATML
    return t


def test_the_prefix_prompt_is_the_prefix_without_the_spaces_inject_moved_to_the_completion(tok):
    f = prompt_format(tok, "prefix")
    assert isinstance(f, PrefixPrompt) and f.family == "prefix"
    assert f.prompt("def f():\n    key = ", "\n    return key\n") == "def f():\n    key ="
    assert f.prompt("a\n", "ignored") == "a\n"           # only spaces and tabs move; a newline stays
    assert f.stop_tokens() == ["<eos>"]


def test_the_chat_prompt_is_exactly_the_template_with_its_generation_prompt(chat_tok):
    f = prompt_format(chat_tok, "chat")
    assert isinstance(f, ChatPrompt) and f.family.startswith("chat:")
    prefix = "def f():\n    key = "
    expected = chat_tok.apply_chat_template([{"role": "user", "content": prefix}], tokenize=False,
                                            add_generation_prompt=True)
    assert f.prompt(prefix, "suffix is not shown") == expected
    assert f.prompt(prefix, "") == "<|im_start|>user\n" + prefix + "<|im_end|>\n<|im_start|>assistant\n"
    assert f.stop_tokens() == ["<eos>", "<|im_end|>"]    # EOS, then the token that ends an assistant turn


def test_a_bos_in_the_template_is_not_doubled_by_the_encoder(chat_tok):
    chat_tok.chat_template = "{{ bos_token }}" + CHATML
    chat_tok.bos_token = "<|im_start|>"
    f = prompt_format(chat_tok, "chat")
    ids = encode_texts(chat_tok, [f.prompt("x = ", "")])[0]
    bos = chat_tok.convert_tokens_to_ids("<|im_start|>")
    adds = chat_tok("a")["input_ids"][:1] == [bos]
    assert ids[:2].count(bos) == 1 if adds else ids[0] == bos


def test_psm_is_unchanged_and_a_format_without_fim_tokens_says_what_to_set(tok):
    s = prompt_format(tok, None)
    assert s is FAMILIES["memlens"] and s.prompt("a", "b") == "<fim_prefix>a<fim_suffix>b<fim_middle>"
    with pytest.raises(UserError, match="audit.fim_family='nope' is unknown; use prefix, chat"):
        prompt_format(tok, "nope")
    with pytest.raises(UserError, match="no chat template"):
        prompt_format(tok, "chat")


def test_the_prompt_format_is_part_of_the_completion_cache_key():
    keys = {}
    for family in ("memlens", "prefix", "chat:0123456789ab"):
        keys[family], covers = completion_fingerprint("m", "e", fim_family=family, dtype="float32", max_new_tokens=8,
                                                      target_tokens=8, stop_tokens=["<eos>"])
        assert covers["prompt_format"] == prompt_format_name(family)
    assert len(set(keys.values())) == 3
    assert [prompt_format_name(f) for f in keys] == ["psm", "prefix", "chat"]
