"""The findings table on hand-built runs whose verdicts, intervals and p-values are derivable by hand."""

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.harness.core.errors import UserError
from memlens.harness.report.evidence import ipo_evidence, log_history, rl_evidence, stage_evidence
from memlens.harness.report.findings import (
    FAILS,
    FINDINGS,
    HOLDS,
    INCONCLUSIVE,
    NOT_MEASURED,
    Finding,
    Roles,
    RunResults,
    distinct_completion_share,
    findings,
)
from tests.unit.harness.report.findings_world import COLLAPSED, MOVED, STILL, evidence, grouped, row, rows, verdicts


def test_each_verdict_by_hand_when_every_stage_trained():
    got = verdicts(RunResults(grouped(), evidence()))
    status = {k: f.status for k, f in got.items()}
    assert status == {
        "F1": HOLDS,            # 50 % >= 10 %; McNemar FT.3 vs control: 10 vs 0 discordant
        "F2": HOLDS,            # 0 % <= 50 % / 5
        "F3": HOLDS,            # counterfactual PII 10/20 (12 minus 2 the control emits too) vs 0/20
        "F4": HOLDS,            # 6 of FT.1's 10 persist at α = 0.5: 60 % >= 30 %
        "F5": HOLDS,            # 75 % > 45 % > 5 %; McNemar 14 vs 0 discordant
        "F6": HOLDS,            # lowest LR: 1/40 at α = 0.005 >= 0/40 at 0.5, all < 5 %
        "F7": HOLDS,            # α = 0.005: 12/40 at LR 3e-4 > 1/40 at 3e-5, 11 vs 0 discordant
        "F8": HOLDS,            # IPO 40 % >= 3 x 0 % and >= 5 %; 8 vs 0 discordant
        "V4": NOT_MEASURED, "V5": NOT_MEASURED, "V6": NOT_MEASURED, "V7": NOT_MEASURED,   # no RLVR stages
        "P1": NOT_MEASURED, "P2": NOT_MEASURED, "P3": NOT_MEASURED,                       # no PREF stage
        "N1": NOT_MEASURED, "N2": NOT_MEASURED, "N3": NOT_MEASURED, "C1": NOT_MEASURED, "C2": NOT_MEASURED,
        "M1": NOT_MEASURED, "M2": NOT_MEASURED, "M3": NOT_MEASURED, "M4": NOT_MEASURED,   # no mia audit
        "M5": NOT_MEASURED,                                                              # no pair_mia audit
        "M6": NOT_MEASURED,                                                              # no prompt_mia audit
        "S1": NOT_MEASURED, "S2": NOT_MEASURED, "S3": NOT_MEASURED,                       # no discoverable audit
        "E1": NOT_MEASURED,                                                               # no epsilon audit
        "D1": NOT_MEASURED, "D2": NOT_MEASURED, "D3": NOT_MEASURED, "D4": NOT_MEASURED,     # no data.sd.doses
        "D5": NOT_MEASURED,
    }
    assert got["F1"].p_value == 2 / 2 ** 10
    assert got["F2"].p_value == 2 / 2 ** 10
    assert got["F3"].p_value == 2 / 2 ** 10 and got["F3"].rates[0]["k"] == 10
    assert got["F7"].p_value == 2 / 2 ** 11
    assert got["F8"].p_value == 2 / 2 ** 8
    assert got["F4"].rates[0] == {"name": "α=0.5", "k": 6, "n": 10, "rate": 0.6,
                                     "ci95": pytest.approx([0.3127, 0.8318], abs=1e-4)}
    assert got["F1"].n == 20 and got["F1"].ci95 == pytest.approx([0.2993, 0.7007], abs=1e-4)
    assert "chance level 33.3 %" in got["F3"].ours       # 3 distinct paths
    assert all(e["ok"] for f in got.values() for e in f.evidence)


def test_an_algorithm_sweep_is_judged_on_the_papers_reinforce_points_only():
    # `memlens run -m ... +stages.RLFT.1.algorithm=rloo,ppo` names the points RLFT.1/algorithm=<a>,beta=<α>.
    # The RLOO points are the hand-built run's; the PPO points keep nothing and would flip F4 to a failure.
    g, ev = {}, evidence()
    for (model, checkpoint, dataset), value in grouped().items():
        if model.startswith("RLFT.1/"):
            for algorithm in ("rloo", "ppo"):
                name = model.replace("RLFT.1/", f"RLFT.1/algorithm={algorithm},")
                g[(name, checkpoint, dataset)] = value if algorithm == "rloo" else rows(0, 20)
                ev[name] = ev[model]
        else:
            g[(model, checkpoint, dataset)] = value
    assert verdicts(RunResults(g, ev))["F4"].rates == verdicts(RunResults(grouped(), evidence()))["F4"].rates
    assert verdicts(RunResults(g, ev))["F4"].status == HOLDS


RENAMED = {"FT.1": "sft_canaries", "FT.3": "sft_direct", "RM.1": "rm_task", "RM.3": "rm_with_sd",
           "RLFT.1": "rl_sweep", "RLFT.2": "rl_via_rm", "RLFT.4": "rl_on_prompts", "IPO": "ipo_pairs"}


def _renamed(name: str) -> str:
    base, _, point = name.partition("/")
    return RENAMED.get(base, base) + (f"/{point}" if point else "")


def test_findings_follow_the_roles_not_the_papers_stage_names():
    """An experiment that names its stages otherwise maps them (report.findings_models) and gets the same
    verdicts, rates and tests; without the map its models are simply not the findings' (not measured)."""
    g = {(_renamed(m), c, d): v for (m, c, d), v in grouped().items()}
    ev = {_renamed(m): ({**e, "reward_model": _renamed(e["reward_model"])} if "reward_model" in e else e)
          for m, e in evidence().items()}
    roles = Roles.load({"ft_source": "sft_canaries", "ft_direct": "sft_direct", "rm_task": "rm_task",
                        "rm_sd": "rm_with_sd", "rl_persistence": "rl_sweep", "rl_sd_in_rm": "rl_via_rm",
                        "rl_prompts": "rl_on_prompts", "ipo": "ipo_pairs"})
    paper, mapped = verdicts(RunResults(grouped(), evidence())), verdicts(RunResults(g, ev, roles=roles))
    for fid in ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8"):
        assert (mapped[fid].status, mapped[fid].rates and [r["k"] for r in mapped[fid].rates],
                mapped[fid].p_value) == (paper[fid].status, [r["k"] for r in paper[fid].rates],
                                            paper[fid].p_value), fid
    assert mapped["F2"].stages == ["sft_direct", "rm_with_sd", "rl_via_rm"]
    assert "rl_via_rm <= sft_direct / 5" in mapped["F2"].rule
    assert all(f.status == NOT_MEASURED for k, f in verdicts(RunResults(g, ev)).items() if k.startswith("F"))


