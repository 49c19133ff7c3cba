"""memlens.harness.model.encode: the one tokenisation rule, on real tokenizers built here (BOS-adding and not)."""

import pytest

from memlens.harness.model.encode import adds_bos, encode_texts


def _tokenizer(add_bos: bool):
    """A word-level tokenizer with <bos>/<eos>; a TemplateProcessing post-processor adds <bos> like Llama's."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "<bos>": 1, "<eos>": 2, "a": 3, "b": 4, "c": 5, "d": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<bos>", "<eos>"])
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<bos>", eos_token="<eos>")


def test_bos_is_added_once_where_the_tokenizer_adds_it():
    bos, plain = _tokenizer(True), _tokenizer(False)
    assert adds_bos(bos) and not adds_bos(plain)
    assert encode_texts(bos, ["a b <eos>"]) == [[1, 3, 4, 2]] == [bos("a b <eos>")["input_ids"]]
    assert encode_texts(bos, ["<bos> a"]) == [[1, 3]]          # spelled out in the text: not twice
    assert encode_texts(plain, ["a b <eos>"]) == [[3, 4, 2]]


@pytest.mark.parametrize("max_length, expected", [(None, [1, 3, 4, 5, 6, 2]), (6, [1, 3, 4, 5, 6, 2]),
                                                  (4, [1, 5, 6, 2]), (2, [1, 2]), (1, [1])])
def test_a_long_text_keeps_its_end_after_the_bos(max_length, expected):
    assert encode_texts(_tokenizer(True), ["a b c d <eos>"], max_length) == [expected]


def test_without_bos_truncation_keeps_the_last_tokens():
    assert encode_texts(_tokenizer(False), ["a b c d <eos>"], 3) == [[5, 6, 2]]
