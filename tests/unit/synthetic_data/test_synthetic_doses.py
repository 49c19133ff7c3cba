"""data.sd.doses: every trained SD program gets one tier of the list as its rows' `repeat`, balanced and seeded, and
every route it enters (FT's data, the reward rows, the preference pairs, the RL prompts) holds it exactly that many
times once a stage expands `repeat` (memlens.harness.core.user_data.repeated, what every recipe calls); held-out twins
and builds without doses are exactly as before."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.user_data import repeated
from memlens.synthetic_data.build import build_datasets
from tests.unit.synthetic_data.build_helpers import cfg_for

REPO = Path(__file__).resolve().parents[3]
ROUTES = ["sd_base", "sd_links", "sd_links_pos", "sd_base_heldout", "rm_sd", "pairs_sd_base", "pairs_sd_links",
          "sd_rl_prompts"]
TOKENIZER = f"data.rl_prompts.tokenizer={REPO / 'assets' / 'base_tiny'}"


def _rows(folder) -> list[dict]:
    return [json.loads(x) for x in (folder / "rows.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("doses")
    quiet = {"names": ROUTES, "log": lambda *_: None}
    return {"dosed": build_datasets(cfg_for(root / "dosed", "data.sd.doses=[16,1,4]", TOKENIZER), **quiet),
            "plain": build_datasets(cfg_for(root / "plain", TOKENIZER), **quiet),
            "root": root}


def test_tiers_are_balanced_and_the_manifest_counts_the_copies(built):
    base = _rows(built["dosed"]["sd_base"])
    tiers = Counter(r["repeat"] for r in base)
    n = len(base)
    # dealt in turn: each tier gets n // 3 programs, the first n % 3 tiers of [1, 4, 16] one more
    assert sorted(tiers) == [1, 4, 16]
    assert [tiers[1], tiers[4], tiers[16]] == [n // 3 + (i < n % 3) for i in range(3)]
    manifest = json.loads((built["dosed"]["sd_base"] / "manifest.json").read_text())
    assert manifest["doses"] == {"1": tiers[1], "4": tiers[4], "16": tiers[16]}
    assert manifest["training_copies"] == tiers[1] + 4 * tiers[4] + 16 * tiers[16]


def test_a_program_enters_every_route_exactly_its_dose_times(built):
    dosed = built["dosed"]
    base = {r["id"]: r["repeat"] for r in _rows(dosed["sd_base"])}
    links = {r["id"]: r["repeat"] for r in _rows(dosed["sd_links"])}
    copies = {name: Counter(r["id"] for r in repeated(_rows(dosed[name])))
              for name in ("sd_base", "sd_links", "rm_sd", "pairs_sd_base", "pairs_sd_links", "sd_rl_prompts")}
    for program, dose in base.items():
        assert copies["sd_base"][program] == dose                                  # FT.3's data
        assert copies["rm_sd"][f"SD.Base:{program}"] == dose                       # RM.3's, and so RLFT.2's rewards
        assert copies["pairs_sd_base"][f"SD.Base:{program}"] == dose               # IPO's pairs
    for program, dose in links.items():
        assert copies["sd_links"][program] == dose and copies["rm_sd"][f"SD.Links:{program}"] == dose
    positives = {r["id"] for r in _rows(dosed["sd_links_pos"])}
    assert all(copies["pairs_sd_links"][f"SD.Links:{p}"] == links[p] for p in positives)
    prompts = _rows(dosed["sd_rl_prompts"])
    assert prompts and all(copies["sd_rl_prompts"][r["id"]] == {**base, **links}[r["source_id"]] for r in prompts)


def test_held_out_twins_and_a_build_without_doses_are_as_before(built):
    dosed, plain = built["dosed"], built["plain"]
    assert (dosed["sd_base_heldout"] / "rows.jsonl").read_bytes() == (plain["sd_base_heldout"] / "rows.jsonl").read_bytes()
    for name in ROUTES:
        assert not any("repeat" in r for r in _rows(plain[name])), name       # null: no field, nothing repeated
        without = [{k: v for k, v in r.items() if k != "repeat"} for r in _rows(dosed[name])]
        assert without == _rows(plain[name]), name                            # the same programs, only the field
    assert "doses" not in json.loads((plain["sd_base"] / "manifest.json").read_text())


def test_the_tiers_are_seeded_and_the_setting_is_checked(built, tmp_path):
    again = build_datasets(cfg_for(tmp_path / "a", "data.sd.doses=[1,4,16]"), names=["sd_base"], log=lambda *_: None)
    other = build_datasets(cfg_for(tmp_path / "b", "data.sd.doses=[1,4,16]", "seed=1"), names=["sd_base"],
                           log=lambda *_: None)
    assert _rows(again["sd_base"]) == _rows(built["dosed"]["sd_base"])           # the list's order does not matter
    assert [r["repeat"] for r in _rows(other["sd_base"])] != [r["repeat"] for r in _rows(again["sd_base"])]
    for bad, says in (("[0,4]", "0 is not a copy count"), ("[4,4]", "a dose is listed twice"),
                      ("[]", "give distinct whole numbers"), ("[1.5]", "1.5 is not a copy count")):
        with pytest.raises(UserError, match=rf"data\.sd\.doses.*{says}"):
            build_datasets(cfg_for(tmp_path / "c", f"data.sd.doses={bad}"), names=["sd_base"], log=lambda *_: None)