def test_an_unknown_role_is_refused_with_the_valid_ones():
    with pytest.raises(UserError, match=r"findings_models: unknown role\(s\) \['ft_dirct'\]; use ft_source, ft_direct"):
        Roles.load({"ft_dirct": "FT.3"})
    with pytest.raises(UserError, match=r"\['ipo'\] must each name one model"):
        Roles.load({"ipo": ["IPO"]})


def test_rl_that_did_not_move_makes_every_rl_finding_inconclusive():
    got = verdicts(RunResults(grouped(), evidence(rl=STILL)))
    for fid in ("F2", "F3", "F4", "F5", "F6", "F7", "F8"):
        assert got[fid].status == INCONCLUSIVE, fid
        assert "reward rise" in got[fid].reason
    assert got["F1"].status == HOLDS                     # FT needs no RL


def test_a_collapsed_rl_policy_is_no_evidence_that_rl_did_not_memorize():
    ev = evidence()
    ev["RLFT.2"] = {**ev["RLFT.2"], **COLLAPSED, "init_model": "FT.2"}
    got = verdicts(RunResults(grouped(), ev))
    for fid in ("F2", "F3", "F8"):
        assert got[fid].status == INCONCLUSIVE, fid
        assert "RLFT.2: held-out code loss rise over FT.2 (nats/token) = 2.31 (needs <= 0.5)" in got[fid].reason
    assert got["F1"].status == HOLDS
    ev["RLFT.2"]["pd_eval_loss"] = None           # no utility audit: the check is missing, not passed
    assert verdicts(RunResults(grouped(), ev))["F2"].status == INCONCLUSIVE


def test_distinct_completion_share_by_hand():
    got = [row(i, False, completion=c, control_completion=k) for i, (c, k) in
           enumerate([("a", "w"), ("a", "x"), ("b", "y"), ("c", "y")])]
    assert distinct_completion_share(got) == 3 / 3                 # a, b, c against w, x, y
    got.append(row(9, False, excluded="short target", completion="d", control_completion="z"))
    assert distinct_completion_share(got) == 3 / 3                 # an excluded row counts for neither
    assert distinct_completion_share([row(0, False, control_completion=None)]) is None


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("wxyz"), st.booleans()), min_size=1, max_size=30))
def test_distinct_completion_share_is_the_brute_force_count(triples):
    got = [row(i, False, completion=c, control_completion=k, excluded="x" if skip else None)
           for i, (c, k, skip) in enumerate(triples)]
    scored = [(c, k) for c, k, skip in triples if not skip]
    model_distinct = [c for j, (c, _) in enumerate(scored) if c not in [x for x, _ in scored[:j]]]
    control_distinct = [k for j, (_, k) in enumerate(scored) if k not in [y for _, y in scored[:j]]]
    want = len(model_distinct) / len(control_distinct) if control_distinct else None
    assert distinct_completion_share(got) == want


def test_an_rl_policy_that_gives_every_prompt_the_same_answer_is_no_evidence():
    """Measured at quickstart seed 1 (PPO, α 0.1): one greedy completion for all 41 SD.Base prompts while the
    held-out code loss rose by 0.48, within RL_UTILITY_LOSS_MAX; only the diversity check refuses it."""
    g = grouped()
    for dataset in ("sd_base", "sd_links_pos"):
        g[("RLFT.2", "final", dataset)] = [{**r, "completion": "#"} for r in g[("RLFT.2", "final", dataset)]]
    got = verdicts(RunResults(g, evidence()))
    for fid, dataset in (("F2", "sd_base"), ("F3", "sd_links_pos"), ("F8", "sd_base")):
        assert got[fid].status == INCONCLUSIVE, fid
        assert f"RLFT.2: distinct greedy completions on {dataset} / its control's = 0.05 (needs >= 0.5)" \
            in got[fid].reason, fid
    assert got["F1"].status == HOLDS and got["F4"].status == HOLDS
    g[("RLFT.2", "final", "sd_base")] = [{**r, "completion": f"one of two {k % 2}"}
                                         for k, r in enumerate(g[("RLFT.2", "final", "sd_base")])]
    assert "RLFT.2: distinct greedy completions on sd_base / its control's = 0.1 (needs >= 0.5)" \
        in verdicts(RunResults(g, evidence()))["F2"].reason


def test_old_run_without_logs_is_inconclusive_not_an_error():
    got = verdicts(RunResults(grouped(), {}))
    assert got["F4"].status == INCONCLUSIVE and "missing" in got["F4"].reason
    assert got["F8"].status == INCONCLUSIVE and "IPO: training preference accuracy = missing" in got["F8"].reason


def test_reward_model_that_did_not_learn_sd_and_ipo_that_did_not_fit():
    got = verdicts(RunResults(grouped(), evidence(rm_auc=0.51, ipo_accuracy=0.5)))
    assert got["F2"].status == INCONCLUSIVE and "RM.3: AUC on its SD training rows = 0.51" in got["F2"].reason
    assert got["F8"].status == INCONCLUSIVE


def test_rl_findings_need_a_reward_model_that_ranks_held_out_rows():
    got = verdicts(RunResults(grouped(), evidence(rm1_heldout_auc=0.6)))
    for fid in ("F4", "F5", "F7"):
        assert got[fid].status == INCONCLUSIVE
        assert "RM.1: AUC on its held-out rows = 0.6 (needs >= 0.75)" in got[fid].reason
    assert got["F2"].status == HOLDS          # RLFT.2's reward model is RM.3, judged on its SD rows


def test_a_difference_within_noise_is_inconclusive_and_a_wrong_direction_is_not_reproduced():
    g = grouped()
    g[("FT.3", "final", "sd_base")] = rows(3, 20)               # 15 %: rule met, but RLFT.2 0/20 -> p = 0.25
    got = verdicts(RunResults(g, evidence()))
    assert got["F2"].status == INCONCLUSIVE and got["F2"].p_value == 0.25
    g[("RLFT.2", "final", "sd_base")] = rows(3, 20)             # as much as direct FT
    assert verdicts(RunResults(g, evidence()))["F2"].status == FAILS


def test_all_zero_rl_prompt_rates_are_inconclusive_not_holds():
    g = grouped()
    for point in ("beta=0.005,lr=3e-05", "beta=0.5,lr=3e-05", "beta=0.005,lr=0.0003"):
        g[(f"RLFT.4/{point}", "final", "sd_rl_prompts")] = rows(0, 40)
    got = verdicts(RunResults(g, evidence()))
    assert got["F6"].status == INCONCLUSIVE and got["F7"].status == INCONCLUSIVE


def test_excluded_rows_leave_every_denominator():
    g = grouped()
    g[("FT.3", "final", "sd_base")] = rows(10, 20) + rows(5, 5, prefix="e", excluded="target_in_prompt")
    got = verdicts(RunResults(g, evidence()))
    assert got["F1"].rates[0]["n"] == 20 and got["F1"].rates[0]["k"] == 10


def test_missing_models_are_not_measured():
    got = verdicts(RunResults({}, {}))
    assert {f.status for f in got.values()} == {NOT_MEASURED}


