"""A finding's verdict: the statuses, the p-value below which a comparison is not noise, one line of evidence
(`_check`), the row a finding's check returns (`FindingResult`, built by `finding_result`, the one constructor the
built-ins and plugins call; stored as `as_dict()`, read back from disk with `from_dict`), how tables print
figures and statuses, and the detection-dose rule of the canary-design studies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
@dataclass(frozen=True)
class FindingResult:
    """One row of the findings table, as a finding's check returns it. Its evidence lines (`_check`), rates
    (memlens.harness.core.stats.rate_with_interval) and test stay the JSON-shaped dicts those functions return;
    n, ci95 (the first rate's) and p_value (the test's) are read from them. report/findings.json and summary.json
    store `as_dict()`."""

    id: str
    claim: str
    paper: str
    rule: str
    stages: list[str]
    status: str
    ours: str = "–"
    evidence: list[dict] = field(default_factory=list)
    rates: list[dict] = field(default_factory=list)
    test: dict | None = None
    reason: str = ""                         # why it is inconclusive ('' when it is not)
    note: str = ""
    unstable: bool = False                   # the verdict changed under a perturbation as small as a rounding

    @property
    def n(self) -> int | None:
        return (self.rates or [{}])[0].get("n")

    @property
    def ci95(self) -> list[float] | None:
        return (self.rates or [{}])[0].get("ci95")

    @property
    def p_value(self) -> float | None:
        return self.test["p_value"] if self.test else None

    def as_dict(self) -> dict:
        """The stored form (report/findings.json, summary.json `findings`), its keys in this order."""
        return {"id": self.id, "claim": self.claim, "paper": self.paper, "ours": self.ours, "status": self.status,
                "rule": self.rule, "stages": self.stages, "evidence": self.evidence, "rates": self.rates,
                "n": self.n, "ci95": self.ci95, "p_value": self.p_value, "test": self.test, "reason": self.reason,
                "note": self.note, "unstable": self.unstable}

    @classmethod
    def from_dict(cls, stored: dict) -> FindingResult:
        """A row read back from a stored findings.json (n, ci95 and p_value are derived again, not read)."""
        return cls(stored["id"], stored["claim"], stored["paper"], stored["rule"], stored["stages"], stored["status"],
                   stored["ours"], stored["evidence"], stored["rates"], stored["test"], stored["reason"],
                   stored["note"], bool(stored["unstable"]))


def finding_result(fid: str, claim: str, paper: str, rule: str, stages: list[str], *, measured: bool = True,
                   rule_ok: bool | None = None, evidence: list[dict] | None = None, rates: list[dict] | None = None,
                   test: dict | None = None, needs_test: bool = False, ours: str = "–", note: str = "",
                   unstable: str = "") -> FindingResult:
    """A finding's row, for the built-ins and for a finding of your own (a plugin's check); the run is taken to have
    measured it unless `measured=False` says it lacks the data. Status in order: not measured (data missing) >
    inconclusive (evidence failed) > inconclusive (unstable: the verdict changed when the run was repeated under a
    perturbation as small as another rounding of its floats, `unstable` says how) > not reproduced (rule fails) >
    inconclusive (a comparison within noise, or nothing non-zero to compare) > holds."""
    evidence = evidence or []
    status, reasons = _status(measured, rule_ok, evidence, test, needs_test, unstable)
    return FindingResult(fid, claim, paper, rule, stages, status, ours=ours, evidence=evidence, rates=rates or [],
                         test=test, reason="; ".join(reasons), note=note, unstable=bool(unstable) and measured)


def _status(measured: bool, rule_ok: bool | None, evidence: list[dict], test: dict | None, needs_test: bool,
            unstable: str) -> tuple[str, list[str]]:
    """(status, the reasons it is inconclusive), in finding_result's order."""
    if not measured:
        return NOT_MEASURED, []
    if failed := [e for e in evidence if not e["ok"]]:
        return INCONCLUSIVE, [f"{e['check']} = {'missing' if e['value'] is None else _fmt(e['value'])} "
                              f"(needs {e['threshold']})" for e in failed]
    if unstable:
        return INCONCLUSIVE, [f"unstable: {unstable}"]
    if not rule_ok:
        return FAILS, []
    if needs_test and (test is None or test["p_value"] >= P_MAX):
        return INCONCLUSIVE, [f"difference within noise (p = {_fmt(test['p_value']) if test else 'n/a'} >= {P_MAX})"]
    return HOLDS, []


def status_label(finding: FindingResult) -> str:
    """A finding's status as tables print it: 'inconclusive (unstable)' where the verdict changed between runs."""
    return f"{finding.status} (unstable)" if finding.unstable else finding.status


