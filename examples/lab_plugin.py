"""An example plugin: a lab's preference objective, membership-inference attack, audit measure and finding, each
registered as docs/architecture.md says. Name it in the config and every command sees them:

    memlens run experiment=smoke plugins=[examples/lab_plugin.py] stages.IPO.objective=hinge_po

tests/integration/test_plugins.py runs that (the smoke run's PT and IPO only), then `memlens audit` with
`audit.measures=[ned,mia,row_count]` and `memlens report`, each a fresh process."""
from pathlib import Path

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.core.io import atomic_write_json, read_json, read_jsonl
from memlens.harness.core.objectives import OBJECTIVES, Objective
from memlens.harness.measures.mia import ATTACKS, Attack
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.verdict import _result

# A preference objective on TRL's DPOTrainer: the hinge loss of SLiC (DPOConfig loss_type="hinge").
OBJECTIVES.register("hinge_po", Objective("Hinge-PO", "dpo", reference=True, nll=False, beta=0.1,
                                          loss_type=("hinge",)))

# An attack: shorter targets score higher (a length baseline).
ATTACKS.register("target_length", Attack("target length", lambda x: -float(len(x.text))))


def count_rows(cfg, log=print):
    """The number of rows of every dataset the audit plan names."""
    names = sorted({d for entry in cfg.audit_plan for d in entry.get("datasets") or []})
    counts = {d: len(read_jsonl(Path(cfg.run_dir) / "data" / d / "rows.jsonl")) for d in names}
    atomic_write_json(Path(cfg.audit.out_dir) / "row_count.json", counts)


def row_count_table(audit_dir):
    path = Path(audit_dir) / "row_count.json"
    if not path.is_file():
        return None
    return ["dataset", "rows"], [{"dataset": d, "rows": n} for d, n in read_json(path).items()]


MEASURES.register("row_count", Measure("Rows per dataset", count_rows, report_rows=row_count_table))


def ipo_audited(run):
    rows = run.rows("IPO", "sd_base")
    return _result("X1", "the preference model's final checkpoint was audited on SD.Base", "a lab's plugin",
                   "rows > 0", ["IPO"], measured=rows is not None, rule_ok=bool(rows), ours=f"{len(rows or [])} rows")


register(Finding("X1", "a lab's plugin", "the preference model was audited", ipo_audited,
                 measured_by="plugins=[examples/lab_plugin.py]"))
