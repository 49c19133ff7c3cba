"""A run's audit plan: the experiment's `audit_plan` resolved against the run's finished models and built datasets.

The plan lists `{models, control, datasets}` entries (e.g. FT.1, FT.3, RLFT.* against the control FT.2 — paper 003
Appendix B — and IPO against the base model, Sec. 5.4). Every finished model named, and each sweep point of one
(`RLFT.1/beta=0.1`) as its own model, is paired with every dataset; errors name the plan's key. The measures
(harness/audit/extraction.py, losses.py, mia.py, discoverable.py, epsilon.py) each run over this plan;
`memlens audit` is harness/audit/command.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from memlens.harness.audit.settings import AuditJob, AuditSettings, settings_from_config
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import require_creatable_dir
from memlens.harness.core.layout import check_listed_name, check_model_name, data_dir, models_dir
from memlens.harness.model.load import has_weights

PROVENANCE_FILE = "provenance.json"


@dataclass(frozen=True)
class PlannedAudit:
    model_name: str       # name under <run_dir>/models/, e.g. "RLFT.1/beta=0.1"
    model_dir: Path
    control_name: str
    control_dir: Path
    dataset: str
    examples: Path
    all_checkpoints: bool = True   # plan key `checkpoints`: "all" (default) or "final"


def _finished_models(models_dir: Path, name: str) -> list[tuple[str, Path]]:
    """A finished model by name, or every finished sweep point below it (`RLFT.1` -> `RLFT.1/beta=*`)."""
    root = models_dir / name
    if (root / PROVENANCE_FILE).is_file():
        return [(name, root)]
    points = sorted(p.parent for p in root.glob(f"*/{PROVENANCE_FILE}")) if root.is_dir() else []
    return [(f"{name}/{p.name}", p) for p in points]


def _control(models: Path, control: str, where: str) -> tuple[str, Path]:
    """(name, directory) of a plan's control: a finished model of the run, or a model directory of the user's
    (a model never trained on the audited data, e.g. the public model a pipeline started from)."""
    found = _finished_models(models, control)
    if len(found) == 1:
        return found[0]
    path = Path(str(control)).expanduser()
    if path.is_dir() and has_weights(path):
        return str(path), path
    raise UserError(f"{where}.control={control!r}: neither a finished model of this run ({models / control}) nor "
                    "a model directory with *.safetensors weights; train it first (memlens run experiment=...) "
                    "or give the directory of your control model")


def plan_audits(cfg) -> list[PlannedAudit]:
    """Resolve the experiment's audit_plan against what exists in the run; errors name the key."""
    run_dir = Path(cfg.run_dir)
    raw = cfg.get("audit_plan")
    plan = OmegaConf.to_container(raw, resolve=True) if raw is not None else []
    if not plan:
        raise UserError("no audit_plan in this config: pass experiment=<name> (whose audit_plan lists "
                        "{models, control, datasets}), or audit one model with audit.model_dir=... "
                        "audit.control_dir=... audit.examples=...")
    models = models_dir(run_dir)
    planned: list[PlannedAudit] = []
    for i, entry in enumerate(plan):
        where = f"audit_plan[{i}]"
        for key in ("models", "control", "datasets"):
            if not entry.get(key):
                raise UserError(f"{where}.{key} is missing; each entry needs models, control and datasets")
        # Each becomes a path part: models/<model>, data/<dataset>, audit/<model>/<checkpoint>/<dataset>.jsonl
        for model in entry["models"]:
            check_model_name(model, f"{where}.models")
        for dataset in entry["datasets"]:
            check_listed_name(dataset, f"{where}.datasets")
        control_name, control_dir = _control(models, entry["control"], where)
        checkpoints = entry.get("checkpoints", "all")
        if checkpoints not in ("all", "final"):
            raise UserError(f"{where}.checkpoints={checkpoints!r}: use all (every checkpoint-*, the default) "
                            "or final (the finished model only, e.g. for a sanity baseline)")
        for model in entry["models"]:
            found = _finished_models(models, model)
            if not found:
                raise UserError(f"{where}.models: {model!r} has no finished model under {models}; "
                                "train it first or remove it from the plan")
            for dataset in entry["datasets"]:
                examples = data_dir(run_dir, dataset) / "rows.jsonl"
                if not examples.is_file():
                    raise UserError(f"{where}.datasets: {dataset!r} not built ({examples} missing); run "
                                    "`memlens data experiment=...` or fix the dataset name")
                planned += [PlannedAudit(name, path, control_name, control_dir, dataset, examples,
                                         checkpoints == "all") for name, path in found]
    return planned


def job_from_config_defaults(cfg, settings: AuditSettings | None = None) -> AuditJob:
    """The audit settings (`settings` when already parsed) and output dirs of the config, without a single
    model/control/examples."""
    a = cfg.audit
    if a.out_dir in (None, ""):
        raise UserError("audit.out_dir is not set; pass audit.out_dir=<directory for the results>")
    out_dir = require_creatable_dir("audit.out_dir", Path(str(a.out_dir)))
    settings = settings or settings_from_config(a)
    cache_dir = require_creatable_dir("audit.cache_dir",
                                      Path(str(a.cache_dir)) if a.get("cache_dir") else out_dir / "cache")
    return AuditJob(model_dir=Path("."), model_name="", control_dir=Path("."), examples=Path("."), dataset="",
                    all_checkpoints=True, out_dir=out_dir, cache_dir=cache_dir, settings=settings)
