"""A finding's id names one claim across the project: the code-model findings (FINDINGS: F, V, P, N, C, M, S, E) and
the formal-language study's (FORMAL_FINDINGS: L) share none, so `grep L3` or a row of findings.json leads to one
check. Each registry refuses a second registration of an id; this is the check across them, on the ids the rows
carry (what reports and findings.json print) as well as the registered ones."""

from __future__ import annotations

from collections import Counter

from memlens.harness.core.formal_study import FormalSettings
from memlens.harness.report.findings import FINDINGS, RunResults, findings
from memlens.harness.report.formal_findings import FORMAL_FINDINGS, FormalResults, formal_findings


def test_no_finding_id_is_used_twice_across_the_findings_and_the_formal_study():
    registered = [*FINDINGS, *FORMAL_FINDINGS]
    # An empty run and an empty study: every check answers `not measured`, with the id its row carries.
    rows = [f.id for f in findings(RunResults({}))]
    rows += [f.id for f in formal_findings(FormalResults(FormalSettings.load({}), [], []))]
    assert rows == registered                              # each row carries the id it is registered under
    twice = sorted(fid for fid, n in Counter(registered).items() if n > 1)
    assert not twice, f"finding ids used twice: {twice}; give one of them another id"
    assert {fid for fid in FORMAL_FINDINGS} == {f"L{i}" for i in range(1, 8)}