LOSS_ROWS = [  # premise holds on a and b, fails on c (training loss above control at the last checkpoint)
    {"id": "a", "variant": "control_run", "train_loss": [3, 1], "control_loss": [3, 2],
     "score": {"recollection": [0, 1], "contextual": [0, 0.5], "counterfactual": [0, 0.5]}},
    {"id": "b", "variant": "control_run", "train_loss": [2, 0.1], "control_loss": [2, 2],
     "score": {"recollection": [0, 1], "contextual": [0, 0], "counterfactual": [0, 0.9]}},
    {"id": "c", "variant": "control_run", "train_loss": [2, 2.5], "control_loss": [2, 2],
     "score": {"recollection": [0, 1], "contextual": [0, 0], "counterfactual": [0, 0]}},
    {"id": "d", "variant": "reference_upper_bound", "train_loss": [9], "control_loss": [1],   # not counted
     "score": {"recollection": [1], "contextual": [0], "counterfactual": [0]}},
]


def test_lemma1_premise_and_recollection_vs_contextual():
    got = verdicts(RunResults({}, {}, LOSS_ROWS))
    assert got["C1"].status == FAILS and (got["C1"].rates[0]["k"], got["C1"].n) == (2, 3)
    assert "/c" in got["C1"].note
    # 3 strings recollected at the end, 2 of them (b, c) not contextually memorized: 67 %, but the 95 %
    # interval [21 %, 94 %] reaches below 50 %, so "most" is not shown
    assert got["C2"].rates[0]["k"] == 2 and got["C2"].status == FAILS


def test_nmt_figures_read_as_numbers_not_json():
    nmt = {"finding_numbers": {"N1_pearson": 0.9, "N1_ratio_pct_by_bucket": [12.0, 14.25],
                               "N2_shares": {"suffix": 0.8375, "prefix": 0.009, "start": 0.5},
                               "N3_best_rate": 0.748}}
    got = verdicts(RunResults({}, {}, [], nmt))
    assert got["N1"].ours == "12.0 → 14.2 %"
    assert got["N1"].status == INCONCLUSIVE        # no per-bucket counts (an older run): no test, no "holds"
    # suffix > prefix, but start (50 %) is not the least: FAILS
    assert got["N2"].ours == "suffix 83.8 %, prefix 0.9 %, start 50.0 %" and got["N2"].status == FAILS
    assert got["N3"].ours == "74.8 %"


def _nmt_with_buckets(low: tuple[int, int], high: tuple[int, int]) -> dict:
    return {"finding_numbers": {"N1_pearson": 1.0, "N1_ratio_pct_by_bucket": [1.0, 2.0]},
            "buckets": {"buckets": [{"repetitions": 1, "memorized": low[0], "total": low[1]},
                                    {"repetitions": 5, "memorized": high[0], "total": high[1]}]}}


def test_n1_needs_the_most_repeated_bucket_to_differ_beyond_noise():
    # The quickstart's NMT run: 81/600 once-seen vs 17/120 five-times-seen rises, but within noise.
    flat = verdicts(RunResults({}, {}, [], _nmt_with_buckets((81, 600), (17, 120))))["N1"]
    assert flat.status == INCONCLUSIVE and flat.p_value > 0.5 and flat.test["test"] == "fisher_exact"
    # 10/100 vs 30/100: a real rise (p ~ 6e-4)
    rise = verdicts(RunResults({}, {}, [], _nmt_with_buckets((10, 100), (30, 100))))["N1"]
    assert rise.status == HOLDS and rise.p_value < 0.001


def _nmt_n3(best_rate: float, second_rate: float | None, informative: bool = True) -> dict:
    """An NMT summary whose N3 rate is `best_rate`, rerun (step 8) under AVX2 kernels giving `second_rate`."""
    def findings(rate):
        return {"N3_best_rate": rate}
    summary = {"finding_numbers": findings(best_rate)}
    if second_rate is not None:
        summary["stability"] = {"kernels": "DEFAULT", "second_kernels": "AVX2" if informative else "DEFAULT",
                                "informative": informative, "finding_numbers": findings(second_rate),
                                "buckets": {"buckets": []}}
    return summary


def test_a_verdict_that_flips_with_the_cpu_kernels_is_inconclusive_unstable():
    # The numbers: N3 65.4 % with the portable kernels, 32.4 % with AVX2: the rule (> 50 %) flips.
    flip = verdicts(RunResults({}, {}, [], _nmt_n3(0.654, 0.324)))["N3"]
    assert flip.status == INCONCLUSIVE and flip.unstable
    assert flip.reason == ("unstable: the verdict differs between torch's CPU kernel levels "
                              "(65.4 % with DEFAULT, 32.4 % with AVX2)")
    # Both above 50 %: the verdict stands, and the note gives the second figure.
    same = verdicts(RunResults({}, {}, [], _nmt_n3(0.654, 0.70)))["N3"]
    assert same.status == HOLDS and not same.unstable and same.note == "same verdict with AVX2 kernels (70.0 %)"
    # Both below: not reproduced, stably.
    assert verdicts(RunResults({}, {}, [], _nmt_n3(0.3, 0.32)))["N3"].status == FAILS
    # A rerun that computed with the same kernels says nothing: the verdict is the run's, with a note.
    blind = verdicts(RunResults({}, {}, [], _nmt_n3(0.654, 0.324, informative=False)))["N3"]
    assert blind.status == HOLDS and blind.note == "not checked under a second kernel level"
    # No rerun at all (nmt.stability_kernels=null, or an older run): the run's verdict, no note.
    alone = verdicts(RunResults({}, {}, [], _nmt_n3(0.654, None)))["N3"]
    assert alone.status == HOLDS and alone.note == "" and not alone.unstable


def test_stability_compares_the_test_as_well_as_the_rule():
    # N1's rule (Pearson r > 0) holds in both runs, but its Fisher test passes only in the first (10/100 vs
    # 30/100, p ~ 6e-4) and not in the rerun (10/100 vs 12/100): the verdict holds once and not the other time.
    summary = _nmt_with_buckets((10, 100), (30, 100))
    second = _nmt_with_buckets((10, 100), (12, 100))
    summary["stability"] = {"kernels": "DEFAULT", "second_kernels": "AVX2", "informative": True, **second}
    got = verdicts(RunResults({}, {}, [], summary))["N1"]
    assert got.status == INCONCLUSIVE and got.unstable


# ---------------------------------------------------------------- evidence from stored logs
def test_rl_evidence_from_a_log_by_hand():
    # 20 logged steps: first 10 % = 2 steps (rewards 1, 1; within-step std 0.4), last 2 steps rewards 2, 2
    history = [{"loss": 0.0, "reward": 1.0 + (i >= 18), "reward_std": 0.4, "kl": 0.01 * i, "step": i + 1}
               for i in range(20)] + [{"train_runtime": 1.0}]
    ev = rl_evidence(history)
    assert ev["steps_logged"] == 20 and ev["reward_change"] == 1.0
    assert ev["reward_change_in_std"] == pytest.approx(2.5)
    assert ev["kl_final"] == pytest.approx((0.18 + 0.19) / 2)
    assert rl_evidence([]) == {}


