"""The report's evidence sections, in the order a reader checks a conclusion: rates, the user's canaries, training,
persistence, reward scores, sweeps, memorization over training, loss-based measures, membership inference,
utility, registered measures and the maps. Each is a function of the stored results it is given that returns a
`Section`: its blocks (harness/report/blocks.py) and the rows it files in summary.json under its own keys. None
writes into shared state; render.py lists them in order (SECTIONS) and puts them after the findings and the comparison.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from memlens.harness.audit.measure_registry import MEASURES
from memlens.harness.core.io import read_jsonl
from memlens.harness.core.layout import (
    CANARIES,
    CANARY_EXPOSURE_SUBDIR,
    REWARD_RANKING_SUBDIR,
    heldout_dataset,
    models_dir,
)
from memlens.harness.core.objectives import PREFERENCE_STAGE
from memlens.harness.core.stats import (
    MIA_FPRS,
    fpr_key,
    fpr_measurable,
    min_nonmembers,
    reward_score_stats,
    wilson_interval,
)
from memlens.harness.measures.blind_mia import BLIND, BLIND_LABEL
from memlens.harness.measures.mia import ATTACKS, attack_label, best_attack, is_degenerate
from memlens.harness.measures.utility import load_utility
from memlens.harness.report import analyses as A
from memlens.harness.report import figures as F
from memlens.harness.report.blocks import Block, Details, Heading, Image, Paragraph, table
from memlens.harness.report.evidence import log_history
from memlens.harness.report.loss_figures import render_loss_figures


@dataclass(frozen=True)
class Section:
    """One section of the report: its blocks, and what it files in summary.json (its keys, nobody else's)."""

    blocks: list[Block]
    filed: dict = field(default_factory=dict)


def _reward_scores(run_dir: Path, prefix: str) -> dict[str, dict[str, dict[int, list[float]]]]:
    """dataset -> reward model -> label -> scores, from models/<RM>/scores/<dataset>.jsonl."""
    out: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(dict)
    for path in sorted(models_dir(run_dir).glob("**/scores/*.jsonl")):
        rm = prefix + str(path.parent.parent.relative_to(models_dir(run_dir)))
        by_label: dict[int, list[float]] = defaultdict(list)
        for r in read_jsonl(path):
            by_label[int(r["label"])].append(float(r["score"]))
        out[path.stem][rm] = dict(by_label)
    return out


def rates_section(finals: list[dict]) -> Section:
    """The memorization rate of every audited model's final checkpoint, and its PII paths where they were scored."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    blocks: list[Block] = [
        Heading(2, "Memorization rates (final checkpoints)"),
        table(finals, ["model", "checkpoint", "dataset", "n_scored", "n_memorized", "rate", "ci95", "n_excluded",
                       "excluded_by_reason"]),
    ]
    pii = [e for e in finals if e.get("pii_regurgitation_rate") is not None]
    if pii:
        blocks.append(Paragraph("PII paths (SD.Links, paper 003 Sec. 5.1-5.2): the share of scored positives whose "
                                "completion contains the example's path verbatim, for the model and its control; "
                                "counterfactual: the model does and the control does not; chance level: 1 / distinct "
                                "paths."))
        blocks.append(table(pii, ["model", "checkpoint", "dataset", "pii_regurgitation_rate",
                                  "control_pii_regurgitation_rate", "pii_counterfactual_rate",
                                  "pii_counterfactual_ci95", "pii_chance_level"]))
    return Section(blocks, filed)


def breakdown_section(grouped: dict, entries: list[dict], fig_dir: Path) -> Section:
    """A user's canaries (data.canaries.file, or an audit.examples file with `group` / `repeat`) or SD planted at
    data.sd.doses: the final checkpoint's memorization rate by group and by copies in training, each part with n and
    its interval."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    rows_out, series = [], {}
    for e in sorted(A.final_entries(entries), key=lambda e: (e["model"], e["dataset"])):
        rows = grouped[(e["model"], e["checkpoint"], e["dataset"])]
        for key in A.BREAKDOWN_KEYS:
            for part in A.breakdown(rows, key):
                rows_out.append({"model": e["model"], "checkpoint": e["checkpoint"], "dataset": e["dataset"],
                                 "by": key, "value": part[key], **{k: part[k] for k in (
                                     "n_scored", "n_memorized", "rate", "ci95", "n_excluded")}})
                if key == "repeat" and isinstance(part[key], int):
                    series.setdefault(f"{e['model']} on {e['dataset']}", []).append(
                        (part[key], part["rate"], part["ci95"]))
    if not rows_out:
        return Section([], filed)
    blocks: list[Block] = [
        Heading(2, "Memorization by group and by copies in training"),
        Paragraph("Final checkpoints. 'group' is the label each of your canaries carries; 'repeat' is how many "
                  "copies of a canary (or, under data.sd.doses, of an SD program) went into training. Rates over "
                  "scored (not excluded) canaries, with the 95 % Wilson interval; a part with few canaries has a "
                  "wide interval."),
    ]
    exposure = {label: points for label, points in series.items() if len(points) >= 2}
    if exposure:
        path = F.sweep_plot(exposure, "repeat", "Memorization rate against copies in training",
                            fig_dir / "canaries_by_repeat.png")
        blocks.append(Image(path, "Memorization rate against copies in training"))
    blocks.append(table(rows_out, ["model", "checkpoint", "dataset", "by", "value", "n_scored", "n_memorized",
                                   "rate", "ci95", "n_excluded"]))
    filed["breakdowns"] = rows_out
    return Section(blocks, filed)


def training_section(evidence: dict, runs: list[Path], fig_dir: Path) -> Section:
    """Did each stage train? Reward-model AUCs by split, RL reward/KL curves per stage (one line per
    point), IPO accuracy/margin/loss — what a reader needs before believing a finding."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    if not evidence:
        return Section([], filed)
    blocks: list[Block] = [Heading(2, "Training: did each stage learn?")]
    rm_rows = [{"reward_model": m, "dataset": d, "split": v.get("split"), "n": v.get("n"), "auc": v.get("auc")}
               for m, ev in evidence.items() if ev["stage"] == "reward" for d, v in ev["auc"].items()]
    if rm_rows:
        blocks.append(Paragraph("Reward models: ROC-AUC of the scores on each scored dataset (split: train = its "
                                "training rows, eval = held out, scored = never trained on)."))
        blocks.append(table(rm_rows, ["reward_model", "dataset", "split", "n", "auc"]))
    stages = (
        ("rl", ["beta", "reward_model", "reward_function", "reward_heldout_auc", "eval_prompts", "eval_reward_initial", "eval_reward_final", "eval_change_ci95",
                "eval_change_in_sd", "eval_up", "eval_down", "eval_p_value", "reward_change_in_std", "kl_final"],
         "RL points. eval_*: the reward model's score of the initial and the trained policy's sampled completions "
         "on the same fixed prompts (eval_prompts of the stage's own, 4 samples each), the mean change with its "
         "95 % interval and in units of the initial spread across prompts, prompts up/down and the sign test's p "
         "— the evidence that the reward rose. reward_change_in_std: the training log's last 10 % of steps vs "
         "the first, in first-step std (each step draws other prompts, so it also measures their difficulty). "
         "kl_final: final mean per-token KL to the reference. reward_function: a verifiable reward in the reward "
         "model's place (recipes/stages/verifiable_rewards.py); reward_heldout_auc: its ranking of held-out labelled rows, "
         "the check a reward model's held-out AUC gets.",
         F.rl_training_plots, "RL training curves"),
        (PREFERENCE_STAGE, ["objective", "pair_n", "pair_accuracy", "pair_accuracy_ci95", "pair_chosen_change",
                 "pair_rejected_change", "steps_logged", "accuracy_first", "accuracy_final", "margin_final",
                 "loss_first", "loss_final", "logps_chosen_first", "logps_chosen_final", "logps_rejected_first",
                 "logps_rejected_final"],
         "Preference stages, one row per objective. pair_*: measured the same way for every objective after training "
         "(recipes/stages/preference_eval.py): pair_accuracy is the share of its training pairs whose chosen completion "
         "gained more summed log-probability over the initial model than the rejected one (the findings' check), "
         "pair_chosen_change / pair_rejected_change the mean change of each side's summed log-probability (nats): "
         "likelihood displacement, when the rejected falls far more than the chosen rises, leaves the chosen line "
         "no more likely to be decoded. The rest as each trainer logs it over the first and last 10 % of logged "
         "steps: its own preference accuracy (DPO: implicit reward vs the reference; CPO, SimPO, ORPO: the policy's "
         "log-likelihoods; KTO: none), reward margin, loss (IPO's starts at (1/2β)²) and the log-probabilities of "
         "the chosen and rejected completions (DPO, KTO: summed; SimPO, ORPO: per token).",
         F.ipo_training_plots, "Preference training curves"),
    )
    for ev in evidence.values():            # the verifiable reward's held-out ranking, for the RL table
        if ev.get("reward_auc"):
            aucs = [v["auc"] for v in ev["reward_auc"].values() if v.get("auc") is not None]
            ev["reward_heldout_auc"] = min(aucs) if aucs else None
    stage_rows = {}
    for kind, columns, text, plot, title in stages:
        stage_rows[kind] = _stage_rows(evidence, kind, columns)
        if stage_rows[kind]:                # the evidence of the stage's models as a table, with its caption
            blocks += [Paragraph(text), table(stage_rows[kind], ["model", *columns])]
        if kind == PREFERENCE_STAGE and any(r.get("pair_accuracy") is not None for r in stage_rows[kind]):
            path = F.preference_displacement_plot([r for r in stage_rows[kind] if r.get("pair_accuracy") is not None],
                                                  fig_dir / "preference_displacement.png")
            blocks.append(Image(path, "Preference pairs: chosen and rejected log-probability change"))
        if stage_rows[kind]:
            for path in plot(_histories(runs, evidence, kind), fig_dir):
                blocks.append(Image(path, f"{title}: {path.stem}"))
    filed["training"] = {"reward_models": rm_rows, "rl": stage_rows["rl"],
                          "preference": stage_rows[PREFERENCE_STAGE]}
    return Section(blocks, filed)


def _stage_rows(evidence: dict, stage: str, columns: list[str]) -> list[dict]:
    """The evidence of every model of one stage kind, a row per model; [] if there is none."""
    return [{"model": m, **{k: ev.get(k) for k in columns}} for m, ev in evidence.items() if ev["stage"] == stage]


def _histories(runs: list[Path], evidence: dict, stage: str) -> dict[str, list[dict]]:
    """{model: log_history} of the models of one stage kind (model names carry the run prefix)."""

    out = {}
    for name, ev in evidence.items():
        if ev["stage"] != stage:
            continue
        run_name, _, model = name.rpartition(":")
        run = next((r for r in runs if r.name == run_name), runs[0]) if run_name else runs[0]
        out[name] = log_history(models_dir(run) / model)
    return out


def persistence_section(entries_rows: dict, entries: list[dict], prov: dict, k: float, fig_dir: Path) -> Section:
    """Fig. 1 for every audited model whose init model was audited too (e.g. FT.1 -> RLFT.1/beta=*)."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    finals = {(e["model"], e["dataset"]): e["checkpoint"] for e in A.final_entries(entries)}
    by_source: dict[tuple[str, str], dict[str, A.Persistence]] = defaultdict(dict)
    for (model, dataset), ckpt in finals.items():
        init = (prov.get(model) or {}).get("init_model")
        init_name = Path(init).name if init else None
        source = next((m for (m, d) in finals if d == dataset and init_name and
                       (m == init or m == init_name or m.endswith("/" + init_name))), None)
        if source is None or source == model:
            continue
        result = A.persistence(entries_rows[(source, finals[(source, dataset)], dataset)],
                               entries_rows[(model, ckpt, dataset)], k)
        by_source[(source, dataset)][model] = result
    if not by_source:
        return Section([], filed)
    blocks: list[Block] = [Heading(2, "Persistence of memorization through a later stage (paper 003 Fig. 1)")]
    rows = []
    for (source, dataset), results in sorted(by_source.items()):
        path = F.persistence_plot(source, results, k, f"{dataset}: memorized by {source}, after the next stage",
                                  fig_dir / f"persistence_{_slug(source)}_{_slug(dataset)}.png")
        blocks.append(Image(path, f"Persistence from {source} on {dataset}"))
        for target, r in sorted(results.items()):
            rows.append({"source": source, "target": target, "dataset": dataset,
                         "memorized_by_source": r.n_source_memorized, "still_memorized": r.n_still_memorized,
                         "share": r.share, "ci95": wilson_interval(r.n_still_memorized, r.n_source_memorized)})
    blocks.append(table(rows, ["source", "target", "dataset", "memorized_by_source", "still_memorized", "share",
                               "ci95"]))
    filed["persistence"] = rows
    return Section(blocks, filed)


def reward_scores_section(runs: list[Path], fig_dir: Path) -> Section:
    """Fig. 2: reward-score distributions by label, a section per scored dataset of each run."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    blocks: list[Block] = []
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        for dataset, per_rm in _reward_scores(run, prefix).items():
            blocks.append(Heading(2, f"Reward scores by label on {dataset} (paper 003 Fig. 2)"))
            path = F.reward_scores_plot(per_rm, dataset, fig_dir / f"reward_scores_{_slug(prefix)}{_slug(dataset)}.png")
            blocks.append(Image(path, f"Reward scores on {dataset}"))
            stats = [{"reward_model": rm, "dataset": dataset, "mean_label_1": s["by_label"].get("1", {}).get("mean"),
                      "mean_label_0": s["by_label"].get("0", {}).get("mean"), "auc": s["auc"]}
                     for rm, s in ((rm, reward_score_stats([{"label": lbl, "score": x} for lbl, xs in by.items()
                                                               for x in xs])) for rm, by in per_rm.items())]
            blocks.append(table(stats, ["reward_model", "dataset", "mean_label_1", "mean_label_0", "auc"]))
            filed.setdefault("reward_scores", []).extend(stats)
    return Section(blocks, filed)


def sweep_section(entries: list[dict], fig_dir: Path) -> Section:
    """Fig. 4 / Fig. 7: rate against each swept key, one line per dataset and setting of the others."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    finals = A.final_entries(entries)
    swept = defaultdict(set)
    for e in finals:
        base, point = A.parse_sweep_point(e["model"])
        if point:
            swept[base].update(point)
    if not swept:
        return Section([], filed)
    blocks: list[Block] = [Heading(2, "Sweeps (paper 003 Fig. 4, Fig. 7)")]
    out = []
    for base, axes in sorted(swept.items()):
        for axis in sorted(axes):
            series: dict[str, list] = {}
            others = sorted(axes - {axis})
            combos = {tuple((o, A.parse_sweep_point(e["model"])[1].get(o)) for o in others)
                      for e in finals if A.parse_sweep_point(e["model"])[0] == base}
            for dataset in sorted({e["dataset"] for e in finals}):
                for combo in sorted(combos, key=str):
                    pts = A.sweep_series(entries, base, dataset, axis, fixed=dict(combo))
                    if len([p for p in pts if p[1] is not None]) >= 2:
                        label = dataset + ("" if not combo else " @ " + ",".join(f"{k}={v:g}" if isinstance(v, float)
                                                                                  else f"{k}={v}" for k, v in combo))
                        series[label] = pts
                        out += [{"model": base, "axis": axis, "series": label, "value": x, "rate": y, "ci95": ci}
                                for x, y, ci in pts]
            if series:
                path = F.sweep_plot(series, axis, f"{base}: memorization rate vs {axis}",
                                    fig_dir / f"sweep_{_slug(base)}_{axis}.png")
                blocks.append(Image(path, f"{base}: memorization rate against {axis}"))
    blocks.append(table(out, ["model", "axis", "series", "value", "rate", "ci95"]))
    filed["sweeps"] = out
    return Section(blocks, filed)


def over_training_section(entries: list[dict], fig_dir: Path) -> Section:
    """Every checkpoint is scored: memorization over training, a figure per model with two or more checkpoints."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    over = defaultdict(dict)
    for e in entries:
        over[e["model"]][e["dataset"]] = A.over_training(entries, e["model"], e["dataset"])
    trained = {m: d for m, d in over.items() if any(len([x for x in v if x["checkpoint"] != "final"]) >= 2
                                                    for v in d.values())}
    if not trained:
        return Section([], filed)
    blocks: list[Block] = [Heading(2, "Memorization over training (every checkpoint)")]
    for model, per_dataset in sorted(trained.items()):
        path = F.over_training_plot(model, per_dataset, fig_dir / f"over_training_{_slug(model)}.png")
        blocks.append(Image(path, f"{model} over training"))
    return Section(blocks, filed)


def loss_section(audits: dict[Path, Path], fig_dir: Path) -> Section:
    """Paper 004's recollection / counterfactual / contextual measures and canary exposure, per model,
    from the `audit.measures=[loss]` outputs under <audit dir>/losses/<model>/."""
    filed: dict = {}   # what this section files in summary.json, under its keys

    found = [(audit, p) for audit in audits.values() for p in sorted((audit / "losses").rglob("summary.json"))]
    if not found:
        return Section([], filed)
    blocks: list[Block] = [Heading(2, "Loss-based measures (paper 004 Sec. 3-4) and canary exposure")]
    rows = []
    for audit, path in found:
        model = str(path.parent.relative_to(audit / "losses"))
        loss_summary = json.loads(path.read_text())
        blocks.append(Paragraph(f"{model}: {loss_summary['variant_note']}"))
        for fig in render_loss_figures(path.parent, fig_dir / "losses" / _slug(model)):
            blocks.append(Image(fig, f"{model}: {fig.stem}"))
        for dataset, entry in loss_summary["datasets"].items():
            row = {"model": model, "dataset": dataset, "variant": loss_summary["variant"]}
            for measure, m in entry["measures"].items():
                row[f"{measure}_frac_last"] = m["frac"][-1] if m["frac"] else None
            if entry.get("exposure"):
                row["mean_exposure_last"] = entry["exposure"][-1].get("mean")
            rows.append(row)
    cols = ["model", "dataset", "variant", "recollection_frac_last", "counterfactual_frac_last",
            "contextual_frac_last", "mean_exposure_last"]
    blocks.append(table(rows, cols))
    filed["loss_measures"] = rows
    return Section(blocks, filed)


def _tpr_cells(m: dict, fpr: float) -> dict:
    """A TPR at FPR `fpr` as the table shows it: its value with the bootstrap and the exact (Clopper-Pearson) interval,
    or "n/m" where that FPR does not exist at this many non-members (memlens.harness.core.stats.fpr_measurable)."""
    key, entry = fpr_key(fpr), m.get(fpr_key(fpr)) or {}
    if not entry.get("measurable", fpr_measurable(m["n_nonmembers"], fpr)):
        return {key: f"n/m: needs ≥ {min_nonmembers(fpr):,} held out", f"{key}_ci95": None, f"{key}_cp95": None}
    return {key: entry.get("value"), f"{key}_ci95": entry.get("ci95"), f"{key}_cp95": entry.get("clopper_pearson95")}


def _mia_row(model: str, dataset: str, span: str, tier: str, rank: int | None, attack: str, label: str,
             m: dict) -> dict:
    return {"model": model, "dataset": dataset, "span": span, "tier": tier, "rank": rank, "attack": attack,
            "attack_label": label, "auc": m["auc"]["value"], "auc_ci95": m["auc"]["ci95"],
            "auc_vs_loss": (m.get("vs_loss") or {}).get("value"), "auc_vs_loss_ci95": (m.get("vs_loss") or {}).get(
                "ci95"), "auc_vs_blind": (m.get("vs_blind") or {}).get("value"),
            "auc_vs_blind_ci95": (m.get("vs_blind") or {}).get("ci95"), **_tpr_cells(m, MIA_FPRS[0]),
            **_tpr_cells(m, MIA_FPRS[1]), "n_members": m["n_members"], "n_nonmembers": m["n_nonmembers"],
            "n_boot": m["bootstrap"]["n"]}


def _mia_rows(mia: dict, model: str, dataset: str, span: str, metrics: dict, tier: str = "all") -> list[dict]:
    """One table row per attack of one model x dataset x span, ranked by AUC (1 = highest; ties share the order of
    ATTACKS), after a first, unranked row: the blind baseline's (no model; Das et al. 2024), which every attack is
    read against. Attacks degenerate here are not ranked (`_degenerate_rows` lists them)."""
    ranked = sorted(((a, m) for a, m in metrics.items() if not is_degenerate(m)), key=lambda am: -am[1]["auc"]["value"])
    blind = A.blind_entry(mia, model, dataset, span) if tier == "all" else None
    first = [_mia_row(model, dataset, span, tier, None, BLIND, BLIND_LABEL, blind)] if blind else []
    return first + [_mia_row(model, dataset, span, tier, rank, attack, attack_label(attack), m)
                    for rank, (attack, m) in enumerate(ranked, start=1)]


def _degenerate_rows(model: str, dataset: str, span: str, metrics: dict) -> list[dict]:
    """The attacks whose numbers say nothing about the model here, each with why (memlens.harness.measures.mia
    .degenerate_reasons): shown apart, never ranked, never flipped."""
    return [{"model": model, "dataset": dataset, "span": span, "attack": attack, "attack_label": attack_label(attack),
             "auc": m["auc"]["value"], "auc_ci95": m["auc"]["ci95"], "degenerate_why": "; ".join(m["degenerate"])}
            for attack, m in metrics.items() if is_degenerate(m)]


def degenerate_line(rows: list[dict]) -> str:
    """'degenerate here: EZ-MIA (8 of 8 members and 0 of 8 non-members took the authors' fallback), ...' of one
    model x dataset x span's degenerate rows."""
    return "degenerate here: " + ", ".join(f"{r['attack_label']} ({r['degenerate_why']})" for r in rows)


