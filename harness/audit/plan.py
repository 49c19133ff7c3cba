"""`memlens audit experiment=<name>`: audit every model and checkpoint of a run, as its plan says.

The experiment's `audit_plan` lists `{models, control, datasets}` entries (e.g. FT.1, FT.3, RLFT.*
against the control FT.2 — paper 003 Appendix B — and IPO against the base model, Sec. 5.4). Every
`checkpoint-*` of every listed model is scored, each sweep point (`RLFT.1/beta=0.1`) as its own
model. Control completions are generated once per dataset (the completion cache), so adding one
checkpoint and rerunning generates only that checkpoint's completions.

Multi-process: under `accelerate launch --config_file launch/cpu_2proc.yaml -m memlens audit
experiment=...` (or any launcher that sets RANK/WORLD_SIZE, e.g. torchrun or multi_gpu.yaml) each
process audits every N-th example into its own shard directory (rows and completion caches), then
process 0 merges the shards into the run's audit directory (keyed by example id: nothing duplicated)
and writes the summary. The rows are the same as a single-process run's.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import OmegaConf

from memlens.harness.audit.discoverable import audit_discoverable, drop_discoverable_model
from memlens.harness.audit.discoverable import report_rows as discoverable_report_rows
from memlens.harness.audit.discoverable import settings_from_audit as discoverable_settings
from memlens.harness.audit.epsilon import TITLE as EPSILON_TITLE
from memlens.harness.audit.epsilon import audit_epsilon_models, epsilon_settings, require_mia
from memlens.harness.audit.epsilon import report_rows as epsilon_report_rows
from memlens.harness.audit.losses import audit_losses
from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.mia import audit_mia, collect_summaries
from memlens.harness.audit.run import META_SUFFIX, SUMMARY_FILE, check_scored, run_audit, write_summary
from memlens.harness.audit.run import main as audit_one
from memlens.harness.audit.settings import AuditJob, settings_from_config
from memlens.harness.core.config import require_bool
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import (
    RowStore,
    atomic_write_json,
    atomic_write_jsonl,
    read_json,
    read_jsonl,
    require_creatable_dir,
)
from memlens.harness.core.layout import (
    check_listed_name,
    check_model_name,
    checkpoint_dirs,
    data_dir,
    datasets_dir,
    discoverable_dir,
    epsilon_dir,
    heldout_dataset,
    mia_dir,
    models_dir,
    require_inside,
    stale_dir,
)
from memlens.harness.core.processes import process_rank, world_size
from memlens.harness.core.provenance import provenance
from memlens.harness.measures.utility import UTILITY_FILE, utility_of_models
from memlens.harness.model.cache import program_text
from memlens.harness.model.load import distributed_barrier, has_weights, set_threads

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


def _distributed() -> tuple[int, int]:
    return process_rank(), world_size()


def _shard_examples(examples: Path, shard_dir: Path, rank: int, world: int) -> Path:
    """Every world-th example from `rank` on, written to the shard's own examples file."""
    path = shard_dir / "examples" / examples.parent.name / "rows.jsonl"
    if not path.exists():
        atomic_write_jsonl(path, read_jsonl(examples)[rank::world])
    return path


def _merge_shards(shards_root: Path, out_dir: Path) -> None:
    """Fold every shard's rows into the run's audit dir (keyed by id: a rerun merges nothing twice).

    Shard completion caches stay under shards/rank-*/cache: their fingerprints cover the shard's own
    example file, so a rerun with the same number of processes regenerates nothing."""
    for shard in sorted(shards_root.glob("rank-*")):
        shard_audit = shard / "audit"
        for meta in sorted(shard_audit.rglob(f"*{META_SUFFIX}")):
            rel = meta.relative_to(shard_audit)
            rows_file = meta.with_name(meta.name[:-len(META_SUFFIX)] + ".jsonl")
            merged_meta = out_dir / rel
            if not merged_meta.exists():
                m = read_json(meta)
                m["examples_sha256"] = None  # each shard saw part of the set; the merged rows cover all of it
                m["merged_from_processes"] = True
                atomic_write_json(merged_meta, m)
            RowStore(out_dir / rel.parent / rows_file.name).append(RowStore(rows_file).rows())
        shutil.rmtree(shard_audit, ignore_errors=True)


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