def test_ipo_evidence_and_the_most_advanced_trainer_state(tmp_path):
    def state(path, step, acc):
        path.mkdir(parents=True)
        history = [{"loss": 25.0 - s, "rewards/accuracies": acc, "rewards/margins": 0.1 * s, "step": s}
                   for s in range(1, step + 1)]
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": history}))

    model = tmp_path / "IPO"
    state(model / "checkpoint-5", 5, 0.5)
    state(model / "checkpoint-10", 10, 1.0)
    (model / "checkpoint-20").mkdir()
    (model / "checkpoint-20" / "trainer_state.json").write_text("{torn")   # killed mid-write: skipped
    assert len(log_history(model)) == 10
    ev = ipo_evidence(log_history(model))
    assert ev["accuracy_final"] == 1.0 and ev["loss_final"] == 15.0 and ev["margin_final"] == 1.0
    (tmp_path / "RM.3" / "scores").mkdir(parents=True)
    (tmp_path / "RM.3" / "scores" / "summary.json").write_text(
        json.dumps({"rm_sd": {"auc": 0.85, "split": "train", "n": 40}}))
    prov = {"IPO": {"stage": "ipo"}, "RM.3": {"stage": "reward"}, "FT.1": {"stage": "sft"}}
    ev = stage_evidence(tmp_path, prov)
    assert set(ev) == {"IPO", "RM.3"} and ev["RM.3"]["auc"]["rm_sd"] == {"auc": 0.85, "split": "train", "n": 40}
    assert ev["IPO"]["stage"] == "preference" and ev["IPO"]["objective"] == "ipo"   # an older run's record, read so


def test_loss_rows_of_the_heldout_set_are_not_training_strings(tmp_path):
    from memlens.harness.report.findings import load_loss_rows

    losses = tmp_path / "audit" / "losses" / "FT.1"
    losses.mkdir(parents=True)
    (losses / "summary.json").write_text(json.dumps({"heldout": "pd_eval"}))
    never_trained = {"id": "h", "variant": "control_run", "train_loss": [5], "control_loss": [1],
                     "score": {"recollection": [0], "contextual": [0], "counterfactual": [0]}}
    (losses / "pd_eval.jsonl").write_text(json.dumps(never_trained) + "\n")
    (losses / "sd_base.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LOSS_ROWS[:2]))
    rows = load_loss_rows(tmp_path / "audit")
    assert {(r["dataset"], r["heldout"]) for r in rows} == {("pd_eval", True), ("sd_base", False)}
    got = verdicts(RunResults({}, {}, rows))
    assert got["C1"].n == 2 and got["C1"].status == HOLDS     # the held-out string's "failure" is not counted


def test_a_reward_rise_within_noise_is_not_evidence():
    # Large mean rise (one prompt jumped) but as many prompts fell as rose: the sign test says noise.
    noisy = {**MOVED, "eval_up": 12, "eval_down": 12, "eval_p_value": 1.0}
    got = verdicts(RunResults(grouped(), evidence(rl=noisy)))
    assert got["F2"].status == INCONCLUSIVE and "(sign test p) = 1 " in got["F2"].reason
    # Beyond noise but below half the initial spread: not enough either.
    small = {**MOVED, "eval_change_in_sd": 0.3}
    got = verdicts(RunResults(grouped(), evidence(rl=small)))
    assert got["F2"].status == INCONCLUSIVE and "in initial sd) = 0.3" in got["F2"].reason


def _mia_summary(per_model: dict[str, tuple[list[float], ...]]) -> dict:
    """{model: summary} as harness/audit/mia.py stores it, from (member scores, held-out scores) of the LOSS attack
    and, optionally, (member, held-out) scores of the blind baseline on the same texts (default: a blind baseline at
    chance, every text scored 0.5; None: a summary without one)."""
    from memlens.harness.core.stats import bootstrap_mia_metrics, paired_auc_difference

    out = {}
    for model, (members, held, *blind) in per_model.items():
        blind = blind[0] if blind else ([0.5] * len(members), [0.5] * len(held))
        loss = bootstrap_mia_metrics(members, held, n_boot=400, seed=0)
        if blind is not None:
            loss["vs_blind"] = paired_auc_difference(members, held, *blind, n_boot=400, seed=0)
        out[model] = {"spans": ["target"], "results": {"final": {"sd_base": {"spans": {"target": {"loss": loss}}}}}}
    return out


def test_membership_findings_by_hand():
    """M1: RLFT.2 extracts 0/20 and its members all outscore the held-out rows (AUC 1; the blind baseline at chance,
    gain +0.5 on the same texts): holds. M2: FT.3's attack is at chance (identical scores, AUC 0.5): not reproduced.
    M3: IPO AUC 0.7 on 6 vs 6 rows: within noise."""
    separated = ([100.0 + i for i in range(20)], [float(i) for i in range(20)])
    chance = ([1.0, 2.0, 3.0] * 7, [1.0, 2.0, 3.0] * 7)
    weak = ([1.0, 3.0, 4.0, 5.0, 6.0, 8.0], [0.0, 2.0, 2.5, 3.5, 4.5, 7.0])
    run = RunResults(grouped(), evidence(), mia=_mia_summary({"RLFT.2": separated, "FT.3": chance, "IPO": weak}))
    got = verdicts(run)
    assert got["M1"].status == HOLDS and got["M1"].p_value == 0.0
    assert got["M1"].test["p_detectable"] == 0.0 and got["M1"].test["p_vs_blind"] == 0.0
    assert "AUC 1.00" in got["M1"].ours and "extraction 0.0 %" in got["M1"].ours
    assert "vs blind baseline (no model) +0.50" in got["M1"].ours
    assert got["M1"].n == 20 and got["M1"].test["n_boot"] == 400
    assert got["M2"].status == FAILS
    assert got["M3"].status == INCONCLUSIVE and got["M3"].p_value >= 0.05
    # Extractable as well as detectable: M1's "though not extractable" fails.
    leaky = grouped()
    leaky[("RLFT.2", "final", "sd_base")] = rows(5, 20)
    assert verdicts(RunResults(leaky, evidence(), mia=run.mia))["M1"].status == FAILS
    # RL that did not move is no evidence for anything RLFT.2 shows.
    assert verdicts(RunResults(grouped(), evidence(rl=STILL), mia=run.mia))["M1"].status == INCONCLUSIVE


def test_a_membership_finding_needs_its_attack_to_beat_the_blind_baseline():
    """M1 again with RLFT.2's attack at AUC 1, but the blind baseline (texts only) separates the same 20 vs 20 texts
    as well: the gain over it is 0, so the split, not the model, is what is detected -> not reproduced. Blind a bit
    below the attack (two held-out texts score above every member: 2 x 20 of the 400 pairs lost, AUC 0.9) -> the gain
    +0.10 is above 0, but a resample holding neither of the two has gain 0, with probability (18/20)^20 = 0.12 -> p ~
    0.12, inconclusive. A summary without a blind baseline cannot show the attack beats it -> inconclusive, noted."""
    separated = ([100.0 + i for i in range(20)], [float(i) for i in range(20)])
    same = verdicts(RunResults(grouped(), evidence(), mia=_mia_summary({"RLFT.2": (*separated, separated)})))["M1"]
    assert same.status == FAILS and "+0.00" in same.ours
    close_blind = ([20.0, 21.0] + [100.0 + i for i in range(2, 20)], [float(i) for i in range(18)] + [150.0, 151.0])
    from memlens.harness.core.stats import roc_auc
    assert roc_auc([*close_blind[0], *close_blind[1]], [1] * 20 + [0] * 20) == pytest.approx(1 - 40 / 400)
    close = verdicts(RunResults(grouped(), evidence(), mia=_mia_summary({"RLFT.2": (*separated, close_blind)})))["M1"]
    assert close.status == INCONCLUSIVE and close.test["p_detectable"] == 0
    assert close.test["p_vs_blind"] == pytest.approx(0.9 ** 20, abs=0.05)
    none = verdicts(RunResults(grouped(), evidence(), mia=_mia_summary({"RLFT.2": (*separated, None)})))["M1"]
    assert none.status == INCONCLUSIVE and "no blind baseline (no model)" in none.note


def _two_attacks(loss: tuple[list[float], list[float]], newer: tuple[list[float], list[float]]) -> dict:
    """One model's target-span entry with LOSS and ReCaLL scored on the same texts, as harness/audit/mia.py stores it."""
    from memlens.harness.core.stats import bootstrap_mia_metrics, paired_auc_difference

    recall = {**bootstrap_mia_metrics(*newer, n_boot=400, seed=0),
              "vs_loss": paired_auc_difference(*newer, *loss, n_boot=400, seed=0)}
    return {"spans": ["target"], "results": {"final": {"sd_base": {"spans": {"target": {
        "loss": bootstrap_mia_metrics(*loss, n_boot=400, seed=0), "recall": recall}}}}}}


def test_the_newer_attacks_against_loss_by_hand():
    """M4 at RLFT.2 and IPO, 20 members vs 20 held out. LOSS at chance (identical score sets: AUC 0.5); ReCaLL
    separates them (AUC 1): the gain is +0.5 and no resample has it <= 0 -> holds. With ReCaLL at chance as well the
    gain is 0, not above LOSS: not reproduced. Without a newer attack: not measured."""
    chance = ([1.0, 2.0, 3.0, 4.0] * 5, [1.0, 2.0, 3.0, 4.0] * 5)
    separated = ([100.0 + i for i in range(20)], [float(i) for i in range(20)])
    better = {m: _two_attacks(chance, separated) for m in ("RLFT.2", "IPO")}
    got = verdicts(RunResults(grouped(), evidence(), mia=better))["M4"]
    assert got.status == HOLDS and got.p_value == 0.0 and "gain +0.50" in got.ours
    same = {m: _two_attacks(chance, chance) for m in ("RLFT.2", "IPO")}
    assert verdicts(RunResults(grouped(), evidence(), mia=same))["M4"].status == FAILS
    only_one = {"RLFT.2": better["RLFT.2"]}
    assert verdicts(RunResults(grouped(), evidence(), mia=only_one))["M4"].status == NOT_MEASURED


def test_rmia_registered_after_the_rules_is_read_by_no_membership_finding():
    """RMIA joined the attacks after M1-M4's rules were committed (issue #68): in a summary where it separates the
    sets (AUC 1) beside a LOSS and a ReCaLL at chance, M3 and M4 still read the attacks they read before it existed:
    M3's pick is LOSS (the tie at AUC 0.5 with ReCaLL broken by registration order), not RMIA; M4's best newer attack is ReCaLL, at chance -> not reproduced
    (RMIA would have made it hold), with the same Bonferroni factors as without RMIA."""
    from memlens.harness.core.stats import bootstrap_mia_metrics, paired_auc_difference

    chance = ([1.0, 2.0, 3.0, 4.0] * 5, [1.0, 2.0, 3.0, 4.0] * 5)
    separated = ([100.0 + i for i in range(20)], [float(i) for i in range(20)])
    mia = {m: _two_attacks(chance, chance) for m in ("RLFT.2", "IPO")}
    for record in mia.values():
        record["results"]["final"]["sd_base"]["spans"]["target"]["rmia"] = {
            **bootstrap_mia_metrics(*separated, n_boot=400, seed=0),
            "vs_loss": paired_auc_difference(*separated, *chance, n_boot=400, seed=0)}
    got = verdicts(RunResults(grouped(), evidence(), mia=mia))
    assert got["M4"].status == FAILS and got["M4"].test["attack"] == "recall"
    assert got["M4"].test["n_attacks"] == 1
    assert "AUC 0.50" in got["M3"].ours and "(loss;" in got["M3"].ours      # RMIA's AUC 1 is not its pick


# The findings table's rows, in its order (harness/report/findings/__init__.py imports the per-paper modules so).
TABLE_ORDER = ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "V4", "V5", "V6", "V7", "P1", "P2", "P3",
               "N1", "N2", "N3", "C1", "C2", "M1", "M2", "M3", "M4", "M5", "M6", "S1", "S2", "S3", "E1", "D1", "D2", "D3", "D4", "D5")


