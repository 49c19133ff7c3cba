"""Membership inference over a run: for every checkpoint of an audited model, how well each attack of
harness.measures.mia tells the canaries it trained on (a planned dataset, e.g. sd_base) from held-out ones of
the same generator that no stage saw (`<dataset>_heldout`, synthetic_data), on two spans: the target given its
FIM prompt (the extraction audit's inputs) and the whole program (`audit_mia`; `audit.measures=[...,mia]`).

The per-token log-probs come from the model layer's one teacher-forced pass through its cache
(harness.model.cache.cached_token_logprobs), so a killed audit resumes where it stopped and a rerun loads no
weights; everything else is recomputed from the cache and written atomically, summary last (as the loss audit,
harness/audit/losses.py). The reference-calibrated attack uses the control's final model (the fixed control of
the extraction audit, paper 003 Appendix B).

On disk, below the run's audit dir (harness.core.layout.mia_dir):
    mia/<model>/<checkpoint>/<dataset>.jsonl   one row per example: id, member (1/0), score[span][attack]
    mia/<model>/summary.json                   AUC and TPR at FPR < 1 % / < 0.1 % with bootstrap 95 % intervals
    mia/summary.json                           every model's summary (the report reads this one)
"""

from __future__ import annotations

from pathlib import Path

from memlens.harness.audit.losses import load_fim_examples
from memlens.harness.audit.settings import list_checkpoints
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, read_json
from memlens.harness.core.layout import MIA_SUMMARY, checkpoint_step, mia_dir, require_inside
from memlens.harness.core.provenance import provenance
from memlens.harness.core.stats import BOOTSTRAP_N, BOOTSTRAP_SEED, MIA_FPRS, TPR_AT_FPR_RULE
from memlens.harness.measures.mia import ATTACKS, MIN_K_FRACTION, attack_metrics, attack_scores
from memlens.harness.model.cache import CACHE_VERSION, SPANS, cached_token_logprobs, program_text
from memlens.harness.model.load import model_sentinels, pick_device
from memlens.harness.model.scorer import CausalLMScorer


def _check_spans(spans) -> tuple[str, ...]:
    spans = (spans,) if isinstance(spans, str) else tuple(spans)
    bad = [s for s in spans if s not in SPANS]
    if not spans or bad:
        raise UserError(f"audit.mia_spans={list(spans)}: use a non-empty list of {list(SPANS)} (target: the FIM "
                        "target given its prompt, as the extraction audit; program: the whole program)")
    return spans


def _token_values(model_dir: Path, sets: dict[str, list[dict]], spans, cache_dir: Path, device: str,
                  batch_size: int, fim_family: str | None) -> dict[str, dict[str, dict]]:
    """{set name: {span: {id: per-token values}}} of one model directory (weights loaded on a cache miss only)."""
    scorer = CausalLMScorer.load(model_dir, device, batch_size=batch_size, lazy=True)
    sentinels = model_sentinels(model_dir, fim_family)
    out = {name: {span: cached_token_logprobs(scorer, rows, sentinels, cache_dir, span) for span in spans}
           for name, rows in sets.items()}
    scorer.release()
    return out


def _score_rows(rows: list[dict], member: int, values: dict, control: dict | None, spans) -> list[dict]:
    out = []
    for r in rows:
        text = {"target": r["target"], "program": program_text(r)}
        out.append({"id": r["id"], "member": member,
                    "score": {span: attack_scores(values[span][r["id"]], text[span],
                                                  control[span][r["id"]] if control is not None else None)
                              for span in spans}})
    return out


def _metrics(rows: list[dict], spans, n_boot: int, seed: int) -> dict:
    """{span: {attack: metrics}} (attacks without a score, the reference without a control, left out)."""
    out: dict = {}
    for span in spans:
        for attack in ATTACKS:
            members = [r["score"][span][attack] for r in rows if r["member"] == 1]
            nonmembers = [r["score"][span][attack] for r in rows if r["member"] == 0]
            if None in members or None in nonmembers:
                continue
            out.setdefault(span, {})[attack] = attack_metrics(members, nonmembers, n_boot=n_boot, seed=seed)
    return out


