"""Findings N1-N3 of paper 002 (Finding Memo, NMT): Table 1, its neighbourhood columns, and Algorithm 3 in
Sec. 5, read from the NMT run's summary (harness/measures/nmt.py `findings`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memlens.harness.core.stats import fisher_exact
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults
from memlens.harness.report.findings.verdict import P_MAX, _pct, _result


# ---------------------------------------------------------------- N1-N3 (paper 002)
def _nmt_numbers(value: Any) -> str:
    """NMT figures for a table cell: a ratio per bucket as a chain, shares by kind, one rate as a percentage."""
    if isinstance(value, list):
        return " → ".join(f"{v:.1f}" if isinstance(v, (int, float)) else str(v) for v in value) + " %"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_pct(v)}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in value.items())
    if isinstance(value, (int, float)):
        return _pct(value)
    return json.dumps(value)


def _nmt(fid: str, keys: tuple[str, ...], numbers: str, claim: str, paper: str,
         test: Callable[[dict], dict | None] | None = None) -> Callable:
    """N1-N3 from the NMT run's summary.json `findings` (memlens.harness.measures.nmt.findings): all `keys` must hold,
    and where the finding is a comparison, `test(summary)` must put it below P_MAX."""
    def check(run: RunResults) -> dict:
        f = (run.nmt or {}).get("findings") or {}
        rule = " and ".join(keys) + (f" (Fisher p < {P_MAX}, fewest vs most repetitions)" if test else "")
        if not all(k in f for k in keys):
            return _result(fid, claim, paper, rule, ["NMT"], measured=False)
        unstable, note = nmt_stability(run.nmt, keys, numbers, test)
        return _result(fid, claim, paper, rule, ["NMT"], measured=True, rule_ok=all(bool(f[k]) for k in keys),
                       ours=_nmt_numbers(f.get(numbers)), test=test(run.nmt) if test else None,
                       needs_test=test is not None, unstable=unstable, note=note)
    return check


def nmt_stability(summary: dict, keys: tuple[str, ...], numbers: str,
                  test: Callable[[dict], dict | None] | None = None) -> tuple[str, str]:
    """(why the verdict is unstable or "", a note with the second run's figure) from the NMT summary's
    `stability` block: the same run repeated with torch computing under a second level of CPU kernels
    (harness/audit/nmt.py step 8). A verdict (its rule, and its test where it has one) that is not the same
    under both is decided by rounding, not by the model."""
    stability = summary.get("stability") or {}
    second = stability.get("findings") or {}
    if not stability.get("informative") or not all(k in second for k in keys):
        return "", "not checked under a second kernel level" if stability else ""
    first = summary["findings"]
    here, there = stability.get("kernels"), stability.get("second_kernels")

    def verdict(findings: dict, run: dict) -> bool:
        passed = test(run) if test else None
        return all(bool(findings[k]) for k in keys) and (test is None or (passed or {}).get("p_value", 1) < P_MAX)

    ours, theirs = _nmt_numbers(first.get(numbers)), _nmt_numbers(second.get(numbers))
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


register(
    Finding("N1", "paper 002 Table 1", "NMT: memorization rises with repetitions",
            _nmt("N1", ("N1_memorization_rises_with_repetitions",), "N1_ratio_pct_by_bucket",
                 "NMT: memorization rises with repetitions", "Table 1: ratio grows with the bucket", repetition_test)),
    Finding("N2", "paper 002 Table 1, neighbourhood columns",
            "NMT: suffix perturbations keep the memorized output more than prefix ones; start least",
            _nmt("N2", ("N2_suffix_kept_more_than_prefix", "N2_start_kept_least"), "N2_shares",
                 "NMT: suffix perturbations keep the memorized output more than prefix ones; start least",
                 "Table 1, neighbourhood columns")),
    Finding("N3", "paper 002 Sec. 5, Algorithm 3", "NMT: the recovery symbol gives new outputs for most memorized sources",
            _nmt("N3", ("N3_recovery_for_most_memorized",), "N3_best_rate",
                 "NMT: the recovery symbol gives new outputs for most memorized sources", "Sec. 5, Algorithm 3")),
)