def _fmt(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


# ---------------------------------------------------------------- a verdict over seeds
MIN_SEEDS = 3                # a verdict over seeds is decided only from at least this many runs


def over_seeds(per_seed: list[FindingResult | None]) -> dict:
    """One finding's verdict over runs that differ only in their seed, by a rule fixed before any run: it `holds`
    (or is `not reproduced`) only where every one of at least MIN_SEEDS runs measured it with that same verdict
    and none was unstable under the kernel rerun; anything else is `inconclusive`, with how many runs held and the
    spread of its figures and of every evidence gate that failed in any run. A verdict decided by a gate as close
    as 0.38 against 0.81 of a spread on two processors needs this before it decides anything."""
    measured = [f for f in per_seed if f is not None and f.status != NOT_MEASURED]
    held = sum(f.status == HOLDS for f in measured)
    if not measured:
        status, why = NOT_MEASURED, ""
    elif len(measured) < max(MIN_SEEDS, len(per_seed)):
        status, why = INCONCLUSIVE, f"measured in {len(measured)} run(s), needs {MIN_SEEDS} or more"
    elif any(f.unstable for f in measured):
        status, why = INCONCLUSIVE, "unstable under the kernel rerun in " + \
            f"{sum(f.unstable for f in measured)} of {len(measured)} runs"
    elif {f.status for f in measured} in ({HOLDS}, {FAILS}):
        status, why = measured[0].status, ""
    elif {f.status for f in measured} == {INCONCLUSIVE}:
        status, why = INCONCLUSIVE, "inconclusive in every run"
    else:
        status, why = INCONCLUSIVE, "the verdict differs between runs"
    return {"status": status, "held": held, "measured": len(measured), "reason": why,
            "spread": rate_spread(measured), "gates": failed_gates(measured)}


def rate_spread(findings: list[FindingResult]) -> str:
    """'0.0–0.0 % vs 54.8–64.3 %': each of the findings' rates, lowest to highest over the runs."""
    columns = list(zip(*[f.rates for f in findings if f.rates]))
    if not columns or len(columns[0]) < len(findings):
        return ""
    parts = []
    for rates in columns:
        values = [r["rate"] for r in rates if r.get("rate") is not None]
        if values:
            parts.append(f"{100 * min(values):.1f}–{100 * max(values):.1f} %")
    return " vs ".join(parts)


def failed_gates(findings: list[FindingResult]) -> str:
    """'RLFT.2 reward rise (initial sd) 0.38 / 1.1 / 0.2 (needs >= 0.5)': every evidence gate that failed in any run,
    with its value in each run."""
    checks: dict[str, list] = {}
    thresholds: dict[str, str] = {}
    failed = set()
    for f in findings:
        for e in f.evidence:
            checks.setdefault(e["check"], []).append(e["value"])
            thresholds[e["check"]] = e["threshold"]
            if not e["ok"]:
                failed.add(e["check"])
    return "; ".join(f"{check} {' / '.join('missing' if v is None else _fmt(v) for v in checks[check])} "
                     f"(needs {thresholds[check]})" for check in checks if check in failed)


# ---------------------------------------------------------------- detection at a lower dose
# Designed canaries against SD's own target line (issue #67; Panda et al. 2025 report designed canaries detected where
# natural ones are not), the rule of the two studies that read it: benchmarks/canary_designs.py (through TRL and the
# AuditCallback) and benchmarks/designed_doses.py (experiment=doses_designed against experiment=doses). The detection
# dose of a run is the smallest dose whose LOSS-attack AUC on the target span (that dose's members against every
# held-out canary; attack and span fixed in advance) has a 95 % bootstrap interval above 0.5, none when no dose has.
# "Designed is detected at a lower dose than SD" holds at a seed when the designed run's detection dose is lower than
# the SD run's (SD never detected counts as above every dose); not reproduced when the designed one's is the same or
# higher (or never); inconclusive when neither is detected at any dose, or when a run of the pair did not train. Over
# seeds: over_seeds (at least 3 seeds agree, none says otherwise).
DETECTION_ATTACK = "loss"       # fixed in advance, never the best of several
DETECTION_SPAN = "target"       # the secret a design chooses, not the whole program


def detection_dose(ci_by_dose: Mapping[int, Sequence[float] | None]) -> int | None:
    """The smallest dose whose AUC interval lies above 0.5 (None: no dose); a dose without an AUC is skipped."""
    for dose in sorted(ci_by_dose):
        ci = ci_by_dose[dose]
        if ci is not None and ci[0] > 0.5:
            return dose
    return None


def detection_verdict(designed: Mapping[int, Sequence[float] | None] | None,
                      sd: Mapping[int, Sequence[float] | None] | None,
                      trained: tuple[bool, bool] = (True, True),
                      untrained: str = "a run did not train") -> tuple[str, str]:
    """(status, why) for one route and seed: the designed run's and the SD run's AUC intervals by dose (None: a run is
    missing), whether each trained, and what to say when one did not (its training gate)."""
    if designed is None or sd is None:
        return NOT_MEASURED, "a run is missing"
    if not all(trained):
        return INCONCLUSIVE, untrained
    d, s = detection_dose(designed), detection_dose(sd)
    if d is None and s is None:
        return INCONCLUSIVE, "neither detected at any dose"
    if d is not None and (s is None or d < s):
        return HOLDS, f"x{d} < {'never' if s is None else f'x{s}'}"
    return FAILS, f"{'never' if d is None else f'x{d}'} >= x{s}"
