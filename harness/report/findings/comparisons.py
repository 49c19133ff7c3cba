"""The rule shared by findings that compare two models' memorization of sd_base (F2, F8, P1): one at least
`factor` times the other's rate and at least a floor, tested with McNemar on the same examples."""

from __future__ import annotations

from memlens.harness.core.stats import mcnemar_exact
from memlens.harness.report.findings.run import RunResults, _rate, memorized_flags
from memlens.harness.report.findings.verdict import _pct, finding_result


def _two_models(run: RunResults, first: str, second: str, dataset: str = "sd_base"):
    """((flags of first, flags of second), their rates) on one dataset's final rows; None if either is missing."""
    rows = run.rows(first, dataset), run.rows(second, dataset)
    if None in rows:
        return None
    flags = tuple(memorized_flags(r) for r in rows)
    return flags, [_rate(f"{name} {dataset}", f) for name, f in zip((first, second), flags)]


def _times_higher(run: RunResults, fid: str, texts: tuple[str, str, str], stages: list[str], evidence,
                  first: str, second: str, high: str, factor: float, floor: float) -> dict:
    """A finding that one model memorizes sd_base at least `factor` times the other's rate and at least
    `floor`, tested with McNemar on the paired flags; `evidence(run)` is read only when both were audited.
    The rates are listed as (first, second); `high` names the model expected to memorize more."""
    claim, paper, rule = texts
    pair = _two_models(run, first, second)
    if pair is None:
        return finding_result(fid, claim, paper, rule, stages, measured=False)
    flags, rates = pair
    hi, lo = (0, 1) if high == first else (1, 0)
    h, low = rates[hi]["rate"], rates[lo]["rate"]
    ok = h is not None and low is not None and h >= floor and h >= factor * low
    return finding_result(fid, claim, paper, rule, stages, measured=True, rule_ok=ok, evidence=evidence(run),
                          rates=rates, test=mcnemar_exact(flags[hi], flags[lo]), needs_test=True,
                          ours=f"{_pct(rates[0])} vs {_pct(rates[1])}")
