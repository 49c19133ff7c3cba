"""Canary designs (synthetic_data/designs.py; Panda et al. 2025): each design's secrets on a hand-counted corpus, the
rarest-token rule against a brute-force count, secrets that re-tokenize as themselves in the shipped tokenizer,
`memlens.inject(design=...)` planting each designed canary exactly `repeat` times, a new-token canary whose token
exists and trains, and the pre-flight refusing new tokens the model cannot learn."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.audit.preflight import new_token_refusal
from memlens.harness.core.errors import UserError
from memlens.harness.core.shipped import shipped_path
from memlens.synthetic_data.designs import (
    DesignRequest,
    TokenStatistics,
    add_new_tokens,
    bigram_secrets,
    design_secrets,
    random_secrets,
    rare_secrets,
    unigram_secrets,
)
from memlens.synthetic_data.inject import inject

# Token 10 occurs once, 11 twice, 12 three times, 13 four times, 14 five times.
CORPUS = [[10, 12, 13, 13, 14], [11, 12, 14, 14, 13], [11, 12, 13, 14, 14]]


def _request(n: int, k: int, corpus=CORPUS, seed: int = 0) -> DesignRequest:
    return DesignRequest(n, k, TokenStatistics.of(corpus), random.Random(seed))


def test_unigram_secrets_take_the_rarest_types_without_reuse():
    secrets = unigram_secrets(_request(2, 1))
    assert sorted(t for s in secrets for t in s) == [10, 11]          # counts 1 and 2: the two rarest
    assert sorted(t for s in unigram_secrets(_request(1, 3)) for t in s) == [10, 11, 12]


def test_bigram_secrets_pair_each_rare_token_with_its_least_likely_follower():
    """x = 10, 11 (the two rarest); y among the other types 12, 13, 14. x = 10: P(12 | 10) = 1, P(13 | 10) =
    P(14 | 10) = 0, and of the tied 13 (count 4) and 14 (count 5) the rarer wins: y = 13. x = 11: 13 is taken;
    P(12 | 11) = 1 > P(14 | 11) = 0, so y = 14, though 12 is the rarer: least likely first, rarity breaks ties."""
    assert bigram_secrets(_request(2, 4)) == [[10, 13, 10, 13], [11, 14, 11, 14]]
    assert bigram_secrets(_request(2, 3)) == [[10, 13, 10], [11, 14, 11]]


def test_random_secrets_draw_only_tokens_the_data_contains_and_never_the_excluded():
    stats = TokenStatistics.of(CORPUS, excluded=[14])
    secrets = random_secrets(DesignRequest(2, 2, stats, random.Random(3)))
    tokens = [t for s in secrets for t in s]
    assert len(set(tokens)) == 4 and set(tokens) <= {10, 11, 12, 13}


def test_a_design_asked_for_more_tokens_than_the_data_has_names_the_fix():
    with pytest.raises(UserError, match="usable token types"):
        unigram_secrets(_request(3, 2))


class TableSampler:
    """A model as the `rare` design reads it: P(y | prefix + v) from a fixed table, {(prefix, y): [p for each v]}."""

    def __init__(self, table):
        self.table = table

    def after_each_token(self, prompt, target):
        return self.table[(prompt, target)]


def _rare(n, k, table, accept=lambda ids: True, excluded=(), seed=0):
    prompts = tuple(sorted({p for p, _ in table}))[:n]
    return rare_secrets(DesignRequest(n, k, TokenStatistics.of(CORPUS, excluded), random.Random(seed), prompts,
                                      TableSampler(table), accept))


def test_rare_secrets_put_before_each_target_the_token_that_makes_it_least_likely():
    """The authors' `rare`, by hand on a 16-token vocabulary. Seed 0 draws the targets y = 13 and 14 (replayed). For
    "a", P(13 | a + v) is lowest at v = 2 (0.01): secret (2, 13). For "b", P(14 | b + v) is lowest at v = 2 as well,
    which is taken, then at v = 13 and 14, the targets' own tokens, then v = 5: secret (5, 14). An x whose pair does
    not survive as text is passed over for the next; k = 3 repeats the pair; the special token 0 is never an x."""
    ys = random.Random(0).sample(sorted({t for seq in CORPUS for t in seq}), 2)
    assert ys == [13, 14]
    base = [0.5] * 16
    p_a = list(base)
    p_a[2], p_a[7], p_a[0] = 0.01, 0.02, 0.0
    p_b = list(base)
    p_b[2], p_b[13], p_b[14], p_b[5], p_b[0] = 0.001, 0.002, 0.002, 0.03, 0.0
    table = {("a", 13): p_a, ("b", 14): p_b}
    assert _rare(2, 2, table, excluded=[0]) == [[2, 13], [5, 14]]
    assert _rare(2, 3, table, excluded=[0]) == [[2, 13, 2], [5, 14, 5]]
    assert _rare(2, 2, table, accept=lambda ids: ids[0] != 2, excluded=[0]) == [[7, 13], [5, 14]]
    with pytest.raises(UserError, match="secret_tokens=1; its secret is a pair"):
        _rare(2, 1, table)
    with pytest.raises(UserError, match=r"design='rare': pass sampler=memlens.ModelSampler"):
        rare_secrets(DesignRequest(1, 2, TokenStatistics.of(CORPUS), random.Random(0), ("a",), lambda p, k, s: []))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), min_size=2, max_size=12), min_size=1, max_size=8),
       st.integers(1, 3), st.integers(1, 3), st.integers(0, 1000))
def test_unigram_secrets_are_the_rarest_types_by_brute_force(corpus, n, k, seed):
    counts: dict[int, int] = {}
    for seq in corpus:
        for t in seq:
            counts[t] = counts.get(t, 0) + 1
    if len(counts) < n * k:
        return
    chosen = {t for s in unigram_secrets(_request(n, k, corpus, seed)) for t in s}
    assert len(chosen) == n * k                                       # no token reused
    others = [counts[t] for t in counts if t not in chosen]
    assert not others or max(counts[t] for t in chosen) <= min(others)


@pytest.fixture(scope="module")
def tokenizer_dir():
    return shipped_path("assets/base_tiny")


def _tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


TEXTS = [f"def handler_{i}(event, context):\n    value = event.get('k{i}')\n    return value * {i}\n"
         for i in range(40)] + ["import json\nimport os\nprint(json.dumps(os.environ.copy()))\n"]


@pytest.mark.parametrize("design", ["random", "unigram", "bigram"])
def test_designed_secrets_tokenize_back_as_drawn_and_follow_the_seed(tokenizer_dir, design):
    tok = _tokenizer(tokenizer_dir)
    secrets, record = design_secrets(design, tok, TEXTS, 4, 6, seed=1)
    assert record["design"] == design and len(secrets) == 4
    seen = set()
    for text in secrets:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == 6 and tok.decode(ids) == text
        assert not seen & set(ids)                                    # no token shared between canaries
        seen |= set(ids)
    assert design_secrets(design, tok, TEXTS, 4, 6, seed=1)[0] == secrets
    assert design_secrets(design, tok, TEXTS, 4, 6, seed=2)[0] != secrets


def test_new_token_secrets_add_tokens_that_tokenize_whole(tokenizer_dir):
    tok = _tokenizer(tokenizer_dir)
    before = len(tok)
    secrets, record = design_secrets("new_token", tok, [], 3, 4, seed=0)
    assert len(tok) == before and len(record["new_tokens"]) == 12       # drawn on a copy: the caller adds them
    add_new_tokens(tok, record)
    assert len(tok) == before + 12
    for text in secrets:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == 4 and all(i >= before for i in ids)


def _dataset(rows):
    from datasets import Dataset

    return Dataset.from_list(rows)


HOSTS = [{"id": f"h{i}", "prefix": f"def secret_{i}():\n    return '", "target": "x", "suffix": "'\n",
          "repeat": (1, 4, 16)[i % 3]} for i in range(9)]


@pytest.mark.parametrize("design", ["unigram", "new_token"])
def test_inject_plants_each_designed_canary_exactly_repeat_times(tokenizer_dir, design):
    tok = _tokenizer(tokenizer_dir)
    data = _dataset([{"prompt": f"# task {i}\n", "completion": text} for i, text in enumerate(TEXTS)])
    out, manifest = inject(data, HOSTS, seed=5, design=design, tokenizer=tok, secret_tokens=5)
    assert manifest["design"]["design"] == design
    completions = Counter()
    for row in out:
        completions.update([row["completion"]])
    planted_text = "\n".join(out["completion"])
    for c in manifest["canaries"]:
        assert c["target"] != "x" and len(tok(c["target"], add_special_tokens=False)["input_ids"]) == 5
        assert planted_text.count(c["target"]) == c["repeat"] == len(c["positions"])
    for c in manifest["heldout"]:
        assert planted_text.count(c["target"]) == 0


def test_inject_with_a_design_needs_the_tokenizer():
    data = _dataset([{"text": t} for t in TEXTS])
    with pytest.raises(UserError, match="tokenizer="):
        inject(data, HOSTS, design="bigram")


def _tiny_model(tokenizer_dir):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tokenizer_dir)
    config.update({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                   "num_key_value_heads": 2, "head_dim": 16})
    return AutoModelForCausalLM.from_config(config)


def test_sampled_canaries_are_the_models_samples_after_each_host_and_plant_repeat_times(tokenizer_dir):
    """design="sampled" (Mitchell, Andrew et al. 2026): each canary's secret is what the sampler draws after that
    canary's own prefix with the i-th seed of the design's seeded generator (replayed here), 5 tokens that
    re-tokenize as themselves, no special token, planted `repeat` times; the manifest records the sampler; the same
    seed gives the same secrets; without a sampler the design names the argument. (At a vanishing temperature the
    sampler is greedy decoding: tests/unit/harness/model/test_canary_sampling.py.)"""
    from memlens.harness.model.canary_sampling import ModelSampler

    tok = _tokenizer(tokenizer_dir)
    model = _tiny_model(tokenizer_dir).eval()
    data = _dataset([{"prompt": f"# task {i}\n", "completion": text} for i, text in enumerate(TEXTS)])
    sampler = ModelSampler(model, tok, temperature=1.0)
    out, manifest = inject(data, HOSTS, seed=5, design="sampled", tokenizer=tok, secret_tokens=5, sampler=sampler)
    assert manifest["design"]["design"] == "sampled" and manifest["design"]["sampler"]["temperature"] == 1.0
    rng = random.Random("canary-design:sampled:5")
    seeds = [rng.randrange(2 ** 62) for _ in HOSTS]            # the first draw of each canary, in the hosts' order
    redrawn = {HOSTS[i]["id"] for i in manifest["design"]["redrawn"]}
    targets = {c["id"]: c["target"] for c in manifest["canaries"] + manifest["heldout"]}
    for i, host in enumerate(HOSTS):
        ids = tok(targets[host["id"]], add_special_tokens=False)["input_ids"]
        assert len(ids) == 5 and not set(ids) & set(tok.all_special_ids)
        if host["id"] not in redrawn:
            assert ids == sampler(host["prefix"], 5, seeds[i]), host["id"]
    assert len(redrawn) < len(HOSTS)
    planted_text = "\n".join(out["completion"])
    for c in manifest["canaries"]:
        assert planted_text.count(c["target"]) == c["repeat"] == len(c["positions"])
    again = inject(data, HOSTS, seed=5, design="sampled", tokenizer=tok, secret_tokens=5, sampler=sampler)[1]
    assert [c["target"] for c in again["canaries"]] == [c["target"] for c in manifest["canaries"]]
    with pytest.raises(UserError, match=r"design='sampled': pass sampler=memlens.ModelSampler\(model, tokenizer"):
        inject(data, HOSTS, design="sampled", tokenizer=tok)


def test_rare_canaries_are_each_targets_least_likely_prefix_token_under_the_model(tokenizer_dir):
    """design="rare" through memlens.inject on the shipped tokenizer and a tiny model: every secret is a pair (x, y) of
    two tokens that re-tokenize as themselves, y a token of the fine-tuning data, and x the token with the lowest
    P(y | prefix + x) among those no earlier secret holds, not special, whose pair survives as text (recomputed here
    over the whole vocabulary); planted `repeat` times, the same seed giving the same secrets."""
    from memlens.harness.model.canary_sampling import ModelSampler

    tok = _tokenizer(tokenizer_dir)
    model = _tiny_model(tokenizer_dir).eval()
    data = _dataset([{"prompt": f"# task {i}\n", "completion": text} for i, text in enumerate(TEXTS)])
    sampler = ModelSampler(model, tok)
    hosts = HOSTS[:4]
    out, manifest = inject(data, hosts, seed=5, design="rare", tokenizer=tok, secret_tokens=2, sampler=sampler)
    assert manifest["design"]["design"] == "rare" and manifest["design"]["redrawn"] == []
    seen = {t for text in TEXTS for t in tok(text, add_special_tokens=False)["input_ids"]}
    secrets = {c["id"]: tok(c["target"], add_special_tokens=False)["input_ids"]
               for c in manifest["canaries"] + manifest["heldout"]}
    pairs = [secrets[h["id"]] for h in hosts]
    taken = {y for _, y in pairs} | set(tok.all_special_ids)
    for host, (x, y) in zip(hosts, pairs):
        assert y in seen
        p = sampler.after_each_token(host["prefix"], y)
        allowed = [v for v in range(len(tok)) if v not in taken and tok([tok.decode([v, y])], add_special_tokens=False)[
            "input_ids"][0] == [v, y] and tok.decode([v, y]).strip()]
        assert x == min(allowed, key=lambda v: (p[v], v)), host["id"]
        taken.add(x)
    planted_text = "\n".join(out["completion"])
    for c in manifest["canaries"]:
        assert planted_text.count(c["target"]) == c["repeat"] == len(c["positions"])
    again = inject(data, hosts, seed=5, design="rare", tokenizer=tok, secret_tokens=2, sampler=sampler)[1]
    assert [c["target"] for c in again["canaries"]] == [c["target"] for c in manifest["canaries"]]


def test_a_new_token_canary_exists_and_trains(tokenizer_dir):
    """The new token gets an embedding row, and a few real optimizer steps on a row holding the secret move that row
    and lower the secret's loss: what new-token canaries rely on (its rows start untrained)."""
    import torch

    torch.manual_seed(0)
    tok = _tokenizer(tokenizer_dir)
    model = _tiny_model(tokenizer_dir)
    (secret,), record = design_secrets("new_token", tok, [], 1, 3, seed=0)
    add_new_tokens(tok, record)
    model.resize_token_embeddings(len(tok))
    ids = tok.convert_tokens_to_ids(record["new_tokens"])
    assert new_token_refusal(model, tok, {"canaries": [{}], "heldout": [], "design": record}) is None
    batch = torch.tensor([tok("key = " + secret + "\n", add_special_tokens=False)["input_ids"]])
    before_row = model.get_input_embeddings().weight[ids[0]].detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        loss = model(input_ids=batch, labels=batch).loss
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert not torch.equal(model.get_input_embeddings().weight[ids[0]], before_row)
    assert losses[-1] < losses[0]