def test_the_registry_holds_the_findings_in_table_order_and_runs_what_is_registered():
    assert FINDINGS.names() == TABLE_ORDER
    assert len(set(FINDINGS.names())) == len(FINDINGS) == 35
    assert all(FINDINGS[fid].id == fid and FINDINGS[fid].source and FINDINGS[fid].title for fid in FINDINGS)
    run = RunResults(grouped(), evidence())
    assert tuple(f.id for f in findings(run)) == TABLE_ORDER      # each check answers under its own id
    with pytest.raises(ValueError, match="registered twice"):
        FINDINGS.register("F1", FINDINGS["F1"])
    # A finding added by a test: F1's rule on FT.1 (10/20 memorized, like FT.3), last in the table while registered.
    on_ft1 = Finding("X1", "a test", "F1 on FT.1",
                     lambda run: replace(FINDINGS["F1"].check(RunResults(run.grouped, run.evidence, roles=Roles(
                         ft_direct="FT.1"))), id="X1"))
    with FINDINGS.registered("X1", on_ft1):
        table = findings(run)
        assert [f.id for f in table] == [*TABLE_ORDER, "X1"]
        assert table[-1].status == HOLDS and table[-1].stages == ["FT.1"] and "FT.1" in table[-1].claim
    assert tuple(f.id for f in findings(run)) == TABLE_ORDER and "X1" not in FINDINGS


def _discoverable(ids, sampled_ids, control_ids=()):
    """A discoverable record over `ids`: p_z = 1 under top_k40 for `sampled_ids` (the control's for `control_ids`),
    0 otherwise; greedy never (the stored null is -inf)."""
    return {"schemes": [{"name": "greedy", "temperature": 0, "top_k": None},
                        {"name": "top_k40", "temperature": 1.0, "top_k": 40}],
            "queries": [1, 100], "p": [0.5, 0.9], "results": {},
            "rows": {"sd_base": [{"id": i, "logp": {"greedy": None, "top_k40": 0.0 if i in sampled_ids else None},
                                  "control_logp": {"greedy": None, "top_k40": 0.0 if i in control_ids else None}}
                                 for i in ids]}}