def _tier_rows(mia: dict, model: str) -> list[dict]:
    """The final checkpoint's attacks per repetition tier (members planted r times against every held-out one)."""
    results = (mia.get(model) or {}).get("results") or {}
    last = max(results, key=A.checkpoint_step, default=None)
    out = []
    for dataset, entry in sorted(((results.get(last) or {}) if last else {}).items()):
        for tier, spans in sorted((entry.get("tiers") or {}).items(), key=lambda tm: int(tm[0])):
            for span, metrics in spans.items():
                out += _mia_rows(mia, model, dataset, span, metrics, tier=f"repeat {tier}")
    return out


def _sequence_rows(mia: dict) -> list[dict]:
    """Per model, dataset, span and sequence attack at the last checkpoint: its AUC and its paired gain over the
    best single-checkpoint attack there (harness/audit/mia.py `vs_best_single`)."""
    out = []
    for model, record in sorted(mia.items()):
        results = record.get("results") or {}
        for d in sorted({d for ck in results.values() for d in ck}):
            for span in record.get("spans") or []:
                for attack, m in (A.mia_entry(mia, model, d, span) or {}).items():
                    best = m.get("vs_best_single")
                    if best is None:
                        continue
                    single = (A.mia_entry(mia, model, d, span) or {})[best["attack"]]
                    out.append({"model": model, "dataset": d, "span": span, "checkpoints": len(results),
                                "attack": attack, "attack_label": attack_label(attack), "auc": m["auc"]["value"],
                                "best_single": attack_label(best["attack"]), "best_single_auc": single["auc"]["value"],
                                "gain": best["value"], "gain_ci95": best["ci95"], "p_at_most_0": best["p_at_most_0"]})
    return out


