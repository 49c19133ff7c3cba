"""Results of a model that is replaced: before a stage is retrained, every audit result computed from its old weights
(NED rows where it is the audited model or the control, its loss, MIA, pair and prompt MIA, discoverable and ε
results) moves to the run's
stale/ folder and the summaries are rebuilt from what is left. The pipeline calls this through the CLI
(memlens.recipes.orchestration.pipeline.Measurement), so the recipes never import the audit.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from memlens.harness.audit.discoverable import drop_discoverable_model
from memlens.harness.audit.mia import collect_summaries
from memlens.harness.audit.preference_mia import collect_pair_summaries
from memlens.harness.audit.prompt_mia import collect_prompt_summaries
from memlens.harness.audit.run import META_SUFFIX, SUMMARY_FILE, write_summary
from memlens.harness.core.io import atomic_write_json, read_json
from memlens.harness.core.layout import discoverable_dir, epsilon_dir, mia_dir, pair_mia_dir, prompt_mia_dir
from memlens.harness.measures.utility import UTILITY_FILE


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
                    discoverable_dir(audit_dir, model_name), epsilon_dir(audit_dir, model_name),
                    pair_mia_dir(audit_dir, model_name), prompt_mia_dir(audit_dir, model_name)):
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
    if pair_mia_dir(audit_dir).is_dir():
        collect_pair_summaries(audit_dir)
    if prompt_mia_dir(audit_dir).is_dir():
        collect_prompt_summaries(audit_dir)
    drop_discoverable_model(audit_dir, model_name)
    utility = audit_dir / UTILITY_FILE
    if utility.is_file():
        record = read_json(utility)
        if model_name in (record.get("results") or {}):
            record["results"].pop(model_name)
            atomic_write_json(utility, record)
