"""The RL-prompt audit's pure parts (harness/audit/prompt_mia.py) on hand-made samples: each row's scores, the metrics
with the n/m rule, the report table's order, the capped sample, the settings' cross-check, which datasets the stage
plan builds for it, and that the held-out prompts are other prompts than the members'."""

import pytest

from memlens.harness.audit import prompt_mia as audit
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json
from memlens.harness.measures.blind_mia import BLIND, BLIND_LABEL
from memlens.harness.measures.mia import attack_metrics
from memlens.harness.measures.prompt_mia import PromptSamples

# m1's policy samples are equal (NN distance 0); m2's are "aaaa", "aaab", "bbbb" (NN 0.25, 0.25, 0.75)
DIVERSE = ("aaaa", "aaab", "bbbb")
SAMPLES = {"m1": PromptSamples(("x = 1",) * 3, DIVERSE, (1.0, 2.0, 3.0), (0.0, 0.0, 3.0), (0.5, 1.5)),
           "m2": PromptSamples(DIVERSE, DIVERSE)}


def test_each_row_holds_both_models_min_knn_and_every_score_it_has_inputs_for():
    rows = audit.score_prompts([{"id": "m1"}, {"id": "m2"}], 1, SAMPLES, 2, {"m1": 0.4, "m2": 0.6})
    assert [r["score"]["min_knn"] for r in rows] == [0.0, -0.25]
    assert [r["score"]["min_knn_vs_initial"] for r in rows] == [0.25, 0.0]
    # m1: rewards 2.0 - 1.0 = 1.0; drift (0.5 + 1.5) / 2 = 1.0; m2 has neither input: no DIBA score
    assert rows[0]["score"]["reward_gain"] == 1.0 and rows[0]["score"]["policy_drift"] == 1.0
    assert rows[0]["reward"] == {"policy": 2.0, "initial": 1.0}
    assert "reward_gain" not in rows[1]["score"] and "reward" not in rows[1]
    assert rows[1]["min_knn"] == {"policy": 0.25, "initial": 0.25}
    assert [r[BLIND] for r in rows] == [0.4, 0.6] and {r["member"] for r in rows} == {1}


def test_diba_is_the_sum_of_the_two_features_standardised_over_the_pooled_prompts():
    rows = [{"member": 1, "score": {"reward_gain": 1.0, "policy_drift": 10.0}},
            {"member": 0, "score": {"reward_gain": 3.0, "policy_drift": 30.0}}]
    audit.add_diba(rows)
    # each feature: mean 2 / 20, population sd 1 / 10: z = -1, +1 for both
    assert [r["score"]["diba"] for r in rows] == [-2.0, 2.0]
    assert audit.scored_attacks(rows) == ["reward_gain", "policy_drift", "diba"]
    partial = [{"member": 1, "score": {"reward_gain": 1.0}}]
    audit.add_diba(partial)
    assert "diba" not in partial[0]["score"]


def _rows(members, nonmembers):
    out = []
    for member, values in ((1, members), (0, nonmembers)):
        out += [{"member": member, "score": {"min_knn": v, "mean_nn": v, "min_knn_vs_initial": 0.0}, BLIND: 0.5}
                for v in values]
    return out


def test_metrics_by_hand_and_the_report_table(tmp_path):
    metrics = audit.prompt_metrics(_rows([-0.1, -0.5], [-0.3, -0.7]), n_boot=20, seed=0)
    assert metrics["min_knn"]["auc"]["value"] == 0.75          # 3 of the 4 (member, held-out) pairs won
    assert metrics["min_knn"]["vs_blind"]["value"] == 0.25
    assert metrics["min_knn"]["tpr_at_fpr<1%"]["measurable"] is False
    assert any("scores equal" in why for why in metrics["min_knn_vs_initial"]["degenerate"])
    assert "reward_gain" not in metrics                        # not computed on these rows: not in the table
    metrics["mean_nn"]["auc"]["value"] = 0.9
    blind = attack_metrics([0.5, 0.5], [0.5, 0.5], n_boot=20, seed=0)
    atomic_write_json(tmp_path / "prompt_mia" / "RLFT.2" / "summary.json", {
        "model": "RLFT.2", "checkpoints": ["checkpoint-6", "final"], BLIND: {"sd_base": blind},
        "results": {"checkpoint-6": {}, "final": {"sd_base": {"attacks": metrics}}}})
    audit.collect_prompt_summaries(tmp_path)
    columns, table = audit.report_rows(tmp_path)
    assert [r["attack"] for r in table] == [BLIND_LABEL, "mean NN distance (k = m)", "Min-kNN distance (Zhang et al.)",
                                            "Min-kNN drop from the initial model"]
    assert [r["rank"] for r in table] == [None, 1, 2, None] and table[0]["checkpoint"] == "final"
    assert audit.report_rows(tmp_path / "elsewhere") is None


