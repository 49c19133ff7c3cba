"""Analyses of paper 003 Sec. 5 as functions over stored audit rows; nothing here re-scores a model.

Rows are the audit's JSONL rows (`id, dataset, model, checkpoint, ned, control_ned, memorized,
excluded, ...`), stored at `<run_dir>/audit/<model>/<checkpoint>/<dataset>.jsonl` where <model> may
hold a sweep point (`RLFT.1/beta=0.1`). Rates always come from memlens.harness.measures.memorization.summarize_rows,
the one definition of the memorization rate.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_jsonl, unique_rows
from memlens.harness.core.layout import (
    CANARY_EXPOSURE_SUBDIR,
    DISCOVERABLE_SUBDIR,
    EPSILON_SUBDIR,
    MIA_SUBDIR,
    MIA_SUMMARY,
    PAIR_MIA_SUBDIR,
    PROMPT_MIA_SUBDIR,
    REWARD_RANKING_SUBDIR,
    discoverable_dir,
    epsilon_dir,
    pair_mia_dir,
    prompt_mia_dir,
)
from memlens.harness.core.layout import checkpoint_step as layout_checkpoint_step
from memlens.harness.core.stats import TPR_AT_FPR_RULE, fpr_key
from memlens.harness.measures.blind_mia import BLIND
from memlens.harness.measures.memorization import DEFAULT_K, summarize_rows
from memlens.harness.measures.mia import ATTACKS, best_attack

FINAL = "final"
Key = tuple[str, str, str]  # (model, checkpoint, dataset)
TPR_1 = fpr_key(0.01)       # the TPR the comparison shows beside each extraction rate
NOT_ROWS = ("cache", "losses", "shards", MIA_SUBDIR, DISCOVERABLE_SUBDIR, EPSILON_SUBDIR, CANARY_EXPOSURE_SUBDIR,
            REWARD_RANKING_SUBDIR, PAIR_MIA_SUBDIR, PROMPT_MIA_SUBDIR)  # audit/ subfolders: no NED rows


def checkpoint_step(checkpoint: str) -> float:
    """Sort key of a checkpoint name: `checkpoint-<step>` -> step; `final` after every step."""
    step = layout_checkpoint_step(checkpoint)
    if step is not None:
        return float(step)
    if checkpoint == FINAL:
        return math.inf
    raise ValueError(f"unknown checkpoint name {checkpoint!r}: expected 'final' or 'checkpoint-<step>'")


def load_audit_rows(audit_dir: str | Path) -> dict[Key, list[dict]]:
    """Every stored row of a run's audit, grouped by (model, checkpoint, dataset). Skips the cache."""
    audit_dir = Path(audit_dir)
    grouped: dict[Key, list[dict]] = {}
    for path in sorted(audit_dir.rglob("*.jsonl")):
        rel = path.relative_to(audit_dir)
        if rel.parts[0] in NOT_ROWS or len(rel.parts) < 3:
            continue
        model = "/".join(rel.parts[:-2])
        checkpoint, dataset = rel.parts[-2], path.stem
        grouped[(model, checkpoint, dataset)] = unique_rows(read_jsonl(path))   # each example once
    return grouped


def summary_entries(grouped: dict[Key, list[dict]]) -> list[dict]:
    """One entry per model x checkpoint x dataset: counts, rate and its ci95, and on rows with PII paths the
    model's, the control's and the counterfactual PII regurgitation rates (memlens.harness.measures.memorization)."""
    entries = []
    for (model, checkpoint, dataset), rows in sorted(grouped.items(),
                                                     key=lambda kv: (kv[0][0], checkpoint_step(kv[0][1]), kv[0][2])):
        entry = {"model": model, "checkpoint": checkpoint, "dataset": dataset, **summarize_rows(rows)}
        entries.append(entry)
    return entries


# Keys of a user's canary rows the report breaks rates down by (harness/core/user_data.py): the label the user
# gave a canary, and its copies in training (the exposure axis of the secret-sharer line of work).
BREAKDOWN_KEYS = ("group", "repeat")


def breakdown(rows: list[dict], key: str) -> list[dict]:
    """The memorization rate of `rows` per value of `key` (summarize_rows on each part, with its n and 95 %
    interval), values in order; rows without the key form the part `None`. [] when no row has the key."""
    if not any(key in r for r in rows):
        return []
    parts: dict[Any, list[dict]] = defaultdict(list)
    for row in rows:
        parts[row.get(key)].append(row)
    order = sorted(parts, key=lambda v: (v is None, isinstance(v, str), v if v is not None else 0))
    return [{key: value, **summarize_rows(parts[value])} for value in order]


