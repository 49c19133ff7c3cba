"""Findings P1-P3: claims about the preference objectives that replaced IPO (harness/core/objectives.py), read
on the preference stage swept over objectives (role `preference`; conf/experiment/preference_objectives.yaml)."""

from __future__ import annotations

from memlens.harness.core.objectives import DEFAULT_OBJECTIVE, OBJECTIVES
from memlens.harness.core.stats import mcnemar_exact, sign_test
from memlens.harness.report import analyses as A
from memlens.harness.report.findings.comparisons import _times_higher
from memlens.harness.report.findings.evidence_gates import pair_check
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults, _rate, memorized_flags
from memlens.harness.report.findings.verdict import P_MAX, FindingResult, _pct, finding_result


# ---------------------------------------------------------------- P1-P3: preference objectives beyond IPO
# Not claims of paper 003: claims the field makes or implies about the objectives that replaced IPO, stated so that
# the run can refute them, with F1-F8's rules (evidence first, then the rule, then an exact test at p < P_MAX).
def reference_free() -> tuple[str, ...]:
    """The registered objectives without a reference model (simpo, cpo, orpo: harness/core/objectives.py), read when
    asked, so an objective registered from its own module counts too."""
    return OBJECTIVES.where(lambda o: not o.reference)


def reference_based() -> tuple[str, ...]:
    """The registered objectives with one (ipo, dpo, dpo+sft, kto), read when asked."""
    return OBJECTIVES.where(lambda o: o.reference)


def preference_models(run: RunResults, dataset: str = "sd_base") -> dict[str, str]:
    """{objective: model} of the preference stage (role `preference`: the stage and its sweep points) audited on
    `dataset`; the objective is the one its provenance records. Where two points share an objective (a sweep of
    another key too), the first by name stands for it."""
    out: dict[str, str] = {}
    for model, d in sorted(run._final):
        name, point = A.parse_sweep_point(model)
        if d == dataset and name == run.roles.preference:
            objective = run.evidence.get(model, {}).get("objective") or point.get("objective") or DEFAULT_OBJECTIVE
            out.setdefault(str(objective), model)
    return out


def p1(run: RunResults) -> FindingResult:
    """RPO / MPO add the chosen completion's NLL to a preference loss: more likelihood on exactly the preference data."""
    models = preference_models(run)
    texts = ("An NLL term on the chosen completion memorizes preference data more than IPO (dpo+sft vs ipo)",
             "not in paper 003 (RPO / MPO practice)",
             f"objective dpo+sft >= 5 % on sd_base and above objective ipo (McNemar p < {P_MAX})")
    if "dpo+sft" not in models or "ipo" not in models:
        return finding_result("P1", texts[0], texts[1], texts[2], [run.roles.preference], measured=False)
    nll, ipo = models["dpo+sft"], models["ipo"]
    return _times_higher(run, "P1", texts, [nll, ipo], lambda run: [pair_check(run, nll), pair_check(run, ipo)],
                         nll, ipo, high=nll, factor=1.0, floor=0.05)


def p2(run: RunResults) -> FindingResult:
    """Reference-free objectives drop the anchor to the initial model that limits how far a reference-based one
    moves: if that anchor holds memorization back, they memorize more."""
    claim = "Reference-free objectives (SimPO, CPO, ORPO) memorize preference data more than reference-based ones"
    paper = "not in paper 003"
    rule = (f"pooled sd_base rate of the reference-free objectives > that of the reference-based ones (ipo, dpo, "
            f"dpo+sft, kto), exact sign test over examples of their per-example shares, p < {P_MAX}")
    models = preference_models(run)
    free = [models[o] for o in reference_free() if o in models]
    based = [models[o] for o in reference_based() if o in models]
    if not free or not based:
        return finding_result("P2", claim, paper, rule, [run.roles.preference], measured=False)
    flags = {m: memorized_flags(run.rows(m, "sd_base")) for m in free + based}
    common = sorted(set.intersection(*(set(f) for f in flags.values())), key=str)
    share = lambda group, i: sum(flags[m][i] for m in group) / len(group)  # noqa: E731
    diffs = [share(free, i) - share(based, i) for i in common]
    rates = [_rate("reference-free (pooled)", {(m, i): flags[m][i] for m in free for i in common}),
             _rate("reference-based (pooled)", {(m, i): flags[m][i] for m in based for i in common})]
    ok = rates[0]["rate"] is not None and rates[1]["rate"] is not None and rates[0]["rate"] > rates[1]["rate"]
    return finding_result("P2", claim, paper, rule, free + based, measured=True, rule_ok=ok,
                          evidence=[pair_check(run, m) for m in free + based], rates=rates, test=sign_test(diffs),
                          needs_test=True, ours=f"{_pct(rates[0])} vs {_pct(rates[1])}",
                          note="CPO and ORPO also carry an NLL term on the chosen completion (SimPO does not), so this "
                               "contrast mixes the anchor with the NLL term; P1 isolates the NLL term")


def p3(run: RunResults) -> FindingResult:
    """F2's and F8's comparison for every objective: preference data memorized less than the same data fine-tuned on."""
    claim = "Every preference objective memorizes its preference data less than direct fine-tuning on it"
    paper = "F1 vs F8's IPO in paper 003: 17.6 % vs 18.2 %"
    ft = run.roles.ft_direct
    rule = (f"{ft} >= 10 % on sd_base and each objective below it (McNemar; every p < {P_MAX}: an intersection-union "
            "test, so the largest p is reported)")
    models = preference_models(run)
    source = run.rows(ft, "sd_base")
    if not models or source is None:
        return finding_result("P3", claim, paper, rule, [ft, run.roles.preference], measured=False)
    ft_flags = memorized_flags(source)
    flags = {o: memorized_flags(run.rows(m, "sd_base")) for o, m in models.items()}
    rates = [_rate(f"{ft} sd_base", ft_flags), *(_rate(f"{o} sd_base", f) for o, f in flags.items())]
    tests = {o: mcnemar_exact(ft_flags, f) for o, f in flags.items()}
    worst = max(tests.values(), key=lambda t: t["p_value"])
    ft_rate = rates[0]["rate"] or 0.0
    ok = ft_rate >= 0.10 and all((r["rate"] or 0.0) < ft_rate for r in rates[1:])
    return finding_result("P3", claim, paper, rule, [ft, *models.values()], measured=True, rule_ok=ok,
                          evidence=[pair_check(run, m) for m in models.values()], rates=rates, test=worst,
                          needs_test=True, ours=", ".join(f"{r['name'].split()[0]}: {_pct(r)}" for r in rates))


register(
    Finding("P1", "not in paper 003 (RPO / MPO practice)",
            "An NLL term on the chosen completion memorizes preference data more than IPO", p1),
    Finding("P2", "not in paper 003",
            "Reference-free objectives memorize preference data more than reference-based ones", p2),
    Finding("P3", "paper 003 F1 vs F8 (IPO)",
            "Every preference objective memorizes its preference data less than direct fine-tuning on it", p3),
)