def mia_section(mia: dict, entries: list[dict], fig_dir: Path) -> Section:
    """Membership inference beside extraction (`audit.measures=[...,mia]`): per audited model, each attack's AUC
    over checkpoints on the target span beside the extraction rate on the same canaries, and a table of the final
    checkpoint's attacks per span, ranked, with the gain of each over LOSS on the same texts."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    if not mia:
        return Section([], filed)
    labels = ", ".join(attack_label(a) for a in ATTACKS)
    blocks: list[Block] = [
        Heading(3, "Target strings, beside extraction (audit.measures: mia)"),
        Paragraph("Can an attacker tell the canaries a model trained on from held-out ones of the same "
                  "generator (<dataset>_heldout, never in any stage's data)? Attacks (harness/measures/mia.py; "
                  f"docs/methods.md): {labels}. ROC AUC and TPR at FPR < 1 % / < 0.1 % (strict, as mimir and "
                  "LiRA), each with a seeded stratified bootstrap 95 % interval, and the TPR also with its exact "
                  "Clopper-Pearson interval (the bootstrap collapses to a point when the classes separate); a TPR at "
                  "an FPR below 1 / (held-out count) does not exist and reads n/m. 0.5 AUC is chance. Attacks are "
                  "ranked by AUC per model, dataset and span; AUC vs LOSS is the paired bootstrap gain on the same "
                  f"texts. The first row of each, {BLIND_LABEL}, is a bag-of-words random forest that reads the "
                  "texts and never the model (Das et al. 2024; docs/methods.md): an attack tells about the model only "
                  "where it beats that row, and AUC vs blind is its paired gain over it. ReCaLL and Con-ReCall prefixes are made of the first three rows by id of each side, "
                  "which no attack scores. Spans: target = the FIM target given its prompt (the extraction audit's "
                  "inputs); program = the whole program."),
    ]
    rows, tiers, degenerate = [], [], []
    for model, record in sorted(mia.items()):
        datasets = sorted({d for ck in (record.get("results") or {}).values() for d in ck})
        per_dataset = {d: (A.mia_over_training(mia, model, d), A.over_training(entries, model, d)) for d in datasets}
        path = F.mia_over_training_plot(model, per_dataset, fig_dir / f"mia_{_slug(model)}.png")
        blocks.append(Image(path, f"{model}: membership AUC and extraction over training"))
        for d in datasets:
            for span in record.get("spans") or []:
                rows += _mia_rows(mia, model, d, span, A.mia_entry(mia, model, d, span) or {})
                degenerate += _degenerate_rows(model, d, span, A.mia_entry(mia, model, d, span) or {})
        tiers += _tier_rows(mia, model)
    one, tenth = fpr_key(MIA_FPRS[0]), fpr_key(MIA_FPRS[1])
    columns = ["model", "dataset", "span", "rank", "attack_label", "auc", "auc_ci95", "auc_vs_loss",
               "auc_vs_loss_ci95", "auc_vs_blind", "auc_vs_blind_ci95", one, f"{one}_ci95", f"{one}_cp95", tenth,
               "n_members", "n_nonmembers", "n_boot"]
    blocks.append(table(rows, columns))
    if degenerate:
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for r in degenerate:
            groups[(r["model"], r["dataset"], r["span"])].append(r)
        blocks += [Heading(4, "Degenerate attacks (not ranked)"),
                   Paragraph("An attack is degenerate where its own fallback branch scored at least half of the "
                             "members or of the held-out texts, where all its scores are equal, or where its AUC's "
                             "95 % interval lies below 0.5; each score equals its authors' code, none is flipped, "
                             "and none is ranked or chosen as the best attack. "
                             + " ".join(f"{m} / {d} / {s}: {degenerate_line(g)}." for (m, d, s), g in groups.items())),
                   table(degenerate, ["model", "dataset", "span", "attack_label", "auc", "auc_ci95", "degenerate_why"])]
    if tiers:
        blocks += [Heading(4, "By repetition"),
                   Paragraph("The final checkpoint's attacks with the members split by how many times each was "
                             "planted (its `repeat`), each tier against every held-out canary."),
                   table(tiers, ["model", "dataset", "span", "tier", "rank", "attack_label", "auc", "auc_ci95",
                                 one, f"{one}_cp95", "n_members", "n_nonmembers"])]
    sequence = _sequence_rows(mia)
    if sequence:
        blocks += [Heading(4, "The checkpoint sequence against the best single checkpoint"),
                   Paragraph("Each sequence attack (the mean of one attack's score over the stage's checkpoints so "
                             "far; docs/methods.md) against the best single-checkpoint attack at the final "
                             "checkpoint, on the same members and held-out canaries: AUC gain, paired bootstrap."),
                   table(sequence, ["model", "dataset", "span", "checkpoints", "attack_label", "auc", "best_single",
                                    "best_single_auc", "gain", "gain_ci95", "p_at_most_0"])]
    filed["membership_inference"] = rows
    if degenerate:
        filed["membership_inference_degenerate"] = degenerate
    if sequence:
        filed["membership_inference_sequence"] = sequence
    if tiers:
        filed["membership_inference_by_repeat"] = tiers
    return Section(blocks, filed)


def _manifest_ids(run: Path) -> frozenset:
    """The canary ids a callback run planted and held out (its canaries/manifest.json), or none."""
    path = run / CANARIES / "manifest.json"
    if not path.is_file():
        return frozenset()
    manifest = json.loads(path.read_text(encoding="utf-8"))
    return frozenset(c["id"] for c in (manifest.get("canaries") or []) + (manifest.get("heldout") or []))


def runs_section(runs: list[Path], entries: list[dict], mia: dict, fig_dir: Path) -> Section:
    """Several runs side by side (`report.runs=[...]`), as paper 003 compares stages, for the user's own trainers
    (e.g. SFT against DPO against GRPO on one manifest): each model's extraction rate with its interval at its last
    checkpoint, held out beside it, the best MIA attack's AUC there, and every run's rate over steps on one axis."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    if len(runs) < 2:
        return Section([], filed)
    datasets = sorted({e["dataset"] for e in entries if not e["dataset"].endswith("_heldout")})
    rows, figures = [], []
    for dataset in datasets:
        series = {}
        for model in sorted({e["model"] for e in entries if e["dataset"] == dataset}):
            curve = A.over_training(entries, model, dataset)
            last = curve[-1]
            held = A.over_training(entries, model, heldout_dataset(dataset))
            best = best_attack(A.mia_entry(mia, model, dataset) or {})
            rows.append({"model": model, "dataset": dataset, "checkpoint": last["checkpoint"], "rate": last["rate"],
                         "ci95": last.get("ci95"), "n_scored": last.get("n_scored"),
                         "heldout_rate": held[-1]["rate"] if held else None,
                         "best_attack": attack_label(best[0]) if best else None,
                         "auc": best[1]["auc"]["value"] if best else None,
                         "auc_ci95": best[1]["auc"]["ci95"] if best else None})
            series[model] = curve
        path = F.runs_over_training_plot(series, dataset, fig_dir / f"runs_{_slug(dataset)}.png")
        figures.append(Image(path, f"{dataset}: memorization over training, every run on one axis"))
    manifests = {run.name: _manifest_ids(run) for run in runs}
    same = len({ids for ids in manifests.values() if ids}) <= 1
    note = ("Every callback run planted and held out the same canaries." if same and any(manifests.values()) else
            "The runs did not plant the same canaries (their canaries/manifest.json differ): their rates are of "
            "different secrets, so compare them with care." if not same else
            "The runs are compared on the datasets each audited.")
    blocks = [Heading(2, "Runs compared"),
              Paragraph(f"{len(runs)} runs ({', '.join(r.name for r in runs)}): each model's memorization rate with its "
                        "95 % Wilson interval and n at its last checkpoint, the held-out twins' rate beside it, and the "
                        f"best membership attack's AUC there (picked per row: optimistic). {note}"),
              *figures,
              table(rows, ["model", "dataset", "checkpoint", "rate", "ci95", "n_scored", "heldout_rate", "best_attack",
                           "auc", "auc_ci95"])]
    filed["runs_compared"] = {"runs": [str(r) for r in runs], "same_canaries": same, "rows": rows}
    return Section(blocks, filed)


