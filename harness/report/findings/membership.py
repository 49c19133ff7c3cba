"""Findings M1-M6: membership inference (harness/measures/mia.py): is SD a stage trained on still detectable,
whether or not it is extractable (M1-M3), do the newer attacks detect it better than LOSS (M4), and are IPO's own
preference pairs detectable where its SD is not extractable (M5, harness/measures/preference_mia.py), and the RL
stage's own prompts (M6, harness/measures/prompt_mia.py)."""

from __future__ import annotations

from memlens.harness.measures.blind_mia import BLIND_LABEL
from memlens.harness.measures.mia import (
    ATTACKS,
    BASELINE_ATTACK,
    CLASSIC_ATTACKS,
    attack_label,
    best_attack,
    is_degenerate,
)
from memlens.harness.measures.preference_mia import PRIMARY_PAIR_ATTACK, pair_attack_label
from memlens.harness.measures.prompt_mia import PRIMARY_PROMPT_ATTACK, prompt_attack_label
from memlens.harness.report import analyses as A
from memlens.harness.report.findings.evidence_gates import (
    MIA_DETECTABLE_AUC,
    NOT_EXTRACTABLE_MAX,
    _rlft2_evidence,
    ipo_check,
)
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults, _rate, memorized_flags
from memlens.harness.report.findings.verdict import P_MAX, FindingResult, _pct, finding_result


# ---------------------------------------------------------------- M1-M3: membership inference
# Not claims of paper 003: whether SD a stage trained on stays *detectable* (members told from held-out canaries of
# the same generator), the weaker question beside extraction. The best attack is the best one not degenerate there
# (memlens.harness.measures.mia.best_attack). Two tests, both Bonferroni-corrected for picking the best of the attacks:
# the bootstrap's one-sided test of H0: AUC <= MIA_DETECTABLE_AUC, and the paired bootstrap's one-sided test of
# H0: AUC <= the blind baseline's AUC on the same texts (`vs_blind`: Das et al. 2024, an attack that does not beat a
# classifier reading the texts alone says nothing about the model). A finding holds only where both are rejected:
# the intersection-union test (Berger 1982), whose p is the larger of the two.
# The attacks are those registered when the rule was committed (`rule_metrics`: RMIA, added later, is not read).
def rule_metrics(run: RunResults, model: str, dataset: str) -> dict:
    """{attack: metrics} of `dataset` (target span, final) that M1-M4's rules read: every attack but those registered
    after the rules were committed (`Attack.read_by_findings`, RMIA), which would otherwise change the pick and the
    Bonferroni factor after the fact. An attack not registered here (a summary from elsewhere) is read as before."""
    metrics = A.mia_entry(run.mia, model, dataset) or {}
    return {a: m for a, m in metrics.items() if a not in ATTACKS or ATTACKS[a].read_by_findings}


def mia_detection(run: RunResults, model: str, dataset: str = "sd_base") -> dict | None:
    """The best attack on `dataset` (target span, final checkpoint) and its tests; None when not measured.
    `vs_blind` is None where the summary has no blind baseline (too few texts, or audited before memlens had one)."""
    metrics = rule_metrics(run, model, dataset)
    best = best_attack(metrics)
    if best is None:
        return None
    attack, m = best
    key = f"{MIA_DETECTABLE_AUC:g}"
    n = len(metrics)           # every attack looked at, degenerate ones included: the best was picked among them
    p_one = m["auc"].get("p_at_most", {}).get(key)
    p_detectable = None if p_one is None else min(1.0, p_one * n)
    blind = m.get("vs_blind")
    p_blind = None if blind is None else min(1.0, blind["p_at_most_0"] * n)
    test = {"test": "bootstrap_one_sided_bonferroni_and_paired_vs_blind",
            "null": f"AUC <= {key}, or AUC <= the blind baseline's on the same texts", "attack": attack,
            "n_attacks": n, "n_boot": m["bootstrap"]["n"], "p_detectable": p_detectable, "p_vs_blind": p_blind,
            "p_value": None if p_detectable is None or p_blind is None else max(p_detectable, p_blind)}
    ours = (f"AUC {m['auc']['value']:.2f} [{m['auc']['ci95'][0]:.2f}, {m['auc']['ci95'][1]:.2f}] ({attack}; "
            f"{m['n_members']} members vs {m['n_nonmembers']} held out)")
    if blind is not None:
        ours += f"; vs {BLIND_LABEL} {blind['value']:+.2f} [{blind['ci95'][0]:+.2f}, {blind['ci95'][1]:+.2f}]"
    return {"attack": attack, "auc": m["auc"]["value"], "vs_blind": blind, "test": test, "ours": ours}