def audit_run(cfg, log=print, check_empty: bool = True) -> int:
    """Audit every planned (model, dataset) of a run; resumable; multi-process when launched so.

    With `check_empty`, ends in `check_run_scored` (main() calls that after the loss measures)."""
    run_dir = Path(cfg.run_dir)
    base = job_from_config_defaults(cfg)
    planned = plan_audits(cfg)
    rank, world = _distributed()
    log(f"[audit] {len(planned)} (model, dataset) audits in {run_dir} (process {rank + 1}/{world})")
    out_dir, cache_dir = base.out_dir, base.cache_dir
    shards_root = out_dir / "shards"
    # Rows of a model, control or dataset the run has replaced since are moved here and recomputed.
    replaced = stale_dir(run_dir) / f"audit-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    for item in planned:
        job_out, job_cache, examples = out_dir, cache_dir, item.examples
        if world > 1:
            shard = shards_root / f"rank-{rank}"
            examples = _shard_examples(item.examples, shard, rank, world)
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
            _merge_shards(shards_root, out_dir)
        distributed_barrier()
    if rank == 0:
        record = provenance(seed=cfg.get("seed"), datasets={d: read_json(data_dir(run_dir, d) / "manifest.json")["sha256"]
                                                            for d in sorted({p.dataset for p in planned})},
                            audit=asdict(base.settings), processes=world,
                            plan=[{"model": p.model_name, "control": p.control_name, "dataset": p.dataset}
                                  for p in planned])
        path = write_summary(out_dir, record)
        log(f"[audit] summary of the run: {path}")
        if require_bool(cfg.audit.get("utility", False), "audit.utility"):
            audit_run_utility(cfg, planned, base, log)
        if check_empty:
            check_run_scored(cfg, log)
    return 0


def check_run_scored(cfg, log=print) -> None:
    """`memlens.harness.audit.run.check_scored` over every planned (model, dataset) of the run's summary."""
    if _distributed()[0] != 0:
        return
    base = job_from_config_defaults(cfg)
    summary = read_json(base.out_dir / "summary.json")["results"]
    check_scored(summary, [(p.model_name, p.dataset) for p in plan_audits(cfg)], base.settings.allow_empty, log)


