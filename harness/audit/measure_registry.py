"""The audit measures a run can ask for (`audit.measures=[ned, loss, mia, ...]`), one registry.

A measure scores a run's audit plan and writes its results under the audit directory; `audit.measures`
validates against this registry and `memlens audit` runs the requested ones in registration order. Every setting of a
measure is a frozen dataclass: its `settings` parser (the dataclass's `from_config(audit group)`, each error a UserError
naming `audit.<key>=<value>` and the fix) runs for every measure, asked for or not, when the audit is planned
(harness/audit/command.py plan_settings: `memlens audit`, `memlens check` and `memlens run`'s pre-check), so a bad
setting of the last measure stops the audit before any model is scored; the measure's `run(cfg, settings, log)` then
receives the parsed object instead of reading the config. A measure
without a dedicated report section gives `report_rows`: (columns, rows) read back from what it wrote, and the
report lays them out as a table under its title (harness/report/render.py). Each built-in measure registers in the
module that runs it (extraction.py: ned; losses.py, mia.py, discoverable.py, epsilon.py; preference_mia.py: pair_mia; prompt_mia.py:
prompt_mia);
the registry imports those modules the first time it is read, so a command that imported no audit module
(`memlens report`) sees them too, in the order below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.harness.core.registry import Registry


@dataclass(frozen=True)
class Measure:
    """One audit measure. `run(cfg, settings, log)` scores the run's plan (cfg.audit.out_dir is its output root) with
    its parsed settings; a measure without `settings` (a plugin's) is called `run(cfg, log)`."""

    title: str                                       # a section heading in the report
    run: Callable[..., None]
    single_model: bool = False                       # also runs in the one-model audit (audit.model_dir=...)
    report_rows: Callable[[Path], tuple[list[str], list[dict]] | None] | None = None   # from <audit dir>
    settings: Callable[[Any], Any] | None = None     # from_config(cfg.audit) -> its frozen settings, when planned
    check: Callable[..., None] | None = None         # check(cfg): what its settings alone cannot say (e.g. the
                                                     # measures it reads beside it), when planned
    membership_of: str = ""                          # the data kind whose membership it audits ("preference pairs",
                                                     # "RL prompts"): the report puts its table in the membership
                                                     # section, under that kind, instead of a section of its own


def import_builtin_measures() -> None:
    """The modules that run and register the built-in measures (each imports this registry to register, so they are
    imported on the registry's first read, not here at import)."""
    from memlens.harness.audit import (  # noqa: F401  registered on import
        discoverable,
        epsilon,
        extraction,
        losses,
        mia,
        preference_mia,
        prompt_mia,
    )


MEASURES: Registry[Measure] = Registry("audit measure", "audit.measures", builtins=import_builtin_measures,
                                       order=("ned", "loss", "mia", "discoverable", "epsilon", "pair_mia",
                                              "prompt_mia"))
