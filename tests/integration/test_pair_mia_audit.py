"""Preference-pair membership (harness/audit/preference_mia.py) on the smoke run's IPO (tests/integration/conftest.py
`smoke`: no new training): on a copy of its data and its IPO and PT models, the non-member pairs are built from the
held-out programs, `pair_mia` scores the IPO model against PT (the stage's initial model, from provenance.json),
each row's PREMIA score is its four summed log-probs' margin, those log-probs are the preference stage's own
evaluation pass (recipes/stages/preference_eval.py pair_logprobs), the report's table opens with the blind baseline,
and what the run had stays byte for byte. A few seconds beside the shared smoke run."""

from __future__ import annotations

import hashlib

import pytest

from memlens.harness.audit.preference_mia import PairMiaSettings, audit_run_pair_mia, report_rows
from memlens.harness.cli import compose
from memlens.harness.core.io import read_json, read_jsonl
from memlens.harness.measures.blind_mia import BLIND_LABEL
from memlens.harness.measures.preference_mia import PAIR_ATTACKS
from memlens.synthetic_data.build import build_datasets
from tests.integration.run_helpers import copy_run

pytestmark = pytest.mark.slow
PLAN = "audit_plan=[{models:[IPO],control:PT,datasets:[sd_base],checkpoints:final}]"   # its checkpoints: ~4 s more


def _digests(root) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_pair_membership_of_the_smoke_ipo(smoke, tmp_path):
    from memlens.harness.model.load import load_tokenizer, model_sentinels
    from memlens.recipes.stages.preference_eval import pair_logprobs

    run_dir, _ = smoke
    dest = copy_run(run_dir, tmp_path / "run", ["data/sd_base", "data/pairs_sd_base", "models/IPO", "models/PT"])
    before = _digests(dest)
    cfg = compose(["experiment=smoke", f"run_dir={dest}", "device=cpu", PLAN, "audit.measures=[pair_mia]",
                   "audit.mia_bootstrap=50", "audit.progress=false"])
    built = build_datasets(cfg, names=["sd_base_heldout", "pairs_sd_base_heldout"], log=lambda *_: None)
    audit_run_pair_mia(cfg, PairMiaSettings.from_config(cfg.audit), log=lambda *_: None)

    after = _digests(dest)
    assert {k: after[k] for k in before} == before          # the run's data and models: byte for byte
    held = read_jsonl(built["pairs_sd_base_heldout"] / "rows.jsonl")
    members = read_jsonl(dest / "data" / "pairs_sd_base" / "rows.jsonl")
    summary = read_json(dest / "audit" / "pair_mia" / "IPO" / "summary.json")
    assert summary["reference"] == str(dest / "models" / "PT") or summary["reference"].endswith("models/PT")
    assert summary["checkpoints"] == ["final"]
    entry = summary["results"]["final"]["pairs_sd_base"]
    assert (entry["n_members"], entry["n_nonmembers"]) == (len(members), len(held))
    assert set(entry["attacks"]) == set(PAIR_ATTACKS)
    assert all("vs_blind" in m for m in entry["attacks"].values())

    rows = read_jsonl(dest / "audit" / "pair_mia" / "IPO" / "final" / "pairs_sd_base.jsonl")
    assert [r["member"] for r in rows] == [1] * len(members) + [0] * len(held)
    for r in rows:
        lp = r["logp"]
        assert r["score"]["premia_pair"] == pytest.approx(
            (lp["chosen"] - lp["ref_chosen"]) - (lp["rejected"] - lp["ref_rejected"]), abs=1e-9)
    # The summed log-probs are the preference stage's own evaluation pass (the audit's encoding), on a few pairs
    ipo = dest / "models" / "IPO"
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ipo, dtype=torch.float32).eval()
    chosen, rejected = pair_logprobs(model, load_tokenizer(ipo), model_sentinels(ipo, None), members[:3])
    assert [r["logp"]["chosen"] for r in rows[:3]] == pytest.approx(chosen, abs=1e-4)
    assert [r["logp"]["rejected"] for r in rows[:3]] == pytest.approx(rejected, abs=1e-4)

    columns, table = report_rows(dest / "audit")
    assert table[0]["attack"] == BLIND_LABEL and table[0]["rank"] is None
    assert {r["attack"] for r in table[1:]} == {a.label for a in PAIR_ATTACKS.values()}
    assert table[0]["members / held out"] == f"{len(members)} / {len(held)}"
    assert "TPR at 1 % FPR" in columns
    # report.md / report.html: the table under its title, from the same rows
    from memlens.harness.report.sections import MEMBERSHIP_HEADING, membership_section, registered_measures_section

    section = membership_section({}, [], {dest: dest / "audit"}, dest / "fig")
    assert [(b.level, b.text) for b in section.blocks if type(b).__name__ == "Heading"] == [
        (2, MEMBERSHIP_HEADING), (3, "Preference pairs, what an IPO / DPO-family stage trains on (Membership of "
                                     "preference pairs (PREMIA); audit.measures: pair_mia)")]
    assert section.filed["measures"]["pair_mia"] == table
    assert not registered_measures_section({dest: dest / "audit"}).blocks      # not a section of its own
