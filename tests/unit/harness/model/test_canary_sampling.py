"""The `sampled` canary design's sampler (harness/model/canary_sampling.py; Mitchell, Andrew et al. 2026): at a
vanishing temperature it is greedy decoding with the special tokens suppressed (transformers' own `generate` as the
reference), at T = 1 and T = 2 its first token follows softmax(logits / T) over the non-special tokens (frequencies of
2,000 seeded draws within 4.5 standard errors of each likely token's probability), the same seed gives the same ids,
and neither torch's global random state nor the model's training mode changes."""

from __future__ import annotations

import math

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.model.canary_sampling import ModelSampler
from memlens.harness.model.encode import encode_texts
from tests.tiny import tiny_llama, tiny_tokenizer

TEXTS = [f"def load_{i}(path):\n    key = read(path, {i})\n    return key\n" for i in range(40)]
PROMPTS = ["def load_3(path):\n    key = ", "import os\n", "x = "]


@pytest.fixture(scope="module")
def world():
    """A tiny seeded Llama whose logits are spread out (its tied embeddings scaled by 8: the input side goes through
    RMSNorm, so only the output logits grow): after PROMPTS[0] its most likely token has p ~0.18, the next ~0.02,
    where the unscaled model is near uniform (~0.03 at most)."""
    tok = tiny_tokenizer(TEXTS, vocab_size=300)
    model = tiny_llama(tok, hidden=32, layers=1, heads=2)
    model.model.embed_tokens.weight.data *= 8
    return model, tok


def test_at_a_vanishing_temperature_it_is_greedy_decoding_without_special_tokens(world):
    import torch

    model, tok = world
    sampler = ModelSampler(model, tok, temperature=1e-5)
    for prompt in PROMPTS:
        (ids,) = encode_texts(tok, [prompt])
        greedy = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                do_sample=False, max_new_tokens=8, min_new_tokens=8,
                                suppress_tokens=list(tok.all_special_ids), pad_token_id=tok.pad_token_id)
        assert sampler(prompt, 8, seed=5) == greedy[0, len(ids):].tolist(), prompt


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_the_first_token_follows_the_tempered_distribution_over_non_special_tokens(world, temperature):
    import torch

    model, tok = world
    sampler = ModelSampler(model, tok, temperature=temperature)
    (ids,) = encode_texts(tok, [PROMPTS[0]])
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].double() / temperature
    logits[list(tok.all_special_ids)] = float("-inf")
    p = torch.softmax(logits, dim=-1)
    n = 2000
    draws = [sampler(PROMPTS[0], 1, seed=s)[0] for s in range(n)]
    assert not set(draws) & set(tok.all_special_ids)
    for token in torch.topk(p, 5).indices.tolist():
        expected = float(p[token])
        seen = draws.count(token) / n
        assert abs(seen - expected) <= 4.5 * math.sqrt(expected * (1 - expected) / n) + 1e-9, (token, seen, expected)


def test_the_same_seed_gives_the_same_ids_and_nothing_global_changes(world):
    import torch

    model, tok = world
    model.train()
    state = torch.get_rng_state()
    sampler = ModelSampler(model, tok)
    a, b, c = sampler(PROMPTS[0], 10, seed=1), sampler(PROMPTS[0], 10, seed=1), sampler(PROMPTS[0], 10, seed=2)
    assert a == b != c and len(a) == 10
    assert torch.equal(torch.get_rng_state(), state) and model.training
    model.eval()
    assert sampler.describe()["temperature"] == 1.0


@pytest.mark.parametrize("temperature", [0, -1.0, "hot", True])
def test_a_temperature_that_is_not_positive_is_refused_with_the_papers_value(world, temperature):
    model, tok = world
    with pytest.raises(UserError, match=r"ModelSampler\(temperature=.*\): a positive number .* >= 0.8"):
        ModelSampler(model, tok, temperature=temperature)


def test_n_rows_sharing_one_prompt_pass_each_decode_as_the_prompt_alone(world):
    """memlens.harness.model.sampling.sample_continuations, which the prompt audit's m samples per prompt use: the
    prompt's cache, repeated for n rows, decodes every row as the prompt alone would (at a vanishing temperature each
    of 3 rows is transformers' greedy continuation, over 6 steps of the shared cache), the draws are the generator's
    (same seed, same rows; another seed, other rows at T = 1), and the loop ends once every row drew a stop id."""
    import torch

    from memlens.harness.model.sampling import sample_continuations

    model, tok = world
    (ids,) = encode_texts(tok, [PROMPTS[0]])
    greedy = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            do_sample=False, max_new_tokens=6, min_new_tokens=6, pad_token_id=tok.pad_token_id)
    rows = sample_continuations(model, ids, 3, 6, 1e-5, torch.Generator().manual_seed(0))
    assert rows == [greedy[0, len(ids):].tolist()] * 3

    def draw(seed):
        return sample_continuations(model, ids, 4, 6, 1.0, torch.Generator().manual_seed(seed))

    assert draw(1) == draw(1) and draw(1) != draw(2)
    assert len({tuple(r) for r in draw(1)}) > 1                    # the rows are independent draws, not one copied
    everything = list(range(model.config.vocab_size))               # every id stops: one step, then done
    assert [len(r) for r in sample_continuations(model, ids, 3, 6, 1.0, torch.Generator().manual_seed(0),
                                                 stop_ids=everything)] == [1, 1, 1]


def test_the_probability_of_a_target_after_each_token_is_that_of_a_full_forward_pass(world):
    """What the `rare` design reads (Panda et al. 2025): P(y | prompt + v) for every v of the vocabulary, by the
    prompt's cache shared over chunks of candidates, equals softmax of a full forward pass of prompt + v, row by row
    (an independent path: no cache), and the model's training mode is left as it was."""
    import torch

    from memlens.harness.model.canary_sampling import PREFIX_CHUNK

    model, tok = world
    model.train()
    sampler = ModelSampler(model, tok)
    (ids,) = encode_texts(tok, [PROMPTS[0]])
    target = tok("key", add_special_tokens=False)["input_ids"][0]
    got = sampler.after_each_token(PROMPTS[0], target)
    assert len(got) == len(tok) > PREFIX_CHUNK and model.training          # more than one chunk
    model.eval()
    with torch.no_grad():
        rows = torch.tensor([ids + [v] for v in range(len(tok))])
        want = torch.softmax(model(rows).logits[:, -1].double(), dim=-1)[:, target]
    model.train()
    assert got == pytest.approx(want.tolist(), rel=1e-4, abs=1e-7)
    assert min(range(len(got)), key=got.__getitem__) == int(torch.argmin(want))
