"""`memlens verify run_dir=...`: does a finished run still hold what it recorded, and do its results follow from its rows?

Read only; nothing in the run is written. In order, stopping at the first difference:
  datasets     each data/<dataset>/rows.jsonl against its manifest.json's sha256 (core.io.file_sha256, as the
               data build computes it);
  provenance   each models/<NAME>/provenance.json's dataset hashes against those files;
  models       each audit rows file's .meta.json: the scored checkpoint's and the control's fingerprints
               (model.load.model_fingerprint, as the audit computes them) and the examples' sha256 (where they
               are a dataset of the run);
  rows         each extraction row's ned and control_ned recomputed from its own target and completions
               (text.distance.sliding_window_ned_batch) and its memorized flag from those with the audit's k
               (measures.memorization.row_memorized), as the audit computed them;
  audit        audit/summary.json's results rebuilt from the stored rows (audit.run.build_summary);
  report       the report rendered again from the same rows into a temporary folder, with the run's own config
               (run.json), figures off: findings.json, summary.json (but its provenance: where and when it was
               rendered) and every table row of report.md, against the run's.
Exit 0 with one line per part when all match; exit 1 naming the first difference: the file, the field, both values.
A run moved or copied since it ran is verified where it is now: paths it recorded inside its old run_dir are read
inside the new one.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.harness.audit.run import META_SUFFIX, SUMMARY_FILE, build_summary
from memlens.harness.core import layout
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import RowStore, file_sha256, read_json
from memlens.harness.core.layout import (
    DATASET_MANIFEST,
    DATASET_ROWS,
    PROVENANCE_FILE,
    RUN_RECORD,
    data_dir,
    datasets_dir,
    models_dir,
)
from memlens.harness.measures.memorization import row_memorized
from memlens.harness.model.load import model_fingerprint
from memlens.harness.report.render import render_report
from memlens.harness.text.distance import sliding_window_ned_batch

REPORT_JSON = ("findings.json", "summary.json")
RENDERED_WHERE = "provenance"          # report/summary.json's record of where and when it was rendered: not a result
MISSING = "<missing>"
WHAT = {"datasets": "data/<dataset>/rows.jsonl against manifest.json's sha256",
        "provenance": "provenance.json's dataset hashes against those files",
        "models": "checkpoint, control and examples hashes in the audit's .meta.json files",
        "rows": "extraction rows' ned, control_ned and memorized recomputed from their own fields",
        "audit": "audit/summary.json rebuilt from the stored rows",
        "report": "findings.json, summary.json and report.md's table rows rendered again"}


@dataclass(frozen=True)
class Comparison:
    """One recorded value beside the value found now."""

    part: str              # datasets, provenance, models, audit, report
    file: Path             # the file that records the value
    field: str             # where in that file
    recorded: Any
    found: Any
    how: str = "found"     # how `found` was obtained: "hashes to", "recomputed", ...

    @property
    def matches(self) -> bool:
        return self.recorded == self.found

    def __str__(self) -> str:
        return f"{self.file}: field {self.field}: recorded {_short(self.recorded)}, {self.how} {_short(self.found)}"


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


# ---------------------------------------------------------------------------------------------- where things are
@dataclass(frozen=True)
class RunPaths:
    """The run as it lies now, and the run_dir it recorded: a recorded path inside the old run_dir is read inside
    the new one (a run copied or moved since it ran)."""

    run_dir: Path
    recorded_run_dir: Path | None

    def here(self, recorded: str | Path) -> Path:
        path = Path(str(recorded))
        if self.recorded_run_dir is not None and path.is_relative_to(self.recorded_run_dir):
            return self.run_dir / path.relative_to(self.recorded_run_dir)
        return path

    def relocated(self, value: Any) -> Any:
        """`value` (a config) with every string that names a path inside the recorded run_dir moved here."""
        if isinstance(value, dict):
            return {k: self.relocated(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.relocated(v) for v in value]
        if isinstance(value, str) and self.recorded_run_dir is not None and value.startswith(str(self.recorded_run_dir)):
            return str(self.here(value))
        return value


def recorded_config(run_dir: Path, cfg) -> tuple[dict, RunPaths]:
    """The config the run ran with (run.json), moved to where the run is now; a run without run.json (an
    AuditCallback's out_dir) is read with the config of this command."""
    from omegaconf import OmegaConf  # lazy: hydra's config library, as the CLI loads it

    record = run_dir / RUN_RECORD
    if not record.is_file():
        return OmegaConf.to_container(cfg, resolve=True), RunPaths(run_dir, None)
    config = read_json(record).get("config") or {}
    paths = RunPaths(run_dir, Path(str(config["run_dir"])) if config.get("run_dir") else None)
    return {**paths.relocated(config), "run_dir": str(run_dir)}, paths


# ---------------------------------------------------------------------------------------------- the parts
class Hashes:
    """sha256 of each file, computed once however many records name it."""

    def __init__(self):
        self._done: dict[Path, str] = {}

    def of(self, path: Path) -> str:
        if not path.is_file():
            return MISSING
        if path not in self._done:
            self._done[path] = file_sha256(path)
        return self._done[path]


def dataset_hashes(run_dir: Path, hashes: Hashes) -> Iterator[Comparison]:
    """Each dataset's rows against the sha256 its manifest recorded."""
    for manifest in sorted(datasets_dir(run_dir).glob(f"*/{DATASET_MANIFEST}")):
        recorded = read_json(manifest).get("sha256")
        yield Comparison("datasets", manifest, "sha256", recorded, hashes.of(manifest.parent / DATASET_ROWS),
                         f"{DATASET_ROWS} hashes to")


def provenance_hashes(run_dir: Path, hashes: Hashes) -> Iterator[Comparison]:
    """Each model's provenance.json: the sha256 of every dataset it trained on, against the dataset now."""
    for record in sorted(models_dir(run_dir).rglob(PROVENANCE_FILE)):
        for name, recorded in sorted((read_json(record).get("datasets") or {}).items()):
            rows = data_dir(run_dir, name) / DATASET_ROWS
            yield Comparison("provenance", record, f"datasets.{name}", recorded, hashes.of(rows),
                             f"{rows} hashes to")


def _fingerprint(model_dir: Path) -> str:
    try:
        return model_fingerprint(model_dir)
    except UserError:                  # no weights there (deleted, never consolidated): what was recorded is gone
        return f"{MISSING} (no *.safetensors in {model_dir})"


def model_fingerprints(run_dir: Path, audit_dir: Path, paths: RunPaths, hashes: Hashes) -> Iterator[Comparison]:
    """Each audited checkpoint, its control and its examples, against the fingerprints its rows were scored with."""
    for meta_path in sorted(audit_dir.rglob(f"*{META_SUFFIX}")):
        meta = read_json(meta_path)
        if "model_fingerprint" not in meta:
            continue                   # not an extraction rows file's meta (another measure's)
        checkpoint = paths.here(meta["model_dir"])          # the scored directory itself (a checkpoint's, or the final)
        yield Comparison("models", meta_path, "model_fingerprint", meta["model_fingerprint"],
                         _fingerprint(checkpoint), f"{checkpoint} fingerprints to")
        control = paths.here(meta["control_dir"])
        yield Comparison("models", meta_path, "control_fingerprint", meta["control_fingerprint"],
                         _fingerprint(control), f"{control} fingerprints to")
        rows = data_dir(run_dir, meta["dataset"]) / DATASET_ROWS
        if rows.is_file():             # the examples were a dataset of the run (a callback's canaries are not)
            yield Comparison("models", meta_path, "examples_sha256", meta["examples_sha256"], hashes.of(rows),
                             f"{rows} hashes to")


def extraction_rows(audit_dir: Path) -> Iterator[Comparison]:
    """Each extraction row's distances and verdict, recomputed from the row's own strings with the audit's k."""
    for meta_path in sorted(audit_dir.rglob(f"*{META_SUFFIX}")):
        meta = read_json(meta_path)
        rows_file = meta_path.with_name(meta_path.name[:-len(META_SUFFIX)] + ".jsonl")
        if "model_fingerprint" not in meta or not rows_file.is_file():
            continue
        rows = RowStore(rows_file, key="id").rows()
        targets = [r["target"] for r in rows]
        neds = sliding_window_ned_batch(targets, [r["completion"] for r in rows])
        control_neds = sliding_window_ned_batch(targets, [r["control_completion"] for r in rows])
        k = meta["settings"]["k"]
        for row, ned, control_ned in zip(rows, neds, control_neds):
            where = f"row id={row['id']}"
            yield Comparison("rows", rows_file, f"{where} ned", row["ned"], ned, "recomputed")
            yield Comparison("rows", rows_file, f"{where} control_ned", row["control_ned"], control_ned, "recomputed")
            yield Comparison("rows", rows_file, f"{where} memorized", row["memorized"],
                             row_memorized(ned, control_ned, row["excluded"], k), f"recomputed (k={k})")


def _json(value: Any) -> Any:
    """`value` as it reads back from the file it is written to (harness/core/io.py atomic_write_json)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def first_difference(recorded: Any, found: Any, field: str = "") -> tuple[str, Any, Any] | None:
    """(the dotted field, both values) of the first place two JSON values differ, or None."""
    if isinstance(recorded, dict) and isinstance(found, dict):
        for key in sorted(set(recorded) | set(found), key=str):
            where = f"{field}.{key}" if field else str(key)
            if key not in recorded or key not in found:
                return where, recorded.get(key, MISSING), found.get(key, MISSING)
            if (diff := first_difference(recorded[key], found[key], where)) is not None:
                return diff
        return None
    if isinstance(recorded, list) and isinstance(found, list) and len(recorded) == len(found):
        for i, (a, b) in enumerate(zip(recorded, found)):
            if (diff := first_difference(a, b, f"{field}[{i}]")) is not None:
                return diff
        return None
    return None if recorded == found else (field or "(the whole file)", recorded, found)


def json_comparisons(part: str, file: Path, recorded: Any, found: Any) -> Iterator[Comparison]:
    """One comparison of a whole JSON file, its first differing field named when it differs."""
    diff = first_difference(_json(recorded), _json(found))
    field, a, b = diff if diff is not None else ("(every field)", None, None)
    yield Comparison(part, file, field, a, b, "recomputed")


def audit_summary(audit_dir: Path) -> Iterator[Comparison]:
    """audit/summary.json's results against the summary rebuilt from the stored rows."""
    path = audit_dir / SUMMARY_FILE
    if not path.is_file():
        raise UserError(f"{path} does not exist: verify reads a finished run (`memlens run` or `memlens audit` writes "
                        "it); set run_dir to such a run")
    yield from json_comparisons("audit", path, read_json(path).get("results"), build_summary(audit_dir))


def report_outputs(config) -> Iterator[Comparison]:
    """The report's findings.json, summary.json and report.md tables against the same report rendered again."""
    from omegaconf import open_dict  # lazy: hydra's config library, as the CLI loads it

    report = layout.report_dir(config)
    if not all((report / name).is_file() for name in REPORT_JSON):
        return                          # a run whose report was not rendered: nothing to compare
    with tempfile.TemporaryDirectory(prefix="memlens-verify-") as tmp:
        again = Path(tmp)
        cfg = config.copy()
        with open_dict(cfg):
            cfg.report = {**(cfg.get("report") or {}), "out_dir": str(again), "figures": False}
        with contextlib.redirect_stdout(io.StringIO()):    # the report's own lines: this command prints its own
            render_report(cfg)
        for name in REPORT_JSON:
            recorded, found = read_json(report / name), read_json(again / name)
            if name == "summary.json":
                recorded.pop(RENDERED_WHERE, None)
                found.pop(RENDERED_WHERE, None)
            yield from json_comparisons("report", report / name, recorded, found)
        yield from table_rows(report / "report.md", again / "report.md")


def table_rows(recorded: Path, found: Path) -> Iterator[Comparison]:
    """report.md's table rows (lines starting with `|`), one comparison per row, in order."""
    def rows(path: Path) -> list[str]:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("|")]

    mine, again = rows(recorded), rows(found)
    for i in range(max(len(mine), len(again))):
        yield Comparison("report", recorded, f"table row {i + 1}", mine[i] if i < len(mine) else MISSING,
                         again[i] if i < len(again) else MISSING, "recomputed")