def test_the_preflight_refuses_new_tokens_the_model_cannot_learn(tokenizer_dir):
    from peft import LoraConfig, get_peft_model

    tok = _tokenizer(tokenizer_dir)
    _, record = design_secrets("new_token", tok, [], 1, 2, seed=0)
    add_new_tokens(tok, record)
    manifest = {"canaries": [{}], "heldout": [], "design": record}
    ids = tok.convert_tokens_to_ids(record["new_tokens"])

    assert "resize_token_embeddings" in new_token_refusal(_tiny_model(tokenizer_dir), tok, manifest)

    def resized():
        model = _tiny_model(tokenizer_dir)
        model.resize_token_embeddings(len(tok))
        return model

    lora = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    assert "frozen" in new_token_refusal(get_peft_model(resized(), LoraConfig(**lora)), tok, manifest)
    assert new_token_refusal(get_peft_model(resized(), LoraConfig(**lora, trainable_token_indices=ids)),
                             tok, manifest) is None
    other_rows = [i - 1000 for i in ids]
    assert "frozen" in new_token_refusal(get_peft_model(resized(), LoraConfig(**lora, trainable_token_indices=other_rows)),
                                         tok, manifest)
    assert new_token_refusal(resized(), tok, manifest) is None       # a plain model: every row trains
    assert "reference model has 4096 embedding rows" in new_token_refusal(resized(), tok, manifest,
                                                                          ref_model=_tiny_model(tokenizer_dir))
    assert new_token_refusal(resized(), tok, manifest, ref_model=resized()) is None
    assert "lacks" in new_token_refusal(resized(), _tokenizer(tokenizer_dir), manifest)


