"""The findings table on hand-built results whose verdicts are derivable by hand."""

from harness.report.findings import FAILS, HOLDS, NOT_MEASURED, findings


def e(model, dataset, rate, pii=None, checkpoint="final"):
    return {"model": model, "dataset": dataset, "checkpoint": checkpoint, "rate": rate,
            "pii_regurgitation_rate": pii}


ENTRIES = [
    e("FT.1", "sd_base", 0.20), e("FT.3", "sd_base", 0.18), e("RLFT.2", "sd_base", 0.01),
    e("FT.3", "sd_links_pos", 0.3, pii=0.5), e("RLFT.2", "sd_links_pos", 0.0, pii=0.0),
    e("RLFT.1/beta=0.005", "sd_links_pos", 0.1, pii=0.1), e("RLFT.1/beta=0.5", "sd_links_pos", 0.4, pii=0.5),
    e("RLFT.4/beta=0.005,lr=3e-06", "sd_rl_prompts", 0.004), e("RLFT.4/beta=0.5,lr=3e-06", "sd_rl_prompts", 0.001),
    e("RLFT.4/beta=0.005,lr=3e-05", "sd_rl_prompts", 0.008),
    e("IPO", "sd_base", 0.02),   # below RLFT.2? no: 0.02 > 0.01 -> F8 holds
    e("IPO", "sd_base", 0.9, checkpoint="checkpoint-1"),   # not final: ignored
]
PERSISTENCE = [{"source": "FT.1", "target": "RLFT.1/beta=0.005", "dataset": "sd_base", "share": 0.45},
               {"source": "FT.1", "target": "RLFT.1/beta=0.5", "dataset": "sd_base", "share": 0.2}]
LOSS_ROWS = [{"onset": {"counterfactual": 1, "contextual": 2},
              "score": {"counterfactual": [0, 0.5, 0.6], "contextual": [0, 0, 0.4]}},
             {"onset": {"counterfactual": -1, "contextual": -1},
              "score": {"counterfactual": [0, 0, 0], "contextual": [0, 0, 0]}}]
NMT = {"findings": {"N1_memorization_rises_with_repetitions": True, "N1_ratio_pct_by_bucket": [1, 5],
                    "N2_suffix_kept_more_than_prefix": True, "N2_start_kept_least": False,
                    "N2_shares": {}, "N3_recovery_for_most_memorized": True, "N3_best_rate": 0.8}}


def test_each_verdict_by_hand():
    got = {f["id"]: f["status"] for f in findings(ENTRIES, PERSISTENCE, [], LOSS_ROWS, NMT)}
    assert got == {
        "F1": HOLDS,          # 20 % >= 5 %
        "F2": HOLDS,          # 1 % <= 9 %
        "F3": HOLDS,          # 50 % > 0 % and 0 % <= 5 %
        "F4": FAILS,          # one sweep point keeps only 20 % < 30 %
        "F5": HOLDS,          # 10 % at α=0.005 < 50 % at α=0.5
        "F6": HOLDS,          # lowest LR: 0.4 % at α=0.005 >= 0.1 % at α=0.5, all < 5 %
        "F7": HOLDS,          # α=0.005: 0.8 % at LR 3e-5 > 0.4 % at 3e-6
        "F8": HOLDS,          # final IPO 2 % > 1 %
        "N1": HOLDS, "N2": FAILS, "N3": HOLDS,
        "C1": HOLDS,
    }


def test_missing_models_are_not_measured_and_lemma_violation_is_caught():
    broken = [{"onset": {"counterfactual": 2, "contextual": 1},
               "score": {"counterfactual": [0, 0, 0.5], "contextual": [0, 0.1, 0.4]}}]
    got = {f["id"]: f["status"] for f in findings([], [], [], broken, None)}
    assert got["C1"] == FAILS
    assert all(got[k] == NOT_MEASURED for k in ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "N1", "N2", "N3"))


def test_direct_ft_falls_back_to_ft1_when_the_run_has_no_ft3():
    entries = [e("FT.1", "sd_base", 0.2), e("RLFT.2", "sd_base", 0.15),
               e("FT.1", "sd_links_pos", 0.3, pii=0.4), e("RLFT.2", "sd_links_pos", 0.0, pii=0.0)]
    got = {f["id"]: f for f in findings(entries, [], [], [], None)}
    assert got["F2"]["status"] == FAILS and got["F2"]["ours"] == "15.0 % vs 20.0 %"   # 15 % > half of 20 %
    assert got["F3"]["status"] == HOLDS


def test_nmt_figures_read_as_numbers_not_json():
    nmt = {"findings": {"N1_memorization_rises_with_repetitions": True, "N1_ratio_pct_by_bucket": [12.0, 14.25],
                        "N2_suffix_kept_more_than_prefix": True, "N2_start_kept_least": True,
                        "N2_shares": {"suffix": 0.8375, "prefix": 0.009}, "N3_recovery_for_most_memorized": True,
                        "N3_best_rate": 0.748}}
    got = {f["id"]: f["ours"] for f in findings([], [], [], [], nmt)}
    assert got["N1"] == "12.0 → 14.2 %"
    assert got["N2"] == "suffix 83.8 %, prefix 0.9 %"
    assert got["N3"] == "74.8 %"


def test_trivial_verdicts_carry_a_note():
    """F4 at 100 % everywhere and F6 at 0 % everywhere hold by the rules, and say why that is weak."""
    pers = [{"source": "FT.1", "dataset": "sd_base", "target": f"RLFT.1/beta={b}", "share": 1.0} for b in (0.005, 0.5)]
    rl4 = [e(f"RLFT.4/beta={b},lr=3e-05", "sd_rl_prompts", 0.0) for b in (0.005, 0.5)]
    got = {f["id"]: f for f in findings(rl4, pers, [], [], None)}
    assert got["F4"]["status"] == HOLDS and "unchanged" in got["F4"]["note"]
    assert got["F6"]["status"] == HOLDS and "every rate is 0" in got["F6"]["note"]
    normal = {f["id"]: f for f in findings(ENTRIES, PERSISTENCE, [], LOSS_ROWS, NMT)}
    assert normal["F1"]["note"] == "" and normal["F6"]["note"] == ""