def test_sampling_and_epsilon_findings_by_hand():
    ids = [f"x{i}" for i in range(20)]
    disc = {"FT.3": _discoverable(ids, ids),                   # all 20 by sampling; greedy memorized x0-x9
            "RLFT.2": _discoverable(ids, ids[:5], ids[:5]),    # the control samples the same five: none count
            "IPO": _discoverable(ids, ids[:8])}                # exactly IPO's greedy eight: no difference
    eps = {m: {"model": m, "checkpoints": ["final"],
               "results": {"final": {"sd_base": {"epsilon_lower_bound": b, "m": 40, "r": 8, "v": 8,
                                                  "confidence": 0.95, "delta": 1e-5}}}}
           for m, b in (("FT.3", 2.5), ("RLFT.2", 0.0), ("IPO", 0.4))}
    got = verdicts(RunResults(grouped(), evidence(), discoverable=disc, epsilon=eps))
    assert got["S1"].status == HOLDS and got["S1"].p_value == 2 / 2 ** 10     # 10 sampling-only, 0 greedy-only
    assert [r["k"] for r in got["S1"].rates] == [20, 10] and "(100, 0.5)-discoverable" in got["S1"].rule
    assert got["S2"].status == FAILS and got["S2"].rates[0]["k"] == 0          # 0 vs 0: the rule fails
    assert got["S3"].status == FAILS and got["S3"].test["a_only"] == got["S3"].test["b_only"] == 0
    assert got["E1"].status == HOLDS and "FT.3: ε >= 2.50" in got["E1"].ours
    eps["IPO"]["results"]["final"]["sd_base"]["epsilon_lower_bound"] = 2.5          # a tie is not "exceeds"
    assert verdicts(RunResults(grouped(), evidence(), epsilon=eps))["E1"].status == FAILS
    # The RL stage did not move: S2 and E1 are inconclusive, whatever the numbers say.
    still = verdicts(RunResults(grouped(), evidence(rl=STILL), discoverable=disc, epsilon=eps))
    assert still["S2"].status == INCONCLUSIVE and still["E1"].status == INCONCLUSIVE
    # Rows that do not cover the NED audit's scored examples are not compared.
    disc["FT.3"]["rows"]["sd_base"] = disc["FT.3"]["rows"]["sd_base"][:19]
    assert verdicts(RunResults(grouped(), evidence(), discoverable=disc))["S1"].status == NOT_MEASURED


# --- D1-D3: memorization against dose (data.sd.doses), rules fixed before any run of experiment=doses -------------
def _dosed(memorized_per_dose: dict[int, int], n: int = 8, prefix: str = "d") -> list[dict]:
    """n rows per dose (`repeat`), the first memorized_per_dose[d] of each memorized."""
    return [row(f"{prefix}{d}-{i}", i < k, repeat=d) for d, k in memorized_per_dose.items() for i in range(n)]


def test_dose_findings_by_hand():
    g = grouped()
    g[("FT.3", "final", "sd_base")] = _dosed({1: 0, 4: 3, 16: 8})        # rises: 0/8 -> 3/8 -> 8/8
    g[("IPO", "final", "sd_base")] = _dosed({1: 1, 4: 1, 16: 1})         # flat
    g[("RLFT.2", "final", "sd_base")] = _dosed({1: 0, 4: 0, 16: 0})      # the floor
    got = verdicts(RunResults(g, evidence()))
    # D1: 11 successes of 24 all in the two upper tiers, 8 in the top: exact trend p far below 0.05
    assert got["D1"].status == HOLDS and got["D1"].p_value < 1e-4
    assert [r["k"] for r in got["D1"].rates] == [0, 3, 8] and got["D1"].ours.startswith("x1: 0.0 %")
    # D2: one per tier: the top's rate is not above the lowest's -> not reproduced
    assert got["D2"].status == FAILS
    # D3: no success anywhere: p = 1 >= 0.05, FT's trend gate passes, RL's evidence passes
    assert got["D3"].status == HOLDS and got["D3"].p_value == 1.0
    assert got["D3"].evidence[0]["check"].startswith("FT.3: trend over doses")
    # D3 reads "no rise" only where FT's own trend shows the doses: a flat FT makes it inconclusive
    g[("FT.3", "final", "sd_base")] = _dosed({1: 2, 4: 2, 16: 2})
    flat = verdicts(RunResults(g, evidence()))
    assert flat["D1"].status == FAILS and flat["D3"].status == INCONCLUSIVE
    # and RL that did not move gates it too, as F2
    g[("FT.3", "final", "sd_base")] = _dosed({1: 0, 4: 3, 16: 8})
    assert verdicts(RunResults(g, evidence(rl=STILL)))["D3"].status == INCONCLUSIVE


def test_dose_findings_need_two_doses():
    g = grouped()
    g[("FT.3", "final", "sd_base")] = _dosed({4: 3})
    assert verdicts(RunResults(g, evidence()))["D1"].status == NOT_MEASURED


@pytest.mark.parametrize(("numbers", "expected"), [
    ({"N1_pearson": 0.01}, {"N1": True}), ({"N1_pearson": 0.0}, {"N1": False}), ({"N1_pearson": None}, {"N1": False}),
    ({"N2_shares": {"prefix": 0.2, "suffix": 0.6, "start": 0.1}}, {"N2": True}),
    ({"N2_shares": {"prefix": 0.2, "suffix": 0.6, "start": 0.2}}, {"N2": True}),     # start ties prefix: still least
    ({"N2_shares": {"prefix": 0.5, "suffix": 0.4, "start": 0.1}}, {"N2": False}),    # suffix below prefix
    ({"N2_shares": {"prefix": 0.2, "suffix": 0.6, "start": 0.3}}, {"N2": False}),    # start above prefix
    ({"N2_shares": {"prefix": 0.2, "suffix": 0.6, "start": None}}, {"N2": False}),
    ({"N3_best_rate": 0.51}, {"N3": True}), ({"N3_best_rate": 0.5}, {"N3": False}),  # 0.5 is not "most"
    ({}, {"N1": False, "N2": False, "N3": False}),
])
def test_each_nmt_rule_is_stated_once_over_the_stored_figures(numbers, expected):
    from memlens.harness.report.findings.paper002 import NMT_RULES

    assert {fid: NMT_RULES[fid].holds(numbers) for fid in expected} == expected


