"""A finding's verdict: the statuses, the p-value below which a comparison is not noise, one line of evidence
(`_check`) and the verdict that weighs them (`_result`), and how tables print figures and statuses."""

from __future__ import annotations

from typing import Any

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "not reproduced", "inconclusive", "not measured"
P_MAX = 0.05                 # a comparison is "not noise" below this p-value (two-sided exact test)


def _pct(rate: dict | float | None) -> str:
    value = rate.get("rate") if isinstance(rate, dict) else rate
    if value is None:
        return "–"
    if isinstance(rate, dict):
        low, high = rate["ci95"]
        return f"{100 * value:.1f} % [{100 * low:.0f}–{100 * high:.0f}] ({rate['k']}/{rate['n']})"
    return f"{100 * value:.1f} %"


def _check(check: str, value: float | None, threshold: str, ok: bool | None) -> dict:
    """One evidence line; a value the run does not have is a failed check (`missing`)."""
    return {"check": check, "value": value, "threshold": threshold, "ok": bool(ok) if value is not None else False}


# ---------------------------------------------------------------- the verdict
def _result(fid: str, claim: str, paper: str, rule: str, stages: list[str], *, measured: bool,
            rule_ok: bool | None = None, evidence: list[dict] | None = None, rates: list[dict] | None = None,
            test: dict | None = None, needs_test: bool = False, ours: str = "–", note: str = "",
            unstable: str = "") -> dict:
    """Status in order: not measured (data missing) > inconclusive (evidence failed) > inconclusive (unstable:
    the verdict changed when the run was repeated under a perturbation as small as another rounding of its
    floats, `unstable` says how) > not reproduced (rule fails) > inconclusive (a comparison within noise, or
    nothing non-zero to compare) > holds."""
    evidence = evidence or []
    reasons = []
    if not measured:
        status = NOT_MEASURED
    elif failed := [e for e in evidence if not e["ok"]]:
        status = INCONCLUSIVE
        reasons = [f"{e['check']} = {'missing' if e['value'] is None else _fmt(e['value'])} (needs {e['threshold']})"
                   for e in failed]
    elif unstable:
        status = INCONCLUSIVE
        reasons = [f"unstable: {unstable}"]
    elif not rule_ok:
        status = FAILS
    elif needs_test and (test is None or test["p_value"] >= P_MAX):
        status = INCONCLUSIVE
        reasons = [f"difference within noise (p = {_fmt(test['p_value']) if test else 'n/a'} >= {P_MAX})"]
    else:
        status = HOLDS
    primary = (rates or [{}])[0]
    return {"id": fid, "claim": claim, "paper": paper, "ours": ours, "status": status, "rule": rule,
            "stages": stages, "evidence": evidence, "rates": rates or [], "n": primary.get("n"),
            "ci95": primary.get("ci95"), "p_value": test["p_value"] if test else None, "test": test,
            "reason": "; ".join(reasons), "note": note, "unstable": bool(unstable) and measured}


def status_label(finding: dict) -> str:
    """A finding's status as tables print it: 'inconclusive (unstable)' where the verdict changed between runs."""
    return f"{finding['status']} (unstable)" if finding.get("unstable") else finding["status"]


def _fmt(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)
