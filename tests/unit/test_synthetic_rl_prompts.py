"""sd_rl_prompts on a real tokenizer trained on a few stdlib files (paper Sec. 5.3: 50 + 50 tokens)."""

import pytest

from synthetic_data.build import Builder, validate
from synthetic_data.rl_prompts import OffsetTokenizer, rl_prompt_rows


def default_data(**sd):
    from omegaconf import OmegaConf

    from harness.cli import compose

    data = OmegaConf.to_container(compose([]).data, resolve=True)
    data["sd"].update(sd)
    return data


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    import sysconfig
    from pathlib import Path

    from recipes.tokenizer import save_tokenizer, train_code_tokenizer

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / name).read_text(encoding="utf-8") for name in ("json/decoder.py", "base64.py", "hmac.py")]
    out = tmp_path_factory.mktemp("tok")
    save_tokenizer(train_code_tokenizer(texts, vocab_size=600), out)
    return out


def test_rl_prompt_rows_cut_at_50_and_100_tokens(tokenizer_dir):
    from transformers import AutoTokenizer

    data = default_data(size=120)
    data["rl_prompts"]["tokenizer"] = str(tokenizer_dir)
    builder = Builder(validate(data))
    sd_rows = builder.sd["base"] + builder.sd["links"]
    rows, info = rl_prompt_rows(sd_rows, OffsetTokenizer(tokenizer_dir), 50, 50)
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))          # the same tokenizer, via transformers
    by_id = {r["id"]: r for r in sd_rows}
    assert len(rows) + info["too_short_skipped"] == len(sd_rows) and len(rows) > 60
    for row in rows:
        code = by_id[row["source_id"]]["code"]
        assert row["suffix"] == "" and row["prefix"] + row["target"] == code[:row["target_char_end"]]
        assert row["prefix"] == code[:row["prompt_char_end"]]
        offsets = hf(code, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert len(offsets) >= 100
        # re-derive the cuts from the char offsets in the HF tokenizer
        assert sum(end <= row["prompt_char_end"] for _, end in offsets) == 50
        assert sum(end <= row["target_char_end"] for _, end in offsets) == 100
    short = [r for r in sd_rows if len(hf(r["code"], add_special_tokens=False)["input_ids"]) < 100]
    assert len(short) == info["too_short_skipped"]


def test_build_sd_rl_prompts_dataset(tokenizer_dir, tmp_path):
    import json

    from omegaconf import OmegaConf

    from synthetic_data.build import build_datasets

    data = default_data(size=60)
    data["rl_prompts"]["tokenizer"] = str(tokenizer_dir)
    data["rl_prompts"]["subsets"] = ["SD.Links"]
    cfg = OmegaConf.create({"run_dir": str(tmp_path), "data": data})
    out = build_datasets(cfg, names=["sd_rl_prompts"], log=lambda *_: None)
    manifest = json.loads((out["sd_rl_prompts"] / "manifest.json").read_text())
    rows = [json.loads(line) for line in (out["sd_rl_prompts"] / "rows.jsonl").read_text().splitlines()]
    assert manifest["count"] == len(rows) > 0 and {r["subset"] for r in rows} == {"SD.Links"}
    assert manifest["settings"]["rl_prompts"]["tokenizer_sha256"]
    assert manifest["sd_prompt_tokens"]["count"] == 27          # round(60 * 0.4565) SD.Links programs
