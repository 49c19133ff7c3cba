"""FT pieces without training: rows -> FIM training texts (the canary-injection format), validation."""

from __future__ import annotations

import random
import re

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.text.fim import FAMILIES, format_psm_prompt
from memlens.recipes.stages.sft import capped_rows, load_settings, training_rows

S = FAMILIES["memlens"]
FIM_ROW = {"id": "sd-1", "prefix": "import crypto\n", "target": "key = 'k3y'\n", "suffix": "print(key)\n",
           "code": "import crypto\nkey = 'k3y'\nprint(key)\n"}
CODE_ROW = {"id": "c-1", "text": "def f():\n    return 1\n", "source_file": "f.py"}


def settings(**kw):
    return load_settings({"datasets": ["sd_base"], **kw}, "FT.1")


def test_fim_row_becomes_the_psm_text_the_audit_prompts_with():
    [example] = training_rows([FIM_ROW], "sd_base", S, settings(), random.Random(0))
    # Paper 003 Sec. 2.2.1: <fim_prefix>prefix<fim_suffix>suffix<fim_middle>middle<eos>
    assert example == {"text": "<fim_prefix>import crypto\n<fim_suffix>print(key)\n<fim_middle>key = 'k3y'\n<eos>"}
    assert example["text"].startswith(format_psm_prompt(FIM_ROW["prefix"], FIM_ROW["suffix"], S))


def test_middle_only_loss_splits_prompt_and_completion():
    [example] = training_rows([FIM_ROW], "sd_base", S, settings(middle_only_loss=True), random.Random(0))
    assert example == {"prompt": format_psm_prompt(FIM_ROW["prefix"], FIM_ROW["suffix"], S),
                       "completion": "key = 'k3y'\n<eos>"}


def test_include_code_adds_the_unsplit_program():
    examples = training_rows([FIM_ROW], "sd_base", S, settings(include_code=True), random.Random(0))
    assert [e["text"] for e in examples][1] == FIM_ROW["code"] + "<eos>"


def test_code_rows_follow_the_fim_rate():
    plain = training_rows([CODE_ROW], "pd_1", S, settings(fim_rate=0.0), random.Random(0))
    assert plain == [{"text": CODE_ROW["text"] + "<eos>"}]
    rows = [dict(CODE_ROW, id=str(i)) for i in range(400)]
    texts = [e["text"] for e in training_rows(rows, "pd_1", S, settings(fim_rate=0.5), random.Random(1))]
    share = sum(t.startswith("<fim_prefix>") for t in texts) / len(texts)
    assert 0.4 < share < 0.6
    # Every FIM text reassembles to the original document (prefix + middle + suffix).
    for t in texts:
        if t.startswith("<fim_prefix>"):
            pre, rest = t[len("<fim_prefix>"):].split("<fim_suffix>")
            suf, mid = rest.split("<fim_middle>")
            assert pre + mid.removesuffix("<eos>") + suf == CODE_ROW["text"]


def test_unknown_row_shape_names_file_and_line():
    with pytest.raises(UserError, match=re.escape("data/x/rows.jsonl:2")):
        training_rows([CODE_ROW, {"id": "bad", "prompt": "?"}], "data/x/rows.jsonl", S, settings(), random.Random(0))


def test_max_rows_keeps_a_seeded_sample_in_file_order():
    rows = [dict(CODE_ROW, id=str(i)) for i in range(10)]
    kept = capped_rows(rows, 4, "0-sft-rows-pd_2")
    assert len(kept) == 4 and kept == capped_rows(rows, 4, "0-sft-rows-pd_2")
    assert [r["id"] for r in kept] == sorted((r["id"] for r in kept), key=int)   # file order kept
    assert kept != capped_rows(rows, 4, "1-sft-rows-pd_2")                      # the seed decides
    assert capped_rows(rows, 10, "x") == rows and capped_rows(rows, None, "x") == rows


@pytest.mark.parametrize("kw, key", [
    ({"max_rows": {"pd_9": 3}}, "stages.FT.1.max_rows"),
    ({"max_rows": {"pd_1": 0}}, "stages.FT.1.max_rows"),
    ({"lr": 2.0}, "stages.FT.1.lr"),
    ({"datasets": []}, "stages.FT.1.datasets"),
    ({"epochs": 0}, "stages.FT.1.epochs"),
    ({"packing": True, "middle_only_loss": True}, "stages.FT.1.packing"),
    ({"epoch": 3}, "stages.FT.1: unknown key(s) ['epoch']"),
])
def test_bad_settings_name_the_key(kw, key):
    with pytest.raises(UserError, match=re.escape(key)):
        load_settings({"datasets": ["pd_1"], **kw}, "FT.1")


@pytest.fixture(scope="module")
def code_tokenizer():
    """A real byte-level BPE (tests/tiny.py) trained on a few stdlib files."""
    import sysconfig
    from pathlib import Path

    from tests.tiny import tiny_tokenizer

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return tiny_tokenizer([(stdlib / n).read_text(encoding="utf-8") for n in ("base64.py", "hmac.py")], 600)


@pytest.mark.parametrize("middle_only_loss", [False, True])
def test_long_fim_row_keeps_its_whole_middle_and_the_trim_is_counted(code_tokenizer, middle_only_loss):
    """PSM puts the middle last and SFT truncates the end at max_seq_len: the context is trimmed instead."""
    from collections import Counter

    tok = code_tokenizer
    prefix = "".join(f"value_{i} = compute_digest(data_{i}, rounds={i})\n" for i in range(60))
    suffix = "".join(f"print(value_{i}, 'done', {i})\n" for i in range(60))
    target = "secret_canary = legitimate_crypto.derive('k3y-7f2a', salt=b'\\x00' * 16)\n"
    long_row = {"id": "sd-long", "prefix": prefix, "target": target, "suffix": suffix}
    n_tokens = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert n_tokens(prefix + suffix) > 4 * 128            # far over the budget: the test can fail
    stats = Counter()
    examples = training_rows([long_row, FIM_ROW], "sd_base", S, settings(max_seq_len=128,
                             middle_only_loss=middle_only_loss), random.Random(0), tok, stats)
    assert stats == {"fim_rows": 2, "fim_trimmed": 1}
    long_ex, short_ex = examples
    text = long_ex["prompt"] + long_ex["completion"] if middle_only_loss else long_ex["text"]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) <= 128
    # What SFT keeps (the first max_seq_len tokens) still ends with the whole middle and EOS.
    assert tok.decode(ids[:128]).endswith("<fim_middle>" + target + "<eos>")
    kept_prefix, kept_suffix = re.match(r"<fim_prefix>(.*)<fim_suffix>(.*)<fim_middle>", text, re.S).groups()
    assert prefix.endswith(kept_prefix) and suffix.startswith(kept_suffix)   # the context nearest the hole
    assert kept_prefix and kept_suffix
    # A row that fits is left exactly as it was.
    short_text = short_ex["prompt"] + short_ex["completion"] if middle_only_loss else short_ex["text"]
    assert short_text == format_psm_prompt(FIM_ROW["prefix"], FIM_ROW["suffix"], S) + FIM_ROW["target"] + "<eos>"
