"""Findings C1-C2 of paper 004: Lemma 1's premise (Sec. 3, App. D) and recollection vs contextual memorization
(Sec. 5, Table 1), read from the loss audit's per-string rows against a real control run."""

from __future__ import annotations

from memlens.harness.audit.losses import VARIANT_CONTROL
from memlens.harness.report.findings.evidence_gates import count_check
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults, _rate
from memlens.harness.report.findings.verdict import FindingResult, _pct, finding_result


# ---------------------------------------------------------------- C1-C2 (paper 004)
def _control_run_rows(run: RunResults) -> list[dict]:
    """Training strings' loss rows measured against a real control run (paper 004's D' = D minus the
    strings); rows of the reference-model proxy (`reference_upper_bound`) have no counterfactual loss per
    epoch, and held-out strings were never in D."""
    return [r for r in run.loss_rows if r.get("variant", VARIANT_CONTROL) == VARIANT_CONTROL
            and not r.get("heldout") and "train_loss" in r and "control_loss" in r]


def lemma1_premise(row: dict) -> bool:
    """Paper 004 App. D, the assumption of Lemma 1's proof: at every checkpoint the string's training loss
    is not above its counterfactual (control) loss."""
    return all(t <= c for t, c in zip(row["train_loss"], row["control_loss"]))


def c1(run: RunResults) -> FindingResult:
    claim, paper = "Lemma 1's premise holds in practice: training loss <= counterfactual loss", "assumed (App. D)"
    rule = "the premise holds at every checkpoint for >= 90 % of audited strings"
    rows = _control_run_rows(run)
    if not rows:
        return finding_result("C1", claim, paper, rule, ["loss audit"], measured=False)
    flags = {f"{r.get('model', '')}/{r.get('dataset', '')}/{r['id']}": lemma1_premise(r) for r in rows}
    rate = _rate("strings whose premise holds", flags)
    failing = sorted(k for k, ok in flags.items() if not ok)
    return finding_result("C1", claim, paper, rule, ["loss audit"], measured=True, rule_ok=rate["rate"] >= 0.9,
                          rates=[rate], ours=_pct(rate),
                          note=(f"premise fails for {len(failing)} strings, e.g. {', '.join(failing[:3])}"
                                if failing else ""))


def c2(run: RunResults) -> FindingResult:
    claim = "Most strings recollection calls memorized are not contextually memorized"
    paper = "most (Sec. 5, Table 1)"
    rule = "at the last checkpoint, of the recollection-memorized strings, > 50 % are not contextually memorized (95 % CI above 50 %)"
    rows = _control_run_rows(run)
    if not rows:
        return finding_result("C2", claim, paper, rule, ["loss audit"], measured=False)
    recollected = [r for r in rows if r["score"]["recollection"][-1] > 0]
    if not recollected:
        return finding_result("C2", claim, paper, rule, ["loss audit"], measured=True,
                              evidence=[count_check("recollection-memorized strings", 0, 1)])
    flags = {f"{r.get('model', '')}/{r.get('dataset', '')}/{r['id']}": not r["score"]["contextual"][-1] > 0
             for r in recollected}
    rate = _rate("recollected but not contextual", flags)
    return finding_result("C2", claim, paper, rule, ["loss audit"], measured=True, rule_ok=rate["ci95"][0] > 0.5,
                          rates=[rate], ours=_pct(rate))


register(
    Finding("C1", "paper 004 Sec. 3, App. D (Lemma 1)", "Lemma 1's premise holds in practice", c1),
    Finding("C2", "paper 004 Sec. 5, Table 1",
            "Most strings recollection calls memorized are not contextually memorized", c2),
)