def audit_mia(model_dir: str | Path, model_name: str, pairs: dict[str, tuple[Path, Path]], out_dir: str | Path,
              *, control_dir: str | Path | None = None, cache_dir: str | Path | None = None,
              all_checkpoints: bool = True, spans=SPANS, n_boot: int = BOOTSTRAP_N, seed: int = BOOTSTRAP_SEED,
              batch_size: int = 16, device: str = "auto", fim_family: str | None = None,
              checkpoints: list[tuple[str, Path]] | None = None) -> dict:
    """Score every checkpoint of `model_dir` (then its final model) on each dataset of `pairs`
    ({dataset: (members rows, non-members rows)}); write rows and `<out_dir>/summary.json`; return the summary.

    `checkpoints`: (name, directory) to score instead, added to the checkpoints the summary already holds (the
    training callback scores each checkpoint as it is saved, and the trainer may delete older ones)."""
    out_dir = Path(out_dir)
    spans = _check_spans(spans)
    if not pairs:
        raise UserError(f"{model_name}: no (members, held-out) dataset pair to score; build the held-out sets "
                        "(memlens data: sd_base_heldout, sd_links_heldout) or drop mia from audit.measures")
    device = pick_device(device)
    cache_dir = Path(cache_dir) if cache_dir is not None else out_dir / "cache"
    data: dict[str, list[dict]] = {}
    sha: dict[str, str] = {}
    for dataset, (members_path, nonmembers_path) in pairs.items():
        for role, path in (("members", members_path), ("nonmembers", nonmembers_path)):
            data[f"{dataset}:{role}"], sha[f"{dataset}:{role}"] = load_fim_examples(path)
        clash = {r["id"] for r in data[f"{dataset}:members"]} & {r["id"] for r in data[f"{dataset}:nonmembers"]}
        if clash:
            raise UserError(f"{nonmembers_path}: ids {sorted(clash)[:3]} are also members ({members_path}); "
                            "held-out examples must be examples no stage trained on")
    control = (_token_values(Path(control_dir), data, spans, cache_dir, device, batch_size, fim_family)
               if control_dir is not None else None)

    outputs: dict[Path, list[dict]] = {}
    results: dict = {}
    earlier = _earlier_results(out_dir, control_dir, spans, n_boot, seed) if checkpoints is not None else {}
    if checkpoints is None:
        checkpoints = list_checkpoints(model_dir, all_checkpoints)
    for checkpoint, path in checkpoints:
        values = _token_values(path, data, spans, cache_dir, device, batch_size, fim_family)
        for dataset in pairs:
            rows = []
            for role, member in (("members", 1), ("nonmembers", 0)):
                key = f"{dataset}:{role}"
                rows += _score_rows(data[key], member, values[key], control[key] if control else None, spans)
            outputs[require_inside(out_dir / checkpoint / f"{dataset}.jsonl", out_dir, "audit.out_dir")] = rows
            results.setdefault(checkpoint, {})[dataset] = {
                "n_members": len(data[f"{dataset}:members"]), "n_nonmembers": len(data[f"{dataset}:nonmembers"]),
                "members_file": str(pairs[dataset][0]), "nonmembers_file": str(pairs[dataset][1]),
                "spans": _metrics(rows, spans, n_boot, seed)}
    results = {**{c: r for c, r in earlier.items() if c not in results}, **results}
    summary = {
        "model": model_name, "model_dir": str(model_dir), "control": str(control_dir) if control_dir else None,
        "checkpoints": sorted(results, key=_checkpoint_order), "spans": list(spans), "attacks": list(ATTACKS),
        "min_k_fraction": MIN_K_FRACTION, "fprs": list(MIA_FPRS), "tpr_at_fpr_rule": TPR_AT_FPR_RULE,
        "bootstrap": {"n": n_boot, "seed": seed},
        "score_convention": "higher = member; AUC 0.5 = chance",
        "results": results,
        "provenance": provenance(seed=seed, datasets=sha, measure="membership_inference",
                                 cache_version=CACHE_VERSION, spans=list(spans)),
    }
    # Everything computed first: a failure above leaves the previous outputs whole; the summary marks a finish.
    for path, rows in outputs.items():
        atomic_write_jsonl(path, rows)
    atomic_write_json(out_dir / "summary.json", summary)
    return summary


def _checkpoint_order(name: str) -> tuple[int, int]:
    """checkpoint-<step> in step order, then the final model."""
    step = checkpoint_step(name)
    return (1, 0) if step is None else (0, step)


def _earlier_results(out_dir: Path, control_dir, spans, n_boot: int, seed: int) -> dict:
    """The per-checkpoint results of `<out_dir>/summary.json` when they were computed the same way (control,
    spans, attacks, bootstrap), else none: a summary only ever joins results of one method."""
    path = out_dir / "summary.json"
    if not path.is_file():
        return {}
    old = read_json(path)
    same = (old.get("control") == (str(control_dir) if control_dir else None) and old.get("spans") == list(spans)
            and old.get("attacks") == list(ATTACKS) and old.get("bootstrap") == {"n": n_boot, "seed": seed})
    return dict(old.get("results") or {}) if same else {}


def collect_summaries(audit_dir: str | Path) -> dict:
    """`<audit dir>/mia/summary.json`: {"results": {model: its summary}} from every per-model summary."""
    root = mia_dir(audit_dir)
    models = {}
    for path in sorted(root.rglob("summary.json")):
        if path == root / MIA_SUMMARY:
            continue
        record = read_json(path)
        models[record.get("model") or str(path.parent.relative_to(root))] = record
    record = {"results": models}
    atomic_write_json(root / MIA_SUMMARY, record)
    return record