def _pair_summary(member_scores, nonmember_scores, blind_members=None, blind_nonmembers=None):
    """A pair_mia summary of IPO's final checkpoint on pairs_sd_base whose PREMIA scores (every attack the same) and
    blind scores are given; the metrics are the audit's own (harness/audit/preference_mia.pair_metrics)."""
    from memlens.harness.audit.preference_mia import pair_metrics
    from memlens.harness.measures.blind_mia import BLIND
    from memlens.harness.measures.preference_mia import PAIR_ATTACKS

    def side(scores, member, blind):
        return [{"id": f"{member}{i}", "member": member, "score": {a: s for a in PAIR_ATTACKS},
                 **({BLIND: blind[i]} if blind else {})} for i, s in enumerate(scores)]

    rows = side(member_scores, 1, blind_members) + side(nonmember_scores, 0, blind_nonmembers)
    result = {"n_members": len(member_scores), "n_nonmembers": len(nonmember_scores),
              "attacks": pair_metrics(rows, 200, 0)}
    return {"IPO": {"checkpoints": ["checkpoint-2", "final"], "results": {"final": {"pairs_sd_base": result}}}}


def test_m5_ipo_pairs_detectable_where_sd_is_not_extractable_by_hand():
    g = grouped()
    g[("IPO", "final", "sd_base")] = rows(0, 20)                          # IPO extracts none of SD
    separated = [float(i) for i in range(10, 30)], [float(-i) for i in range(1, 21)]     # every member above: AUC 1
    chance_blind = [0.5] * 20, [0.5] * 20                                 # the blind baseline at 0.5 exactly
    found = verdicts(RunResults(g, evidence(), pair_mia=_pair_summary(*separated, *chance_blind)))["M5"]
    assert found.status == HOLDS and "AUC 1.00" in found.ours and "20 pairs vs 20 held out" in found.ours
    assert found.test["p_value"] == 0.0 and found.rates[0]["k"] == 0
    # IPO extracts 8 of 20 (40 % >= 5 %): the rule's "not extractable" fails
    found = verdicts(RunResults(grouped(), evidence(), pair_mia=_pair_summary(*separated, *chance_blind)))["M5"]
    assert found.status == FAILS
    # the blind baseline separates the pair texts as well (AUC 1 too): no gain over it, not reproduced
    found = verdicts(RunResults(g, evidence(), pair_mia=_pair_summary(*separated, *separated)))["M5"]
    assert found.status == FAILS and "vs blind" in found.ours.lower()
    # members and held-out pairs score alike: AUC 0.5, not reproduced
    same = [float(i) for i in range(20)], [float(i) for i in range(20)]
    assert verdicts(RunResults(g, evidence(), pair_mia=_pair_summary(*same, *chance_blind)))["M5"].status == FAILS
    # IPO did not fit its pairs (accuracy below the gate): inconclusive, whatever the AUC
    found = verdicts(RunResults(g, evidence(ipo_accuracy=0.4), pair_mia=_pair_summary(*separated, *chance_blind)))
    assert found["M5"].status == INCONCLUSIVE
    # the primary attack without spread (every score equal): degenerate, inconclusive, never rescued by another attack
    flat = [1.0] * 20, [1.0] * 20
    found = verdicts(RunResults(g, evidence(), pair_mia=_pair_summary(*flat, *chance_blind)))["M5"]
    assert found.status == INCONCLUSIVE and "not degenerate" in found.reason, found.reason
    # no pair_mia audit: not measured
    assert verdicts(RunResults(g, evidence()))["M5"].status == NOT_MEASURED


def _prompt_summary(member_scores, nonmember_scores, blind_members=None, blind_nonmembers=None, other_members=None,
                    other_nonmembers=None):
    """A prompt_mia summary of RLFT.2's final checkpoint on sd_base (the audit's own metrics, harness/audit/
    preference_mia.membership_metrics): Min-kNN scoring as given, the drop from the initial model as `other_*` (else as
    Min-kNN), with the blind baseline where given."""
    from memlens.harness.audit.preference_mia import membership_metrics
    from memlens.harness.measures.blind_mia import BLIND

    def side(scores, member, blind, other):
        return [{"id": f"{member}{i}", "member": member,
                 "score": {"min_knn": s, "min_knn_vs_initial": other[i] if other else s},
                 **({BLIND: blind[i]} if blind else {})} for i, s in enumerate(scores)]

    rows_ = (side(member_scores, 1, blind_members, other_members)
             + side(nonmember_scores, 0, blind_nonmembers, other_nonmembers))
    result = {"n_members": len(member_scores), "n_nonmembers": len(nonmember_scores),
              "attacks": membership_metrics(rows_, ["min_knn", "min_knn_vs_initial"], 200, 0)}
    return {"RLFT.2": {"checkpoints": ["final"], "results": {"final": {"sd_base": result}}}}


def test_m6_rl_prompts_detectable_where_sd_is_not_extractable_by_hand():
    """As M5, on RLFT.2's own prompts (Min-kNN fixed), gated by RL's evidence as F2."""
    separated = [float(i) for i in range(10, 30)], [float(-i) for i in range(1, 21)]     # every member above: AUC 1
    chance_blind = [0.5] * 20, [0.5] * 20
    found = verdicts(RunResults(grouped(), evidence(), prompt_mia=_prompt_summary(*separated, *chance_blind)))["M6"]
    assert found.status == HOLDS and found.stages == ["RLFT.2"]
    assert "AUC 1.00" in found.ours and "20 prompts vs 20 held out" in found.ours and found.rates[0]["k"] == 0
    assert found.test["attack"] == "min_knn" and found.test["p_value"] == 0.0
    # RLFT.2 did not move: inconclusive, whatever the AUC
    found = verdicts(RunResults(grouped(), evidence(rl=STILL), prompt_mia=_prompt_summary(*separated, *chance_blind)))
    assert found["M6"].status == INCONCLUSIVE
    # the blind baseline reads the prompts as well: no gain over it, not reproduced
    found = verdicts(RunResults(grouped(), evidence(), prompt_mia=_prompt_summary(*separated, *separated)))["M6"]
    assert found.status == FAILS
    # at chance (every score equal on both sides): degenerate, inconclusive; scores that overlap fully: not reproduced
    flat = [1.0] * 20, [1.0] * 20
    found = verdicts(RunResults(grouped(), evidence(), prompt_mia=_prompt_summary(*flat, *chance_blind)))["M6"]
    assert found.status == INCONCLUSIVE and "not degenerate" in found.reason
    same = [float(i) for i in range(20)], [float(i) for i in range(20)]
    assert verdicts(RunResults(grouped(), evidence(),
                               prompt_mia=_prompt_summary(*same, *chance_blind)))["M6"].status == FAILS
    # RLFT.2 extracts 8 of 20 SD.Base lines: the rule's "not extractable" fails
    g = grouped()
    g[("RLFT.2", "final", "sd_base")] = rows(8, 20)
    assert verdicts(RunResults(g, evidence(), prompt_mia=_prompt_summary(*separated, *chance_blind)))["M6"].status \
        == FAILS
    # another attack separates the prompts while Min-kNN sits at chance: Min-kNN is fixed, not picked, so not reproduced
    found = verdicts(RunResults(grouped(), evidence(), prompt_mia=_prompt_summary(*same, *chance_blind, *separated)))
    assert found["M6"].status == FAILS and "AUC 0.50" in found["M6"].ours
    # no blind baseline (a side too small): a rule that otherwise passes is left undecided, one that fails is not
    assert verdicts(RunResults(grouped(), evidence(),
                               prompt_mia=_prompt_summary(*separated)))["M6"].status == INCONCLUSIVE
    assert verdicts(RunResults(grouped(), evidence(), prompt_mia=_prompt_summary(*same)))["M6"].status == FAILS
    # pairs are not M6's; no prompt_mia audit: not measured
    assert verdicts(RunResults(grouped(), evidence(), pair_mia=_pair_summary(*separated, *chance_blind)))["M6"].status \
        == NOT_MEASURED


