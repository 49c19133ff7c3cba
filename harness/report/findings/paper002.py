"""Findings N1-N3 of paper 002 (Finding Memo, NMT): Table 1, its neighbourhood columns, and Algorithm 3 in
Sec. 5, judged here, and only here, on the figures the NMT run's summary stores (harness/measures/nmt.py
`finding_numbers`); the NMT report (harness/report/nmt_report.py) reads its verdicts from `NMT_RULES`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memlens.harness.core.stats import fisher_exact
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults
from memlens.harness.report.findings.verdict import P_MAX, FindingResult, _pct, finding_result


# ---------------------------------------------------------------- N1-N3 (paper 002)
def nmt_numbers(value: Any) -> str:
    """NMT figures for a table cell: a ratio per bucket as a chain, shares by kind, one rate as a percentage."""
    if isinstance(value, list):
        return " → ".join(f"{v:.1f}" if isinstance(v, (int, float)) else str(v) for v in value) + " %"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_pct(v)}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in value.items())
    if isinstance(value, (int, float)):
        return _pct(value)
    return json.dumps(value)


# The rule of each finding, over the stored figures (`finding_numbers`); a missing figure holds no rule.
def n1_rises_with_repetitions(f: dict) -> bool:
    """Table 1: the memorized ratio rises with the repetition bucket (Pearson r > 0)."""
    return f.get("N1_pearson") is not None and f["N1_pearson"] > 0


def n2_suffix_over_prefix_start_least(f: dict) -> bool:
    """Table 1's neighbourhood columns: suffix perturbations keep the memorized output more often than prefix ones,
    and start perturbations least."""
    shares = f.get("N2_shares") or {}
    pre, suf, start = (shares.get(c) for c in ("prefix", "suffix", "start"))
    return None not in (pre, suf, start) and suf > pre and start <= min(pre, suf)


def n3_recovery_for_most(f: dict) -> bool:
    """Sec. 5, Algorithm 3: the best recovery symbol gives a new output for most (> 50 %) memorized sources."""
    return f.get("N3_best_rate") is not None and f["N3_best_rate"] > 0.5


@dataclass(frozen=True)
class NmtRule:
    holds: Callable[[dict], bool]
    text: str               # the rule as the findings table states it
    numbers: str            # the figure the table shows
    test: Callable[[dict], dict | None] | None = None     # a comparison that must put it below P_MAX


def _nmt(fid: str, claim: str, paper: str) -> Callable:
    """N1-N3 from the NMT run's summary.json `finding_numbers`: NMT_RULES[fid] must hold, and where the finding is a
    comparison, its test must put it below P_MAX."""
    def check(run: RunResults) -> FindingResult:
        rule = NMT_RULES[fid]
        f = (run.nmt or {}).get("finding_numbers") or {}
        text = rule.text + (f" (Fisher p < {P_MAX}, fewest vs most repetitions)" if rule.test else "")
        if rule.numbers not in f:
            return finding_result(fid, claim, paper, text, ["NMT"], measured=False)
        unstable, note = nmt_stability(run.nmt, rule)
        return finding_result(fid, claim, paper, text, ["NMT"], measured=True, rule_ok=rule.holds(f),
                              ours=nmt_numbers(f.get(rule.numbers)), test=rule.test(run.nmt) if rule.test else None,
                              needs_test=rule.test is not None, unstable=unstable, note=note)
    return check


def nmt_stability(summary: dict, rule: NmtRule) -> tuple[str, str]:
    """(why the verdict is unstable or "", a note with the second run's figure) from the NMT summary's
    `stability` block: the same run repeated with torch computing under a second level of CPU kernels
    (harness/audit/nmt.py step 8). A verdict (its rule, and its test where it has one) that is not the same
    under both is decided by rounding, not by the model."""
    stability = summary.get("stability") or {}
    second = stability.get("finding_numbers") or {}
    if not stability.get("informative") or rule.numbers not in second:
        return "", "not checked under a second kernel level" if stability else ""
    first = summary["finding_numbers"]
    here, there = stability.get("kernels"), stability.get("second_kernels")

    def verdict(numbers: dict, run: dict) -> bool:
        passed = rule.test(run) if rule.test else None
        return rule.holds(numbers) and (rule.test is None or (passed or {}).get("p_value", 1) < P_MAX)

    ours, theirs = nmt_numbers(first.get(rule.numbers)), nmt_numbers(second.get(rule.numbers))
    if verdict(first, summary) == verdict(second, stability):
        return "", f"same verdict with {there} kernels ({theirs})"
    return f"the verdict differs between torch's CPU kernel levels ({ours} with {here}, {theirs} with {there})", ""


def repetition_test(nmt_summary: dict) -> dict | None:
    """N1 as a comparison: memorized share of the most-repeated bucket vs the least-repeated one (different
    pairs: Fisher's exact test). None when the summary has no per-bucket counts (an older run)."""
    buckets = ((nmt_summary.get("buckets") or {}).get("buckets")) or []
    if len(buckets) < 2 or not all("memorized" in b and "total" in b for b in buckets):
        return None
    low, high = min(buckets, key=lambda b: b["repetitions"]), max(buckets, key=lambda b: b["repetitions"])
    return fisher_exact(high["memorized"], high["total"], low["memorized"], low["total"])


NMT_RULES: dict[str, NmtRule] = {
    "N1": NmtRule(n1_rises_with_repetitions, "Pearson r of the memorized ratio with repetitions > 0",
                  "N1_ratio_pct_by_bucket", repetition_test),
    "N2": NmtRule(n2_suffix_over_prefix_start_least, "suffix share kept > prefix share, start share least",
                  "N2_shares"),
    "N3": NmtRule(n3_recovery_for_most, "best recovery symbol's rate > 50 %", "N3_best_rate"),
}

register(
    Finding("N1", "paper 002 Table 1", "NMT: memorization rises with repetitions",
            _nmt("N1", "NMT: memorization rises with repetitions", "Table 1: ratio grows with the bucket")),
    Finding("N2", "paper 002 Table 1, neighbourhood columns",
            "NMT: suffix perturbations keep the memorized output more than prefix ones; start least",
            _nmt("N2", "NMT: suffix perturbations keep the memorized output more than prefix ones; start least",
                 "Table 1, neighbourhood columns")),
    Finding("N3", "paper 002 Sec. 5, Algorithm 3", "NMT: the recovery symbol gives new outputs for most memorized sources",
            _nmt("N3", "NMT: the recovery symbol gives new outputs for most memorized sources", "Sec. 5, Algorithm 3")),
)
