"""Paper 004's three measures on its formal languages: every trained string, every epoch, every model of the study.

For each language, seed and variant (harness/core/formal_study.py), from the models' per-epoch losses:
- the training loss loss(M_e(D), s) of each string of D (the variant's full model), its counterfactual loss
  loss(M_e(D'), s) (the model trained without s's fold; for Sec. 3's s0-s2, the model trained on D'), and the
  three measures through `memorization_measures` (harness/measures/losses.py, the one definition);
- the null: the test strings, which no model trained on, scored the same way (full model vs a fold model): what
  the counterfactual and contextual measures call memorized when nothing was;
- the language's test loss per epoch (token-weighted, over the test strings), e* = the epoch where it is lowest
  (Sec. 4, RQ3), and how close it comes to the test strings' own entropy per token, sum -log P_L(s) / sum tokens:
  the loss of a model that knows L exactly, the evidence gate "the model learned the language";
- frequency groups on the base D: the top and bottom 10 % of D's distinct strings by count (Sec. 4, Fig. 4).

Writes <run_dir>/formal/analysis/summary.json (one entry per language, seed and variant) and strings.jsonl (one
row per string and variant, with its losses and onsets); the findings and figures read only these.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

from memlens.harness.core.errors import UserError
from memlens.harness.core.formal_study import (
    BASE,
    FULL,
    LANGUAGE_FILE,
    LOSSES_FILE,
    SEC3,
    STRINGS_FILE,
    FormalSettings,
    analysis_dir,
    language_data_dir,
    model_dir,
)
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from memlens.harness.core.provenance import provenance
from memlens.harness.measures.losses import LOSS_MEASURES, memorization_measures

SUMMARY_FILE = "summary.json"
GROUP_SHARE = 0.10          # Fig. 4: top and bottom 10 % most / least frequent strings


def _losses(run_dir: Path, language: str, seed: int, variant: str, role: str) -> tuple[np.ndarray, dict]:
    """(epochs, strings) losses of one model, columns in strings.jsonl order; an unfinished model is an error."""
    path = model_dir(run_dir, language, seed, variant, role) / LOSSES_FILE
    if not path.is_file():
        raise UserError(f"{path}: model not trained; run `memlens run experiment=<formal experiment>` first "
                        "(it keeps the finished models)")
    record = read_json(path)
    return np.asarray(record["loss"], dtype=np.float64), record


def test_loss_curve(loss: np.ndarray, rows: list[dict]) -> np.ndarray:
    """Token-weighted mean loss over the test strings (each weighted by its count in the test sample), per epoch."""
    idx = [i for i, r in enumerate(rows) if r["test"]]
    weights = np.array([rows[i]["test"] * rows[i]["predicted_tokens"] for i in idx], dtype=np.float64)
    return (loss[:, idx] * weights).sum(axis=1) / weights.sum()


def test_entropy_per_token(rows: list[dict]) -> float:
    """sum -log P_L(s) / sum tokens over the test strings (count-weighted): the test loss of the true distribution."""
    test = [r for r in rows if r["test"]]
    return (sum(r["test"] * r["neglogp"] for r in test)
            / sum(r["test"] * r["predicted_tokens"] for r in test))


def frequency_groups(members: list[dict], variant: str) -> dict[str, str]:
    """{id: "top" | "bottom"} for the GROUP_SHARE most and least frequent distinct strings of D (ties by id)."""
    order = sorted(members, key=lambda r: (-r["count"][variant], r["id"]))
    n = max(1, math.ceil(GROUP_SHARE * len(order)))
    groups = {r["id"]: "bottom" for r in order[-n:]}
    groups.update({r["id"]: "top" for r in order[:n]})
    return groups


def _paired_losses(run_dir: Path, settings: FormalSettings, language: str, seed: int, variant: str,
                   rows: list[dict]) -> dict:
    """Training and counterfactual losses of the variant's strings and of the test strings (the null)."""
    full, _ = _losses(run_dir, language, seed, variant, FULL)
    col = {r["id"]: i for i, r in enumerate(rows)}
    if variant == SEC3:
        members = sorted((r for r in rows if r["sec3"]), key=lambda r: r["sec3"])
        control, _ = _losses(run_dir, language, seed, BASE, FULL)
        train = full[:, [col[r["id"]] for r in members]]
        counter = control[:, [col[r["id"]] for r in members]]
        return {"members": members, "train": train, "control": counter, "null": None, "full": full}
    folds = [_losses(run_dir, language, seed, variant, f"fold{j}")[0] for j in range(settings.folds)]
    members = [r for r in rows if r["count"].get(variant)]
    train = full[:, [col[r["id"]] for r in members]]
    counter = np.stack([folds[r["fold"][variant]][:, col[r["id"]]] for r in members], axis=1)
    tests = [r for r in rows if r["test"]]
    null = {"train": full[:, [col[r["id"]] for r in tests]],
            "control": np.stack([folds[r["test_fold"]][:, col[r["id"]]] for r in tests], axis=1)}
    return {"members": members, "train": train, "control": counter, "null": null, "full": full}


