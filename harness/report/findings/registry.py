"""The findings table as a registry (harness/core/registry.py): each finding a `Finding`, registered by the module of
the paper it comes from, in the table's order (the package's __init__ imports those modules in that order);
`findings(run)` runs every registered finding in that order."""

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


FINDINGS: Registry[Finding] = Registry("finding", "id")


def register(*entries: Finding) -> tuple[Finding, ...]:
    """Register each finding under its id, in the order given (the table's); returns them."""
    for entry in entries:
        FINDINGS.register(entry.id, entry)
    return entries


def findings(run: RunResults) -> list[dict]:
    """The findings table of a run: every registered finding's check, in registration order."""
    return [finding.check(run) for finding in FINDINGS.values()]
