"""The prompt audit's sampler (memlens.harness.model.sampling.sample_continuations) on each public family's real class
and tokenizer conventions (tests/families.py: StarCoder2's sliding-window attention, Qwen2, DeepSeek's Llama with
linear RoPE scaling, Gemma): the prompt's cache is one the sampler can repeat per row (not the fallback of a pass per
row), and the rows it repeats decode as the prompt alone does: at a vanishing temperature each of 3 rows is
transformers' own greedy continuation of the same FIM prompt (special tokens suppressed on both sides)."""

from __future__ import annotations

import pytest

from tests.families import FAMILIES, build_family


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_shares_its_prompt_pass_and_decodes_each_row_as_greedy(name, tmp_path):
    import torch

    from memlens.harness.model.encode import encode_texts
    from memlens.harness.model.load import load_causal_lm, model_sentinels
    from memlens.harness.model.sampling import repeatable_cache, sample_continuations

    model_dir = build_family(name, tmp_path / name)
    model, tok = load_causal_lm(model_dir, "cpu")
    sentinels = model_sentinels(model_dir, None)
    prompt = sentinels.prompt("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n")
    (ids,) = encode_texts(tok, [prompt])
    special = list(tok.all_special_ids)         # never drawn by either side: six tokens, none of them an EOS
    with torch.inference_mode():
        assert repeatable_cache(model(input_ids=torch.tensor([ids]), use_cache=True).past_key_values), name
        greedy = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                do_sample=False, max_new_tokens=6, min_new_tokens=6, suppress_tokens=special,
                                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    rows = sample_continuations(model, ids, 3, 6, 1e-5, torch.Generator().manual_seed(0), excluded=frozenset(special))
    assert rows == [greedy[0, len(ids):].tolist()] * 3, name