def _detectable(run: RunResults, fid: str, model: str, claim: str, stages: list[str], evidence: list[dict],
                not_extractable: bool = False) -> dict:
    rule = (f"{model}'s best membership attack not degenerate on sd_base (target span, final): AUC > "
            f"{MIA_DETECTABLE_AUC} and above the blind baseline's on the same texts (bootstrap one-sided and paired "
            f"bootstrap one-sided p < {P_MAX}, each Bonferroni over the attacks)")
    if not_extractable:
        rule += f", and its extraction rate on sd_base < {100 * NOT_EXTRACTABLE_MAX:.0f} %"
    paper = "not in paper 003 (membership inference: mimir, Duan et al. 2024)"
    found = mia_detection(run, model)
    rows = run.rows(model, "sd_base")
    if found is None or (not_extractable and rows is None):
        return finding_result(fid, claim, paper, rule, stages, measured=False)
    blind = found["vs_blind"]
    ok = found["auc"] > MIA_DETECTABLE_AUC and (blind is None or blind["value"] > 0)
    note = "" if blind is not None else (f"no {BLIND_LABEL} in this summary (a side too small, or audited before "
                                         "memlens had one): rerun the MIA audit to decide")
    rates, ours = [], found["ours"]
    if not_extractable:
        extraction = _rate(f"{model} sd_base extraction", memorized_flags(rows))
        rates = [extraction]
        ok = ok and extraction["rate"] is not None and extraction["rate"] < NOT_EXTRACTABLE_MAX
        ours += f"; extraction {_pct(extraction)}"
    test = found["test"] if found["test"]["p_value"] is not None else None
    return finding_result(fid, claim, paper, rule, stages, measured=True, rule_ok=ok, evidence=evidence, rates=rates,
                          test=test, needs_test=True, ours=ours, note=note)


def m1(run: RunResults) -> FindingResult:
    """SD only in the reward model's data: RLFT.2 memorizes ~none of it (F2), yet is it still detectable?"""
    r = run.roles
    return _detectable(run, "M1", r.rl_sd_in_rm,
                       f"RLFT via the reward model leaves SD detectable (AUC > {MIA_DETECTABLE_AUC}) though not "
                       f"extractable ({r.rl_sd_in_rm})", [r.rm_sd, r.rl_sd_in_rm], _rlft2_evidence(run),
                       not_extractable=True)


def m2(run: RunResults) -> FindingResult:
    """Fine-tuning on SD makes it detectable (the premise the other M rows are read against)."""
    ft = run.roles.ft_direct
    return _detectable(run, "M2", ft, f"Fine-tuning on SD leaves it detectable (AUC > {MIA_DETECTABLE_AUC}, {ft})",
                       [ft], [])


def m3(run: RunResults) -> FindingResult:
    """IPO on SD pairs: detectable as well as extractable (F8)?"""
    ipo = run.roles.ipo
    return _detectable(run, "M3", ipo, f"IPO on SD preference pairs leaves SD detectable (AUC > "
                                       f"{MIA_DETECTABLE_AUC}, {ipo})", [ipo], [ipo_check(run)])


# ---------------------------------------------------------------- M5: the preference pairs themselves
# Rule committed before any run judged it (issue #68; the quickstart's IPO had been audited once, exploratory, at
# seed 0 when the measure was built: PREMIA AUC 0.86 on pairs_sd_base; the rule below is the issue's own example, fixed
# here before the runs that decide it). What IPO trains on is pairs, not target strings, so its membership question is
# about pairs (Feng et al. 2024). One attack fixed in advance, PREMIA's pair margin (PRIMARY_PAIR_ATTACK: no best-of
# selection, no Bonferroni), at IPO's final checkpoint on pairs_sd_base (its SD pairs against the same pairs built from
# held-out programs). Holds where its AUC is above MIA_DETECTABLE_AUC (bootstrap one-sided p < P_MAX) and above the
# blind baseline's on the same pair texts (paired bootstrap one-sided p < P_MAX; intersection-union: p = the larger),
# while IPO's extraction rate on sd_base stays below NOT_EXTRACTABLE_MAX, with IPO's training evidence in place. A
# degenerate primary attack, or a summary without a blind baseline, leaves it inconclusive, never rescued by another.
PAIR_DATASET = "pairs_sd_base"