def _at(curve: np.ndarray, epoch_index: int) -> float:
    return float(curve[epoch_index])


def _measure_summary(measures: dict, e_star: int) -> dict:
    """Per measure: dataset curves, the count memorized at e*, and the onsets (1-based epochs, None = never)."""
    out = {}
    for name in LOSS_MEASURES:
        m = measures[name]
        memorized = m["score"][e_star] > 0
        out[name] = {"frac": [float(x) for x in m["frac"]], "weighted": [float(x) for x in m["weighted"]],
                     "k_at_e_star": int(memorized.sum()), "n": int(memorized.size),
                     "weighted_at_e_star": _at(m["weighted"], e_star),
                     "onsets": [int(o) + 1 if o >= 0 else None for o in m["onset"]]}
    return out


def lemma1_check(measures: dict) -> dict:
    """Lemma 1 on every string: contextual onset never before the counterfactual onset, contextual score never above
    the counterfactual score; and the premise of its proof (App. D), training loss <= counterfactual loss."""
    cf, ctx = measures["counterfactual"], measures["contextual"]
    onset_bad = [(c >= 0) and (f < 0 or c < f) for c, f in zip(ctx["onset"], cf["onset"])]
    score_bad = (ctx["score"] > cf["score"] + 1e-12).any(axis=0)
    return {"onset_violations": int(sum(onset_bad)), "score_violations": int(score_bad.sum()),
            "n": len(onset_bad)}


def analyse_variant(run_dir: Path, settings: FormalSettings, language: str, seed: int, variant: str,
                    rows: list[dict], meta: dict) -> tuple[dict, list[dict]]:
    paired = _paired_losses(run_dir, settings, language, seed, variant, rows)
    test_curve = test_loss_curve(paired["full"], rows)
    e_star = int(np.argmin(test_curve))
    reference = test_entropy_per_token(rows)
    measures = memorization_measures(paired["train"], paired["control"], settings.tau)
    premise = (paired["train"] <= paired["control"]).all(axis=0)
    entry = {
        "language": language, "seed": seed, "variant": variant, "epochs": int(paired["full"].shape[0]),
        "n_strings": len(paired["members"]), "e_star": e_star + 1,
        "test_loss": [float(x) for x in test_curve], "test_loss_at_e_star": float(test_curve[e_star]),
        "test_string_loss_at_e_star": [float(paired["full"][e_star, i]) for i, r in enumerate(rows) if r["test"]],
        "test_entropy_per_token": reference, "learned_gap": float(test_curve[e_star]) - reference,
        "language_entropy": meta["entropy"], "measures": _measure_summary(measures, e_star),
        "lemma1": {**lemma1_check(measures), "premise_holds": int(premise.sum())},
    }
    if paired["null"] is not None:
        null = memorization_measures(paired["null"]["train"], paired["null"]["control"], settings.tau)
        entry["null"] = _measure_summary(null, e_star)
    groups = frequency_groups(paired["members"], variant) if variant == BASE else {}
    string_rows = []
    for j, r in enumerate(paired["members"]):
        string_rows.append({
            "id": r["id"], "language": language, "seed": seed, "variant": variant,
            "count": r["count"].get(variant), "sec3": r["sec3"], "group": groups.get(r["id"]),
            "neglogp": r["neglogp"], "predicted_tokens": r["predicted_tokens"],
            "train_loss": [float(x) for x in paired["train"][:, j]],
            "control_loss": [float(x) for x in paired["control"][:, j]],
            "onset": {name: entry["measures"][name]["onsets"][j] for name in LOSS_MEASURES},
            "score_at_e_star": {name: float(measures[name]["score"][e_star, j]) for name in LOSS_MEASURES},
        })
    return entry, string_rows


def analyse(run_dir: str | Path, settings: FormalSettings) -> dict:
    """Every language, seed and variant of the study -> analysis/summary.json and strings.jsonl."""
    run_dir = Path(run_dir)
    entries, string_rows = [], []
    for language in settings.languages:
        for seed in settings.seeds:
            data = language_data_dir(run_dir, language, seed)
            if not (data / LANGUAGE_FILE).is_file():
                raise UserError(f"{data}: no data; run `memlens run experiment=<formal experiment>` first")
            rows, meta = read_jsonl(data / STRINGS_FILE), read_json(data / LANGUAGE_FILE)
            for variant in settings.variants(language):
                entry, strings = analyse_variant(run_dir, settings, language, seed, variant, rows, meta)
                entries.append(entry)
                string_rows.extend(strings)
    summary = {"settings": asdict(settings),
               "entries": entries, "provenance": provenance(seed=None)}
    out = analysis_dir(run_dir)
    atomic_write_jsonl(out / STRINGS_FILE, string_rows)
    atomic_write_json(out / SUMMARY_FILE, summary)
    return summary
