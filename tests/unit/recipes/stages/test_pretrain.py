"""PT pieces without training: settings validation, model presets, FIM packing into token blocks."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from memlens.harness.core.errors import UserError
from memlens.harness.text.fim import FAMILIES
from memlens.recipes.stages.models import parse_model
from memlens.recipes.stages.pretrain import load_settings, packed_blocks

CONF = Path(__file__).resolve().parents[4] / "conf"


def test_every_model_preset_validates():
    presets = sorted((CONF / "model").glob("*.yaml"))
    assert {p.stem for p in presets} >= {"tiny", "micro", "starcoder2_3b", "qwen2.5_coder_0.5b",
                                         "qwen2.5_coder_1.5b", "deepseek_coder_1.3b", "codegemma_2b"}
    for path in presets:
        model = parse_model(OmegaConf.to_container(OmegaConf.load(path)), f"model ({path.name})")
        assert model.fim_family in FAMILIES, path
        assert not model.trust_remote_code, path
        if model.pretrained and path.stem != "tiny_base":   # public models: LoRA in bf16 (the GPU path);
            # tiny_base is the embedded default's shipped base: full fine-tuning on CPU like tiny
            assert model.lora_settings.enabled and model.dtype == "bfloat16", path


def test_tiny_preset_matches_the_task_size():
    tiny = parse_model(OmegaConf.to_container(OmegaConf.load(CONF / "model" / "tiny.yaml")), "model")
    assert (tiny.hidden_size, tiny.num_layers, tiny.num_heads, tiny.intermediate_size, tiny.vocab_size) == \
        (256, 5, 4, 688, 4096)
    assert tiny.tie_embeddings and tiny.pretrained is None


@pytest.mark.parametrize("settings, key", [
    ({"lr": 0}, "stages.PT.lr"),
    ({"fim_rate": 1.5}, "stages.PT.fim_rate"),
    ({"max_tokens": 10, "max_seq_len": 64}, "stages.PT.max_tokens"),
    ({"datasets": []}, "stages.PT.datasets"),
    ({"learning_rate": 1e-3}, "stages.PT: unknown key(s) ['learning_rate']"),
    ({"model": {"hidden_size": 30, "num_heads": 4}}, "stages.PT.model.hidden_size"),
    ({"model": {"lora": {"enabled": True, "r": 0}}}, "stages.PT.model.lora.r"),
    ({"model": {"dtype": "fp8"}}, "stages.PT.model.dtype"),
    ({"tokenizer": "assets/no_such_tokenizer"}, "stages.PT.tokenizer"),
])
def test_bad_settings_name_the_key(settings, key):
    with pytest.raises(UserError, match=re.escape(key)):
        load_settings(settings, "PT")


def test_a_named_tokenizer_resolves_against_the_project_root():
    # the GPU ladder's base uses the shipped base's tokenizer (benchmarks/gpu_ladder.py)
    assert load_settings({"tokenizer": "assets/base_tiny"}, "PT").tokenizer == str(CONF.parent / "assets" / "base_tiny")
    assert load_settings({}, "PT").tokenizer is None                 # default: PT trains its own


def test_defaults_follow_the_paper_fim_rate():
    assert load_settings({}, "PT").fim_rate == 0.8      # Appendix A.3 (CodeGemma)


@pytest.fixture(scope="module")
def tokenizer():
    from memlens.recipes.stages.tokenizer import train_code_tokenizer

    texts = ["def add(a, b):\n    return a + b\n", "import os\nprint(os.getcwd())\n"] * 20
    return train_code_tokenizer(texts, vocab_size=300)


def test_packing_fills_the_budget_with_full_blocks(tokenizer):
    sentinels = FAMILIES["memlens"]
    texts = ["def add(a, b):\n    return a + b\n", "x = 1\n"]
    settings = load_settings({"max_tokens": 100, "max_seq_len": 16, "fim_rate": 0.0}, "PT")
    blocks = packed_blocks(texts, tokenizer, sentinels, settings, seed=0)
    assert len(blocks) == 7                                  # ceil(100 / 16), the corpus repeated
    assert all(len(b) == 16 for b in blocks)
    # fim_rate 0: the stream is the documents, each followed by EOS, in a seeded order.
    stream = [t for b in blocks for t in b]
    doc_ids = [tokenizer(t + "<eos>", add_special_tokens=False)["input_ids"] for t in texts]
    assert stream.count(tokenizer.eos_token_id) >= 5
    first = stream[:len(doc_ids[0])] == doc_ids[0] or stream[:len(doc_ids[1])] == doc_ids[1]
    assert first


def test_packing_applies_fim_at_the_rate_and_is_seeded(tokenizer):
    sentinels = FAMILIES["memlens"]
    texts = [f"value_{i} = {i}\n" * 3 for i in range(200)]
    settings = load_settings({"max_tokens": 2000, "max_seq_len": 20, "fim_rate": 0.8}, "PT")
    blocks = packed_blocks(texts, tokenizer, sentinels, settings, seed=3)
    assert blocks == packed_blocks(texts, tokenizer, sentinels, settings, seed=3)
    assert blocks != packed_blocks(texts, tokenizer, sentinels, settings, seed=4)
    stream = [t for b in blocks for t in b]
    fim_prefix = tokenizer.convert_tokens_to_ids("<fim_prefix>")
    eos = tokenizer.eos_token_id
    docs = stream.count(eos)
    rate = stream.count(fim_prefix) / docs
    assert 0.6 < rate < 0.95, rate                           # ≈ 0.8 of documents in PSM form


def test_packing_rng_matches_harness_fim_transform(tokenizer):
    """The first document is exactly memlens.harness.text.fim.fim_transform under the recipe's seeded RNG."""
    from memlens.harness.text.fim import fim_transform

    sentinels = FAMILIES["memlens"]
    texts = ["alpha = 1\nbeta = 2\n" * 4]
    settings = load_settings({"max_tokens": 16, "max_seq_len": 16, "fim_rate": 1.0}, "PT")
    rng = random.Random("7-pt-0")
    rng.shuffle([0])
    expected = tokenizer(fim_transform(texts[0], rng, sentinels, 1.0), add_special_tokens=False)["input_ids"]
    blocks = packed_blocks(texts, tokenizer, sentinels, settings, seed=7)
    assert len(expected) >= 16 and blocks == [expected[:16]]
