"""The extraction measure over a run (`audit.measures` includes `ned`, the default): the counterfactual NED test
(paper 003 Sec. 4.2) of every planned model at every checkpoint against its control, resumable, sharded across
processes when launched so (harness/audit/shards.py); then the run's summary and, with `audit.utility`, paper 003
Table 2's utility of every planned model. Control completions are generated once per dataset (the completion cache),
so adding one checkpoint and rerunning generates only that checkpoint's completions.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.plan import PlannedAudit, job_from_config_defaults, plan_audits
from memlens.harness.audit.run import check_scored, run_audit, write_summary
from memlens.harness.audit.settings import AuditJob, AuditSettings, setting
from memlens.harness.audit.shards import distributed, merge_shards, shard_examples
from memlens.harness.core.config import AUDIT_UTILITY_DEFAULT, audit_utility
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json
from memlens.harness.core.layout import data_dir, datasets_dir, stale_dir
from memlens.harness.core.provenance import provenance
from memlens.harness.measures.utility import utility_of_models
from memlens.harness.model.load import distributed_barrier


@dataclass(frozen=True)
class NedSettings:
    """The ned measure's settings: the scoring knobs (AuditSettings, recorded in every .meta.json and the summary) and
    the whole-run utility audit's keys (KEYS); parsed and checked when the audit is planned (harness/audit/command.py),
    before any model is scored."""

    KEYS: ClassVar[dict[str, str]] = {"utility": "utility", "utility_examples": "utility_examples"}

    utility: bool = AUDIT_UTILITY_DEFAULT  # paper 003 Table 2's utility of every planned model after the NED audit
    utility_examples: int | None = 200   # seeded subset size of each utility set; None: all
    scoring: AuditSettings = field(default_factory=AuditSettings)

    def __post_init__(self):
        n = self.utility_examples
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise UserError(f"audit.utility_examples={n!r}: must be a positive integer (the seeded subset of each "
                            "utility set) or null (all of it)")

    @classmethod
    def from_config(cls, a) -> NedSettings:
        """audit.utility and audit.utility_examples (a missing key takes its default) and the scoring knobs, checked;
        each error names the key and the fix."""
        return cls(audit_utility(a), setting(a, cls, "utility_examples"),
                   AuditSettings.from_config(a))


class JobLog:
    """The log of one (model, dataset) audit of a run: every line goes to `<audit dir>/audit_log.txt`; the
    console gets the first warning or note of the job (the rest repeat it per checkpoint) and, from the
    caller, one line with the job's final rate. A run audits dozens of (model, checkpoint, dataset) triples,
    whose cache counts are diagnostics, not results."""

    FILE = "audit_log.txt"

    def __init__(self, out_dir: Path, console=print):
        self.path, self.console, self.told = Path(out_dir) / self.FILE, console, False

    def __call__(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        if not self.told and line.startswith(("[audit] warning", "[audit] note")):
            self.told = True
            self.console(line + (f" (each checkpoint: {self.path})" if "warning" in line else ""))


def job_line(out_dir: Path, item: PlannedAudit, scored: int) -> str:
    """`[audit] FT.3 on sd_base vs FT.2: 4 checkpoint(s) + final; final 27/42 memorized (64.3 % [49.2, 77.0])`
    (`scored`: how many models of the job were scored, the final one included)."""
    entry = (((read_json(out_dir / "summary.json").get("results") or {}).get(item.model_name) or {})
             .get("final") or {}).get(item.dataset) or {}
    rate, ci = entry.get("rate"), entry.get("ci95")
    final = ("nothing scored" if rate is None else
             f"{entry['n_memorized']}/{entry['n_scored']} memorized ({100 * rate:.1f} % "
             f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}])")
    return (f"[audit] {item.model_name} on {item.dataset} vs {item.control_name}: {scored - 1} checkpoint(s) + final; "
            f"final {final}")


def audit_run(cfg, log=print, check_empty: bool = True, settings: NedSettings | None = None) -> int:
    """Audit every planned (model, dataset) of a run; resumable; multi-process when launched so.

    With `check_empty`, ends in `check_run_scored` (main() calls that after the loss measures). `settings`: parsed
    when the audit was planned (None: here)."""
    run_dir = Path(cfg.run_dir)
    settings = settings or NedSettings.from_config(cfg.audit)
    base = job_from_config_defaults(cfg, settings.scoring)
    planned = plan_audits(cfg)
    rank, world = distributed()
    log(f"[audit] {len(planned)} (model, dataset) audits in {run_dir} (process {rank + 1}/{world})")
    out_dir, cache_dir = base.out_dir, base.cache_dir
    shards_root = out_dir / "shards"
    # Rows of a model, control or dataset the run has replaced since are moved here and recomputed.
    replaced = stale_dir(run_dir) / f"audit-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    for item in planned:
        job_out, job_cache, examples = out_dir, cache_dir, item.examples
        if world > 1:
            shard = shards_root / f"rank-{rank}"
            examples = shard_examples(item.examples, shard, rank, world)
            job_out, job_cache = shard / "audit", shard / "cache"
        job = AuditJob(model_dir=item.model_dir, model_name=item.model_name, control_dir=item.control_dir,
                       examples=examples, dataset=item.dataset, all_checkpoints=item.all_checkpoints,
                       out_dir=job_out, cache_dir=job_cache, settings=base.settings,
                       stale_dir=replaced / job_out.relative_to(out_dir))
        stats = run_audit(job, seed=cfg.get("seed"), log=JobLog(job_out, log), check_empty=False)
        if world == 1:      # sharded rows are merged (and summarised) after every job
            log(job_line(out_dir, item, len(stats)))
    if world > 1:
        distributed_barrier()
        if rank == 0:
            merge_shards(shards_root, out_dir)
        distributed_barrier()
    if rank == 0:
        record = provenance(seed=cfg.get("seed"), datasets={d: read_json(data_dir(run_dir, d) / "manifest.json")["sha256"]
                                                            for d in sorted({p.dataset for p in planned})},
                            audit=asdict(base.settings), processes=world,
                            plan=[{"model": p.model_name, "control": p.control_name, "dataset": p.dataset}
                                  for p in planned])
        path = write_summary(out_dir, record)
        log(f"[audit] summary of the run: {path}")
        if settings.utility:
            audit_run_utility(cfg, planned, base, settings.utility_examples, log)
        if check_empty:
            check_run_scored(cfg, log)
    return 0


def check_run_scored(cfg, log=print) -> None:
    """`memlens.harness.audit.run.check_scored` over every planned (model, dataset) of the run's summary."""
    if distributed()[0] != 0:
        return
    base = job_from_config_defaults(cfg)
    summary = read_json(base.out_dir / "summary.json")["results"]
    check_scored(summary, [(p.model_name, p.dataset) for p in plan_audits(cfg)], base.settings.allow_empty, log)


def audit_run_utility(cfg, planned: list[PlannedAudit], base: AuditJob, n_examples: int | None, log=print) -> None:
    """Paper 003 Table 2 analogue for the final model of every planned model and control (`n_examples`: the seeded
    subset of each utility set, audit.utility_examples; None: all)."""
    models = {p.model_name: p.model_dir for p in planned}
    models.update({p.control_name: p.control_dir for p in planned})
    record = utility_of_models(models, datasets_dir(cfg.run_dir), base.out_dir, base.settings, base.cache_dir,
                               n_examples, int(cfg.get("seed") or 0))
    for name, entry in record["results"].items():
        log(f"[audit] utility {name}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in entry.items()))


def _run_ned(cfg, settings: NedSettings, log=print) -> None:
    # check_run_scored comes last: an empty NED audit still gets the rest
    audit_run(cfg, log, check_empty=False, settings=settings)


MEASURES.register("ned", Measure("Extraction: the counterfactual NED test (paper 003 Sec. 4.2)", _run_ned,
                                 single_model=True, settings=NedSettings.from_config))