def utility_section(runs: list[Path], audits: dict[Path, Path]) -> Section:
    """Paper 003 Table 2 analogue: HumanEval single-line infilling exact match, held-out PD loss."""
    filed: dict = {}   # what this section files in summary.json, under its keys

    rows = []
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        record = load_utility(audits[run])
        for model, entry in sorted(((record or {}).get("results") or {}).items()):
            rows.append({"model": prefix + model, **entry})
    if not rows:
        return Section([], filed)
    blocks: list[Block] = [
        Heading(2, "Utility of the final models (paper 003 Table 2 analogue)"),
        Paragraph("HumanEval single-line infilling: exact match of the first generated line (no code is "
                  "executed); pd_eval: mean target cross-entropy on held-out public code (lower is better)."),
        table(rows, ["model", "humaneval_infill_exact_match", "humaneval_infill_n", "pd_eval_loss", "pd_eval_n"]),
    ]
    filed["utility"] = rows
    return Section(blocks, filed)


def discoverable_section(audits: dict[Path, Path], fig_dir: Path) -> Section:
    """The curve over n of probabilistic discoverable extraction (audit.measures=[...,discoverable]): per dataset,
    each model's sampling-scheme rate at the smallest p audited against n, beside its greedy NED rate. The table
    of the same results is the measure's registered one (below)."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    blocks: list[Block] = []
    for run, audit in audits.items():
        records = A.load_discoverable(audit)
        for dataset in sorted({d for r in records.values() for d in (r["results"].get("final") or {})}):
            curves = {}
            for model, record in sorted(records.items()):
                entry = (record["results"].get("final") or {}).get(dataset)
                sampling = [s["name"] for s in record["schemes"] if s["temperature"] > 0]
                if entry is None or not sampling:
                    continue
                p = min(record["p"])
                points = [(pt["n_queries"], pt["counterfactual"]["rate"], pt["counterfactual"]["ci95"])
                          for pt in entry["schemes"][sampling[0]] if pt["p"] == p]
                curves[model] = {"label": f"{sampling[0]}, p={p:g}", "points": points,
                                 "greedy": entry["greedy_ned"]["rate"]}
            if curves:
                name = f"discoverable_{_slug(run.name)}_{_slug(dataset)}.png" if len(audits) > 1 else \
                    f"discoverable_{_slug(dataset)}.png"
                path = F.discoverable_curve_plot(curves, dataset, fig_dir / name)
                blocks.append(Image(path, f"{run.name}: {dataset}" if len(audits) > 1 else dataset))
    if not blocks:
        return Section([], filed)
    return Section([Heading(2, "Extraction by sampling: the curve over queries (Hayes et al. 2024)"),
            Paragraph("Each model's counterfactual (n, p)-discoverable rate under its sampling scheme (the audited "
                      "model's chance that n queries produce the exact target is at least p, the control's is not; "
                      "final checkpoint) against n, with 95 % Wilson intervals; the dashed line is the same model's "
                      "greedy NED rate on the same examples. Rules: docs/methods.md."), *blocks], filed)


def _interval(m: dict | None) -> str:
    if not m:
        return "–"
    lo, hi = m.get("ci95") or (None, None)
    return f"{m['value']:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None else "")


def callback_section(audits: dict[Path, Path]) -> Section:
    """What memlens.AuditCallback measured beside extraction and MIA at each saved checkpoint: exposure of the
    planted canaries next to its null (the held-out ones), and a reward model's ranking of planted over held out."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    exposure, reward = [], []
    for run, audit in audits.items():
        prefix = "" if len(audits) == 1 else f"{run.name}:"
        for model, record in A.load_callback_summaries(audit, CANARY_EXPOSURE_SUBDIR).items():
            for checkpoint, s in sorted(record["results"].items(), key=lambda kv: A.checkpoint_step(kv[0])):
                p, h = s["planted"], s["heldout"]
                exposure.append({"model": prefix + model, "checkpoint": checkpoint,
                                 "planted mean (n)": f"{p['mean']:.2f} ({p['count']})" if p["count"] else "–",
                                 "planted at max": f"{p['share_max']:.2f}" if p["count"] else "–",
                                 "held out mean (n)": f"{h['mean']:.2f} ({h['count']})" if h["count"] else "–",
                                 "max bits": f"{p['max_exposure']:.2f}"})
        for model, record in A.load_callback_summaries(audit, REWARD_RANKING_SUBDIR).items():
            for checkpoint, s in sorted(record["results"].items(), key=lambda kv: A.checkpoint_step(kv[0])):
                metrics = s.get("metrics") or {}
                reward.append({"model": prefix + model, "checkpoint": checkpoint,
                               "AUC [95 % CI]": _interval(metrics.get("auc")),
                               "mean reward planted / held out": f"{s['mean_reward_members']:.3f} / "
                               + (f"{s['mean_reward_nonmembers']:.3f}" if s["mean_reward_nonmembers"] is not None
                                  else "–"),
                               "n planted / held out": f"{s['n_members']} / {s['n_nonmembers']}"})
    blocks: list[Block] = []
    if exposure:
        blocks += [Heading(2, "Exposure of the canaries over training (memlens.AuditCallback)"),
                   Paragraph("Carlini et al. 2019, rank form: each canary's target ranked by summed NLL among the "
                             "held-out canaries' targets in its prompt, exposure = log2(candidates) - log2(rank), ties "
                             "against the canary. The held-out canaries, ranked among each other, are the null: their "
                             "mean is what a model that learned nothing of them gives. 'at max': the share ranked first."),
                   table(exposure, list(exposure[0]))]
    if reward:
        blocks += [Heading(2, "A reward model's ranking of the canaries (memlens.AuditCallback)"),
                   Paragraph("The reward of each canary's prompt + completion as a membership score, planted vs held "
                             "out: ROC AUC with its seeded bootstrap 95 % interval (0.5 = chance)."),
                   table(reward, list(reward[0]))]
    filed["callback"] = {"exposure": exposure, "reward": reward}
    return Section(blocks, filed)


