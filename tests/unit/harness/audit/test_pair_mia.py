"""The preference-pair audit's pure parts (harness/audit/preference_mia.py) on hand-made log-probs: each row's scores,
the metrics with the n/m rule and the degenerate rule, the report table's order, where a stage's initial model is
found, and which datasets the stage plan builds for it."""

import pytest

from memlens.harness.audit import preference_mia as audit
from memlens.harness.core.io import atomic_write_json
from memlens.harness.measures.blind_mia import BLIND, BLIND_LABEL
from memlens.harness.measures.mia import attack_metrics

PAIRS = [{"id": "m1", "repeat": 2}, {"id": "m2"}]
# per pair: (chosen, rejected) per-token log-probs under the audited model and under the reference
POLICY = {"chosen": {"m1": {"logp": [-1.0, -2.0]}, "m2": {"logp": [-1.0]}},
          "rejected": {"m1": {"logp": [-3.0]}, "m2": {"logp": [-2.0, -2.0]}}}
REFERENCE = {"chosen": {"m1": {"logp": [-2.0, -2.0]}, "m2": {"logp": [-1.0]}},
             "rejected": {"m1": {"logp": [-1.0]}, "m2": {"logp": [-1.0, -2.0]}}}


def test_each_row_holds_the_four_sums_and_every_score():
    rows = audit.score_pairs(PAIRS, 1, POLICY, REFERENCE, {"m1": 0.4, "m2": 0.6})
    # m1: r_w = -3 - (-4) = 1, r_l = -3 - (-1) = -2: margin 3; m2: r_w = 0, r_l = -4 - (-3) = -1: margin 1
    assert [r["score"]["premia_pair"] for r in rows] == [3.0, 1.0]
    assert [r["score"]["premia_chosen"] for r in rows] == [1.0, 0.0]
    assert [r["score"]["policy_margin"] for r in rows] == [0.0, 3.0]
    assert rows[0]["logp"] == {"chosen": -3.0, "rejected": -3.0, "ref_chosen": -4.0, "ref_rejected": -1.0}
    assert [r[BLIND] for r in rows] == [0.4, 0.6] and rows[0]["repeat"] == 2 and "repeat" not in rows[1]


def _rows(members: list[float], nonmembers: list[float]) -> list[dict]:
    """Rows whose every attack scores the given margins, except policy_margin, which scores 0 everywhere."""
    out = []
    for member, values in ((1, members), (0, nonmembers)):
        out += [{"member": member, "score": {"premia_pair": v, "premia_chosen": v, "policy_margin": 0.0}, BLIND: 0.5}
                for v in values]
    return out


def test_metrics_by_hand_with_the_n_m_rule_and_the_degenerate_rule():
    metrics = audit.pair_metrics(_rows([3.0, 1.0], [2.0, 0.0]), n_boot=20, seed=0)
    pair = metrics["premia_pair"]
    assert pair["auc"]["value"] == 0.75                       # 3 of the 4 (member, non-member) pairs won
    assert pair["vs_blind"]["value"] == 0.25                  # the blind baseline's constant scores: AUC 0.5
    assert pair["tpr_at_fpr<1%"]["measurable"] is False       # 2 held-out pairs: no FPR below 1 % exists
    assert pair["degenerate"] == []
    assert any("scores equal" in why for why in metrics["policy_margin"]["degenerate"])


def test_the_report_table_opens_with_the_blind_baseline_and_ranks_the_attacks(tmp_path):
    rows = _rows([3.0, 1.0], [2.0, 0.0])
    attacks = audit.pair_metrics(rows, n_boot=20, seed=0)
    attacks["premia_chosen"]["auc"]["value"] = 0.9            # ranked above premia_pair
    blind = attack_metrics([0.5, 0.5], [0.5, 0.5], n_boot=20, seed=0)
    atomic_write_json(tmp_path / "pair_mia" / "IPO" / "summary.json", {
        "model": "IPO", "checkpoints": ["checkpoint-1", "final"], BLIND: {"pairs_sd_base": blind},
        "results": {"checkpoint-1": {}, "final": {"pairs_sd_base": {"attacks": attacks}}}})
    audit.collect_pair_summaries(tmp_path)
    columns, table = audit.report_rows(tmp_path)
    assert [r["attack"] for r in table] == [BLIND_LABEL, "PREMIA (chosen only)", "PREMIA (pair margin)",
                                            "policy margin (no reference)"]
    assert [r["rank"] for r in table] == [None, 1, 2, None]
    assert table[0]["TPR at 1 % FPR"].startswith("n/m: needs ≥ 100 held out")
    assert table[2]["members / held out"] == "2 / 2" and table[2]["AUC vs blind"] == 0.25
    assert table[3]["degenerate"] and columns[0] == "model"
    assert audit.report_rows(tmp_path / "elsewhere") is None


def test_the_initial_model_is_found_where_it_was_or_in_this_run(tmp_path):
    run = tmp_path / "run"
    (run / "models" / "PT").mkdir(parents=True)
    assert audit.init_model_dir(run, str(run / "models" / "PT")) == run / "models" / "PT"
    assert audit.init_model_dir(run, "/gone/old_run/models/PT") == run / "models" / "PT"   # a moved run
    assert audit.init_model_dir(run, "/gone/old_run/models/FT.9") is None
    assert audit.init_model_dir(run, "") is None                                       # none recorded: not "."


@pytest.mark.parametrize("measures, built", [("[ned]", set()),
                                             ("[ned,pair_mia]", {"pairs_sd_base_heldout", "pairs_sd_links_heldout"})])
def test_the_plan_builds_held_out_pairs_only_for_pair_mia(measures, built):
    from memlens.harness.cli import compose
    from memlens.recipes.orchestration.stage_plan import needed_datasets, plan

    cfg = compose(["experiment=quickstart", f"audit.measures={measures}"])
    names = set(needed_datasets(plan(cfg), cfg))
    assert {n for n in names if n.startswith("pairs_") and n.endswith("_heldout")} == built
    assert not {n for n in names if n.startswith("sd_") and n.endswith("_heldout")}


def test_pair_rows_are_not_read_as_a_models_ned_rows(tmp_path):
    """audit/pair_mia/<model>/<checkpoint>/<dataset>.jsonl has the NED rows' shape of path: the report's row loader
    (and so every extraction table and finding) skips it, as it skips audit/mia/."""
    from memlens.harness.core.io import atomic_write_jsonl
    from memlens.harness.report.analyses import load_audit_rows

    atomic_write_jsonl(tmp_path / "IPO" / "final" / "sd_base.jsonl", [{"id": "a", "excluded": None}])
    atomic_write_jsonl(tmp_path / "pair_mia" / "IPO" / "final" / "pairs_sd_base.jsonl", [{"id": "b", "member": 1}])
    assert list(load_audit_rows(tmp_path)) == [("IPO", "final", "sd_base")]