# ---------------------------------------------------------------------------------------------- the command
def comparisons(run_dir: Path, cfg) -> Iterator[Comparison]:
    """Every comparison verify makes, in order (lazily: it stops hashing at the first difference)."""
    from omegaconf import OmegaConf  # lazy: hydra's config library, as the CLI loads it

    config, paths = recorded_config(run_dir, cfg)
    config = OmegaConf.create(config)  # read as every command reads its config (layout, the report)
    audit_dir = layout.audit_dir(run_dir, config)
    hashes = Hashes()
    yield from dataset_hashes(run_dir, hashes)
    yield from provenance_hashes(run_dir, hashes)
    yield from model_fingerprints(run_dir, audit_dir, paths, hashes)
    yield from extraction_rows(audit_dir)
    yield from audit_summary(audit_dir)
    yield from report_outputs(config)


def verify(run_dir: Path, cfg, log=print) -> int:
    """0 when every recorded value matches what is found now (one line per part), else 1 with the first difference."""
    if not run_dir.is_dir():
        raise UserError(f"run_dir={run_dir}: no such directory; set run_dir to a finished run")
    counts: dict[str, int] = {}
    for comparison in comparisons(run_dir, cfg):
        if not comparison.matches:
            log(f"[verify] DIFFERENT ({comparison.part}): {comparison}")
            return 1
        counts[comparison.part] = counts.get(comparison.part, 0) + 1
    for part, n in counts.items():
        log(f"[verify] ok {part:<10} {n:>4}  {WHAT[part]}")
    log(f"[verify] {run_dir}: every recorded hash and result matches")
    return 0


def main(cfg) -> int:
    """`memlens verify run_dir=<run>`."""
    return verify(Path(str(cfg.run_dir)), cfg)
