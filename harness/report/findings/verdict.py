"""A finding's verdict: the statuses, the p-value below which a comparison is not noise, one line of evidence
(`_check`) and the verdict that weighs them (`_result`; `finding_result` is its public name for plugins), and how
tables print figures and statuses."""

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


def finding_result(fid: str, claim: str, paper: str, rule: str, stages: list[str], *, measured: bool = True,
                   **verdict: Any) -> dict:
    """A finding's row, for a finding of your own (a plugin's check): the built-ins' verdict (`_result`, whose
    keywords it takes: rule_ok, evidence, rates, test, needs_test, ours, note, unstable) under a public name, the run
    taken to have measured it unless `measured=False` says it lacks the data."""
    return _result(fid, claim, paper, rule, stages, measured=measured, **verdict)


def status_label(finding: dict) -> str:
    """A finding's status as tables print it: 'inconclusive (unstable)' where the verdict changed between runs."""
    return f"{finding['status']} (unstable)" if finding.get("unstable") else finding["status"]


def _fmt(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


# ---------------------------------------------------------------- a verdict over seeds
MIN_SEEDS = 3                # a verdict over seeds is decided only from at least this many runs


def over_seeds(per_seed: list[dict | None]) -> dict:
    """One finding's verdict over runs that differ only in their seed, by a rule fixed before any run: it `holds`
    (or is `not reproduced`) only where every one of at least MIN_SEEDS runs measured it with that same verdict
    and none was unstable under the kernel rerun; anything else is `inconclusive`, with how many runs held and the
    spread of its figures and of every evidence gate that failed in any run. A verdict decided by a gate as close
    as 0.38 against 0.81 of a spread on two processors needs this before it decides anything."""
    measured = [f for f in per_seed if f is not None and f["status"] != NOT_MEASURED]
    held = sum(f["status"] == HOLDS for f in measured)
    if not measured:
        status, why = NOT_MEASURED, ""
    elif len(measured) < max(MIN_SEEDS, len(per_seed)):
        status, why = INCONCLUSIVE, f"measured in {len(measured)} run(s), needs {MIN_SEEDS} or more"
    elif any(f.get("unstable") for f in measured):
        status, why = INCONCLUSIVE, "unstable under the kernel rerun in " + \
            f"{sum(bool(f.get('unstable')) for f in measured)} of {len(measured)} runs"
    elif {f["status"] for f in measured} in ({HOLDS}, {FAILS}):
        status, why = measured[0]["status"], ""
    elif {f["status"] for f in measured} == {INCONCLUSIVE}:
        status, why = INCONCLUSIVE, "inconclusive in every run"
    else:
        status, why = INCONCLUSIVE, "the verdict differs between runs"
    return {"status": status, "held": held, "measured": len(measured), "reason": why,
            "spread": rate_spread(measured), "gates": failed_gates(measured)}


def rate_spread(findings: list[dict]) -> str:
    """'0.0–0.0 % vs 54.8–64.3 %': each of the findings' rates, lowest to highest over the runs."""
    columns = list(zip(*[f["rates"] for f in findings if f.get("rates")]))
    if not columns or len(columns[0]) < len(findings):
        return ""
    parts = []
    for rates in columns:
        values = [r["rate"] for r in rates if r.get("rate") is not None]
        if values:
            parts.append(f"{100 * min(values):.1f}–{100 * max(values):.1f} %")
    return " vs ".join(parts)


def failed_gates(findings: list[dict]) -> str:
    """'RLFT.2 reward rise (initial sd) 0.38 / 1.1 / 0.2 (needs >= 0.5)': every evidence gate that failed in any run,
    with its value in each run."""
    checks: dict[str, list] = {}
    thresholds: dict[str, str] = {}
    failed = set()
    for f in findings:
        for e in f.get("evidence") or []:
            checks.setdefault(e["check"], []).append(e["value"])
            thresholds[e["check"]] = e["threshold"]
            if not e["ok"]:
                failed.add(e["check"])
    return "; ".join(f"{check} {' / '.join('missing' if v is None else _fmt(v) for v in checks[check])} "
                     f"(needs {thresholds[check]})" for check in checks if check in failed)
