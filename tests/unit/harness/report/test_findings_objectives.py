"""Findings P1-P3 (preference objectives beyond IPO) and V4-V7 (F4-F7 under a verifiable reward) on hand-built
runs whose verdicts and p-values are derivable by hand (tests/unit/harness/report/findings_world.py)."""


from memlens.harness.core.objectives import OBJECTIVES
from memlens.harness.report.findings import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, RunResults
from tests.unit.harness.report.findings_world import evidence, grouped, rows, verdicts


def preference_run(memorized: dict[str, int], accuracy: float = 0.95, n: int = 20):
    """FT.3 memorizes 10/20 (grouped()); PREF/objective=<o> memorizes memorized[o] of the same 20 rows."""
    g, ev = grouped(), evidence()
    for objective in OBJECTIVES:
        name = f"PREF/objective={objective}"
        g[(name, "final", "sd_base")] = rows(memorized.get(objective, 0), n)
        ev[name] = {"stage": "preference", "objective": objective, "pair_accuracy": accuracy}
    return RunResults(g, ev)


def test_p1_p3_when_the_nll_term_memorizes_and_no_objective_reaches_direct_ft():
    got = verdicts(preference_run({"dpo+sft": 6, "ipo": 0, "cpo": 6, "orpo": 6, "simpo": 4, "dpo": 1, "kto": 1}))
    assert got["P1"].status == HOLDS and got["P1"].p_value == 2 / 2 ** 6      # 6 vs 0 discordant
    # P2, per example (rows 0-5 are the only ones any objective memorizes): reference-free share 1 (rows 0-3) or
    # 2/3 (rows 4, 5), reference-based share 3/4 (row 0: dpo, dpo+sft, kto) or 1/4 (rows 1-5: dpo+sft): 6 up, 0 down
    assert got["P2"].status == HOLDS and got["P2"].p_value == 2 / 2 ** 6
    assert got["P2"].rates[0]["k"] == 16 and got["P2"].rates[1]["k"] == 8      # 6+6+4 of 60 vs 0+1+6+1 of 80
    # P3: FT.3 10/20; the objective closest to it (6/20) gives the largest McNemar p (4 vs 0 discordant)
    assert got["P3"].status == INCONCLUSIVE and got["P3"].p_value == 2 / 2 ** 4
    assert "within noise" in got["P3"].reason
    # The wrong direction is refuted, not left open: an NLL term that memorizes less than IPO
    assert verdicts(preference_run({"dpo+sft": 1, "ipo": 6}))["P1"].status == FAILS


def test_p_rows_are_not_reproduced_when_every_objective_memorizes_nothing():
    got = verdicts(preference_run({}))
    assert got["P1"].status == FAILS and got["P2"].status == FAILS
    assert got["P3"].status == HOLDS and got["P3"].p_value == 2 / 2 ** 10     # 10 vs 0 for every objective


def test_an_objective_that_did_not_fit_its_pairs_makes_its_rows_inconclusive():
    got = verdicts(preference_run({"dpo+sft": 8}, accuracy=0.6))
    for fid in ("P1", "P2", "P3"):
        assert got[fid].status == INCONCLUSIVE
        assert "preference accuracy on its pairs vs the initial model = 0.6 (needs >= 0.9)" in got[fid].reason
    run = preference_run({"dpo+sft": 8})
    del run.evidence["PREF/objective=ipo"]["pair_accuracy"]            # a run from before the measurement
    assert "PREF/objective=ipo (ipo): preference accuracy" in verdicts(run)["P1"].reason


def test_p_rows_need_their_objectives():
    run = preference_run({})
    for objective in ("simpo", "cpo", "orpo"):
        del run.grouped[(f"PREF/objective={objective}", "final", "sd_base")]
    got = verdicts(RunResults(run.grouped, run.evidence))
    assert got["P2"].status == NOT_MEASURED and got["P1"].status == FAILS


def rlvr_run(auc: float = 0.85, function_rise: float = 2.0):
    """The hand-built run's RLFT.1 / RLFT.4 rows again as RLVR.1 / RLVR.4, their reward a function whose held-out
    AUC is `auc`; the RM-based RLFT points stay as they are."""
    g, ev = grouped(), evidence()
    for (model, checkpoint, dataset), value in list(g.items()):
        if model.startswith(("RLFT.1/", "RLFT.4/")):
            twin = model.replace("RLFT.", "RLVR.", 1)
            g[(twin, checkpoint, dataset)] = value
            ev[twin] = {**ev[model], "reward_model": None, "reward_function": "identifier_reuse",
                        "eval_change_in_sd": function_rise,
                        "reward_auc": {"rm_pd2_val": {"auc": auc, "split": "eval", "n": 76}}}
    return RunResults(g, ev)


def test_v4_v7_are_f4_f7_on_the_verifiable_reward_stages_with_the_functions_auc_as_evidence():
    got = verdicts(rlvr_run())
    for f, v in (("F4", "V4"), ("F5", "V5"), ("F6", "V6"), ("F7", "V7")):
        assert got[v].status == got[f].status == HOLDS, v
        assert [r["k"] for r in got[v].rates] == [r["k"] for r in got[f].rates] and \
            got[v].p_value == got[f].p_value
        assert got[v].claim.endswith("verifiable reward") and "RLFT." not in got[v].claim
    assert "RLVR.1" in got["V4"].claim and "RLVR.4" in got["V6"].claim
    checks = [e["check"] for e in got["V4"].evidence]
    assert "RLVR.1/beta=0.5's reward function identifier_reuse: AUC on its held-out rows" in checks
    assert not any("RM.1" in c for c in checks)


def test_a_function_that_does_not_rank_held_out_rows_or_a_flat_reward_makes_v_rows_inconclusive():
    got = verdicts(rlvr_run(auc=0.6))
    for fid in ("V4", "V5", "V6", "V7"):
        assert got[fid].status == INCONCLUSIVE
        assert "reward function identifier_reuse: AUC on its held-out rows = 0.6 (needs >= 0.75)" in got[fid].reason
    assert got["F4"].status == HOLDS          # the RM-based rows stay as they are
    got = verdicts(rlvr_run(function_rise=0.1))
    assert got["V4"].status == INCONCLUSIVE and "reward rise on fixed prompts" in got["V4"].reason


def test_v_rows_read_no_reward_model_auc_and_a_missing_function_auc_is_missing():
    run = rlvr_run()
    for model, ev in run.evidence.items():
        if model.startswith("RLVR."):
            ev["reward_auc"] = {}
    got = verdicts(run)
    assert got["V4"].status == INCONCLUSIVE and "AUC on its held-out rows = missing" in got["V4"].reason
    assert verdicts(RunResults(grouped(), evidence()))["V4"].status == NOT_MEASURED
