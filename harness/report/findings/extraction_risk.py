"""Findings S1-S3 and E1: what greedy extraction under-counts, and how much each stage leaks as a privacy bound.

Not claims of paper 003; phrased so a run can refute them:
- S1-S3, probabilistic discoverable extraction (Hayes et al. 2024; harness/measures/discoverable.py): sampling
  reveals SD targets of a stage that greedy decoding does not. Per example on sd_base (final checkpoint), the
  sampling scheme's counterfactual (n, p)-discoverable flag against the NED test's memorized flag, paired: the
  claim holds when more targets are revealed by sampling alone than by greedy alone, by McNemar's exact test.
- E1, one-run privacy auditing (Steinke, Nasr & Jagielski 2023; harness/measures/epsilon.py): the fine-tuned
  model's ε lower bound on sd_base exceeds the RL model's and IPO's. The bounds each hold at the audit's
  confidence; the rule compares the numbers, no further test (a larger lower bound is more leakage shown, not a
  larger true ε).
"""

from __future__ import annotations

from memlens.harness.core.stats import mcnemar_exact
from memlens.harness.measures.discoverable import counterfactually_discoverable, read_logp
from memlens.harness.report.findings.evidence_gates import _rlft2_evidence, ipo_check
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults, _rate, memorized_flags
from memlens.harness.report.findings.verdict import FindingResult, _pct, finding_result

DATASET = "sd_base"
SAMPLING_P = 0.5             # the p of the judged (n, p) point: even odds of extraction; n is the largest audited
PAPER_S = "not in paper 003 (probabilistic extraction: Hayes et al. 2024)"
PAPER_E = "not in paper 003 (one-run privacy auditing: Steinke, Nasr & Jagielski 2023)"


# ---------------------------------------------------------------- S1-S3: sampling vs greedy
def sampling_point(record: dict) -> tuple[str, int, float] | None:
    """(scheme, n, p) a finding judges: the first sampling scheme (temperature > 0), the largest n audited and
    p = SAMPLING_P when audited (else the smallest p); None when the audit ran no sampling scheme."""
    sampling = [s["name"] for s in record["schemes"] if s["temperature"] > 0]
    if not sampling:
        return None
    p = SAMPLING_P if SAMPLING_P in record["p"] else min(record["p"])
    return sampling[0], max(record["queries"]), p


def sampling_flags(record: dict, scheme: str, n: int, p: float) -> dict | None:
    """{id: counterfactually (n, p)-discoverable under `scheme`} over the final checkpoint's sd_base rows."""
    rows = record["rows"].get(DATASET)
    if rows is None:
        return None
    return {r["id"]: counterfactually_discoverable(read_logp(r["logp"][scheme]), read_logp(r["control_logp"][scheme]), n, p)
            for r in rows}


def _sampling_reveals(run: RunResults, fid: str, model: str, evidence: list[dict]) -> FindingResult:
    record = run.discoverable.get(model)
    point = sampling_point(record) if record else None
    rows = run.rows(model, DATASET)
    claim = f"Sampling reveals SD targets of {model} that greedy decoding does not"
    if point is None or rows is None:
        return finding_result(fid, claim, PAPER_S, f"{model}: sampling-only > greedy-only on {DATASET}", [model],
                              measured=False)
    scheme, n, p = point
    sampled = sampling_flags(record, scheme, n, p)
    greedy = memorized_flags(rows)
    if sampled is None or set(sampled) != set(greedy):
        return finding_result(fid, claim, PAPER_S, f"{model}: sampling-only > greedy-only on {DATASET}", [model],
                              measured=False, note="the discoverable rows do not cover the NED audit's scored examples")
    rule = (f"{model} on {DATASET} (final): targets counterfactually ({n}, {p:g})-discoverable under {scheme} but "
            f"not memorized by the greedy NED test outnumber the reverse (McNemar exact p < 0.05)")
    test = mcnemar_exact(sampled, greedy)
    rates = [_rate(f"{model} {scheme} ({n}, {p:g})-discoverable", sampled), _rate(f"{model} greedy NED", greedy)]
    ours = (f"{scheme}: {_pct(rates[0])} vs greedy {_pct(rates[1])}; sampling only {test['a_only']}, "
            f"greedy only {test['b_only']}")
    return finding_result(fid, claim, PAPER_S, rule, [model], measured=True, rule_ok=test["a_only"] > test["b_only"],
                          evidence=evidence, rates=rates, test=test, needs_test=True, ours=ours)


def s1(run: RunResults) -> FindingResult:
    """The premise: on the model fine-tuned on SD, sampling finds what greedy misses."""
    return _sampling_reveals(run, "S1", run.roles.ft_direct, [])


def s2(run: RunResults) -> FindingResult:
    """SD only in the reward model's data (F2: RLFT.2 memorizes ~none greedily): does sampling reveal some?"""
    return _sampling_reveals(run, "S2", run.roles.rl_sd_in_rm, _rlft2_evidence(run))


def s3(run: RunResults) -> FindingResult:
    """IPO on SD pairs (F8): does sampling reveal more than greedy?"""
    return _sampling_reveals(run, "S3", run.roles.ipo, [ipo_check(run)])


# ---------------------------------------------------------------- E1: ε lower bounds per stage
def epsilon_bound(run: RunResults, model: str) -> dict | None:
    """The final checkpoint's bound on sd_base of `model` (its summary's entry), None when not measured."""
    record = run.epsilon.get(model)
    if not record or not record.get("checkpoints"):
        return None
    return (record["results"].get(record["checkpoints"][-1]) or {}).get(DATASET)


def e1(run: RunResults) -> FindingResult:
    r = run.roles
    ft, others = r.ft_direct, [r.rl_sd_in_rm, r.ipo]
    claim = f"{ft}'s ε lower bound exceeds " + " and ".join(f"{m}'s" for m in others)
    rule = (f"one-run ε lower bound on {DATASET} (final; Steinke et al. 2023): {ft}'s > each of "
            f"{', '.join(others)}'s")
    bounds = {m: epsilon_bound(run, m) for m in (ft, *others)}
    if any(b is None for b in bounds.values()):
        return finding_result("E1", claim, PAPER_E, rule, [ft, *others], measured=False)
    eps = {m: b["epsilon_lower_bound"] for m, b in bounds.items()}
    first = bounds[ft]
    ours = "; ".join(f"{m}: ε >= {eps[m]:.2f} ({bounds[m]['v']}/{bounds[m]['r']} right of m={bounds[m]['m']})"
                     for m in eps) + f" at {100 * first['confidence']:g} %, δ={first['delta']:g}"
    return finding_result("E1", claim, PAPER_E, rule, [ft, *others], measured=True,
                          rule_ok=all(eps[ft] > eps[m] for m in others),
                          evidence=[*_rlft2_evidence(run), ipo_check(run)], ours=ours)


register(
    Finding("S1", PAPER_S, "Sampling reveals SD targets of the fine-tuned model that greedy decoding does not", s1),
    Finding("S2", PAPER_S, "Sampling reveals SD targets of RL via the reward model that greedy decoding does not", s2),
    Finding("S3", PAPER_S, "Sampling reveals SD targets of IPO that greedy decoding does not", s3),
    Finding("E1", PAPER_E, "The fine-tuned model's ε lower bound exceeds RL's and IPO's", e1),
)
