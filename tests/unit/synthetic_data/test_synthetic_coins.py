"""data.sd.membership=coins: SD.Base membership by an independent fair coin per program (the one-run audit's
randomization, harness/measures/epsilon.py); the default split builds what it built before (test_synthetic_build)."""

from __future__ import annotations

import json

import pytest

from memlens.harness.core.errors import UserError
from memlens.synthetic_data.build import COIN_STREAM, build_datasets
from tests.unit.synthetic_data.build_helpers import cfg_for, training_strings

# a small corpus needs fatter splits so that every split gets files (as test_synthetic_build.py)
FAT = ["data.pd.max_files=90", "data.pd.proportions.pd_pt=0.3", "data.pd.proportions.pd_1=0.14",
       "data.pd.proportions.pd_2=0.14", "data.pd.proportions.pd_2_val=0.1", "data.pd.proportions.pd_3=0.12",
       "data.pd.proportions.pd_3_val=0.1", "data.pd.proportions.pd_eval=0.1"]


def _rows(folder) -> list[dict]:
    return [json.loads(x) for x in (folder / "rows.jsonl").read_text().splitlines()]


def _manifest(folder) -> dict:
    return json.loads((folder / "manifest.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("coins")
    coins = build_datasets(cfg_for(root / "coins", "data.sd.membership=coins", *FAT), names=None, log=lambda *_: None)
    split = build_datasets(cfg_for(root / "split"), names=["sd_base", "sd_base_heldout", "sd_links",
                                                           "sd_links_heldout"], log=lambda *_: None)
    return {"root": root, "coins": coins, "split": split}


def test_coins_reassign_the_pool_of_both_streams_and_the_manifests_say_so(built):
    coins, split = built["coins"], built["split"]
    ones, zeros = _rows(coins["sd_base"]), _rows(coins["sd_base_heldout"])
    pool_split = {r["id"] for r in _rows(split["sd_base"]) + _rows(split["sd_base_heldout"])}
    ids_ones, ids_zeros = {r["id"] for r in ones}, {r["id"] for r in zeros}
    assert not ids_ones & ids_zeros and ids_ones | ids_zeros <= pool_split
    info = _manifest(coins["sd_base"])
    assert info["membership"] == "coins" and _manifest(coins["sd_base_heldout"])["membership"] == "coins"
    counts = info["coins"]
    assert counts["stream"] == f"{COIN_STREAM}:0" and counts["ones"] == len(ones) and counts["zeros"] == len(zeros)
    assert counts["pool"] == len(pool_split) == len(ones) + len(zeros) + counts["left_out_shared_target"]
    assert 0.3 < len(ones) / (len(ones) + len(zeros)) < 0.7              # fair coins over ~130 programs
    # each stream's programs land on both sides: the coin, not the stream, decides
    assert {i.split("-")[0] for i in ids_ones} == {"sd", "sdh"} == {i.split("-")[0] for i in ids_zeros}
    # SD.Links keeps its split, byte for byte, and says so
    for name in ("sd_links", "sd_links_heldout"):
        assert (coins[name] / "rows.jsonl").read_bytes() == (split[name] / "rows.jsonl").read_bytes()
        assert _manifest(coins[name])["membership"] == "split" and "PII paths" in _manifest(coins[name])["membership_note"]
    assert "membership" not in _manifest(split["sd_base"])           # split manifests are as they were


def test_everything_built_from_sd_base_holds_the_ones_only(built):
    coins = built["coins"]
    ones = {r["id"] for r in _rows(coins["sd_base"])}
    rm_base = {r["id"].split(":", 1)[1] for r in _rows(coins["rm_sd"]) if r["source"] == "SD.Base"}
    pairs = {r["id"].split(":", 1)[1] for r in _rows(coins["pairs_sd_base"])}
    assert rm_base == ones == pairs


def test_no_zero_target_is_a_line_any_trained_dataset_has_and_targets_are_distinct(built):
    coins = built["coins"]
    pool = _rows(coins["sd_base"]) + _rows(coins["sd_base_heldout"])
    targets = [r["target"].strip() for r in pool]
    assert len(set(targets)) == len(targets)
    all_lines = {}
    for r in pool + _rows(coins["sd_links"]) + _rows(coins["sd_links_heldout"]):
        for line in {ln.strip() for ln in r["code"].splitlines() if ln.strip()}:
            all_lines[line] = all_lines.get(line, 0) + 1
    assert all(all_lines[t] == 1 for t in targets)                    # each target in its own program only
    corpus = "\n\x00".join(t for name in coins if not name.endswith("_heldout")
                           for r in _rows(coins[name]) for t in training_strings(r))
    for r in _rows(coins["sd_base_heldout"]):
        assert r["code"] not in corpus, r["id"]
        assert r["target"].strip() not in corpus, (r["id"], r["target"])


def test_coins_are_seeded_and_settings_are_checked(built, tmp_path):
    again = build_datasets(cfg_for(tmp_path / "a", "data.sd.membership=coins"), names=["sd_base"], log=lambda *_: None)
    other = build_datasets(cfg_for(tmp_path / "b", "data.sd.membership=coins", "seed=1"), names=["sd_base"],
                           log=lambda *_: None)
    assert (again["sd_base"] / "rows.jsonl").read_bytes() == (built["coins"]["sd_base"] / "rows.jsonl").read_bytes()
    assert (other["sd_base"] / "rows.jsonl").read_bytes() != (again["sd_base"] / "rows.jsonl").read_bytes()
    # switching membership rebuilds: the settings differ
    logs = []
    build_datasets(cfg_for(tmp_path / "a"), names=["sd_base"], log=logs.append)
    assert "rows in" in logs[-1] and "membership" not in _manifest(tmp_path / "a" / "data" / "sd_base")
    with pytest.raises(UserError, match=r"data\.sd\.membership='dice': use split .* or coins"):
        build_datasets(cfg_for(tmp_path / "c", "data.sd.membership=dice"), names=["sd_base"], log=lambda *_: None)
    with pytest.raises(UserError, match=r"data\.sd\.target_selection=uniform: data\.sd\.membership=coins needs"):
        build_datasets(cfg_for(tmp_path / "c", "data.sd.membership=coins", "data.sd.target_selection=uniform"),
                       names=["sd_base"], log=lambda *_: None)