@dataclass
class Persistence:
    """Fig. 1: of the examples a source model memorized, how many a later model still memorizes."""

    n_source_memorized: int
    n_still_memorized: int
    share: float | None
    ned_after: list[float]          # the later model's NED on the source-memorized examples


def persistence(source_rows: list[dict], target_rows: list[dict], k: float = DEFAULT_K) -> Persistence:
    """Share of the source model's memorized examples that the target model still memorizes.

    "Still memorized" uses the target row's own counterfactual verdict (NED <= k and control > k);
    examples excluded or missing in the target audit count as not memorized, so nothing is
    silently dropped from the denominator (paper 003 Sec. 5.1: 43-47 % of 319).
    """
    memorized_ids = [r["id"] for r in source_rows if r.get("memorized") and not r.get("excluded")]
    by_id = {r["id"]: r for r in target_rows}
    still = [i for i in memorized_ids if by_id.get(i, {}).get("memorized")]
    neds = [by_id[i]["ned"] for i in memorized_ids if i in by_id]
    share = len(still) / len(memorized_ids) if memorized_ids else None
    return Persistence(len(memorized_ids), len(still), share, neds)


def parse_sweep_point(model: str) -> tuple[str, dict[str, float | str]]:
    """`RLFT.4/beta=0.005,lr=3e-06` -> ("RLFT.4", {"beta": 0.005, "lr": 3e-06})."""
    base, _, point = model.partition("/")
    values: dict[str, float | str] = {}
    for part in filter(None, point.split(",")):
        key, _, raw = part.partition("=")
        try:
            values[key] = float(raw)
        except ValueError:
            values[key] = raw
    return base, values


def final_entries(entries: list[dict]) -> list[dict]:
    """The last checkpoint of every model ('final' when present, else the highest step)."""
    last: dict[tuple[str, str], dict] = {}
    for e in entries:
        key = (e["model"], e["dataset"])
        if key not in last or checkpoint_step(e["checkpoint"]) >= checkpoint_step(last[key]["checkpoint"]):
            last[key] = e
    return list(last.values())


# The interval key of each rate an entry carries (memlens.harness.measures.memorization.summarize_rows / summarize_pii).
CI_KEY = {"rate": "ci95", "pii_regurgitation_rate": "pii_regurgitation_ci95",
          "control_pii_regurgitation_rate": "control_pii_regurgitation_ci95",
          "pii_counterfactual_rate": "pii_counterfactual_ci95"}


def sweep_series(entries: list[dict], base_model: str, dataset: str, axis: str,
                 fixed: dict[str, float] | None = None,
                 metric: str = "rate") -> list[tuple[float, float | None, list | None]]:
    """Fig. 4 / Fig. 7: (axis value, metric, its ci95) for the final checkpoints of a swept model, sorted
    by value. `fixed` pins the other swept keys (e.g. the LR series at beta=0.005, as in Appendix E)."""
    series = []
    for e in final_entries(entries):
        base, point = parse_sweep_point(e["model"])
        if base != base_model or e["dataset"] != dataset or axis not in point:
            continue
        if any(point.get(k) != v for k, v in (fixed or {}).items()):
            continue
        series.append((point[axis], e.get(metric), e.get(CI_KEY[metric])))
    return sorted(series, key=lambda t: t[0])


def over_training(entries: list[dict], model: str, dataset: str) -> list[dict]:
    """Memorization and PII regurgitation against checkpoint step, 'final' last."""
    rows = [e for e in entries if e["model"] == model and e["dataset"] == dataset]
    return sorted(rows, key=lambda e: checkpoint_step(e["checkpoint"]))


def provenance_table(models_dir: str | Path) -> list[dict]:
    """Table 1 of paper 003, generated from every provenance.json under <run_dir>/models/."""
    models_dir = Path(models_dir)
    table = []
    for prov_path in sorted(models_dir.rglob("provenance.json")):
        prov = json.loads(prov_path.read_text(encoding="utf-8"))
        settings = prov.get("settings") or {}
        table.append({
            "model": str(prov_path.parent.relative_to(models_dir)),
            "stage": prov.get("stage"),
            "init": prov.get("init_model"),
            "reward_model": prov.get("reward_model"),
            "datasets": ", ".join(sorted(prov.get("datasets") or {})),
            "hyper_parameters": {k: settings[k] for k in sorted(settings)
                                 if k in ("lr", "epochs", "beta", "objective", "loss", "algorithm",
                                          "max_steps", "max_tokens", "batch_size")},
            "code": code_version(prov),
            "git_commit": prov.get("git_commit"),
            "computed_on": computed_on(prov),
        })
    return table


