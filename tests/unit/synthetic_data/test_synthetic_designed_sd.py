"""data.sd.design: a model-free canary design (Panda et al. 2025; synthetic_data/designs.py) puts a secret of
design_tokens tokens in place of each SD.Base program's target line, trained and held-out programs alike, so every
route that reads SD.Base (FT's data, the reward rows, the preference pairs) and every audit reads the same secret, a
dose-k program's secret exactly k times once a stage expands `repeat`; the default (as_given) changes no dataset's
settings or rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.user_data import repeated
from memlens.synthetic_data.build import Builder, build_datasets
from memlens.synthetic_data.data_settings import validate
from tests.unit.synthetic_data.build_helpers import cfg_for

REPO = Path(__file__).resolve().parents[3]
ROUTES = ["sd_base", "sd_base_heldout", "sd_links", "rm_sd", "pairs_sd_base", "pairs_sd_base_heldout"]
DESIGN = ["data.sd.design=unigram", "data.sd.design_tokens=6", "data.sd.design_tokenizer=assets/base_tiny"]


def _rows(folder) -> list[dict]:
    return [json.loads(x) for x in (folder / "rows.jsonl").read_text().splitlines()]


def _data(cfg) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.data, resolve=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("designed")
    quiet = {"names": ROUTES, "log": lambda *_: None}
    return {"designed": build_datasets(cfg_for(root / "designed", "data.sd.doses=[1,4]", *DESIGN), **quiet),
            "plain": build_datasets(cfg_for(root / "plain", "data.sd.doses=[1,4]"), **quiet)}


def test_each_sd_base_target_is_a_designed_secret_in_its_own_program(built):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(REPO / "assets" / "base_tiny")
    seen: set[int] = set()
    for name in ("sd_base", "sd_base_heldout"):
        designed, plain = _rows(built["designed"][name]), _rows(built["plain"][name])
        assert [r["id"] for r in designed] == [r["id"] for r in plain] and designed
        for d, p in zip(designed, plain):
            ids = tok(d["target"], add_special_tokens=False)["input_ids"]
            assert len(ids) == 6 and tok.decode(ids) == d["target"] and d["design"] == "unigram"
            assert not seen & set(ids)                          # no token shared by two secrets, held-out included
            seen |= set(ids)
            assert (d["prefix"], d["suffix"]) == (p["prefix"], p["suffix"]) and d["target"] != p["target"]
            assert d["code"] == d["prefix"] + d["target"] + d["suffix"]
            assert d.get("repeat") == p.get("repeat")            # the doses are the as_given build's
    # the manifest counts a secret's tokens in the design's tokenizer: 6 < 10, so every secret is short, by that count
    for name in ("sd_base", "sd_base_heldout"):
        exclusions = json.loads((built["designed"][name] / "manifest.json").read_text())["audit_exclusions"]
        assert exclusions["target_tokens_counted_as"] == "the design's tokenizer's tokens"
        assert exclusions["by_reason"].get("short_target") == exclusions["of"] == len(_rows(built["designed"][name]))
    assert json.loads((built["designed"]["sd_links"] / "rows.jsonl").read_text().splitlines()[0]) == json.loads(
        (built["plain"]["sd_links"] / "rows.jsonl").read_text().splitlines()[0])       # SD.Links keeps its PII paths


def test_a_dose_k_secret_is_in_every_route_exactly_k_times_and_a_held_out_one_in_none(built):
    designed = built["designed"]
    secrets = [(r["target"], r["repeat"]) for r in _rows(designed["sd_base"])]
    held = {r["target"] for r in _rows(designed["sd_base_heldout"])}
    routes = {name: repeated(_rows(designed[name])) for name in ("sd_base", "rm_sd", "pairs_sd_base")}

    def holding(name, secret):       # rows of the route, its copies expanded, with the secret in a trained field
        return sum(any(secret in v for v in r.values() if isinstance(v, str)) for r in routes[name])

    assert {dose for _, dose in secrets} == {1, 4}
    for secret, dose in secrets:
        assert holding("sd_base", secret) == dose                    # FT.3's data
        assert holding("rm_sd", secret) == dose                      # RM.3's rows (so RLFT.2's rewards)
        assert holding("pairs_sd_base", secret) >= dose              # IPO's chosen (another pair's rejected may be it)
    assert {r["chosen"] for r in _rows(designed["pairs_sd_base_heldout"])} == held
    assert all(holding(name, secret) == 0 for secret in held for name in ("sd_base", "rm_sd"))


def test_as_given_adds_nothing_and_a_design_names_itself_in_the_settings(tmp_path):
    plain = Builder(validate(_data(cfg_for(tmp_path))))
    assert plain.s["sd_design"] is None and "design" not in plain.settings_for("sd_base")
    designed = Builder(validate(_data(cfg_for(tmp_path, *DESIGN))))
    settings = designed.settings_for("sd_base")["design"]
    assert settings["design"] == "unigram" and settings["tokens"] == 6 and len(settings["tokenizer_sha256"]) == 64
    longer = Builder(validate(_data(cfg_for(tmp_path, *DESIGN, "data.sd.design_tokens=8"))))
    assert longer.settings_for("sd_base") != designed.settings_for("sd_base")           # a rebuild, not a reuse
    # the secrets count PD.1 / PD.2's tokens, so another public-code corpus rebuilds them as well
    fewer = Builder(validate(_data(cfg_for(tmp_path, *DESIGN, "data.pd.max_files=50"))))
    assert fewer.settings_for("sd_base") != designed.settings_for("sd_base")
    # and every secret is drawn with the held-out programs', so their count does too
    held = Builder(validate(_data(cfg_for(tmp_path, *DESIGN, "data.sd.heldout_size=30"))))
    assert held.settings_for("sd_base") != designed.settings_for("sd_base")


@pytest.mark.parametrize("overrides, needle", [
    (["data.sd.design=rare", "data.sd.design_tokenizer=assets/base_tiny"], "reads a model"),
    (["data.sd.design=new_token", "data.sd.design_tokenizer=assets/base_tiny"], "adds tokens"),
    (["data.sd.design=zipf", "data.sd.design_tokenizer=assets/base_tiny"], "is unknown"),
    (["data.sd.design=bigram", "data.sd.design_tokenizer=assets/base_tiny"], "rarest secrets out in row order"),
    (["data.sd.design=unigram"], r"data.sd.design_tokenizer: .*\(model=tiny_base"),
])
def test_a_design_the_data_cannot_build_is_refused_naming_the_key(tmp_path, overrides, needle):
    with pytest.raises(UserError, match=needle):
        validate(_data(cfg_for(tmp_path, *overrides)))


def test_the_shipped_base_preset_gives_its_tokenizer(tmp_path):
    data = _data(cfg_for(tmp_path, "model=tiny_base", "data.sd.design=random"))
    assert validate(data)["sd_design"] == {"design": "random", "tokens": 10, "tokenizer": "assets/base_tiny"}
    assert validate(_data(cfg_for(tmp_path)))["sd"] == validate(data)["sd"]       # the design is its own setting
