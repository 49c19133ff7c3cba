"""Utility of the final models (paper 003 Table 2 analogue): does a model still complete code well?

- HumanEval single-line infilling (Fried et al. 2023, paper 003 Appendix A.4), scored by exact match
  of the first generated line against the held-out line — not by executing code: the audit never
  runs model output. One FIM example per line of each canonical solution (synthetic_data/humaneval.py).
- Held-out public-code loss: mean target cross-entropy on pd_eval FIM examples (memlens.harness.measures.losses).

Completions and losses go through the audit's completion cache and the losses' row cache, so a rerun
regenerates nothing; results are written to `<audit_dir>/utility.json` with provenance.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

from memlens.harness.core.io import atomic_write_json, file_sha256, read_json
from memlens.harness.core.provenance import provenance
from memlens.harness.core.user_data import load_examples
from memlens.harness.model.cache import cached_target_losses
from memlens.harness.model.load import model_sentinels
from memlens.harness.model.scorer import AuditedModel, CausalLMScorer

UTILITY_FILE = "utility.json"


def first_line(text: str) -> str:
    """The first line of a completion, trailing whitespace removed (indentation kept: it is code)."""
    return text.split("\n", 1)[0].rstrip()


def infill_exact_match(completions: list[str], targets: list[str]) -> float | None:
    """Share of single-line infills whose first generated line equals the target line."""
    if len(completions) != len(targets):
        raise ValueError(f"{len(completions)} completions for {len(targets)} targets")
    if not targets:
        return None
    hits = sum(first_line(c) == first_line(t) for c, t in zip(completions, targets))
    return hits / len(targets)


def sample_rows(rows: list[dict], n: int | None, seed: int) -> list[dict]:
    """A seeded subset (all rows when n is None or larger than the set), in the file's order."""
    if n is None or n >= len(rows):
        return rows
    keep = set(random.Random(seed).sample(range(len(rows)), n))
    return [r for i, r in enumerate(rows) if i in keep]


def humaneval_exact_match(model_dir: Path, rows: list[dict], examples_sha256: str, settings,
                          cache_dir: Path) -> float | None:
    """Greedy single-line infills through the audit's completion cache; a line needs few tokens."""
    model = AuditedModel(model_dir, settings, examples_sha256, cache_dir, label=f"utility/{model_dir.name}")
    completions = model.cache.get(rows)
    model.cache.release()
    return infill_exact_match([completions[r["id"]] for r in rows], [r["target"] for r in rows])


def heldout_loss(model_dir: Path, rows: list[dict], settings, cache_dir: Path) -> float | None:
    """Mean per-example target loss on held-out FIM rows, through the model layer's one cache
    (memlens.harness.model.cache.cached_target_losses: paper 004's losses of the same model and rows are the same
    entries)."""
    if not rows:
        return None
    scorer = CausalLMScorer.load(model_dir, settings.device, batch_size=settings.batch_size,
                                 trust_remote_code=settings.trust_remote_code, lazy=True)
    values = cached_target_losses(scorer, rows, model_sentinels(model_dir, settings.fim_family), cache_dir)
    scorer.release()
    return sum(values[r["id"]] for r in rows) / len(rows)


def utility_of_models(models: dict[str, Path], data_dir: Path, out_dir: Path, settings,
                      cache_dir: Path, n_examples: int | None, seed: int) -> dict[str, Any]:
    """Utility of each final model; writes `<out_dir>/utility.json` (atomic) and returns it."""
    sets: dict[str, tuple[list[dict], str]] = {}
    for name in ("humaneval_infill", "pd_eval"):
        path = data_dir / name / "rows.jsonl"
        if path.is_file():
            sets[name] = (sample_rows(load_examples(path), n_examples, seed), file_sha256(path))
    line_settings = replace(settings, max_new_tokens=min(settings.max_new_tokens, 32))
    results: dict[str, Any] = {}
    for name, model_dir in sorted(models.items()):
        entry: dict[str, Any] = {}
        if "humaneval_infill" in sets:
            rows, sha = sets["humaneval_infill"]
            entry["humaneval_infill_exact_match"] = humaneval_exact_match(model_dir, rows, sha, line_settings,
                                                                          cache_dir)
            entry["humaneval_infill_n"] = len(rows)
        if "pd_eval" in sets:
            rows, _ = sets["pd_eval"]
            entry["pd_eval_loss"] = heldout_loss(model_dir, rows, settings, cache_dir)
            entry["pd_eval_n"] = len(rows)
        results[name] = entry
    record = {"results": results,
              "provenance": provenance(seed=seed, datasets={k: sha for k, (_, sha) in sets.items()},
                                       n_examples=n_examples, max_new_tokens=line_settings.max_new_tokens,
                                       metric="first-line exact match; mean target cross-entropy")}
    atomic_write_json(out_dir / UTILITY_FILE, record)
    return record


def load_utility(audit_dir: Path) -> dict[str, Any] | None:
    path = Path(audit_dir) / UTILITY_FILE
    return read_json(path) if path.is_file() else None
