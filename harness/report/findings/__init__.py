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
bounds per stage (harness/measures/epsilon.py).

The package, by what each module holds: `verdict` the statuses, P_MAX, one evidence line (`_check`) and the verdict
(`_result`, `status_label`); `run` what a finding reads (`Roles`, `RunResults`, `load_loss_rows`) and the per-example
flags and rates; `evidence_gates` the training-evidence thresholds and their checks (`rl_checks`, `method_checks`,
...); `comparisons` the rule of findings that compare two models' rates; `registry` `Finding`, the registry
`FINDINGS` and `findings(run)`; and one module per source of findings, each registering its own: `paper003`
(F1-F8, V4-V7), `preference` (P1-P3), `paper002` (N1-N3), `paper004` (C1-C2), `mia` (M1-M4), `extraction_risk`
(S1-S3, E1). A new finding is a function of `RunResults` returning `_result(...)`, registered as a `Finding` in
the module of its paper.
"""

from __future__ import annotations

# The per-paper modules register their findings on import; the registry imports them itself on its first read and
# orders the table (registry.py TABLE_ORDER), so the order of the imports below decides nothing.
from memlens.harness.report.findings import extraction_risk, mia, paper002, paper003, paper004, preference  # noqa: F401
from memlens.harness.report.findings.evidence_gates import (
    IPO_ACCURACY_MIN,
    MIA_DETECTABLE_AUC,
    NOT_EXTRACTABLE_MAX,
    PAIR_ACCURACY_MIN,
    RL_DISTINCT_SHARE_MIN,
    RL_KL_MIN,
    RL_REWARD_RISE_MIN,
    RL_UTILITY_LOSS_MAX,
    RM_HELDOUT_AUC_MIN,
    RM_SD_AUC_MIN,
    SD_REWARD_DATASETS,
    SOURCE_MEMORIZED_MIN,
    count_check,
    distinct_completion_share,
    ipo_check,
    kl_check,
    method_checks,
    pair_check,
    rl_checks,
    rl_diversity_check,
    rl_utility_check,
    rm_heldout_check,
    rm_sd_check,
)
from memlens.harness.report.findings.extraction_risk import e1, epsilon_bound, s1, s2, s3, sampling_flags
from memlens.harness.report.findings.mia import m1, m2, m3, mia_detection
from memlens.harness.report.findings.paper002 import nmt_stability, repetition_test
from memlens.harness.report.findings.paper003 import f1, f2, f3, f4, f5, f6, f7, f8, under_verifiable_reward
from memlens.harness.report.findings.paper004 import c1, c2, lemma1_premise
from memlens.harness.report.findings.preference import p1, p2, p3, preference_models, reference_based, reference_free
from memlens.harness.report.findings.registry import FINDINGS, Finding, findings
from memlens.harness.report.findings.run import (
    PAPER_RL_ALGORITHM,
    Roles,
    RunResults,
    load_loss_rows,
    memorized_flags,
    pii_flags,
    within_k_flags,
)
from memlens.harness.report.findings.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, P_MAX, status_label

__all__ = [
    # the verdict
    "HOLDS", "FAILS", "INCONCLUSIVE", "NOT_MEASURED", "P_MAX", "status_label",
    # what a finding reads
    "Roles", "RunResults", "PAPER_RL_ALGORITHM", "load_loss_rows", "memorized_flags", "within_k_flags", "pii_flags",
    # the evidence gates
    "RM_SD_AUC_MIN", "RM_HELDOUT_AUC_MIN", "RL_REWARD_RISE_MIN", "RL_UTILITY_LOSS_MAX", "RL_DISTINCT_SHARE_MIN",
    "RL_KL_MIN", "IPO_ACCURACY_MIN", "PAIR_ACCURACY_MIN", "MIA_DETECTABLE_AUC", "NOT_EXTRACTABLE_MAX",
    "SOURCE_MEMORIZED_MIN", "SD_REWARD_DATASETS", "rl_checks", "rl_utility_check", "distinct_completion_share",
    "rl_diversity_check", "kl_check", "rm_sd_check", "rm_heldout_check", "ipo_check", "pair_check", "method_checks",
    "count_check",
    # the registry and the table
    "Finding", "FINDINGS", "findings",
    # the findings and their helpers, by module
    "paper003", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "under_verifiable_reward",
    "preference", "reference_free", "reference_based", "preference_models", "p1", "p2", "p3",
    "paper002", "nmt_stability", "repetition_test",
    "paper004", "lemma1_premise", "c1", "c2",
    "mia", "mia_detection", "m1", "m2", "m3",
    "extraction_risk", "sampling_flags", "s1", "s2", "s3", "epsilon_bound", "e1",
]
