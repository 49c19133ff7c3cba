"""`memlens audit`: score a model's checkpoints against a fixed control with the k-approximate
counterfactual memorization test (paper 003 Definition 3.1, Sec. 4.2, Appendices B-D).

For every example (prefix, target, suffix) the audited model and the control complete the PSM prompt
greedily; the target compared is the first `target_tokens` tokens of the target (audited model's
tokenizer); `ned` / `control_ned` are sliding-window NEDs between that target and each completion;
the example is memorized when ned <= k < control_ned, unless it is excluded (short target, target
recoverable from the prompt).

Layout (the audit's part of a run; harness/core/layout.py has the whole run):
    <out_dir>/<model>/<checkpoint>/<dataset>.jsonl       one row per example (RowStore: resumable)
    <out_dir>/<model>/<checkpoint>/<dataset>.meta.json   what those rows were computed with
    <out_dir>/summary.json                               rebuilt from every stored row at the end
    <cache_dir>/<fingerprint>.jsonl + .json              completions of one model on one example set

Work proceeds in length-sorted batches of examples; after each batch its completions (cache) and rows
are appended with fsync, so a kill loses at most one batch and a rerun continues where it stopped.

A job's state — its settings and paths (memlens.harness.audit.settings.AuditJob), the examples and their hash, the
control and every checkpoint as memlens.harness.model sees them, their shared completion caches — is one
`AuditState`, built once by `AuditState.open(job)` (which validates every model before anything is
written); `audit_checkpoint` takes what it needs from it. A whole-run audit (memlens.harness.audit.extraction) runs
one such job per (model, dataset).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from memlens.harness.audit.settings import AuditJob, job_from_config, list_checkpoints
from memlens.harness.core.errors import NothingScored, UserError
from memlens.harness.core.io import RowStore, atomic_write_json, file_sha256, read_json
from memlens.harness.core.layout import require_inside
from memlens.harness.core.provenance import provenance
from memlens.harness.core.user_data import load_examples
from memlens.harness.measures.memorization import pii_regurgitated, row_memorized, summarize_rows
from memlens.harness.model.cache import CompletionCache
from memlens.harness.model.decode import length_sorted_batches
from memlens.harness.model.encode import encode_texts
from memlens.harness.model.load import set_threads, tokenizers_differ
from memlens.harness.model.scorer import AuditedModel
from memlens.harness.text.distance import sliding_window_ned_batch
from memlens.harness.text.exclusions import PROMPT_TOO_LONG, exclusion_reason

EXAMPLE_FIELDS = ("id", "prefix", "target", "suffix")
SUMMARY_FILE = "summary.json"
META_SUFFIX = ".meta.json"

# --------------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------------

ROW_FIELDS = ("id", "dataset", "model", "checkpoint", "prefix", "suffix", "target", "target_token_count",
              "target_truncated", "completion", "ned", "control_completion", "control_ned", "memorized",
              "excluded")


def score_rows(examples: Sequence[dict], completions: dict, control_completions: dict,
               targets: dict[Any, tuple[str, int]], *, dataset: str, model: str, checkpoint: str,
               settings, too_long: set | frozenset = frozenset()) -> list[dict]:
    """One result row per example (paper 003 Definition 3.1 + the Appendix B exclusions).

    Ids in `too_long` (prompt longer than a model's context) were not decoded: their completions are
    empty and they are excluded as PROMPT_TOO_LONG, before the other exclusion rules.
    """
    completions = {ex["id"]: "" if ex["id"] in too_long else completions[ex["id"]] for ex in examples}
    control_completions = {ex["id"]: "" if ex["id"] in too_long else control_completions[ex["id"]]
                           for ex in examples}
    compared = [targets[ex["id"]][0] for ex in examples]
    neds = sliding_window_ned_batch(compared, [completions[ex["id"]] for ex in examples])
    control_neds = sliding_window_ned_batch(compared, [control_completions[ex["id"]] for ex in examples])
    rows = []
    for ex, target, ned, control_ned in zip(examples, compared, neds, control_neds):
        full_count = targets[ex["id"]][1]
        excluded = PROMPT_TOO_LONG if ex["id"] in too_long else exclusion_reason(
            ex["prefix"], target, ex["suffix"], min(full_count, settings.target_tokens),
            min_target_tokens=settings.min_target_tokens, prompt_ned_threshold=settings.prompt_ned_threshold)
        row = {
            "id": ex["id"], "dataset": dataset, "model": model, "checkpoint": checkpoint,
            "prefix": ex["prefix"], "suffix": ex["suffix"], "target": target,
            "target_token_count": full_count, "target_truncated": target != ex["target"],
            "completion": completions[ex["id"]], "ned": ned,
            "control_completion": control_completions[ex["id"]], "control_ned": control_ned,
            "memorized": row_memorized(ned, control_ned, excluded, settings.k),
            "excluded": excluded,
        }
        if ex.get("pii_path"):
            row["pii_regurgitated"] = pii_regurgitated(row["completion"], ex["pii_path"])
            row["control_pii_regurgitated"] = pii_regurgitated(row["control_completion"], ex["pii_path"])
        # Metadata rides along; a metadata key that clashes with a result field is kept as example_<key>.
        for key, value in ex.items():
            if key in EXAMPLE_FIELDS:
                continue
            row[f"example_{key}" if key in row else key] = value
        rows.append(row)
    return rows


def rows_path(out_dir: str | Path, model: str, checkpoint: str, dataset: str) -> Path:
    """<out_dir>/<model>/<checkpoint>/<dataset>.jsonl, proven to lie inside out_dir (the names were checked
    where they entered; this is the proof)."""
    return require_inside(Path(out_dir) / model / checkpoint / f"{dataset}.jsonl", out_dir, "audit.out_dir")


def _check_or_write_meta(path: Path, meta: dict, out_dir: Path, stale_dir: Path | None = None,
                         log: Callable[[str], None] = print) -> None:
    """Rows of one file must all come from the same settings, model, control and examples: refuse to mix.

    A rows file without rows holds nothing to mix (a crash before the first row), so its meta is rewritten.
    With `stale_dir` (a whole-run audit, whose models and data are the run's own), rows computed for a model,
    control or example set that has been replaced since are moved there and recomputed; other settings
    than the stored rows' are refused, since the user chose them for this out_dir.
    """
    if path.exists():
        old = read_json(path)
        keys = ("settings", "model_fingerprint", "control_fingerprint", "examples_sha256")
        diff = [k for k in keys if json.dumps(old.get(k), sort_keys=True) != json.dumps(meta[k], sort_keys=True)]
        if not diff:
            return
        rows_file = path.with_name(path.name[:-len(META_SUFFIX)] + ".jsonl")
        if rows_file.exists() and rows_file.stat().st_size > 0:
            if stale_dir is None or "settings" in diff:
                raise UserError(f"{rows_file} holds rows computed with a different {', '.join(diff)}; delete that "
                                "directory to recompute it, or set audit.out_dir to a new directory")
            target = stale_dir / rows_file.relative_to(out_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(rows_file), str(target))
            shutil.move(str(path), str(target.with_name(path.name)))
            log(f"[audit] {rows_file}: computed with another {', '.join(diff)} (replaced since); moved to "
                f"{target.parent} and recomputed")
    atomic_write_json(path, meta)


def plan_batches(examples: Sequence[dict], tokenizer, format_prompt, batch_size: int) -> list[list[dict]]:
    """The examples in length-sorted batches (audited model's tokens): the units of resumable work.

    Fixed by the example set alone, so a rerun after a kill decodes the same batches as an
    uninterrupted run (padding changes fp results in the last bits; same batches, same bits).
    """
    if not examples:
        return []
    lengths = [len(ids) for ids in encode_texts(tokenizer, [format_prompt(ex) for ex in examples])]
    return [[examples[i] for i in idx] for idx in length_sorted_batches(lengths, batch_size)]


def _context_words(context: int | None) -> str:
    return f"{context} tokens" if context is not None else "no context length in its config.json"


def audit_checkpoint(state: AuditState, checkpoint: str, model: AuditedModel,
                     log: Callable[[str], None] = print) -> dict[str, int]:
    """Score one checkpoint of the job on its example set; resumable. Returns counts of what it did."""
    job, control, examples = state.job, state.control, state.examples
    dataset, model_name, out_dir = job.dataset, job.model_name, job.out_dir
    s = model.settings
    path = rows_path(out_dir, model_name, checkpoint, dataset)
    # Distances are in characters, so a control with another tokenizer is valid; say so once.
    tokenizer_differs = tokenizers_differ(model.tokenizer, control.tokenizer)
    if tokenizer_differs:
        log(f"[audit] note: the control's tokenizer ({control.path}) differs from {model_name}/{checkpoint}'s; "
            "NEDs are over characters, so rows stay comparable (summary: control_tokenizer_differs)")
    # Paper 003 decodes prompts that fit the model; a longer one would be read past the positions the
    # model was trained on, so it is excluded before decoding (either model's context counts).
    too_long = model.too_long(examples) | control.too_long(examples)
    if too_long:
        log(f"[audit] warning: {len(too_long)} of {len(examples)} prompts of {dataset} are longer than the "
            f"context of {model_name}/{checkpoint} ({_context_words(model.context)}) or of the control "
            f"({_context_words(control.context)}); excluded as prompt_too_long, not decoded")
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_or_write_meta(path.with_name(path.stem + META_SUFFIX), {
        "model": model_name, "checkpoint": checkpoint, "dataset": dataset, "model_dir": str(model.path),
        "control_dir": str(control.path), "model_fingerprint": model.fingerprint,
        "control_fingerprint": control.fingerprint, "examples_sha256": state.examples_sha256,
        "settings": s.scoring(), "model_completion_cache": model.cache.fingerprint,
        "control_completion_cache": control.cache.fingerprint,
        "control_tokenizer_differs": tokenizer_differs,
    }, Path(out_dir), job.stale_dir, log)
    if not path.exists():
        path.touch()   # an empty example set still has its (empty) rows file, so the summary counts it
    store = RowStore(path, key="id")
    counts = dict.fromkeys(("model_generated", "control_generated", "model_cached", "control_cached"), 0)

    def completions(who: str, cache: CompletionCache, batch: list[dict]) -> dict:
        # Counted per call, so a cache that serves both models (the control audited against itself)
        # counts each completion once: generated by the first call, a cache hit of the second.
        generated, cached = cache.n_generated, cache.n_cached
        out = cache.get(batch)
        counts[f"{who}_generated"] += cache.n_generated - generated
        counts[f"{who}_cached"] += cache.n_cached - cached
        return out

    batches = plan_batches(examples, model.tokenizer, model.format_prompt, s.batch_size)
    todo = [[ex for ex in b if ex["id"] not in store.done] for b in batches]
    todo = [b for b in todo if b]
    n_new = 0
    bar = tqdm(total=sum(map(len, todo)), desc=f"audit {model_name}/{checkpoint}", unit="ex", leave=False,
               disable=(not s.progress) if s.progress is not None else None)
    for batch in todo:
        decode = [ex for ex in batch if ex["id"] not in too_long]
        control_out = completions("control", control.cache, decode)
        model_out = completions("model", model.cache, decode)
        targets = {ex["id"]: model.truncate_target(ex["target"]) for ex in batch}
        rows = score_rows(batch, model_out, control_out, targets, dataset=dataset, model=model_name,
                          checkpoint=checkpoint, settings=s, too_long=too_long)
        store.append(rows)
        n_new += len(rows)
        bar.update(len(batch))
    bar.close()
    stats = {"rows_total": len(store.done), "rows_new": n_new, **counts}
    log(f"[audit] {model_name}/{checkpoint} {dataset}: {stats['rows_total']} rows ({n_new} new); "
        f"control completions: {stats['control_generated']} generated, {stats['control_cached']} cached; "
        f"model completions: {stats['model_generated']} generated, {stats['model_cached']} cached")
    return stats


# --------------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------------

def stored_results(out_dir: str | Path) -> Iterable[tuple[dict, list[dict]]]:
    """(meta, rows) of every rows file under `out_dir` (those with a .meta.json beside them)."""
    for meta_path in sorted(Path(out_dir).rglob(f"*{META_SUFFIX}")):
        rows_file = meta_path.with_name(meta_path.name[:-len(META_SUFFIX)] + ".jsonl")
        if rows_file.is_file():
            yield read_json(meta_path), RowStore(rows_file, key="id").rows()


def build_summary(out_dir: str | Path) -> dict[str, dict[str, dict[str, dict]]]:
    """{model: {checkpoint: {dataset: counts + rate + what they were computed with}}} from the rows."""
    results: dict[str, dict[str, dict[str, dict]]] = {}
    for meta, rows in stored_results(out_dir):
        entry = {**summarize_rows(rows), "examples_sha256": meta["examples_sha256"],
                 "model_fingerprint": meta["model_fingerprint"],
                 "control_fingerprint": meta["control_fingerprint"], "control_dir": meta["control_dir"],
                 "control_tokenizer_differs": meta.get("control_tokenizer_differs"),
                 "settings": meta["settings"]}
        results.setdefault(meta["model"], {}).setdefault(meta["checkpoint"], {})[meta["dataset"]] = entry
    return results


def check_scored(results: dict, audited: Iterable[tuple[str, str]], allow_empty: bool,
                 log: Callable[[str], None] = print) -> None:
    """Say so when an audited (model, dataset) scored no example at some checkpoint, with the
    exclusion counts by reason; raise NothingScored (exit 3) unless `allow_empty`.

    Called after the summary is written, so its `n_scored: 0` entries stay for inspection.
    """
    empty = []
    for model, dataset in dict.fromkeys(audited):
        for checkpoint, datasets in (results.get(model) or {}).items():
            entry = datasets.get(dataset)
            if entry is None or entry["n_scored"] > 0:
                continue
            reasons = ", ".join(f"{n} {reason}" for reason, n in entry["excluded_by_reason"].items() if n)
            empty.append(f"{model}/{checkpoint} on {dataset}: 0 of {entry['n_total']} examples scored"
                         + (f" (excluded: {reasons})" if reasons else " (no examples)"))
    if not empty:
        return
    text = "the audit measured nothing: " + "; ".join(empty)
    if allow_empty:
        log(f"[audit] note: {text} (accepted: audit.allow_empty=true)")
        return
    log(f"[audit] {text}")
    raise NothingScored(f"{text}. The rows and summary.json (n_scored: 0) are kept. Fix: give examples whose "
                        "target has at least audit.min_target_tokens tokens, is not in its prompt and whose "
                        "prompt fits the model's context (or lower audit.min_target_tokens / raise "
                        "audit.prompt_ned_threshold); pass audit.allow_empty=true to accept an empty result")


def write_summary(out_dir: str | Path, provenance_record: dict) -> Path:
    """Rebuild `<out_dir>/summary.json` from every stored row (so it always equals the rows); atomic."""
    path = Path(out_dir) / SUMMARY_FILE
    atomic_write_json(path, {"provenance": provenance_record, "results": build_summary(out_dir)})
    return path


# --------------------------------------------------------------------------------------------------
# CLI entry point
# --------------------------------------------------------------------------------------------------

@dataclass
class AuditState:
    """One audit job's state, created once: the job, its examples and their hash, the control and each
    checkpoint as the model layer sees them (tokenizer, sentinels, fingerprint, context, completion cache),
    the caches they share (identical models share one)."""

    job: AuditJob
    examples: list[dict]
    examples_sha256: str
    control: AuditedModel
    models: list[tuple[str, AuditedModel]]
    caches: dict[str, CompletionCache] = field(default_factory=dict)

    @classmethod
    def open(cls, job: AuditJob, checkpoints: Sequence[tuple[str, Path]] | None = None) -> AuditState:
        """Read the examples and validate the control and every checkpoint; nothing is written yet.
        `checkpoints`: (name, directory) to score instead of those `job.model_dir` holds (harness/audit/callback.py
        scores each checkpoint as the trainer saves it)."""
        examples = load_examples(job.examples, allow_empty=True)
        sha = file_sha256(job.examples)
        caches: dict[str, CompletionCache] = {}
        control = AuditedModel(job.control_dir, job.settings, sha, job.cache_dir, label="control", caches=caches)
        if checkpoints is None:
            checkpoints = list_checkpoints(job.model_dir, job.all_checkpoints)
        models = [(checkpoint, AuditedModel(path, job.settings, sha, job.cache_dir,
                                            label=f"{job.model_name}/{checkpoint}", caches=caches))
                  for checkpoint, path in checkpoints]
        state = cls(job, examples, sha, control, models, caches)
        check_not_the_control(state)
        return state


def run_audit(job: AuditJob, seed: int | None = None, log: Callable[[str], None] = print,
              check_empty: bool = True) -> dict:
    """Audit every requested checkpoint of `job.model_dir` against `job.control_dir`; write the summary.

    Every model (control and checkpoints) is loaded and validated before anything is written. With
    `check_empty`, an audit that scored nothing ends in `check_scored` (the whole-run audit checks
    once, at its end).
    """
    if job.settings.threads:
        set_threads(job.settings.threads)
    state = AuditState.open(job)
    log(f"[audit] {len(state.examples)} examples from {job.examples}; {len(state.models)} checkpoint(s) of "
        f"{job.model_name} against control {job.control_dir}")
    all_stats = {}
    for checkpoint, model in state.models:
        all_stats[checkpoint] = audit_checkpoint(state, checkpoint, model, log)
        if model.cache is not state.control.cache:
            model.cache.release()  # free the checkpoint's weights; the control stays loaded
    record = provenance(seed=seed, datasets={job.dataset: state.examples_sha256}, audit=asdict(job.settings),
                        model_dir=str(job.model_dir), control_dir=str(job.control_dir),
                        control_fingerprint=state.control.fingerprint, examples=str(job.examples),
                        checkpoints=[c for c, _ in state.models])
    path = write_summary(job.out_dir, record)
    log(f"[audit] summary: {path}")
    if check_empty:
        check_scored(read_json(path)["results"], [(job.model_name, job.dataset)], job.settings.allow_empty, log)
    return all_stats


def check_not_the_control(state: AuditState) -> None:
    """Refuse an audited checkpoint identical to the control (same weights, config and tokenizer files):
    paper 003 Def. 3.1 counts what the model completes and a model never trained on the examples does not,
    so against itself every rate is 0 by construction. audit.sanity_baseline=true runs it on purpose."""
    job, control = state.job, state.control
    same = [(checkpoint, model) for checkpoint, model in state.models if model.fingerprint == control.fingerprint]
    if not same or job.settings.sanity_baseline:
        return
    checkpoint, model = same[0]
    raise UserError(f"the audited model {job.model_name}/{checkpoint} ({model.path}) is the control "
                    f"{job.control_dir}: the same weights, config and tokenizer (fingerprint {control.fingerprint[:12]}),"
                    " so nothing can count as memorized against it. Point audit.control_dir (or the audit_plan "
                    "entry's control) at a model trained the same way without the examples (paper 003's FT.2 for "
                    "FT.1), or pass "
                    "audit.sanity_baseline=true to run it as a sanity baseline (every rate is 0)")


def main(cfg) -> int:
    job = job_from_config(cfg)
    run_audit(job, seed=cfg.get("seed"))
    return 0