def audit_run_utility(cfg, planned: list[PlannedAudit], base: AuditJob, log=print) -> None:
    """Paper 003 Table 2 analogue for the final model of every planned model and control."""
    models = {p.model_name: p.model_dir for p in planned}
    models.update({p.control_name: p.control_dir for p in planned})
    n = cfg.audit.get("utility_examples")
    record = utility_of_models(models, datasets_dir(cfg.run_dir), base.out_dir, base.settings, base.cache_dir,
                               int(n) if n else None, int(cfg.get("seed") or 0))
    for name, entry in record["results"].items():
        log(f"[audit] utility {name}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in entry.items()))


def job_from_config_defaults(cfg) -> AuditJob:
    """The audit settings and output dirs of the config, without a single model/control/examples."""
    a = cfg.audit
    if a.out_dir in (None, ""):
        raise UserError("audit.out_dir is not set; pass audit.out_dir=<directory for the results>")
    out_dir = require_creatable_dir("audit.out_dir", Path(str(a.out_dir)))
    settings = settings_from_config(a)
    cache_dir = require_creatable_dir("audit.cache_dir",
                                      Path(str(a.cache_dir)) if a.get("cache_dir") else out_dir / "cache")
    return AuditJob(model_dir=Path("."), model_name="", control_dir=Path("."), examples=Path("."), dataset="",
                    all_checkpoints=True, out_dir=out_dir, cache_dir=cache_dir, settings=settings)



def audit_run_losses(cfg, log=print) -> None:
    """Paper 004's loss-based measures for every planned model (`audit.measures` includes `loss`).

    The control run is the plan's control when its checkpoints sit at the same steps as the audited
    model's (paper 004 Sec. 3: same schedule, trained without the strings, e.g. FT.1 vs FT.2);
    otherwise the control's final model serves as the fixed reference of paper 004 Sec. 5, and the
    output is labelled as that upper-bound variant.
    """
    run_dir = Path(cfg.run_dir)
    a = cfg.audit
    by_model: dict[tuple[str, Path, Path], list[str]] = {}
    for item in plan_audits(cfg):
        by_model.setdefault((item.model_name, item.model_dir, item.control_dir), []).append(item.dataset)
    heldout = a.get("loss_heldout")
    for (name, model_dir, control_dir), datasets in by_model.items():
        sets = {d: data_dir(run_dir, d) for d in datasets}
        if heldout and (data_dir(run_dir, heldout) / "rows.jsonl").is_file():
            sets[heldout] = data_dir(run_dir, heldout)
        steps = list(checkpoint_dirs(model_dir))
        matched = bool(steps) and steps == list(checkpoint_dirs(control_dir))
        log(f"[audit] loss measures for {name}: "
            + (f"control run {control_dir.name} (same checkpoint steps)" if matched
               else f"reference model {control_dir.name} (upper-bound variant: checkpoint steps differ)"))
        audit_losses(model_dir, sets, require_inside(Path(a.out_dir) / "losses" / name, a.out_dir, "audit.out_dir"),
                     control_dir=control_dir if matched else None,
                     reference_model=None if matched else control_dir,
                     tau=float(a.get("tau", 0.2)), heldout=heldout if heldout in sets else None,
                     batch_size=int(a.batch_size), device=str(a.get("device") or "auto"),
                     fim_family=a.get("fim_family"), cache_dir=Path(str(a.cache_dir)),
                     seed=cfg.get("seed"))


def mia_reference_texts(run_dir: Path, name: str | None, log=print) -> list[str] | None:
    """The texts of the run's dataset `audit.mia_reference` (each row's `text`, else its whole program): DC-PDD's
    reference corpus of token frequencies. None (and a note) when it is unset or not built in this run."""
    if not name:
        return None
    path = data_dir(run_dir, str(name)) / "rows.jsonl"
    if not path.is_file():
        log(f"[audit] note: audit.mia_reference={name}: {path} is not built in this run, so DC-PDD is not scored; "
            "name a dataset of the run that no audited set is part of (pd_eval: held-out public code)")
        return None
    return [r["text"] if isinstance(r.get("text"), str) else program_text(r) for r in read_jsonl(path)]


def audit_run_mia(cfg, log=print) -> None:
    """Membership inference for every planned model (`audit.measures` includes `mia`): each planned dataset
    whose held-out partner (`<dataset>_heldout`, e.g. sd_base_heldout) is built in the run is scored at every
    checkpoint, members against held-out non-members (memlens.harness.audit.mia), the plan's control as the reference
    model of the calibrated attack."""
    run_dir = Path(cfg.run_dir)
    a = cfg.audit
    by_model: dict[tuple[str, Path, Path, bool], list[str]] = {}
    for item in plan_audits(cfg):
        by_model.setdefault((item.model_name, item.model_dir, item.control_dir, item.all_checkpoints),
                            []).append(item.dataset)
    n_boot = a.get("mia_bootstrap", 1000)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise UserError(f"audit.mia_bootstrap={n_boot!r}: must be a positive integer (bootstrap resamples of each "
                        "interval; 1000 is the default)")
    if a.get("threads"):
        set_threads(int(a.threads))       # as the NED audit does (audit.threads)
    reference = mia_reference_texts(run_dir, a.get("mia_reference"), log)
    scored = 0
    for (name, model_dir, control_dir, all_checkpoints), datasets in by_model.items():
        pairs = {}
        for d in datasets:
            held = data_dir(run_dir, heldout_dataset(d)) / "rows.jsonl"
            if held.is_file():
                pairs[d] = (data_dir(run_dir, d) / "rows.jsonl", held)
        if not pairs:
            continue
        log(f"[audit] membership inference for {name}: {', '.join(pairs)} against their held-out sets")
        audit_mia(model_dir, name, pairs, require_inside(mia_dir(a.out_dir, name), a.out_dir, "audit.out_dir"),
                  control_dir=control_dir, cache_dir=Path(str(a.cache_dir)), all_checkpoints=all_checkpoints,
                  spans=list(a.get("mia_spans") or ["target", "program"]), n_boot=n_boot,
                  seed=int(cfg.get("seed") or 0), batch_size=int(a.batch_size),
                  device=str(a.get("device") or "auto"), fim_family=a.get("fim_family"),
                  reference=reference, reference_name=a.get("mia_reference"))
        scored += 1
    if not scored:
        log("[audit] note: membership inference scored nothing: no planned dataset has a held-out partner "
            "(<dataset>_heldout) in the run; build sd_base_heldout / sd_links_heldout with `memlens data`")
        return
    collect_summaries(a.out_dir)


# --- results of a model that is replaced -------------------------------------------------------------------

def _names_model(recorded: str | None, model_dir: Path, model_name: str) -> bool:
    """Whether a path recorded in a meta file is `model_dir` or one of its checkpoints. Recorded paths are as
    the audit was given them (perhaps relative to another working directory), so `.../models/<name>[/checkpoint-N]`
    at its end counts too."""
    if not recorded:
        return False
    path = Path(recorded)
    if path.name.startswith("checkpoint-"):
        path = path.parent
    tail = ("models", *model_name.split("/"))
    return os.path.realpath(path) == os.path.realpath(model_dir) or path.parts[-len(tail):] == tail


def retire_model_results(audit_dir: Path, model_dir: Path, model_name: str, dest: Path, log=print) -> list[Path]:
    """Move every result computed from the model at `model_dir` (about to be moved to stale/ and retrained)
    to `dest`, keeping its place below the audit dir: NED rows where it is the audited model or the control,
    and its loss measures. The summary is rebuilt from the rows left, and its utility entry dropped; completion
    and loss caches are keyed by the weights' fingerprint, so the new weights never read the old entries.
    Returns what was moved."""
    audit_dir = Path(audit_dir)
    if not audit_dir.is_dir():
        return []
    moved = []
    for meta_path in sorted(audit_dir.rglob(f"*{META_SUFFIX}")):
        rel = meta_path.relative_to(audit_dir)
        if rel.parts[0] == "cache":
            continue
        meta = read_json(meta_path)
        if not (_names_model(meta.get("model_dir"), model_dir, model_name)
                or _names_model(meta.get("control_dir"), model_dir, model_name)):
            continue
        rows_file = meta_path.with_name(meta_path.name[:-len(META_SUFFIX)] + ".jsonl")
        for path in (rows_file, meta_path):
            if path.exists():
                target = dest / path.relative_to(audit_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(path), str(target))
        moved.append(rows_file)
        _remove_empty_parents(meta_path.parent, audit_dir)
    for results in (audit_dir / "losses" / model_name, mia_dir(audit_dir, model_name),
                    discoverable_dir(audit_dir, model_name), epsilon_dir(audit_dir, model_name)):
        if results.is_dir():
            target = dest / results.relative_to(audit_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(results), str(target))
            moved.append(results)
    if moved:
        _drop_from_summaries(audit_dir, model_name)
        log(f"[memlens] {model_name}: {len(moved)} audit result(s) of the replaced model moved to {dest}")
    return moved


def _remove_empty_parents(directory: Path, stop: Path) -> None:
    while directory != stop and directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()
        directory = directory.parent


def _drop_from_summaries(audit_dir: Path, model_name: str) -> None:
    """summary.json rebuilt from the rows left (its provenance kept); the model's utility entry dropped."""
    summary = audit_dir / SUMMARY_FILE
    if summary.is_file():
        write_summary(audit_dir, read_json(summary).get("provenance") or {})
    if mia_dir(audit_dir).is_dir():
        collect_summaries(audit_dir)
    drop_discoverable_model(audit_dir, model_name)
    utility = audit_dir / UTILITY_FILE
    if utility.is_file():
        record = read_json(utility)
        if model_name in (record.get("results") or {}):
            record["results"].pop(model_name)
            atomic_write_json(utility, record)


def audit_run_discoverable(cfg, log=print) -> None:
    """(n, p)-discoverable extraction for every planned model and dataset (`audit.measures` includes `discoverable`,
    after `ned`: it scores the examples the extraction audit scored; memlens.harness.audit.discoverable)."""
    if cfg.audit.get("threads"):
        set_threads(int(cfg.audit.threads))
    audit_discoverable(cfg, plan_audits(cfg), log)


def _run_ned(cfg, log=print) -> None:
    audit_run(cfg, log, check_empty=False)    # check_run_scored comes last: an empty NED audit still gets the rest


MEASURES.register("ned", Measure("Extraction: the counterfactual NED test (paper 003 Sec. 4.2)", _run_ned,
                                 single_model=True))
MEASURES.register("loss", Measure("Loss measures (paper 004)", audit_run_losses))
MEASURES.register("mia", Measure("Membership inference", audit_run_mia))
MEASURES.register("discoverable", Measure("Probabilistic discoverable extraction (Hayes et al. 2024)",
                                          audit_run_discoverable, report_rows=discoverable_report_rows,
                                          check=lambda cfg: discoverable_settings(cfg.audit)))


def audit_run_epsilon(cfg, log=print) -> None:
    """One-run ε lower bounds (harness/audit/epsilon.py) from the MIA rows of every planned model; after mia."""
    audit_epsilon_models(cfg, list(dict.fromkeys(p.model_name for p in plan_audits(cfg))), log)


def _check_epsilon(cfg) -> None:
    require_mia(cfg.audit.get("measures"))
    epsilon_settings(cfg.audit)


MEASURES.register("epsilon", Measure(EPSILON_TITLE, audit_run_epsilon, report_rows=epsilon_report_rows,
                                     check=_check_epsilon))


def requested_measures(cfg) -> list[str]:
    """`audit.measures` (default [ned]) checked against the registry, in registration order."""
    measures = cfg.audit.get("measures") or ["ned"]
    measures = [measures] if isinstance(measures, str) else list(measures)
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise UserError(f"audit.measures={measures}: unknown {unknown}; use a list of {', '.join(MEASURES)} "
                        "(e.g. [ned], [ned,loss,mia])")
    return [m for m in MEASURES if m in measures]


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
    for name in measures:                 # every requested measure's settings first: fail before anything runs
        if MEASURES[name].check is not None:
            MEASURES[name].check(cfg)
    for name in measures:
        start = time.perf_counter()
        MEASURES[name].run(cfg, log=print)
        print(f"[audit] measure {name}: {time.perf_counter() - start:.1f} s")   # what each measure costs a run
    if "ned" in measures:
        check_run_scored(cfg)    # last: an empty NED audit still gets its loss measures and utility
    return 0
