"""Findings D1-D5: memorization against repetition dose (data.sd.doses, memlens.synthetic_data.doses; experiment=doses).

Where one dose of SD puts RLFT.2 and IPO on the floor (0 against 0 decides nothing), the same programs planted 1, 4 and
16 times give a curve per route, and a trend test decides where a single dose cannot (issue: "Audits that decide at
small scale"; the secret-sharer line of work measures exposure against insertions, Carlini et al. 2019 Sec. 5).
These rules were committed before any run of experiment=doses: the direction, the test and the gates are fixed here,
not read off a result. Each is decided over seeds by `over_seeds` (at least 3 runs agreeing).

The test is the exact one-sided Cochran-Armitage trend test over the tiers (memlens.harness.core.stats.dose_trend_test)
on the final checkpoint's counterfactual memorized flags on sd_base (the rate F1 reads).
"""

from __future__ import annotations

from memlens.harness.core.stats import dose_trend_test, rate_with_interval
from memlens.harness.measures.preference_mia import PRIMARY_PAIR_ATTACK, pair_attack_label
from memlens.harness.measures.prompt_mia import PRIMARY_PROMPT_ATTACK, prompt_attack_label
from memlens.harness.report import analyses as A
from memlens.harness.report.findings.evidence_gates import _rlft2_evidence, ipo_check
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults, memorized_flags
from memlens.harness.report.findings.verdict import P_MAX, FindingResult, _check, _pct, finding_result

DOSED = "experiment=doses (data.sd.doses)"
DOSES_PAPER = "not in the papers (doses: issue #67)"


def rates_by_dose(rows: list[dict] | None) -> dict[int, tuple[int, int]] | None:
    """{dose: (memorized, scored)} of a model's final sd_base rows by their `repeat`; None unless the rows carry at
    least two doses (a run without data.sd.doses measures none of D1-D3)."""
    if rows is None:
        return None
    flags = memorized_flags(rows)             # the scored rows, as every rate of the findings counts them
    dose = {r["id"]: int(r["repeat"]) for r in rows if r["id"] in flags and "repeat" in r}
    doses = sorted(set(dose.values()))
    if len(doses) < 2:
        return None
    return {d: (sum(flags[i] for i in dose if dose[i] == d), sum(v == d for v in dose.values())) for d in doses}


def dose_rates(model: str, counts: dict[int, tuple[int, int]]) -> list[dict]:
    return [{"name": f"{model} x{d}", **rate_with_interval(k, n)} for d, (k, n) in counts.items()]


def curve(rates: list[dict]) -> str:
    return " → ".join(f"{r['name'].rsplit(' ', 1)[1]}: {_pct(r)}" for r in rates)


def _rises(run: RunResults, fid: str, model: str, claim: str, stages: list[str], evidence) -> FindingResult:
    """`model`'s memorization of sd_base rises with dose: the top dose's rate above the lowest's, and the trend test's
    p < P_MAX."""
    rule = (f"{model}'s final rate on sd_base at the highest dose > at the lowest, and rises with dose "
            f"(exact one-sided Cochran-Armitage trend test over the doses, p < {P_MAX})")
    counts = rates_by_dose(run.rows(model, "sd_base"))
    if counts is None:
        return finding_result(fid, claim, DOSES_PAPER, rule, stages, measured=False)
    rates = dose_rates(model, counts)
    ok = rates[-1]["rate"] is not None and rates[0]["rate"] is not None and rates[-1]["rate"] > rates[0]["rate"]
    return finding_result(fid, claim, DOSES_PAPER, rule, stages, measured=True, rule_ok=ok,
                          evidence=evidence(run), rates=rates, test=dose_trend_test(counts), needs_test=True,
                          ours=curve(rates))


def d1(run: RunResults) -> FindingResult:
    """FT with SD in its data: memorization rises with the copies of a program."""
    ft = run.roles.ft_direct
    return _rises(run, "D1", ft, f"FT memorizes more of SD the more copies it saw ({ft})", [ft], lambda run: [])


