"""The findings table as a registry (harness/core/registry.py): each finding a `Finding`, registered by the module of
the paper it comes from; the registry imports those modules the first time it is read and lists the findings in the
table's order below, whichever module was imported first; `findings(run)` runs every registered finding in that
order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memlens.harness.core.registry import Registry
from memlens.harness.report.findings.run import RunResults


@dataclass(frozen=True)
class Finding:
    """One row of the findings table: its id, where the claim comes from, the claim in a few words, and the check
    that turns a run's results into the row (verdict._result: claim, rule, evidence, rates, test and status)."""

    id: str                                  # the row's id, e.g. "F2"; the check's result carries the same id
    source: str                              # the paper and section the claim comes from, e.g. "paper 003 Sec. 5.2"
    title: str                               # the claim in short (the row's own claim may name the run's models)
    check: Callable[[RunResults], dict]


# The modules that register the built-in findings, and the table's order of their ids.
FINDING_MODULES = tuple(f"memlens.harness.report.findings.{name}" for name in (
    "paper003", "preference", "paper002", "paper004", "mia", "extraction_risk"))
TABLE_ORDER = ("F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8", "V4", "V5", "V6", "V7", "P1", "P2", "P3",
               "N1", "N2", "N3", "C1", "C2", "M1", "M2", "M3", "S1", "S2", "S3", "E1")
FINDINGS: Registry[Finding] = Registry("finding", "id", builtins=FINDING_MODULES, order=TABLE_ORDER)


def register(*entries: Finding) -> tuple[Finding, ...]:
    """Register each finding under its id, in the order given (the table's); returns them."""
    for entry in entries:
        FINDINGS.register(entry.id, entry)
    return entries


def findings(run: RunResults) -> list[dict]:
    """The findings table of a run: every registered finding's check, in the table's order."""
    return [finding.check(run) for finding in FINDINGS.values()]