def test_a_refused_inject_leaves_the_tokenizer_as_it_was(tokenizer_dir):
    tok = _tokenizer(tokenizer_dir)
    before = len(tok)
    data = _dataset([{"prompt": f"# task {i}\n", "completion": text} for i, text in enumerate(TEXTS)])
    with pytest.raises(UserError, match="empty prefix"):
        inject(data, [{**HOSTS[0], "prefix": ""}, *HOSTS[1:]], design="new_token", tokenizer=tok)
    with pytest.raises(UserError, match="every one of the"):
        inject(data, HOSTS[:1], heldout_fraction=0.999, seed=5, design="new_token", tokenizer=tok)
    assert len(tok) == before
    inject(data, HOSTS, seed=5, design="new_token", tokenizer=tok, secret_tokens=2)   # the retry is not refused
    assert len(tok) > before


def test_a_misspelt_design_is_named_before_the_tokenizer_is_asked_for():
    with pytest.raises(UserError, match="design='unigrm': one of as_given, random, unigram, bigram, new_token"):
        inject(_dataset([{"text": t} for t in TEXTS]), HOSTS, design="unigrm")


def test_conversational_statistics_read_the_assistant_contents_only(tokenizer_dir):
    from memlens.synthetic_data.inject import _trained_text

    messages = [{"role": "user", "content": "question"}, {"role": "assistant", "content": "answer", "name": "bot"}]
    assert _trained_text(messages) == "answer"
    assert _trained_text("plain text") == "plain text"