def d2(run: RunResults) -> FindingResult:
    """IPO on SD preference pairs: memorization rises with the copies of a pair."""
    r = run.roles
    return _rises(run, "D2", r.ipo, f"IPO memorizes more of SD the more copies of its pairs it saw ({r.ipo})",
                  [r.ipo], lambda run: [ipo_check(run)])


def d3(run: RunResults) -> FindingResult:
    """SD only in the reward model's data (and as RL prompts): RLFT.2's memorization does not rise with dose, where
    FT's does. Gated by RL's evidence (as F2) and by D1's own trend (the doses must be visible where SD is trained on
    directly, else "no rise" says nothing)."""
    r = run.roles
    claim = f"RLFT via the reward model memorizes no more with more copies ({r.rl_sd_in_rm}), where FT does"
    rule = (f"{r.rl_sd_in_rm}'s trend over doses on sd_base not significant (exact one-sided Cochran-Armitage p >= "
            f"{P_MAX}) while {r.ft_direct}'s is (p < {P_MAX})")
    stages = [r.ft_direct, r.rm_sd, r.rl_sd_in_rm]
    rl, ft = rates_by_dose(run.rows(r.rl_sd_in_rm, "sd_base")), rates_by_dose(run.rows(r.ft_direct, "sd_base"))
    if rl is None or ft is None:
        return finding_result("D3", claim, DOSES_PAPER, rule, stages, measured=False)
    rl_test, ft_test = dose_trend_test(rl), dose_trend_test(ft)
    ft_gate = _check(f"{r.ft_direct}: trend over doses (D1's test) p", ft_test["p_value"], f"< {P_MAX}",
                     ft_test["p_value"] < P_MAX)
    rates = dose_rates(r.rl_sd_in_rm, rl)
    return finding_result("D3", claim, DOSES_PAPER, rule, stages, measured=True,
                          rule_ok=rl_test["p_value"] >= P_MAX, evidence=[ft_gate, *_rlft2_evidence(run)], rates=rates,
                          test=rl_test, ours=f"{curve(rates)} (trend p = {rl_test['p_value']:.3g})",
                          note="no rise is read only where FT's own trend shows the doses (the gate); "
                               "not a proof of none")


# ---------------------------------------------------------------- D4: does IPO's pair membership rise with dose?
# Rule committed before any run of experiment=doses measured pair membership (issue #67: "IPO's extraction or
# membership signal rises with dose in its pairs"; D2 reads the extraction side, which sits at 0 of 13-15 at every dose
# and seed). On the IPO stage's final checkpoint, pairs_sd_base, PREMIA's primary attack (fixed, not picked), each
# dose's member pairs against every held-out pair (harness/audit/preference_mia.py `dose_tiers`): holds when the AUC
# at the highest dose exceeds the AUC at the lowest and the members' scores rise with dose (one-sided Jonckheere-
# Terpstra permutation test over the doses, p < P_MAX); not reproduced when the highest dose's AUC is not above the
# lowest's; otherwise inconclusive. Gated by IPO's training evidence, as D2.
PAIR_DATASET = "pairs_sd_base"


def membership_rule(subject: str, label: str, members: str, held_out: str) -> str:
    """D4 / D5's rule: `label` (fixed, not picked) on `subject`, each dose's `members` against every `held_out`."""
    return (f"{subject}, {label} (fixed, not picked), each dose's {members} vs every {held_out}: AUC at the highest "
            f"dose > at the lowest, and the members' scores rise with dose (one-sided Jonckheere-Terpstra permutation "
            f"test over the doses, p < {P_MAX})")