def test_the_capped_sample_is_seeded_ordered_and_the_same_for_every_model():
    rows = [{"id": str(i)} for i in range(100)]
    a = audit.capped(rows, 10, 0, "sd_base:members")
    assert len(a) == 10 and a == audit.capped(rows, 10, 0, "sd_base:members")
    assert [r["id"] for r in a] == sorted((r["id"] for r in a), key=int)          # file order kept
    assert a != audit.capped(rows, 10, 1, "sd_base:members")
    assert audit.capped(rows[:5], 10, 0, "x") == rows[:5]


def test_k_above_m_is_refused_naming_the_key():
    with pytest.raises(UserError, match=r"audit\.prompt_mia_k=9"):
        audit.PromptMiaSettings(samples=8, k=9)


@pytest.mark.parametrize("measures, built", [("[ned]", set()), ("[ned,pair_mia]", set()),
                                             ("[ned,prompt_mia]", {"sd_base_heldout", "sd_links_heldout"})])
def test_the_plan_builds_held_out_prompts_only_for_prompt_mia(measures, built):
    from memlens.harness.cli import compose
    from memlens.recipes.orchestration.stage_plan import needed_datasets, plan

    cfg = compose(["experiment=quickstart", f"audit.measures={measures}"])
    names = set(needed_datasets(plan(cfg), cfg))
    assert {n for n in names if n.startswith("sd_") and n.endswith("_heldout")} == built
    assert "pd_3_val" not in names                              # no quickstart RL stage reads pd_3


def test_the_smoke_plan_pairs_pd_3_with_its_validation_split():
    from memlens.harness.cli import compose
    from memlens.recipes.orchestration.stage_plan import needed_datasets, plan

    cfg = compose(["experiment=smoke", "audit.measures=[ned,prompt_mia]"])
    names = needed_datasets(plan(cfg), cfg)
    # RLFT.1: pd_3; RLFT.4: sd_rl_prompts, cut from the held-out programs for its twin (not sd_base_heldout itself)
    assert {"pd_3_val", "sd_rl_prompts_heldout"} <= set(names) and "sd_base_heldout" not in names
    base = compose(["experiment=smoke"])
    assert needed_datasets(plan(base), base) == [n for n in names if n not in ("pd_3_val", "sd_rl_prompts_heldout")]


def test_a_retired_model_leaves_no_prompt_result_behind(tmp_path):
    """harness/audit/retire.py: a retrained RL model's prompt rows and summary move to stale/, and the collected
    summary no longer lists it (the report reads that one)."""
    from memlens.harness.audit.retire import retire_model_results
    from memlens.harness.core.io import read_json

    for model in ("RLFT.2", "RLFT.3"):
        atomic_write_json(tmp_path / "audit" / "prompt_mia" / model / "summary.json", {"model": model})
    audit.collect_prompt_summaries(tmp_path / "audit")
    moved = retire_model_results(tmp_path / "audit", tmp_path / "models" / "RLFT.2", "RLFT.2", tmp_path / "stale",
                                 log=lambda *_: None)
    assert (tmp_path / "stale" / "prompt_mia" / "RLFT.2" / "summary.json").is_file() and moved
    assert list(read_json(tmp_path / "audit" / "prompt_mia" / "summary.json")["results"]) == ["RLFT.3"]
