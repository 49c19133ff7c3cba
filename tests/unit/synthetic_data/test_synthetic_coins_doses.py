"""data.sd.doses under data.sd.membership=coins (experiment=doses_coins, doses_designed_coins): every program of the
pool is dealt its dose before its coin, so a dose's canaries are split by the coins alone and the one-run ε bound per
dose holds (harness/audit/epsilon.py bounds_by_dose); a held-out program keeps its tier as dose_if_member, never as
`repeat` (no stage plants it); designed secrets count tokens over the whole pool, so none depends on a coin."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from memlens.harness.core.user_data import DOSE_IF_MEMBER, repeated
from memlens.synthetic_data import build as build_module
from memlens.synthetic_data.build import Builder, build_datasets
from memlens.synthetic_data.data_settings import validate
from memlens.synthetic_data.doses import assign_doses
from tests.unit.synthetic_data.build_helpers import cfg_for

COINS_DOSES = ["data.sd.membership=coins", "data.sd.doses=[1,4]"]
DESIGN = ["data.sd.design=unigram", "data.sd.design_tokens=6", "data.sd.design_tokenizer=assets/base_tiny"]
NAMES = ["sd_base", "sd_base_heldout", "rm_sd", "pairs_sd_base", "pairs_sd_base_heldout"]


def _rows(folder) -> list[dict]:
    return [json.loads(x) for x in (folder / "rows.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("coins_doses")
    quiet = {"names": NAMES, "log": lambda *_: None}
    return {"plain": build_datasets(cfg_for(root / "plain", *COINS_DOSES), **quiet),
            "designed": build_datasets(cfg_for(root / "designed", *COINS_DOSES, *DESIGN), **quiet),
            "root": root}


def test_every_program_of_the_pool_gets_its_dose_before_its_coin(built):
    ones, zeros = _rows(built["plain"]["sd_base"]), _rows(built["plain"]["sd_base_heldout"])
    assert all("repeat" in r and DOSE_IF_MEMBER not in r for r in ones)
    assert all(DOSE_IF_MEMBER in r and "repeat" not in r for r in zeros)
    # the tiers are the seeded deal over the pool in id order, whichever way each coin fell
    pool = sorted(ones + zeros, key=lambda r: r["id"])
    dealt = {r["id"]: r["repeat"] for r in assign_doses(pool, (1, 4), 0, "base")}
    assert {r["id"]: r.get("repeat", r.get(DOSE_IF_MEMBER)) for r in pool} == dealt
    both_sides = {(r.get("repeat") or r[DOSE_IF_MEMBER], "repeat" in r) for r in pool}
    assert both_sides == {(1, True), (1, False), (4, True), (4, False)}       # each dose has members and held-out ones
    # a member's dose still reaches the routes; a held-out program's reaches none
    rm = repeated(_rows(built["plain"]["rm_sd"]))

    def holding(target):        # reward rows, copies expanded, with the target line in a trained field
        return sum(any(target in v for v in row.values() if isinstance(v, str)) for row in rm)

    assert all(holding(r["target"]) == r["repeat"] for r in ones)
    assert all(holding(r["target"]) == 0 for r in zeros)
    assert all("repeat" not in p for p in _rows(built["plain"]["pairs_sd_base_heldout"]))
    manifest = json.loads((built["plain"]["sd_base"] / "manifest.json").read_text())
    assert "dealt before its coin" in manifest["coins"]["doses"]


def test_the_designed_build_shares_the_pool_coins_and_doses_and_its_secrets_ignore_the_coins(built, monkeypatch):
    for name in ("sd_base", "sd_base_heldout"):
        plain, designed = _rows(built["plain"][name]), _rows(built["designed"][name])
        assert [(r["id"], r.get("repeat"), r.get(DOSE_IF_MEMBER)) for r in plain] == \
            [(r["id"], r.get("repeat"), r.get(DOSE_IF_MEMBER)) for r in designed]
        assert all(d["target"] != p["target"] and d["design"] == "unigram" for d, p in zip(designed, plain))
    # other coins (another coin stream): other members, the same secret for every program of the pool
    settings = validate(OmegaConf.to_container(cfg_for(built["root"] / "other", *COINS_DOSES, *DESIGN).data,
                                               resolve=True))
    secrets = Builder(settings).secrets_by_id
    tiers = {r["id"]: r.get("repeat", r.get(DOSE_IF_MEMBER)) for part in ("members", "heldout")
             for r in Builder(settings).sd_coins[part]["base"]}
    monkeypatch.setattr(build_module, "COIN_STREAM", "another-stream")
    other = Builder(settings)
    assert {r["id"] for r in other.sd["base"]} != {r["id"] for r in _rows(built["designed"]["sd_base"])}
    assert other.secrets_by_id == secrets
    # and every program keeps its tier whichever way its coin fell
    assert {r["id"]: r.get("repeat", r.get(DOSE_IF_MEMBER)) for part in ("members", "heldout")
            for r in other.sd_coins[part]["base"]} == tiers


def test_another_deal_of_doses_rebuilds_the_held_out_rows_in_the_same_run_folder(tmp_path):
    quiet = {"names": ["sd_base", "sd_base_heldout"], "log": lambda *_: None}
    first = build_datasets(cfg_for(tmp_path, *COINS_DOSES), **quiet)
    before = {r[DOSE_IF_MEMBER] for r in _rows(first["sd_base_heldout"])}
    again = build_datasets(cfg_for(tmp_path, "data.sd.membership=coins", "data.sd.doses=[2,8,32]"), **quiet)
    assert before == {1, 4} and {r[DOSE_IF_MEMBER] for r in _rows(again["sd_base_heldout"])} == {2, 8, 32}
    assert {r["repeat"] for r in _rows(again["sd_base"])} == {2, 8, 32}