def computed_on(prov: dict) -> str:
    """'AMD EPYC (x86_64, 2 cores) · torch kernels AVX2 · 2 threads' from a provenance record: what decides the
    last bits of its numbers (docs/methods.md, "What reproduces where"); older runs did not record it."""
    compute = prov.get("compute")
    if not compute:
        return "not recorded"
    cpu, torch, variables = compute.get("cpu") or {}, compute.get("torch") or {}, compute.get("variables") or {}
    parts = [f"{cpu.get('model') or 'unknown CPU'} ({cpu.get('machine')}, {cpu.get('logical_cores')} cores)"]
    if torch:
        pinned = " (pinned)" if variables.get("ATEN_CPU_CAPABILITY") else ""
        parts.append(f"torch kernels {torch.get('cpu_capability')}{pinned}")
        libraries = kernel_libraries(torch.get("kernels"), variables)
        parts += [libraries] if libraries else []
        parts.append(f"{torch.get('threads')} threads")
        if torch.get("cuda_device"):
            parts.append(torch["cuda_device"])
    return " · ".join(parts)


def kernel_libraries(kernels: dict | None, variables: dict) -> str | None:
    """'MKL AUTO, oneDNN AVX2': MKL's branch as MKL reported it (AUTO where it did not honour MKL_CBWR) and oneDNN's
    ISA cap (harness/core/kernels.py); None for a run from before they were recorded."""
    if not kernels:
        return None
    onednn = kernels.get("onednn_max_isa") or variables.get("ONEDNN_MAX_CPU_ISA") or "unpinned"
    return f"MKL {kernels.get('mkl_branch') or 'n/a'}, oneDNN {onednn}"


def code_version(prov: dict) -> str | None:
    """'memlens 0.2.0' from a provenance record (the shipped base, built before provenance named the package,
    records memlens among its packages)."""
    package = prov.get("package") or {}
    if package.get("name"):
        return f"{package['name']} {package.get('version')}"
    version = (prov.get("packages") or {}).get("memlens")
    return f"memlens {version}" if version else None


def rlhf_vs_ipo(entries: list[dict], groups: dict[str, list[str]], datasets: list[str]) -> list[dict]:
    """Sec. 5.4 / Fig. 8: final-checkpoint rates per dataset for named groups of models
    (e.g. {"FT (direct)": ["FT.3"], "RLFT via RM": ["RLFT.2"], "IPO": ["IPO"]})."""
    finals = final_entries(entries)
    out = []
    for label, models in groups.items():
        for dataset in datasets:
            for e in finals:
                if e["model"] in models and e["dataset"] == dataset:
                    out.append({"group": label, "model": e["model"], "dataset": dataset,
                                "rate": e["rate"], "ci95": e["ci95"], "n_scored": e["n_scored"],
                                "pii_counterfactual_rate": e.get("pii_counterfactual_rate"),
                                "pii_counterfactual_ci95": e.get("pii_counterfactual_ci95")})
    return out


# ---------------------------------------------------------------- membership inference (harness/audit/mia.py)
def load_mia(audit_dir: str | Path) -> dict:
    """{model: its MIA summary} of a run (<audit dir>/mia/summary.json); {} when the run measured none. A summary
    whose TPRs were read another way than TPR_AT_FPR_RULE (older memlens counted FPR <= a) is refused, not mixed in."""
    path = Path(audit_dir) / MIA_SUBDIR / MIA_SUMMARY
    if not path.is_file():
        return {}
    results = json.loads(path.read_text(encoding="utf-8")).get("results") or {}
    for model, record in results.items():
        if record.get("tpr_at_fpr_rule") != TPR_AT_FPR_RULE:
            raise UserError(f"{path}: model {model!r} has TPRs read as FPR <= a (an older memlens); the report reads "
                            f"{TPR_AT_FPR_RULE!r} as mimir and LiRA do. Rerun its audit with audit.measures=[...,mia] "
                            "(the scores are cached: it recomputes only the metrics)")
    return results


def load_discoverable(audit_dir: str | Path) -> dict:
    """{model: {"summary": its entries by checkpoint and dataset, "schemes", "queries", "p", "rows": {dataset:
    final-checkpoint rows}}} of a run's probabilistic-extraction audit (harness/audit/discoverable.py); {} when
    the run measured none."""
    root = discoverable_dir(audit_dir)
    path = root / "summary.json"
    if not path.is_file():
        return {}
    summary = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for model, checkpoints in (summary.get("results") or {}).items():
        rows = {dataset: read_jsonl(root / model / FINAL / f"{dataset}.jsonl")
                for dataset in (checkpoints.get(FINAL) or {}) if (root / model / FINAL / f"{dataset}.jsonl").is_file()}
        out[model] = {"results": checkpoints, "schemes": summary["schemes"], "queries": summary["queries"],
                      "p": summary["p"], "rows": rows}
    return out


