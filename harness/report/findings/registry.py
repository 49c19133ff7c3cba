"""The findings table as a registry (harness/core/registry.py): each finding a `Finding`, registered by the module of
the paper it comes from; the registry imports those modules (import_builtin_findings) the first time it is read and lists the findings in the
table's order below, whichever module was imported first; `findings(run)` runs every registered finding in that
order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memlens.harness.core.errors import UserError
from memlens.harness.core.registry import Registry
from memlens.harness.report.findings.run import RunResults
from memlens.harness.report.findings.verdict import NOT_MEASURED, FindingResult


@dataclass(frozen=True)
class Finding:
    """One row of the findings table: its id, where the claim comes from, the claim in a few words, and the check
    that turns a run's results into the row (a verdict.FindingResult: claim, rule, evidence, rates, test and status)."""

    id: str                                  # the row's id, e.g. "F2"; the check's result carries the same id
    source: str                              # the paper and section the claim comes from, e.g. "paper 003 Sec. 5.2"
    title: str                               # the claim in short (the row's own claim may name the run's models)
    check: Callable[[RunResults], FindingResult]
    measured_by: str = ""                    # what measures it, for a run that does not (built-ins: MEASURED_BY)


def import_builtin_findings() -> None:
    """The modules that register the built-in findings (each imports this registry to register, so they are imported
    on the registry's first read, not here at import)."""
    from memlens.harness.report.findings import (  # noqa: F401  registered on import
        doses,
        extraction_risk,
        membership,
        objectives,
        paper002,
        paper003,
        paper004,
    )


# The table's order of the built-in ids.
TABLE_ORDER = ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "V4", "V5", "V6", "V7", "P1", "P2", "P3",
               "N1", "N2", "N3", "C1", "C2", "M1", "M2", "M3", "M4", "M5", "M6", "S1", "S2", "S3", "E1", "D1", "D2", "D3", "D4", "D5")
FINDINGS: Registry[Finding] = Registry("finding", "id", builtins=import_builtin_findings, order=TABLE_ORDER)
# The run that measures each built-in finding: a report names it beside the findings its own run did not measure.
QUICKSTART, FINDINGS_RUN = "experiment=quickstart", "experiment=findings"
MEASURED_BY = {**dict.fromkeys(("F1", "F2", "F3", "F8"), QUICKSTART),
               **dict.fromkeys(("F4", "F5", "F6", "F7"), FINDINGS_RUN),
               **dict.fromkeys(("V4", "V5", "V6", "V7"), "experiment=findings_rlvr"),
               **dict.fromkeys(("P1", "P2", "P3"), "experiment=preference_objectives"),
               **dict.fromkeys(("N1", "N2", "N3"), "memlens nmt experiment=nmt_quickstart + report.nmt_summary"),
               **dict.fromkeys(("C1", "C2"), "audit.measures=[...,loss], as experiment=smoke"),
               **dict.fromkeys(("M1", "M2", "M3", "M4"), "audit.measures=[ned,mia]"),
               "M5": "audit.measures=[ned,pair_mia], as experiment=quickstart",
               "M6": "audit.measures=[ned,prompt_mia], as experiment=quickstart",
               **dict.fromkeys(("S1", "S2", "S3"), "audit.measures=[ned,discoverable]"),
               "E1": "audit.measures=[...,mia,epsilon] with data.sd.membership=coins"}


def measured_by(finding_id: str) -> str:
    """What measures a finding (its registration's `measured_by`, else the built-in table's)."""
    entry = FINDINGS[finding_id] if finding_id in FINDINGS else None
    return (entry.measured_by if entry is not None else "") or MEASURED_BY.get(finding_id, "")


def not_measured_line(judged: list[FindingResult]) -> str:
    """'F4, F5, F6, F7 (experiment=findings); N1, N2, N3 (memlens nmt ...)': the findings a run did not measure,
    in one line, each group with what measures it ('' when it measured them all)."""
    groups: dict[str, list[str]] = {}
    for f in judged:
        if f.status == NOT_MEASURED:
            groups.setdefault(measured_by(f.id) or "no run of memlens's", []).append(f.id)
    return "; ".join(f"{', '.join(ids)} ({how})" for how, ids in groups.items())


def register(*entries: Finding) -> tuple[Finding, ...]:
    """Register each finding under its id, in the order given (the table's); returns them."""
    for entry in entries:
        FINDINGS.register(entry.id, entry)
    return entries


def findings(run: RunResults) -> list[FindingResult]:
    """The findings table of a run: every registered finding's check, in the table's order."""
    results = []
    for finding in FINDINGS.values():
        result = finding.check(run)
        if not isinstance(result, FindingResult):     # e.g. a plugin's check written against the old dict rows
            raise UserError(f"finding {finding.id}: its check returned a {type(result).__name__}, not a FindingResult; "
                            "build its row with finding_result(...) (memlens.harness.report.findings.verdict)")
        results.append(result)
    return results