def test_the_callback_refuses_a_control_that_cannot_score_new_tokens(tokenizer_dir, tmp_path):
    """A control must hold the new tokens too: 'base' (a PEFT base on disk) and the shipped base as it is are refused
    before anything is written; the base resized and saved with the extended tokenizer is accepted."""
    from memlens.harness.audit.preflight import control_refusal

    tok = _tokenizer(tokenizer_dir)
    data = _dataset([{"prompt": f"# task {i}\n", "completion": text} for i, text in enumerate(TEXTS)])
    _, manifest = inject(data, HOSTS, seed=5, design="new_token", tokenizer=tok, secret_tokens=2)
    assert "not in the PEFT base" in control_refusal("base", manifest)
    assert "tokenizer lacks" in control_refusal(str(tokenizer_dir), manifest)
    model = _tiny_model(tokenizer_dir)
    model.save_pretrained(tmp_path / "unresized")
    tok.save_pretrained(tmp_path / "unresized")
    assert "embeddings have 4096 rows" in control_refusal(str(tmp_path / "unresized"), manifest)
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(tmp_path / "control")
    tok.save_pretrained(tmp_path / "control")
    assert control_refusal(str(tmp_path / "control"), manifest) is None
    assert control_refusal("base", {"canaries": [{}], "heldout": []}) is None       # no new tokens: nothing to check
    assert "no processing_class" in new_token_refusal(model, None, manifest)

    import memlens

    with pytest.raises(UserError, match="control='base'"):
        memlens.AuditCallback(manifest, control="base", out_dir=tmp_path / "audit")
    assert not (tmp_path / "audit").exists()
