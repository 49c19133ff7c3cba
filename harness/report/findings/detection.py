"""Detection at a lower dose: the rule that compares a designed canary with SD's own target line (issue #67; Panda et
al. 2025 report designed canaries detected where natural ones are not), defined once for the two studies that read it:
benchmarks/canary_designs.py (through TRL and the AuditCallback) and benchmarks/designed_doses.py (through the
pipeline's routes, experiment=doses_designed against experiment=doses).

The detection dose of a run is the smallest dose whose LOSS-attack AUC on the target span (that dose's members against
every held-out canary; the attack and the span fixed in advance) has a 95 % bootstrap interval above 0.5, and none
when no dose has. "Designed is detected at a lower dose than SD" holds at a seed when the designed run's detection
dose is lower than the SD run's (SD never detected counts as above every dose); it is not reproduced when the designed
one's is the same or higher (or never); it is inconclusive when neither is detected at any dose, or when a run of the
pair did not train. Over seeds: verdict.over_seeds (at least 3 seeds agree, none says otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memlens.harness.report.findings.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED

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
