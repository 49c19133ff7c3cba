"""The papers' findings, checked against one run's stored results — only where the run can show them.

A finding holds only when three things are true, and each is written beside the verdict:
1. **evidence**: the stages it depends on demonstrably trained (harness/report/evidence.py: the reward
   model's AUC on SD, each RL point's reward rise and KL to its reference, and that its policy did not
   collapse to get there (held-out code loss, distinct greedy completions), IPO's preference accuracy,
   the fine-tuned model's own memorization). A failed or missing check makes the finding
   `inconclusive` with the reason — a persistence of 100 % through an RL stage that did not move is no
   evidence of persistence.
2. **the rule**: the paper's claim turned into a stated margin (e.g. F2: RLFT.2 <= FT.3 / 5).
3. **not noise**: a comparison of two rates passes an exact test at p < 0.05 (McNemar on the same
   examples, Fisher on different ones; harness/core/stats.py). Right direction but p >= 0.05: `inconclusive`.
Statuses: `holds`, `not reproduced` (the rule fails with the evidence in place), `inconclusive`,
`not measured` (the run has no models or data for it). Every rate carries n and a 95 % Wilson interval.

Findings F1-F8 follow paper 003 Sec. 5 (5.1: FT.1 -> RLFT.1 persistence, Fig. 1; 5.2: SD only in the
reward model's data, FT.3 vs RLFT.2; 5.3 and App. E: RL-prompt memorization, RLFT.4; 5.4: IPO vs RLHF);
N1-N3 the NMT run's (paper 002 Table 1, its neighbourhood columns, and Algorithm 3 in Sec. 5); C1-C2
paper 004 (Lemma 1's premise, Sec. 3; recollection vs contextual memorization, Sec. 5); M1-M4 membership
inference (harness/measures/mia.py: is a stage's SD detectable, whether or not it is extractable); S1-S3 what
sampling reveals that greedy decoding does not (harness/measures/discoverable.py) and E1 the one-run ε lower
bounds per stage (harness/measures/epsilon.py); D1-D3 memorization against repetition dose (data.sd.doses).

The package, by what each module holds: `verdict` the statuses, P_MAX, one evidence line (`_check`) and the verdict
(`FindingResult`, built by `finding_result`; `status_label`); `run` what a finding reads (`Roles`, `RunResults`,
`load_loss_rows`) and the per-example flags and rates; `evidence_gates` the training-evidence thresholds and their checks
(`rl_checks`, `method_checks`, ...); `comparisons` the rule of findings that compare two models' rates; `registry` `Finding`, the registry
`FINDINGS` and `findings(run)`; and one module per source of findings, each registering its own: `paper003`
(F1-F8, V4-V7), `objectives` (P1-P3), `paper002` (N1-N3), `paper004` (C1-C2), `membership` (M1-M4),
`extraction_risk` (S1-S3, E1), `doses` (D1-D3). A new finding is a function of `RunResults` returning
`finding_result(...)` (a plugin's too), registered as a `Finding` in the module of its source.
"""

from __future__ import annotations

# The per-paper modules register their findings on import; the registry imports them itself on its first read and
# orders the table (registry.py TABLE_ORDER), so importing this package is enough. The names below are what the rest
# of the project reads from the package; anything else is imported from the module that defines it.
from memlens.harness.report.findings.evidence_gates import distinct_completion_share, method_checks
from memlens.harness.report.findings.registry import FINDINGS, Finding, findings
from memlens.harness.report.findings.run import Roles, RunResults, load_loss_rows
from memlens.harness.report.findings.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, status_label

__all__ = [
    "HOLDS", "FAILS", "INCONCLUSIVE", "NOT_MEASURED", "status_label",          # the verdict
    "Roles", "RunResults", "load_loss_rows",                                   # what a finding reads
    "distinct_completion_share", "method_checks",                              # the evidence gates the report shows
    "Finding", "FINDINGS", "findings",                                         # the registry and the table
]