def fixed_attack_detectable(fid: str, claim: str, paper: str, rule: str, stage: str, entry: tuple[str, dict] | None,
                            attack: str, label: str, unit: str, measure: str, extraction_rows: list[dict] | None,
                            evidence: list[dict]) -> FindingResult:
    """M5 / M6: one membership measure's `attack` (fixed in advance, never picked) at `stage`'s last checkpoint, on the
    `entry` of its summary (analyses.membership_entry): its AUC above MIA_DETECTABLE_AUC and above the blind
    baseline's on the same texts (bootstrap one-sided and paired bootstrap one-sided p < P_MAX; the intersection-union
    test's p is the larger), while the stage's extraction rate on sd_base stays below NOT_EXTRACTABLE_MAX. A degenerate
    attack leaves it inconclusive, never rescued by another attack; a summary without a blind baseline leaves a rule
    that otherwise passes inconclusive (no test to decide it) and one that fails not reproduced."""
    if entry is None or extraction_rows is None or attack not in entry[1].get("attacks", {}):
        return finding_result(fid, claim, paper, rule, [stage], measured=False)
    checkpoint, result = entry
    m = result["attacks"][attack]
    extraction = _rate(f"{stage} sd_base extraction", memorized_flags(extraction_rows))
    blind = m.get("vs_blind")
    ours = (f"AUC {m['auc']['value']:.2f} [{m['auc']['ci95'][0]:.2f}, {m['auc']['ci95'][1]:.2f}] ({checkpoint}; "
            f"{result['n_members']} {unit} vs {result['n_nonmembers']} held out)")
    if blind is not None:
        ours += f"; vs {BLIND_LABEL} {blind['value']:+.2f} [{blind['ci95'][0]:+.2f}, {blind['ci95'][1]:+.2f}]"
    ours += f"; extraction {_pct(extraction)}"
    evidence = list(evidence)
    if m.get("degenerate"):
        evidence.append({"check": f"{stage}: {label} not degenerate",
                         "value": "; ".join(m["degenerate"]), "threshold": "no degenerate reason", "ok": False})
    p_detectable = m["auc"].get("p_at_most", {}).get(f"{MIA_DETECTABLE_AUC:g}")
    p_blind = None if blind is None else blind["p_at_most_0"]
    test = None if p_detectable is None or p_blind is None else {
        "test": "bootstrap_one_sided_and_paired_vs_blind", "attack": attack,
        "null": f"AUC <= {MIA_DETECTABLE_AUC:g}, or AUC <= the blind baseline's on the same {unit[:-1]} texts",
        "p_detectable": p_detectable, "p_vs_blind": p_blind, "p_value": max(p_detectable, p_blind)}
    ok = (m["auc"]["value"] > MIA_DETECTABLE_AUC and (blind is None or blind["value"] > 0)
          and extraction["rate"] is not None and extraction["rate"] < NOT_EXTRACTABLE_MAX)
    note = "" if blind is not None else f"no {BLIND_LABEL} on these {unit} (a side too small): rerun {measure} to decide"
    return finding_result(fid, claim, paper, rule, [stage], measured=True, rule_ok=ok, evidence=evidence,
                          rates=[extraction], test=test, needs_test=True, ours=ours, note=note)