def membership_rises(fid: str, claim: str, rule: str, stages: list[str], entry: tuple[str, dict] | None,
                     attack: str, evidence: list[dict]) -> dict:
    """D4 / D5: a membership measure's fixed `attack` on each dose's members against every held-out example (the
    entry's `tiers`) rises with dose: the top dose's AUC above the lowest's (the rule), the one-sided Jonckheere-
    Terpstra test on the members' scores (`dose_trend`, the test)."""
    tiers = (entry or (None, {}))[1].get("tiers") or {}
    trend = ((entry or (None, {}))[1].get("dose_trend") or {}).get(attack)
    if len(tiers) < 2 or trend is None or any(attack not in t for t in tiers.values()):
        return finding_result(fid, claim, DOSES_PAPER, rule, stages, measured=False)
    doses = sorted(tiers, key=int)
    auc = {d: tiers[d][attack]["auc"] for d in doses}
    n_members = {d: tiers[d][attack].get("n_members") for d in doses}
    ours = " → ".join(f"x{d}: AUC {auc[d]['value']:.2f} [{auc[d]['ci95'][0]:.2f}, {auc[d]['ci95'][1]:.2f}]"
                      + (f" ({n_members[d]})" if n_members[d] is not None else "") for d in doses)
    ours += f" vs {entry[1]['n_nonmembers']} held out ({entry[0]}; trend p = {trend['p_value']:.3g})"
    ok = auc[doses[-1]]["value"] > auc[doses[0]]["value"]
    return finding_result(fid, claim, DOSES_PAPER, rule, stages, measured=True, rule_ok=ok, evidence=evidence,
                          test=trend, needs_test=True, ours=ours)


def d4(run: RunResults) -> FindingResult:
    """IPO on SD preference pairs: the membership signal of its pairs (PREMIA) rises with the copies of a pair."""
    ipo = run.roles.ipo
    claim = f"IPO's own pairs are more detectable by membership inference the more copies it saw ({ipo}; PREMIA)"
    rule = membership_rule(f"{ipo} final, {PAIR_DATASET}", pair_attack_label(PRIMARY_PAIR_ATTACK), "member pairs",
                           "held-out pair")
    return membership_rises("D4", claim, rule, [ipo], A.membership_entry(run.pair_mia, ipo, PAIR_DATASET),
                            PRIMARY_PAIR_ATTACK, [ipo_check(run)])


# ---------------------------------------------------------------- D5: do RLFT.2's prompts show the dose?
# Rule committed before any run of experiment=doses measured prompt membership (issue #68's RL-prompt membership,
# issue #67's doses; D3 reads the extraction side, 0 of 13-15 at every dose and seed). On the RL stage trained through
# the reward model (RLFT.2), its final checkpoint, its sd_base prompts, Min-kNN distance (the prompt audit's primary
# attack, fixed, not picked), each dose's member prompts against every held-out prompt (harness/audit/prompt_mia.py,
# `tiers`): holds when the AUC at the highest dose exceeds the AUC at the lowest and the members' scores rise with
# dose (one-sided Jonckheere-Terpstra permutation test, p < P_MAX); not reproduced when the highest dose's AUC is not
# above the lowest's; otherwise inconclusive. Gated by RL's evidence, as F2 and D3.
PROMPT_DATASET = "sd_base"


def d5(run: RunResults) -> FindingResult:
    """RLFT via the reward model: the membership signal of its own RL prompts (Min-kNN) rises with the copies of a
    prompt."""
    rl = run.roles.rl_sd_in_rm
    claim = f"RLFT's own prompts are more detectable by membership inference the more copies it saw ({rl}; Min-kNN)"
    rule = membership_rule(f"{rl} final, its {PROMPT_DATASET} prompts", prompt_attack_label(PRIMARY_PROMPT_ATTACK),
                           "member prompts", "held-out prompt")
    return membership_rises("D5", claim, rule, [rl], A.membership_entry(run.prompt_mia, rl, PROMPT_DATASET),
                            PRIMARY_PROMPT_ATTACK, _rlft2_evidence(run))


register(
    Finding("D1", "issue #67 (doses)", "FT memorization rises with dose", d1, measured_by=DOSED),
    Finding("D2", "issue #67 (doses)", "IPO memorization rises with dose", d2, measured_by=DOSED),
    Finding("D3", "issue #67 (doses)", "RLFT via the RM shows no rise with dose", d3, measured_by=DOSED),
    Finding("D4", "issue #67 (doses)", "IPO pair membership rises with dose", d4,
            measured_by=f"{DOSED}, audit.measures=[...,pair_mia]"),
    Finding("D5", "issue #67 (doses)", "RLFT prompt membership rises with dose", d5,
            measured_by=f"{DOSED}, audit.measures=[...,prompt_mia]"),
)
