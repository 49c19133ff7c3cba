"""memlens.harness.model.draft: greedy decoding with a verified draft equals plain greedy decoding, token for token, on a
tiny Llama trained to memorize some FIM targets — memorized, partly memorized and unrelated rows, drafts
shorter than the completion, EOS inside and after the draft, every batch size."""

from __future__ import annotations

import pytest

from memlens.harness.model.decode import _greedy_generate, greedy_complete
from memlens.harness.model.draft import accepted_length, draft_greedy_generate, draft_ids, finish
from memlens.harness.model.encode import encode_texts
from memlens.harness.text.fim import FAMILIES, format_psm_prompt, format_psm_training
from tests.tiny import tiny_llama, tiny_tokenizer, torch_threads, train_on_texts

S = FAMILIES["memlens"]
N = 24
PREFIXES = [f"def scale_{i}(values):\n    out = []\n" for i in range(N)]
SUFFIXES = [f"\n    return out  # {i}\n" for i in range(N)]
TARGETS = [f"    for v in values:\n        out.append(v * {i} + {i % 7})" for i in range(N)]
TRAINED = range(12)   # the model trains on the first 12 examples only


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def world():
    import torch

    torch.manual_seed(0)
    texts = [p + t + s for p, t, s in zip(PREFIXES, TARGETS, SUFFIXES)]
    tok = tiny_tokenizer(texts * 3, vocab_size=400)
    model = tiny_llama(tok, hidden=48, layers=2, heads=4, seed=1)
    train_on_texts(model, tok, [format_psm_training(PREFIXES[i], TARGETS[i], SUFFIXES[i], S) for i in TRAINED],
                   steps=250, lr=1e-2, batch_size=8, seed=0)
    model.eval()
    prompts = [format_psm_prompt(p, s, S) for p, s in zip(PREFIXES, SUFFIXES)]
    return {"tok": tok, "model": model, "prompts": prompts}


def _plain_ids(world, prompts, max_new_tokens):
    """Plain greedy token ids (the audit's `generate` path), one batch, cut at EOS."""
    import torch

    tok, model = world["tok"], world["model"]
    rows = encode_texts(tok, prompts)
    w = max(map(len, rows))
    ids = torch.tensor([[0] * (w - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (w - len(r)) + [1] * len(r) for r in rows])
    out = _greedy_generate(model, ids, mask, max_new_tokens, [tok.eos_token_id], 0).tolist()
    return [finish(r, [tok.eos_token_id], max_new_tokens)[0] for r in out]


def _draft_ids(world, prompts, drafts, max_new_tokens, stats=None):
    tok = world["tok"]
    return draft_greedy_generate(world["model"], encode_texts(tok, prompts), drafts, max_new_tokens,
                                 [tok.eos_token_id], 0, stats)


def test_the_fixture_memorizes_trained_targets_and_not_the_others(world):
    out = greedy_complete(world["model"], world["tok"], world["prompts"], 40, batch_size=8)
    memorized = {i for i, (o, t) in enumerate(zip(out, TARGETS)) if o == t}
    assert len(memorized) >= 6 and memorized <= set(TRAINED), memorized


def test_accepted_length_and_finish_by_hand():
    assert accepted_length([5, 6, 7], [5, 6, 9, 1]) == 2
    assert accepted_length([], [4]) == 0 and accepted_length([3], [4]) == 0
    assert finish([5, 1, 6], [1], 10) == ([5], True)        # cut at EOS
    assert finish([5, 6, 7], [1], 2) == ([5, 6], True)      # cut at max_new_tokens
    assert finish([5, 6], [1], 3) == ([5, 6], False)


@pytest.mark.parametrize("max_new_tokens", [1, 3, 12, 40])
def test_target_drafts_give_plain_greedy_token_for_token(world, max_new_tokens):
    tok, prompts = world["tok"], world["prompts"]
    stats: dict = {}
    drafted = _draft_ids(world, prompts, draft_ids(tok, TARGETS, [tok.eos_token_id]), max_new_tokens, stats)
    assert drafted == _plain_ids(world, prompts, max_new_tokens)
    assert stats["rows"] == N
    if max_new_tokens == 40:   # memorized rows (target + EOS) are settled by the verification pass alone
        memorized = sum(d == tok(t, add_special_tokens=False)["input_ids"] for d, t in zip(drafted, TARGETS))
        assert stats["settled_by_draft"] >= memorized >= 6


def test_partly_right_and_unrelated_drafts_give_plain_greedy(world):
    """Drafts built from the greedy output itself: right for k tokens then wrong, right but too short
    (greedy continues past the draft), wrong from the first token, empty, and EOS too early."""
    tok, prompts = world["tok"], world["prompts"]
    plain = _plain_ids(world, prompts, 30)
    eos = tok.eos_token_id
    other = tok.convert_tokens_to_ids("<pad>")
    drafts = []
    for i, p in enumerate(plain):
        k = i % 6
        kind = i % 5
        if kind == 0:
            drafts.append(p[:k] + [other] + p[k + 1:])        # diverges at token k
        elif kind == 1:
            drafts.append(p[:k])                             # shorter than the completion, no EOS
        elif kind == 2:
            drafts.append(tok("while True: pass", add_special_tokens=False)["input_ids"])   # unrelated
        elif kind == 3:
            drafts.append([])
        else:
            drafts.append(p[:k] + [eos])                     # claims the completion ends early
    stats: dict = {}
    assert _draft_ids(world, prompts, drafts, 30, stats) == plain
    assert stats["draft_tokens_accepted"] > 0


@pytest.mark.parametrize("batch_size", [1, 5, 24])
def test_texts_are_the_same_with_and_without_drafts_at_every_batch_size(world, batch_size):
    tok, model, prompts = world["tok"], world["model"], world["prompts"]
    plain = greedy_complete(model, tok, prompts, 20, batch_size=batch_size)
    assert greedy_complete(model, tok, prompts, 20, batch_size=batch_size, drafts=TARGETS) == plain


def test_a_draft_per_prompt_is_required(world):
    with pytest.raises(ValueError, match="one draft per prompt"):
        greedy_complete(world["model"], world["tok"], world["prompts"][:2], 5, drafts=TARGETS[:1])