def m5(run: RunResults) -> FindingResult:
    ipo = run.roles.ipo
    claim = (f"IPO's own preference pairs are detectable by membership inference (PREMIA, AUC > {MIA_DETECTABLE_AUC}) "
             f"where its SD is not extractable ({ipo})")
    rule = (f"{ipo} final, {PAIR_DATASET} vs the same pairs of held-out programs: {pair_attack_label(PRIMARY_PAIR_ATTACK)}"
            f" (fixed, not picked) AUC > {MIA_DETECTABLE_AUC} and above the blind baseline's on the same pair texts "
            f"(bootstrap one-sided and paired bootstrap one-sided p < {P_MAX}), and {ipo}'s extraction rate on sd_base "
            f"< {100 * NOT_EXTRACTABLE_MAX:.0f} %")
    paper = "not in paper 003 (preference-pair membership: Feng et al. 2024, PREMIA)"
    return fixed_attack_detectable("M5", claim, paper, rule, ipo, A.membership_entry(run.pair_mia, ipo, PAIR_DATASET),
                                   PRIMARY_PAIR_ATTACK, pair_attack_label(PRIMARY_PAIR_ATTACK), "pairs", "pair_mia",
                                   run.rows(ipo, "sd_base"), [ipo_check(run)])


# ---------------------------------------------------------------- M6: the RL prompts themselves
# Rule committed before any run judged it (issue #68's own example: "RL-prompt membership is detectable after RLFT.2";
# before this commit the measure had run on the quickstart's RLFT.2 once, exploratory, at seed 0 with a
# loaded machine, for its cost (benchmarks/README.md, "Membership of RL prompts": Min-kNN AUC 0.42-0.49 over m); that
# run is not one this rule judges, and the seed-0 verdict comes from a rerun of the measure under this commit). What
# an RL stage trains on is prompts, not target strings, so its membership question is about prompts (Zhang et al.
# 2026). As M5, on the RL stage trained through the reward model (RLFT.2), its final checkpoint, its sd_base prompts
# against held-out prompts of the same generator (harness/audit/prompt_mia.py): Min-kNN distance, the prompt audit's
# primary attack (PRIMARY_PROMPT_ATTACK, fixed before any run, not picked; DIBA is reported beside it, not read), its
# AUC above MIA_DETECTABLE_AUC and above the blind baseline's on the same prompt texts (p < P_MAX each), while
# RLFT.2's extraction rate on sd_base stays below NOT_EXTRACTABLE_MAX; gated by RL's evidence as F2 (an RL stage that
# did not move says nothing about its prompts).
PROMPT_DATASET = "sd_base"


def m6(run: RunResults) -> FindingResult:
    rl = run.roles.rl_sd_in_rm
    label = prompt_attack_label(PRIMARY_PROMPT_ATTACK)
    claim = (f"RLFT's own prompts are detectable by membership inference ({label}, AUC > {MIA_DETECTABLE_AUC}) where "
             f"its SD is not extractable ({rl})")
    rule = (f"{rl} final, its {PROMPT_DATASET} prompts vs held-out prompts of the same generator: {label} (fixed, not "
            f"picked) AUC > {MIA_DETECTABLE_AUC} and above the blind baseline's on the same prompt texts (bootstrap "
            f"one-sided and paired bootstrap one-sided p < {P_MAX}), and {rl}'s extraction rate on sd_base "
            f"< {100 * NOT_EXTRACTABLE_MAX:.0f} %; RL's evidence as F2")
    paper = "not in paper 003 (RL-prompt membership: Zhang et al. 2026, Min-kNN distance)"
    return fixed_attack_detectable("M6", claim, paper, rule, rl, A.membership_entry(run.prompt_mia, rl, PROMPT_DATASET),
                                   PRIMARY_PROMPT_ATTACK, label, "prompts", "prompt_mia", run.rows(rl, "sd_base"),
                                   _rlft2_evidence(run))