MEMBERSHIP_HEADING = "Membership inference, by what each stage trains on"


def membership_section(mia: dict, entries: list[dict], audits: dict[Path, Path], fig_dir: Path) -> Section:
    """One section per report for membership, a part per data kind a stage trains on (issue #68): target strings
    (`mia`, beside extraction) first, then each registered measure with `membership_of` (preference pairs, RL prompts)
    under its kind. Each part's table opens with the blind baseline's row."""
    targets = mia_section(mia, entries, fig_dir)
    kinds = _measure_tables(audits, lambda m: bool(m.membership_of), lambda name, m: f"{m.membership_of[:1].upper()}"
                            f"{m.membership_of[1:]} ({m.title}; audit.measures: {name})", level=3)
    if not targets.blocks and not kinds.blocks:
        return Section([], {})
    intro = Paragraph("Can an attacker tell what a model trained on from held-out data of the same kind? Each part "
                      "scores what its stages train on: the FIM target strings of SFT-style training, the preference "
                      "pairs of IPO/DPO, the prompts of RL. In every table the blind baseline (no model) comes first.")
    return Section([Heading(2, MEMBERSHIP_HEADING), intro, *targets.blocks, *kinds.blocks],
                   {**targets.filed, **kinds.filed})


def registered_measures_section(audits: dict[Path, Path]) -> Section:
    """A measure registered with `report_rows` (harness/audit/measure_registry.py) gets a table under its title: the
    columns and rows it reads back from each run's audit directory, the run's name prefixed when several. Membership
    measures (`membership_of`) are in the membership section instead."""
    return _measure_tables(audits, lambda m: not m.membership_of, lambda name, m: f"{m.title} (audit.measures: {name})",
                           level=2)


