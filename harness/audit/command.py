"""`memlens audit experiment=<name>`: every requested measure (`audit.measures`, default [ned]) over the run's audit
plan (harness/audit/plan.py), or `audit.model_dir=...`: the extraction audit of one model (harness/audit/run.py).

Every measure's settings are parsed into its dataclass (plan_settings) before any model is scored; the
measures run in the registry's order (harness/audit/measure_registry.py), each with its parsed settings, and each
reports its cost in seconds.
"""

from __future__ import annotations

import time
from typing import Any

from memlens.harness.audit.extraction import check_run_scored
from memlens.harness.audit.measure_registry import MEASURES
from memlens.harness.audit.run import main as audit_one
from memlens.harness.audit.settings import settings_from_config
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


def plan_settings(cfg) -> dict[str, Any]:
    """{measure: its parsed settings} of every registered measure with a `settings` parser (plugins included), and
    every other name the audit will read, checked before anything trains or is scored: `audit.measures`, the scoring
    knobs every measure shares (AuditSettings), each measure's settings dataclass and each requested measure's
    `check(cfg)`. A measure that is not asked for is parsed too (as the ε attack always was): a bad `audit.*` value is
    wrong whichever measures run, and otherwise waits for the run that asks for it. A bad value raises a UserError
    naming `audit.<key>=<value>` and the fix (the CLI exits 2)."""
    measures = requested_measures(cfg)
    settings_from_config(cfg.audit)        # the shared knobs first: a bad batch size is named once, as its own key
    parsed = {name: m.settings(cfg.audit) for name, m in MEASURES.items() if m.settings is not None}
    for name in measures:
        if MEASURES[name].check is not None:
            MEASURES[name].check(cfg)
    return parsed


def check_settings(cfg) -> str:
    """plan_settings as a line for `memlens check` and `memlens run`'s pre-check (a bad value raises)."""
    plan_settings(cfg)
    return f"measures {', '.join(requested_measures(cfg))}: names and settings ok"


def run_measure(cfg, name: str, settings: dict[str, Any]) -> None:
    """One requested measure, with the settings parsed when the audit was planned (a plugin's without settings:
    `run(cfg, log)`)."""
    measure = MEASURES[name]
    if name in settings:
        measure.run(cfg, settings[name], log=print)
    else:
        measure.run(cfg, log=print)


def main(cfg) -> int:
    """`memlens audit`: one model (audit.model_dir=...) or every model of a run's audit_plan."""
    measures = requested_measures(cfg)
    if cfg.audit.get("model_dir"):
        multi = [m for m in measures if not MEASURES[m].single_model]
        if multi:
            raise UserError(f"audit.measures={measures}: the single-model audit (audit.model_dir=...) computes "
                            f"{', '.join(MEASURES.where(lambda m: m.single_model))} only; drop {multi}, or run "
                            "them over a run's plan with `memlens audit experiment=<name>`")
        plan_settings(cfg)                # as the run's audit: every setting checked before the model is scored
        return audit_one(cfg)
    settings = plan_settings(cfg)         # every measure's settings first: fail before anything runs
    for name in measures:
        start = time.perf_counter()
        run_measure(cfg, name, settings)
        print(f"[audit] measure {name}: {time.perf_counter() - start:.1f} s")   # what each measure costs a run
    if "ned" in measures:
        check_run_scored(cfg)    # last: an empty NED audit still gets its loss measures and utility
    return 0