# ---------------------------------------------------------------- M4: do the newer attacks beat LOSS?
# Rule written before any run decided it (committed before the quickstart runs were audited). On the RL stage trained through
# the reward model and on the preference stage, sd_base, target span, final checkpoint: the newer attack with the
# highest AUC against LOSS on the same texts (paired bootstrap, memlens.harness.core.stats.paired_auc_difference), its
# one-sided p (AUC gain <= 0) multiplied by the number of newer attacks scored there (Bonferroni for picking the best).
# Holds when both stages' best newer attack beats LOSS at p < P_MAX; not reproduced when at either stage no newer
# attack's AUC is above LOSS's; otherwise inconclusive. Added later (issue #68), after the rule was first committed:
# a newer attack degenerate there (memlens.harness.measures.mia.degenerate_reasons) is never the one picked, though it
# still counts in the Bonferroni factor (it was looked at). RMIA, registered after M1-M4's rules, is read by neither
# (`rule_metrics`): each finding reads the attacks it read when its rule was committed.
def newer_vs_loss(run: RunResults, model: str, dataset: str = "sd_base") -> dict | None:
    """The best newer attack's AUC gain over LOSS on one model's `dataset` (target span, final), or None."""
    metrics = rule_metrics(run, model, dataset)
    newer = {a: m for a, m in metrics.items() if a not in CLASSIC_ATTACKS and "vs_loss" in m}
    candidates = {a: m for a, m in newer.items() if not is_degenerate(m)}
    if not candidates or BASELINE_ATTACK not in metrics:
        return None
    attack, m = max(candidates.items(), key=lambda am: am[1]["auc"]["value"])
    gain = m["vs_loss"]
    return {"model": model, "attack": attack, "auc": m["auc"]["value"], "loss_auc": metrics[BASELINE_ATTACK]["auc"]["value"],
            "gain": gain["value"], "gain_ci95": gain["ci95"], "n_newer": len(newer),
            "p_value": min(1.0, gain["p_at_most_0"] * len(newer))}


def m4(run: RunResults) -> FindingResult:
    r = run.roles
    models = [r.rl_sd_in_rm, r.ipo]
    claim = (f"The newer attacks (ReCaLL, Con-ReCall, DC-PDD, EZ-MIA, the checkpoint sequence) detect SD that only the "
             f"RLHF or preference stage saw better than LOSS does ({', '.join(models)})")
    rule = (f"at each of {', '.join(models)} (sd_base, target span, final): the best newer attack's AUC minus LOSS's, "
            f"paired bootstrap one-sided p x (newer attacks scored) < {P_MAX} at both; not reproduced where no newer "
            "attack's AUC is above LOSS's at either")
    paper = "not in paper 003 (membership inference: Xie et al. 2024, Zhang et al. 2024, Wang et al. 2024, Ilic et al. 2026)"
    found = [newer_vs_loss(run, m) for m in models]
    if any(f is None for f in found):
        return finding_result("M4", claim, paper, rule, models, measured=False)
    ok = all(f["gain"] > 0 for f in found)
    worst = max(found, key=lambda f: f["p_value"])
    test = {"test": "paired_bootstrap_one_sided_bonferroni", "null": "AUC(best newer) <= AUC(LOSS)",
            "attack": worst["attack"], "model": worst["model"], "n_attacks": worst["n_newer"],
            "p_value": worst["p_value"]}
    ours = "; ".join(f"{f['model']}: {attack_label(f['attack'])} AUC {f['auc']:.2f} vs LOSS {f['loss_auc']:.2f} "
                     f"(gain {f['gain']:+.2f} [{f['gain_ci95'][0]:+.2f}, {f['gain_ci95'][1]:+.2f}], "
                     f"p = {f['p_value']:.3g})" for f in found)
    return finding_result("M4", claim, paper, rule, models, measured=True, rule_ok=ok,
                          evidence=_rlft2_evidence(run) + [ipo_check(run)], test=test, needs_test=True, ours=ours)


register(
    Finding("M1", "not in paper 003 (membership inference)",
            "RLFT via the reward model leaves SD detectable though not extractable", m1),
    Finding("M2", "not in paper 003 (membership inference)", "Fine-tuning on SD leaves it detectable", m2),
    Finding("M3", "not in paper 003 (membership inference)", "IPO on SD preference pairs leaves SD detectable", m3),
    Finding("M4", "not in paper 003 (membership inference)",
            "The newer attacks detect RLHF / preference-stage SD better than LOSS", m4),
    Finding("M5", "not in paper 003 (preference-pair membership, PREMIA)",
            "IPO's own preference pairs are detectable where its SD is not extractable", m5),
    Finding("M6", "not in paper 003 (RL-prompt membership, Min-kNN)",
            "RLFT's own prompts are detectable where its SD is not extractable", m6),
)