def _measure_tables(audits: dict[Path, Path], wanted, heading, level: int) -> Section:
    """The report_rows tables of the registered measures `wanted` picks, each under `heading(name, measure)`."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    blocks: list[Block] = []
    for name, measure in MEASURES.items():
        if measure.report_rows is None or not wanted(measure):
            continue
        tables = []
        for run, audit in audits.items():
            got = measure.report_rows(audit)
            if got:
                columns, rows = got
                prefix = "" if len(audits) == 1 else f"{run.name}: "
                tables.append((prefix, columns, rows))
        if not tables:
            continue
        blocks.append(Heading(level, heading(name, measure)))
        for prefix, columns, rows in tables:
            if prefix:
                blocks.append(Paragraph(prefix.rstrip(": ")))
            blocks.append(table(rows, columns))
            filed.setdefault("measures", {}).setdefault(name, []).extend(rows)
    return Section(blocks, filed)


def maps_section(grouped: dict, finals: list[dict], rcfg, k: float, fig_dir: Path) -> Section:
    """Fig. 3 / 8: a map per audited model and dataset (final checkpoint), grouped by model, each group folded."""
    filed: dict = {}   # what this section files in summary.json, under its keys
    map_datasets = set(rcfg.get("map_datasets") or [])
    by_model: dict[str, list[Image]] = defaultdict(list)
    for e in sorted(finals, key=lambda e: (e["model"], e["dataset"])):
        if map_datasets and e["dataset"] not in map_datasets:
            continue
        rows = grouped[(e["model"], e["checkpoint"], e["dataset"])]
        path = F.memorization_map(rows, k, f"{e['model']} vs control on {e['dataset']}",
                                  fig_dir / f"map_{_slug(e['model'])}_{_slug(e['dataset'])}.png")
        by_model[e["model"]].append(Image(path, f"{e['model']} on {e['dataset']}"))
    if not by_model:
        return Section([], filed)
    blocks: list[Block] = [
        Heading(2, "Memorization maps (paper 003 Fig. 3, Fig. 8)"),
        Paragraph("One point per example: the control's distance to the target (x) against the audited model's "
                  "(y); memorized examples lie in the shaded corner (control above k, model at or below). "
                  "One group per model, a map per dataset."),
    ]
    for model, images in by_model.items():
        blocks.append(Details(f"{model}: {len(images)} map(s)", tuple(images)))
    return Section(blocks, filed)


def _slug(name: str) -> str:
    """A model or dataset name as part of a figure's file name: letters, digits, `.`, `-` and `_` only
    (a sweep point `RLFT.1/beta=0.1` -> `RLFT.1_beta-0.1`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name.replace("/", "_").replace("=", "-").replace(",", "_"))