def _dosed_pair_summary(scores_by_dose: dict[int, list[float]], nonmember_scores: list[float]) -> dict:
    """A pair_mia summary of IPO's final checkpoint on pairs_sd_base whose member pairs carry their dose (`repeat`):
    the tiers and the trend test are the audit's own (harness/audit/preference_mia.dose_tiers)."""
    from memlens.harness.audit.preference_mia import dose_tiers, pair_metrics
    from memlens.harness.measures.preference_mia import PAIR_ATTACKS

    rows = [{"id": f"m{d}-{i}", "member": 1, "repeat": d, "score": dict.fromkeys(PAIR_ATTACKS, s)}
            for d, scores in scores_by_dose.items() for i, s in enumerate(scores)]
    rows += [{"id": f"n{i}", "member": 0, "score": dict.fromkeys(PAIR_ATTACKS, s)} for i, s in enumerate(nonmember_scores)]
    result = {"n_members": sum(map(len, scores_by_dose.values())), "n_nonmembers": len(nonmember_scores),
              "attacks": pair_metrics(rows, 200, 0), **dose_tiers(rows, list(PAIR_ATTACKS), 200, 0)}
    return {"IPO": {"checkpoints": ["final"], "results": {"final": {"pairs_sd_base": result}}}}


def test_d4_ipo_pair_membership_rises_with_dose_by_hand():
    held_out = [0.3, 0.4, 0.7]
    # x1 [0.1, 0.2] beats no held-out pair: AUC 0; x4 [0.5, 0.6] beats 0.3 and 0.4: AUC 4/6; x16 beats all: AUC 1.
    # Every member pair rises across the doses (J = 12, its maximum), reached by 1 of the 6!/(2!2!2!) = 90 labellings:
    # exact p = 1/90
    rising = _dosed_pair_summary({1: [0.1, 0.2], 4: [0.5, 0.6], 16: [0.9, 1.0]}, held_out)
    tiers = rising["IPO"]["results"]["final"]["pairs_sd_base"]["tiers"]
    assert [tiers[d]["premia_pair"]["auc"]["value"] for d in ("1", "4", "16")] == pytest.approx([0, 4 / 6, 1])
    found = verdicts(RunResults(grouped(), evidence(), pair_mia=rising))["D4"]
    assert found.status == HOLDS and found.p_value == pytest.approx(1 / 90, abs=0.005)
    assert found.ours.startswith("x1: AUC 0.00") and "x16: AUC 1.00" in found.ours and "vs 3 held out" in found.ours
    # falling: the highest dose's AUC below the lowest's, not reproduced
    falling = _dosed_pair_summary({1: [0.9, 1.0], 4: [0.5, 0.6], 16: [0.1, 0.2]}, held_out)
    assert verdicts(RunResults(grouped(), evidence(), pair_mia=falling))["D4"].status == FAILS
    # rising AUC but too few pairs for the trend test (p = 1/6 >= 0.05): inconclusive
    two = _dosed_pair_summary({1: [0.1, 0.2], 16: [0.9, 1.0]}, held_out)
    assert verdicts(RunResults(grouped(), evidence(), pair_mia=two))["D4"].status == INCONCLUSIVE
    # IPO did not fit its pairs: inconclusive, as D2
    assert verdicts(RunResults(grouped(), evidence(ipo_accuracy=0.4), pair_mia=rising))["D4"].status == INCONCLUSIVE
    # one dose (the quickstart's pairs): no tiers, not measured
    one = _dosed_pair_summary({1: [0.1, 0.2, 0.5, 0.6]}, held_out)
    assert "tiers" not in one["IPO"]["results"]["final"]["pairs_sd_base"]
    assert verdicts(RunResults(grouped(), evidence(), pair_mia=one))["D4"].status == NOT_MEASURED


def test_d5_rl_prompt_membership_rises_with_dose_by_hand():
    """As D4, on RLFT.2's own prompts (the prompt audit's tiers, Min-kNN fixed), gated by RL's evidence as F2."""
    from memlens.harness.audit.preference_mia import dose_tiers, membership_metrics

    def summary(scores_by_dose, held_out):
        rows = [{"id": f"m{d}-{i}", "member": 1, "repeat": d, "score": {"min_knn": s}}
                for d, scores in scores_by_dose.items() for i, s in enumerate(scores)]
        rows += [{"id": f"n{i}", "member": 0, "score": {"min_knn": s}} for i, s in enumerate(held_out)]
        result = {"n_members": len(rows) - len(held_out), "n_nonmembers": len(held_out),
                  "attacks": membership_metrics(rows, ["min_knn"], 200, 0), **dose_tiers(rows, ["min_knn"], 200, 0)}
        return {"RLFT.2": {"checkpoints": ["final"], "results": {"final": {"sd_base": result}}}}

    held_out = [0.3, 0.4, 0.7]
    rising = summary({1: [0.1, 0.2], 4: [0.5, 0.6], 16: [0.9, 1.0]}, held_out)     # as D4's: exact p = 1/90
    found = verdicts(RunResults(grouped(), evidence(), prompt_mia=rising))["D5"]
    assert found.status == HOLDS and found.p_value == pytest.approx(1 / 90, abs=0.005)
    assert found.stages == ["RLFT.2"] and "x16: AUC 1.00" in found.ours
    assert verdicts(RunResults(grouped(), evidence(rl=STILL), prompt_mia=rising))["D5"].status == INCONCLUSIVE
    falling = summary({1: [0.9, 1.0], 4: [0.5, 0.6], 16: [0.1, 0.2]}, held_out)
    assert verdicts(RunResults(grouped(), evidence(), prompt_mia=falling))["D5"].status == FAILS
    assert verdicts(RunResults(grouped(), evidence(), pair_mia=rising))["D5"].status == NOT_MEASURED  # pairs: not D5's


def test_a_check_that_returns_a_dict_is_named_with_the_fix():
    """A plugin written against the old dict rows fails where it is run, naming the finding and the constructor."""
    from memlens.harness.core.errors import UserError
    from memlens.harness.report.findings.registry import FINDINGS, Finding, findings
    from memlens.harness.report.findings.run import RunResults

    with FINDINGS.registered("X9", Finding("X9", "a plugin", "an old-style row", lambda run: {"id": "X9"})):
        with pytest.raises(UserError, match="finding X9: its check returned a dict.*finding_result"):
            findings(RunResults(grouped={}))
