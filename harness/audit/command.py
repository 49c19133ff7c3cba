"""`memlens audit experiment=<name>`: every requested measure (`audit.measures`, default [ned]) over the run's audit
plan (harness/audit/plan.py), or `audit.model_dir=...`: the extraction audit of one model (harness/audit/run.py).

Every requested measure's settings are checked before the first one runs; the measures run in the registry's order
(harness/audit/measure_registry.py) and each reports its cost in seconds.
"""

from __future__ import annotations

import time

from memlens.harness.audit.epsilon import epsilon_attack
from memlens.harness.audit.extraction import check_run_scored
from memlens.harness.audit.measure_registry import MEASURES
from memlens.harness.audit.run import main as audit_one
from memlens.harness.core.errors import UserError


def requested_measures(cfg) -> list[str]:
    """`audit.measures` (default [ned]) checked against the registry, in registration order."""
    measures = cfg.audit.get("measures") or ["ned"]
    measures = [measures] if isinstance(measures, str) else list(measures)
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise UserError(f"audit.measures={measures}: unknown {unknown}; use a list of {', '.join(MEASURES)} "
                        "(e.g. [ned], [ned,loss,mia])")
    return [m for m in MEASURES if m in measures]


def check_settings(cfg) -> str:
    """Every name and setting the audit will read, checked against the registries (plugins included) before anything
    trains or is scored: `audit.measures`, each requested measure's own settings (`check(cfg)`), and the MIA attack
    that ranks canaries for ε, which a typo would otherwise only meet after every stage trained. Returns a line for
    `memlens check`; a bad value raises a UserError naming the key and the choices."""
    measures = requested_measures(cfg)
    for name in measures:
        if MEASURES[name].check is not None:
            MEASURES[name].check(cfg)
    epsilon_attack(cfg.audit)
    return f"measures {', '.join(measures)}: names and settings ok"


def main(cfg) -> int:
    """`memlens audit`: one model (audit.model_dir=...) or every model of a run's audit_plan."""
    measures = requested_measures(cfg)
    if cfg.audit.get("model_dir"):
        multi = [m for m in measures if not MEASURES[m].single_model]
        if multi:
            raise UserError(f"audit.measures={measures}: the single-model audit (audit.model_dir=...) computes "
                            f"{', '.join(MEASURES.where(lambda m: m.single_model))} only; drop {multi}, or run "
                            "them over a run's plan with `memlens audit experiment=<name>`")
        return audit_one(cfg)
    check_settings(cfg)                   # every requested measure's settings first: fail before anything runs
    for name in measures:
        start = time.perf_counter()
        MEASURES[name].run(cfg, log=print)
        print(f"[audit] measure {name}: {time.perf_counter() - start:.1f} s")   # what each measure costs a run
    if "ned" in measures:
        check_run_scored(cfg)    # last: an empty NED audit still gets its loss measures and utility
    return 0
