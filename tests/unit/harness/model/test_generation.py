"""memlens.harness.model.decode on real tiny models: batched greedy == one prompt at a time (left padding, length
grouping, order restored), EOS cuts, seq2seq translation, safe loading."""

from __future__ import annotations

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.model.decode import greedy_complete, greedy_translate, length_sorted_batches
from memlens.harness.model.encode import cut_at_eos, encode_texts
from memlens.harness.model.load import load_causal_lm, load_seq2seq
from memlens.harness.model.scorer import CausalLMScorer
from tests.tiny import save, tiny_llama, tiny_t5, tiny_tokenizer, torch_threads

CODE = [f"def f{i}(x):\n    return x * {i} + {i * i}  # note {i}\n" for i in range(40)]

# Prompts of very different lengths, so a batch holds several pad widths.
PROMPTS = [
    "<fim_prefix>def f(x):<fim_suffix>\n<fim_middle>",
    "x",
    "<fim_prefix>def f3(x):\n    return x * 3 + 9  # note 3\n\ndef f4(x):\n    return<fim_suffix>  # note 4\n<fim_middle>",
    "def f12(x):\n    return x * 12",
    "<fim_prefix><fim_suffix><fim_middle>",
    "    return x * 7 + 49  # note 7\ndef f8(x):\n    return x * 8 + 64  # note 8\n" * 3,
    "return",
]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(CODE, vocab_size=300)


@pytest.fixture(scope="module")
def llama(tok):
    # Random weights: every generated token depends on exact positions and masks, so any left-padding
    # or position-id error shows up as a different greedy continuation.
    return tiny_llama(tok, hidden=32, layers=2, heads=4, seed=3)


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


def test_length_sorted_batches_cover_every_index_once_longest_first():
    lengths = [3, 9, 1, 9, 4, 7, 2]
    batches = length_sorted_batches(lengths, 3)
    assert sorted(i for b in batches for i in b) == list(range(7))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert batches[0] == [1, 3, 5]  # 9, 9 (stable order), 7
    with pytest.raises(UserError, match="batch_size"):
        length_sorted_batches(lengths, 0)


def test_cut_at_eos_keeps_only_the_tokens_before_the_first_eos():
    assert cut_at_eos([5, 6, 1, 7, 1], [1]) == [5, 6]
    assert cut_at_eos([5, 6], [1]) == [5, 6]
    assert cut_at_eos([2, 5], [1, 2]) == []


def test_prompts_are_encoded_without_added_specials(tok):
    ids = encode_texts(tok, ["<fim_prefix>x<fim_suffix><fim_middle>"])[0]
    assert ids[0] == tok.convert_tokens_to_ids("<fim_prefix>")
    assert ids[-1] == tok.convert_tokens_to_ids("<fim_middle>")
    assert tok.eos_token_id not in ids and tok.pad_token_id not in ids


def test_batched_greedy_equals_one_at_a_time(tok, llama):
    singles = [greedy_complete(llama, tok, [p], max_new_tokens=12, batch_size=1)[0] for p in PROMPTS]
    for batch_size in (2, 3, len(PROMPTS)):
        assert greedy_complete(llama, tok, PROMPTS, max_new_tokens=12, batch_size=batch_size) == singles
    assert len(set(singles)) > 3  # the check is meaningful: prompts lead to different continuations


def test_greedy_matches_a_hand_written_argmax_loop(tok, llama):
    """Reference without generate(): full forward pass per step, argmax, no cache."""
    import torch

    prompt = PROMPTS[2]
    ids = encode_texts(tok, [prompt])[0]
    with torch.inference_mode():
        for _ in range(10):
            logits = llama(torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    n = len(encode_texts(tok, [prompt])[0])
    expected = tok.decode(cut_at_eos(ids[n:], [tok.eos_token_id]), skip_special_tokens=True)
    assert greedy_complete(llama, tok, [PROMPTS[0], prompt], max_new_tokens=10, batch_size=2)[1] == expected


def test_generation_stops_at_eos_and_returns_only_new_text(tok, llama):
    """Declare the model's first greedy token to be EOS: the completion must then be empty, while with
    the real EOS it is not, and the prompt never appears in the output."""
    import torch

    prompt = PROMPTS[3]
    with torch.inference_mode():
        first = int(llama(torch.tensor([encode_texts(tok, [prompt])[0]])).logits[0, -1].argmax())
    assert greedy_complete(llama, tok, [prompt], max_new_tokens=8, eos_token_id=first) == [""]
    out = greedy_complete(llama, tok, [prompt], max_new_tokens=8)[0]
    assert out and not out.startswith(prompt)


def test_scorer_counts_generated_prompts(tok, llama):
    scorer = CausalLMScorer(llama, tok, batch_size=4, max_new_tokens=4)
    assert scorer.complete(PROMPTS[:3]) == greedy_complete(llama, tok, PROMPTS[:3], max_new_tokens=4)
    assert scorer.n_generated == 3


def test_saved_model_loads_safely_and_decodes_the_same(tok, llama, tmp_path):
    save(llama, tok, tmp_path / "m")
    model, tokenizer = load_causal_lm(tmp_path / "m", "cpu")
    assert not model.training and tokenizer.padding_side == "left"
    assert next(model.parameters()).dtype.is_floating_point and str(next(model.parameters()).dtype) == "torch.float32"
    assert greedy_complete(model, tokenizer, PROMPTS, 6, 4) == greedy_complete(llama, tok, PROMPTS, 6, 4)


def test_loader_refuses_directories_without_safetensors(tmp_path):
    with pytest.raises(UserError, match="model directory not found"):
        load_causal_lm(tmp_path / "missing", "cpu")
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(UserError, match=r"no \*\.safetensors.*pytorch_model\.bin.*only safetensors"):
        load_causal_lm(tmp_path, "cpu")


def test_batched_translation_equals_one_at_a_time(tok, tmp_path):
    sources = ["def f(x): return 1", "x = 2", "import os\nprint(os.getcwd())  # a longer source line", "y"]
    save(tiny_t5(tok, d_model=32, seed=5), tok, tmp_path / "t5")
    model, tokenizer = load_seq2seq(tmp_path / "t5", "cpu")
    singles = [greedy_translate(model, tokenizer, [s], max_new_tokens=8)[0] for s in sources]
    assert greedy_translate(model, tokenizer, sources, max_new_tokens=8, batch_size=3) == singles
    assert len(set(singles)) > 1