def load_epsilon(audit_dir: str | Path) -> dict:
    """{model: its one-run ε summary} (harness/audit/epsilon.py: epsilon/<model>/summary.json); {} when none."""
    root = epsilon_dir(audit_dir)
    out = {}
    for path in sorted(root.rglob("summary.json")) if root.is_dir() else []:
        record = json.loads(path.read_text(encoding="utf-8"))
        out[record["model"]] = record
    return out


def _membership_summaries(root: Path) -> dict:
    path = root / MIA_SUMMARY
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8")).get("results") or {}


def load_pair_mia(audit_dir: str | Path) -> dict:
    """{model: its preference-pair membership summary} (harness/audit/preference_mia.py: pair_mia/summary.json); {}
    when the run measured none."""
    return _membership_summaries(pair_mia_dir(audit_dir))


def load_prompt_mia(audit_dir: str | Path) -> dict:
    """{model: its RL-prompt membership summary} (harness/audit/prompt_mia.py: prompt_mia/summary.json); {} when the
    run measured none."""
    return _membership_summaries(prompt_mia_dir(audit_dir))


def membership_entry(summaries: dict, model: str, dataset: str) -> tuple[str, dict] | None:
    """(checkpoint, {attack: metrics} plus the summary's `blind`, `tiers`, `dose_trend`) of a model's last checkpoint
    on a dataset of a membership measure (pair_mia, prompt_mia: 'final' when present), or None when not measured."""
    record = summaries.get(model) or {}
    checkpoints = [c for c in record.get("checkpoints") or [] if dataset in (record.get("results") or {}).get(c, {})]
    if not checkpoints:
        return None
    checkpoint = "final" if "final" in checkpoints else checkpoints[-1]
    return checkpoint, record["results"][checkpoint][dataset]


def mia_entry(mia: dict, model: str, dataset: str, span: str = "target", checkpoint: str | None = None) -> dict | None:
    """{attack: metrics} of one model x checkpoint x dataset x span; None when not measured. The checkpoint defaults
    to the model's last ('final' when present, else the highest step: a training callback's run has no 'final')."""
    results = (mia.get(model) or {}).get("results") or {}
    if checkpoint is None:
        checkpoint = max(results, key=checkpoint_step, default=FINAL)
    entry = ((results.get(checkpoint) or {}).get(dataset) or {})
    return (entry.get("spans") or {}).get(span)


def blind_entry(mia: dict, model: str, dataset: str, span: str = "target") -> dict | None:
    """The blind baseline's metrics (no model: one per dataset, harness/audit/mia.py `blind`) for one model's audit of
    `dataset` on `span`; None where that audit has none (too few texts, or a summary written before it existed)."""
    entry = (((mia.get(model) or {}).get(BLIND) or {}).get(dataset) or {})
    return (entry.get("spans") or {}).get(span)


def mia_over_training(mia: dict, model: str, dataset: str, span: str = "target") -> dict[str, list[tuple]]:
    """{attack: [(checkpoint, auc, ci95)]} over a model's checkpoints, 'final' last."""
    checkpoints = sorted(((mia.get(model) or {}).get("results") or {}), key=checkpoint_step)
    out: dict[str, list[tuple]] = {}
    for ck in checkpoints:
        for attack, m in (mia_entry(mia, model, dataset, span, ck) or {}).items():
            out.setdefault(attack, []).append((ck, m["auc"]["value"], m["auc"]["ci95"]))
    return {a: out[a] for a in ATTACKS if a in out}


def mia_comparison(comp_rows: list[dict], mia: dict, span: str = "target") -> list[dict]:
    """The comparison's rows (rlhf_vs_ipo) with the best attack's AUC at the same final checkpoint beside the
    extraction rate; rows without MIA results are left out."""
    out = []
    for r in comp_rows:
        best = best_attack(mia_entry(mia, r["model"], r["dataset"], span) or {})
        if best is None:
            continue
        attack, m = best
        out.append({**r, "best_attack": attack, "auc": m["auc"]["value"], "auc_ci95": m["auc"]["ci95"],
                    TPR_1: m[TPR_1]["value"], "n_members": m["n_members"],
                    "n_nonmembers": m["n_nonmembers"]})
    return out


def load_callback_summaries(audit_dir: str | Path, subdir: str) -> dict[str, dict]:
    """{model: its summary} of what the training callback (harness/audit/callback.py) wrote under
    `<audit dir>/<subdir>/<model>/summary.json` (exposure, a reward model's ranking); {} when it wrote none."""
    root = Path(audit_dir) / subdir
    return {str(p.parent.relative_to(root)): json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(root.glob("*/summary.json"))} if root.is_dir() else {}
