"""`memlens report`: figures, report.md, a self-contained report.html and report/summary.json.

Everything is rendered from stored audit rows, reward-model score files and provenance.json files;
nothing re-scores. The document is built once as a list of blocks and written as Markdown and as HTML
(figures embedded as base64), so both always say the same thing.
"""

from __future__ import annotations

import base64
import html
import json
import re
import urllib.parse
from collections import defaultdict
from pathlib import Path
from typing import Any

from memlens.harness.audit.measures import MEASURES
from memlens.harness.core import layout
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_text, read_jsonl
from memlens.harness.core.layout import models_dir
from memlens.harness.core.objectives import OBJECTIVES, PREFERENCE_STAGE, is_preference_stage, recorded_objective
from memlens.harness.core.provenance import provenance
from memlens.harness.core.stats import reward_score_stats, wilson_interval
from memlens.harness.measures.memorization import DEFAULT_K
from memlens.harness.measures.mia import attack_label
from memlens.harness.measures.utility import load_utility
from memlens.harness.report import analyses as A
from memlens.harness.report import figures as F
from memlens.harness.report.evidence import log_history, stage_evidence
from memlens.harness.report.findings import Roles, RunResults, findings, load_loss_rows, method_checks, status_label
from memlens.harness.report.loss_figures import render_loss_figures

# Default groups when report.compare is empty: by the recipe that produced each model (an RL stage against a
# verifiable reward is RLVR, a preference stage is named by its objective). The recipe does not say how SD
# entered (RLFT.1 inherits it from FT.1, RLFT.2 only saw it through the reward model), so the experiments that
# make that comparison set report.compare themselves (conf/experiment/quickstart.yaml).
STAGE_GROUPS = {"sft": "FT", "rl": "RLFT"}
GROUP_ORDER = ("FT", "RLFT", "RLVR", *(name.upper() for name in OBJECTIVES))   # a preference model: its objective


def default_group(prov: dict) -> str | None:
    """The comparison group of a model from its provenance: FT, RLFT, RLVR, or its preference objective."""
    stage = prov.get("stage")
    if stage == "rl" and prov.get("reward_function"):
        return "RLVR"
    if is_preference_stage(stage):
        return recorded_objective(prov.get("hyperparameters") or {}).upper()
    return STAGE_GROUPS.get(stage)


# ---------------------------------------------------------------- document blocks
# Blocks: ("h", level, text), ("p", text), ("table", headers, rows), ("img", path, caption), ("toc",): the list of
# the document's sections, ("details", summary, [blocks]): a group a reader opens when they need it (HTML
# <details>; in report.md a level-3 heading). Column keys stay the keys of summary.json; a table shows them as
# words (COLUMN_LABELS, else the key with spaces).
COLUMN_LABELS = {
    "n_total": "examples", "n_excluded": "excluded", "excluded_by_reason": "excluded by reason", "n_scored": "scored",
    "n_memorized": "memorized", "rate": "rate", "ci95": "95 % CI", "pii_regurgitation_rate": "PII regurgitated",
    "control_pii_regurgitation_rate": "PII by control", "pii_counterfactual_rate": "PII counterfactual",
    "pii_counterfactual_ci95": "PII counterfactual 95 % CI", "pii_chance_level": "PII chance level",
    "ours": "this run", "claim": "finding", "p_value": "p", "why": "why (when not holds)",
    "evidence_ok": "evidence passed", "memorized_by_source": "memorized by source",
    "still_memorized": "still memorized", "auc": "AUC", "reward_model": "reward model", "attack_label": "attack",
}


def _label(column: str) -> str:
    return COLUMN_LABELS.get(column, column.replace("_", " "))


def _table(rows: list[dict], columns: list[str]) -> tuple[str, list[str], list[list[str]]]:
    def fmt(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, dict):                   # counts by key (e.g. exclusions by reason): the non-zero ones
            return ", ".join(f"{k}={fmt(x)}" for k, x in v.items() if x != 0) or "–"
        if isinstance(v, (list, tuple)):          # an interval: [low, high]
            return "[" + ", ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in v) + "]"
        return str(v)
    return ("table", [_label(c) for c in columns], [[fmt(r.get(c)) for c in columns] for r in rows])


def _md(text: str) -> str:
    """Text for report.md: names come from model and dataset directories and config values, so markup in
    them is shown, never rendered (as report.html escapes it): HTML's special characters as entities, the
    characters of Markdown links and table cells (and the backslash) backslash-escaped, line breaks as spaces."""
    text = html.escape(str(text), quote=False)
    text = re.sub(r"([\\\[\]|])", r"\\\1", text)
    return re.sub(r"[\r\n]+", " ", text)


def _to_markdown(blocks: list[tuple], out_dir: Path) -> str:
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            lines += ["#" * block[1] + " " + _md(block[2]), ""]
        elif kind == "p":
            lines += [_md(block[1]), ""]
        elif kind == "table":
            _, cols, body = block
            lines += ["| " + " | ".join(_md(c) for c in cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in body]
            lines.append("")
        elif kind == "img":
            link = urllib.parse.quote(Path(block[1]).relative_to(out_dir).as_posix())
            lines += [f"![{_md(block[2])}]({link})", ""]
        elif kind == "toc":
            lines += [f"- {_md(text)}" for text in _sections(blocks)] + [""]
        elif kind == "details":
            lines += [f"### {_md(block[1])}", "", _to_markdown(block[2], out_dir)]
    return "\n".join(lines)


def _sections(blocks: list[tuple]) -> list[str]:
    """The level-2 headings, in order: the report's contents."""
    return [b[2] for b in blocks if b[0] == "h" and b[1] == 2]


def _anchor(text: str) -> str:
    return "s-" + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# Tables fit the page (1400 px and narrower): cells wrap anywhere, a wide table gets its own scroll box rather
# than widening the page; long evidence strings wrap in their cell (benchmarks/report_screenshots.py checks it).
_STYLE = ("body{font-family:sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;line-height:1.35}"
          "table{border-collapse:collapse;font-size:13px;margin:.5em 0 1em}"
          "td,th{border:1px solid #bbb;padding:3px 6px;vertical-align:top;overflow-wrap:anywhere}"
          "th{background:#eee;text-align:left;overflow-wrap:normal}td.short{white-space:nowrap}"
          ".tablebox{max-width:100%;overflow-x:auto}"
          "td.status-holds{background:#dff0d8}td.status-inconclusive,td.status-inconclusive-unstable{background:#fcf8e3}"
          "td.status-not-reproduced{background:#f2dede}"
          "details{margin:.4em 0;border:1px solid #ddd;padding:.3em .6em}summary{cursor:pointer;font-weight:bold}"
          "img{max-width:100%}nav ol{columns:2}")


SHORT_CELL = 16          # characters: "not reproduced", "[0.492, 0.77]", "checkpoint-450"


def _html_blocks(blocks: list[tuple], all_blocks: list[tuple]) -> list[str]:
    parts = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            anchor = f" id='{_anchor(block[2])}'" if block[1] == 2 else ""
            parts.append(f"<h{block[1]}{anchor}>{html.escape(block[2])}</h{block[1]}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(block[1])}</p>")
        elif kind == "table":
            _, cols, body = block
            status = cols.index("status") if "status" in cols else None
            parts.append("<div class='tablebox'><table><tr>"
                         + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
            for row in body:
                # A short value (a status, a number, an interval) stays on one line; long text wraps.
                cells = [f"<td class='short status-{_anchor(c)[2:]}'>" if i == status else
                         "<td class='short'>" if len(c) <= SHORT_CELL else "<td>" for i, c in enumerate(row)]
                parts.append("<tr>" + "".join(f"{td}{html.escape(c)}</td>" for td, c in zip(cells, row)) + "</tr>")
            parts.append("</table></div>")
        elif kind == "img":
            data = base64.b64encode(Path(block[1]).read_bytes()).decode()
            parts.append(f"<figure><img alt='{html.escape(block[2])}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
        elif kind == "toc":
            items = "".join(f"<li><a href='#{_anchor(t)}'>{html.escape(t)}</a></li>" for t in _sections(all_blocks))
            parts.append(f"<nav><strong>Contents</strong><ol>{items}</ol></nav>")
        elif kind == "details":
            parts.append(f"<details><summary>{html.escape(block[1])}</summary>")
            parts += _html_blocks(block[2], all_blocks)
            parts.append("</details>")
    return parts


def _to_html(blocks: list[tuple], title: str) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_STYLE}</style></head><body>"]
    parts += _html_blocks(blocks, blocks)
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------- inputs
def _load_run(run_dir: Path, audit_dir: Path, prefix: str) -> tuple[dict, list[dict], dict[str, dict]]:
    """(rows grouped by key, provenance table, provenance by model) of one run; model names prefixed."""
    if not audit_dir.is_dir():
        raise UserError(f"{audit_dir} does not exist: run `memlens audit experiment=...` before the report "
                        "(or set run_dir / report.runs to a run that has been audited, and audit.out_dir to "
                        "where its audit wrote)")
    grouped = {(prefix + m, c, d): rows for (m, c, d), rows in A.load_audit_rows(audit_dir).items()}
    table = A.provenance_table(models_dir(run_dir))
    for row in table:
        row["model"] = prefix + row["model"]
    prov = {}
    for path in models_dir(run_dir).rglob("provenance.json"):
        prov[prefix + str(path.parent.relative_to(models_dir(run_dir)))] = json.loads(path.read_text())
    return grouped, table, prov


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


# ---------------------------------------------------------------- sections
def _persistence_section(entries_rows: dict, prov: dict, k: float, fig_dir: Path, blocks: list, summary: dict):
    """Fig. 1 for every audited model whose init model was audited too (e.g. FT.1 -> RLFT.1/beta=*)."""
    finals = {(e["model"], e["dataset"]): e["checkpoint"] for e in A.final_entries(summary["entries"])}
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
        return
    blocks.append(("h", 2, "Persistence of memorization through a later stage (paper 003 Fig. 1)"))
    rows = []
    for (source, dataset), results in sorted(by_source.items()):
        path = F.persistence_plot(source, results, k, f"{dataset}: memorized by {source}, after the next stage",
                                  fig_dir / f"persistence_{_slug(source)}_{_slug(dataset)}.png")
        blocks.append(("img", str(path), f"Persistence from {source} on {dataset}"))
        for target, r in sorted(results.items()):
            rows.append({"source": source, "target": target, "dataset": dataset,
                         "memorized_by_source": r.n_source_memorized, "still_memorized": r.n_still_memorized,
                         "share": r.share, "ci95": wilson_interval(r.n_still_memorized, r.n_source_memorized)})
    blocks.append(_table(rows, ["source", "target", "dataset", "memorized_by_source", "still_memorized", "share",
                                "ci95"]))
    summary["persistence"] = rows


def _breakdown_section(grouped: dict, entries: list[dict], fig_dir: Path, blocks: list, summary: dict) -> None:
    """A user's canaries (data.canaries.file, or an audit.examples file with `group` / `repeat`): the final
    checkpoint's memorization rate by group and by copies in training, each part with n and its interval."""
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
        return
    blocks.append(("h", 2, "Your canaries: memorization by group and by copies in training"))
    blocks.append(("p", "Final checkpoints. 'group' is the label each canary carries; 'repeat' is how many copies "
                        "of it went into training. Rates over scored (not excluded) canaries, with the 95 % Wilson "
                        "interval; a part with few canaries has a wide interval."))
    exposure = {label: points for label, points in series.items() if len(points) >= 2}
    if exposure:
        path = F.sweep_plot(exposure, "repeat", "Memorization rate against copies in training",
                            fig_dir / "canaries_by_repeat.png")
        blocks.append(("img", str(path), "Memorization rate against copies in training"))
    blocks.append(_table(rows_out, ["model", "checkpoint", "dataset", "by", "value", "n_scored", "n_memorized",
                                    "rate", "ci95", "n_excluded"]))
    summary["breakdowns"] = rows_out


def _sweep_section(entries: list[dict], fig_dir: Path, blocks: list, summary: dict):
    """Fig. 4 / Fig. 7: rate against each swept key, one line per dataset and setting of the others."""
    finals = A.final_entries(entries)
    swept = defaultdict(set)
    for e in finals:
        base, point = A.parse_sweep_point(e["model"])
        if point:
            swept[base].update(point)
    if not swept:
        return
    blocks.append(("h", 2, "Sweeps (paper 003 Fig. 4, Fig. 7)"))
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
                blocks.append(("img", str(path), f"{base}: memorization rate against {axis}"))
    blocks.append(_table(out, ["model", "axis", "series", "value", "rate", "ci95"]))
    summary["sweeps"] = out


def _loss_section(audits: dict[Path, Path], fig_dir: Path, blocks: list, summary: dict) -> None:
    """Paper 004's recollection / counterfactual / contextual measures and canary exposure, per model,
    from the `audit.measures=[loss]` outputs under <audit dir>/losses/<model>/."""

    found = [(audit, p) for audit in audits.values() for p in sorted((audit / "losses").rglob("summary.json"))]
    if not found:
        return
    blocks.append(("h", 2, "Loss-based measures (paper 004 Sec. 3-4) and canary exposure"))
    rows = []
    for audit, path in found:
        model = str(path.parent.relative_to(audit / "losses"))
        loss_summary = json.loads(path.read_text())
        blocks.append(("p", f"{model}: {loss_summary['variant_note']}"))
        for fig in render_loss_figures(path.parent, fig_dir / "losses" / _slug(model)):
            blocks.append(("img", str(fig), f"{model}: {fig.stem}"))
        for dataset, entry in loss_summary["datasets"].items():
            row = {"model": model, "dataset": dataset, "variant": loss_summary["variant"]}
            for measure, m in entry["measures"].items():
                row[f"{measure}_frac_last"] = m["frac"][-1] if m["frac"] else None
            if entry.get("exposure"):
                row["mean_exposure_last"] = entry["exposure"][-1].get("mean")
            rows.append(row)
    cols = ["model", "dataset", "variant", "recollection_frac_last", "counterfactual_frac_last",
            "contextual_frac_last", "mean_exposure_last"]
    blocks.append(_table(rows, cols))
    summary["loss_measures"] = rows


def _registered_measures_section(audits: dict[Path, Path], blocks: list, summary: dict) -> None:
    """A measure registered with `report_rows` (harness/audit/measures.py) gets a table under its title: the
    columns and rows it reads back from each run's audit directory, the run's name prefixed when several."""
    for name, measure in MEASURES.items():
        if measure.report_rows is None:
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
        blocks.append(("h", 2, f"{measure.title} (audit.measures: {name})"))
        for prefix, columns, rows in tables:
            if prefix:
                blocks.append(("p", prefix.rstrip(": ")))
            blocks.append(_table(rows, columns))
            summary.setdefault("measures", {}).setdefault(name, []).extend(rows)


def _mia(audits: dict[Path, Path]) -> dict:
    """{model: MIA summary} of every run (a run's name prefixes its models when several are reported)."""
    out = {}
    for run, audit in audits.items():
        prefix = "" if len(audits) == 1 else f"{run.name}:"
        out.update({prefix + model: entry for model, entry in A.load_mia(audit).items()})
    return out


def _mia_section(mia: dict, entries: list[dict], fig_dir: Path, blocks: list, summary: dict) -> None:
    """Membership inference beside extraction (`audit.measures=[...,mia]`): per audited model, each attack's AUC
    over checkpoints on the target span beside the extraction rate on the same canaries, and a table of the final
    checkpoint's metrics per span and attack."""
    if not mia:
        return
    blocks.append(("h", 2, "Membership inference beside extraction"))
    blocks.append(("p", "Can an attacker tell the canaries a model trained on from held-out ones of the same "
                        "generator (<dataset>_heldout, never in any stage's data)? Attacks (harness/measures/mia.py): "
                        "LOSS, zlib (Carlini et al. 2021), Min-K% and Min-K%++ (Shi et al. 2024; Zhang et al. 2024, "
                        "k = 20 %), and the loss calibrated by the control's. ROC AUC and TPR at 1 % / 0.1 % FPR, each "
                        "with a seeded stratified bootstrap 95 % interval; 0.5 is chance. Spans: target = the FIM "
                        "target given its prompt (the extraction audit's inputs); program = the whole program."))
    rows = []
    for model, record in sorted(mia.items()):
        datasets = sorted({d for ck in (record.get("results") or {}).values() for d in ck})
        per_dataset = {d: (A.mia_over_training(mia, model, d), A.over_training(entries, model, d)) for d in datasets}
        path = F.mia_over_training_plot(model, per_dataset, fig_dir / f"mia_{_slug(model)}.png")
        blocks.append(("img", str(path), f"{model}: membership AUC and extraction over training"))
        for d in datasets:
            for span in record.get("spans") or []:
                for attack, m in (A.mia_entry(mia, model, d, span) or {}).items():
                    rows.append({"model": model, "dataset": d, "span": span, "attack": attack,
                                 "attack_label": attack_label(attack), "auc": m["auc"]["value"], "auc_ci95": m["auc"]["ci95"],
                                 "tpr_at_fpr_1%": m["tpr_at_fpr_1%"]["value"],
                                 "tpr_at_fpr_1%_ci95": m["tpr_at_fpr_1%"]["ci95"],
                                 "tpr_at_fpr_0.1%": m["tpr_at_fpr_0.1%"]["value"],
                                 "n_members": m["n_members"], "n_nonmembers": m["n_nonmembers"],
                                 "n_boot": m["bootstrap"]["n"]})
    blocks.append(_table(rows, ["model", "dataset", "span", "attack_label", "auc", "auc_ci95", "tpr_at_fpr_1%",
                                "tpr_at_fpr_1%_ci95", "tpr_at_fpr_0.1%", "n_members", "n_nonmembers", "n_boot"]))
    summary["membership_inference"] = rows


def _utility_section(runs: list[Path], audits: dict[Path, Path], blocks: list, summary: dict) -> None:
    """Paper 003 Table 2 analogue: HumanEval single-line infilling exact match, held-out PD loss."""

    rows = []
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        record = load_utility(audits[run])
        for model, entry in sorted(((record or {}).get("results") or {}).items()):
            rows.append({"model": prefix + model, **entry})
    if not rows:
        return
    blocks.append(("h", 2, "Utility of the final models (paper 003 Table 2 analogue)"))
    blocks.append(("p", "HumanEval single-line infilling: exact match of the first generated line (no code is "
                        "executed); pd_eval: mean target cross-entropy on held-out public code (lower is better)."))
    blocks.append(_table(rows, ["model", "humaneval_infill_exact_match", "humaneval_infill_n", "pd_eval_loss",
                                "pd_eval_n"]))
    summary["utility"] = rows


def _findings_section(cfg, audits: dict[Path, Path], grouped: dict, evidence: dict, k: float, blocks: list,
                      summary: dict, out_dir: Path, mia: dict | None = None) -> None:
    """The papers' findings (F1-F8, N1-N3, C1-C2) against this run, each with its training evidence,
    rates with n and 95 % intervals, and the exact test: report/findings.json."""

    roles = Roles.load((cfg.get("report") or {}).get("findings_models"))
    nmt_path = (cfg.get("report") or {}).get("nmt_summary")
    nmt = json.loads(Path(nmt_path).read_text()) if nmt_path and Path(nmt_path).is_file() else None
    loss_rows = [r for audit in audits.values() for r in load_loss_rows(audit)]
    table = findings(RunResults(grouped, evidence, loss_rows, nmt, k, roles, mia or {}))
    blocks.append(("h", 2, "Findings: what this run concluded"))
    blocks.append(("p", "A finding holds only when the stages it depends on trained (evidence), its rule's "
                        "margin is met, and a comparison passes an exact test (McNemar on the same examples) at "
                        "p < 0.05. 'inconclusive' names what is missing; 'inconclusive (unstable)' a verdict "
                        "that changed when the run was repeated on other CPU kernels; 'not measured' means the "
                        "run has no models or data for it. Rates: percentage [95 % Wilson interval] (k/n)."))
    rows = [{**f, "p_value": f["p_value"], "why": f["reason"] or f["note"],
             "status": status_label(f),
             "evidence": "; ".join(f"{e['check']} = {_fmt_value(e['value'])} {'ok' if e['ok'] else 'FAILS'} "
                                   f"({e['threshold']})" for e in f["evidence"])} for f in table]
    # What the run concluded first; each finding's rule and the evidence checks behind it (long strings) folded.
    blocks.append(_table(rows, ["id", "claim", "status", "ours", "paper", "p_value", "why"]))
    blocks.append(("details", "Each finding's rule and the training evidence it checked",
                   [_table(rows, ["id", "rule", "evidence"])]))
    summary["findings"] = table
    atomic_write_json(out_dir / "findings.json", {"findings": table, "nmt_summary": nmt_path,
                                                  "evidence": evidence})


def _comparison_section(rcfg, prov: dict, entries: list[dict], grouped: dict, evidence: dict, k: float,
                        fig_dir: Path, blocks: list, summary: dict, mia: dict | None = None) -> None:
    """Sec. 5.2 / 5.4 and beyond: a bar per model a run trained (FT, RLFT via a reward model, RLVR, each preference
    objective) per dataset, each with its 95 % interval, n and whether its stage passed its training evidence
    (harness.report.findings.method_checks: an RL point's reward rise, a preference model's fit to its pairs)."""
    compare = dict(rcfg.get("compare") or {})
    if not compare:
        for model, p in sorted(prov.items()):
            group = default_group(p)
            if group and any(e["model"] == model for e in entries):
                compare.setdefault(group, []).append(model)
        order = {g: i for i, g in enumerate(GROUP_ORDER)}      # default groups in pipeline order;
        compare = dict(sorted(compare.items(), key=lambda kv: order.get(kv[0], len(order))))  # report.compare: its own
    comp_rows = A.rlhf_vs_ipo(entries, compare, sorted({e["dataset"] for e in entries}))
    if len({r["model"] for r in comp_rows}) < 2:
        return
    run = RunResults(grouped, evidence, k=k)
    for r in comp_rows:
        checks = method_checks(run, r["model"], r["dataset"])
        r["evidence_ok"] = all(c["ok"] for c in checks) if checks else None
        r["evidence"] = "; ".join(f"{c['check']} = {_fmt_value(c['value'])} {'ok' if c['ok'] else 'FAILS'} "
                                  f"({c['threshold']})" for c in checks) or "no training check (fine-tuning)"
    blocks.append(("h", 2, "Memorization by training method (paper 003 Sec. 5.2, 5.4, and the objectives since)"))
    blocks.append(("p", "Groups: " + "; ".join(f"{g}: {', '.join(ms)}" for g, ms in compare.items())
                   + (" (from report.compare)" if rcfg.get("compare") else
                      " (grouped by the stage that produced each model; set report.compare to choose)")
                   + ". A bar per model, with its 95 % Wilson interval and n; ✓ its stage passed its training "
                     "evidence, ✗ it did not (hatched: its rate says nothing about the method), no mark: "
                     "fine-tuning, which has no such check."))
    path = F.comparison_plot(comp_rows, "Memorization of SD by training method", fig_dir / "rlhf_vs_ipo.png")
    blocks.append(("img", str(path), "Memorization by training method"))
    blocks.append(_table(comp_rows, ["group", "model", "dataset", "rate", "ci95", "n_scored",
                                     "pii_counterfactual_rate", "pii_counterfactual_ci95", "evidence_ok",
                                     "evidence"]))
    summary["comparison"] = comp_rows
    mia_rows = A.mia_comparison(comp_rows, mia or {})
    if mia_rows:
        blocks.append(("p", "Extractable vs detectable: the extraction rate beside the best membership attack's AUC "
                            "(target span, final checkpoint; members vs held-out canaries) for the same models."))
        path = F.mia_comparison_plot(mia_rows, fig_dir / "rlhf_vs_ipo_mia.png")
        blocks.append(("img", str(path), "Extraction rate and membership AUC by training method"))
        blocks.append(_table(mia_rows, ["group", "model", "dataset", "rate", "ci95", "n_scored", "best_attack", "auc",
                                        "auc_ci95", "tpr_at_fpr_1%", "n_members", "n_nonmembers"]))
        summary["comparison_mia"] = mia_rows


def _maps_section(grouped: dict, finals: list[dict], rcfg, k: float, fig_dir: Path, blocks: list) -> None:
    """Fig. 3 / 8: a map per audited model and dataset (final checkpoint), grouped by model, each group folded."""
    map_datasets = set(rcfg.get("map_datasets") or [])
    by_model: dict[str, list[tuple]] = defaultdict(list)
    for e in sorted(finals, key=lambda e: (e["model"], e["dataset"])):
        if map_datasets and e["dataset"] not in map_datasets:
            continue
        rows = grouped[(e["model"], e["checkpoint"], e["dataset"])]
        path = F.memorization_map(rows, k, f"{e['model']} vs control on {e['dataset']}",
                                  fig_dir / f"map_{_slug(e['model'])}_{_slug(e['dataset'])}.png")
        by_model[e["model"]].append(("img", str(path), f"{e['model']} on {e['dataset']}"))
    if not by_model:
        return
    blocks.append(("h", 2, "Memorization maps (paper 003 Fig. 3, Fig. 8)"))
    blocks.append(("p", "One point per example: the control's distance to the target (x) against the audited model's "
                        "(y); memorized examples lie in the shaded corner (control above k, model at or below). "
                        "One group per model, a map per dataset."))
    for model, images in by_model.items():
        blocks.append(("details", f"{model}: {len(images)} map(s)", images))


def _fmt_value(v: Any) -> str:
    return "missing" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def _training_section(evidence: dict, runs: list[Path], fig_dir: Path, blocks: list, summary: dict) -> None:
    """Did each stage train? Reward-model AUCs by split, RL reward/KL curves per stage (one line per
    point), IPO accuracy/margin/loss — what a reader needs before believing a finding."""
    if not evidence:
        return
    blocks.append(("h", 2, "Training: did each stage learn?"))
    rm_rows = [{"reward_model": m, "dataset": d, "split": v.get("split"), "n": v.get("n"), "auc": v.get("auc")}
               for m, ev in evidence.items() if ev["stage"] == "reward" for d, v in ev["auc"].items()]
    if rm_rows:
        blocks.append(("p", "Reward models: ROC-AUC of the scores on each scored dataset (split: train = its "
                            "training rows, eval = held out, scored = never trained on)."))
        blocks.append(_table(rm_rows, ["reward_model", "dataset", "split", "n", "auc"]))
    stages = (
        ("rl", ["beta", "reward_model", "reward_function", "reward_heldout_auc", "eval_prompts", "eval_reward_initial", "eval_reward_final", "eval_change_ci95",
                "eval_change_in_sd", "eval_up", "eval_down", "eval_p_value", "reward_change_in_std", "kl_final"],
         "RL points. eval_*: the reward model's score of the initial and the trained policy's sampled completions "
         "on the same fixed prompts (eval_prompts of the stage's own, 4 samples each), the mean change with its "
         "95 % interval and in units of the initial spread across prompts, prompts up/down and the sign test's p "
         "— the evidence that the reward rose. reward_change_in_std: the training log's last 10 % of steps vs "
         "the first, in first-step std (each step draws other prompts, so it also measures their difficulty). "
         "kl_final: final mean per-token KL to the reference. reward_function: a verifiable reward in the reward "
         "model's place (recipes/verifiable_rewards.py); reward_heldout_auc: its ranking of held-out labelled rows, "
         "the check a reward model's held-out AUC gets.",
         F.rl_training_plots, "RL training curves"),
        (PREFERENCE_STAGE, ["objective", "pair_n", "pair_accuracy", "pair_accuracy_ci95", "pair_chosen_change",
                 "pair_rejected_change", "steps_logged", "accuracy_first", "accuracy_final", "margin_final",
                 "loss_first", "loss_final", "logps_chosen_first", "logps_chosen_final", "logps_rejected_first",
                 "logps_rejected_final"],
         "Preference stages, one row per objective. pair_*: measured the same way for every objective after training "
         "(recipes/preference_eval.py): pair_accuracy is the share of its training pairs whose chosen completion "
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
        stage_rows[kind] = _stage_table(evidence, kind, columns, blocks, text)
        if kind == PREFERENCE_STAGE and any(r.get("pair_accuracy") is not None for r in stage_rows[kind]):
            path = F.preference_displacement_plot([r for r in stage_rows[kind] if r.get("pair_accuracy") is not None],
                                                  fig_dir / "preference_displacement.png")
            blocks.append(("img", str(path), "Preference pairs: chosen and rejected log-probability change"))
        if stage_rows[kind]:
            for path in plot(_histories(runs, evidence, kind), fig_dir):
                blocks.append(("img", str(path), f"{title}: {path.stem}"))
    summary["training"] = {"reward_models": rm_rows, "rl": stage_rows["rl"],
                          "preference": stage_rows[PREFERENCE_STAGE]}


def _stage_table(evidence: dict, stage: str, columns: list[str], blocks: list, caption: str) -> list[dict]:
    """The evidence of every model of one stage kind as a table (with its caption); [] if there is none."""
    rows = [{"model": m, **{k: ev.get(k) for k in columns}} for m, ev in evidence.items() if ev["stage"] == stage]
    if rows:
        blocks.append(("p", caption))
        blocks.append(_table(rows, ["model", *columns]))
    return rows


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


def _run_evidence(runs: list[Path], prov: dict, audits: dict[Path, Path]) -> dict:
    """Stage evidence of every run, model names prefixed as the rest of the report prefixes them."""

    out = {}
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        own = {m[len(prefix):]: p for m, p in prov.items() if m.startswith(prefix) and ":" not in m[len(prefix):]}
        utility = (load_utility(audits[run]) or {}).get("results") or {}
        out.update({prefix + m: ev for m, ev in stage_evidence(models_dir(run), own, utility).items()})
    return out


def _slug(name: str) -> str:
    """A model or dataset name as part of a figure's file name: letters, digits, `.`, `-` and `_` only
    (a sweep point `RLFT.1/beta=0.1` -> `RLFT.1_beta-0.1`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name.replace("/", "_").replace("=", "-").replace(",", "_"))


def report_dir(cfg) -> Path:
    """Where `memlens report` writes (harness.core.layout.report_dir)."""
    return layout.report_dir(cfg)


def render_report(cfg) -> int:
    run_dir = Path(cfg.run_dir)
    rcfg = cfg.get("report") or {}
    k = float((cfg.get("audit") or {}).get("k", DEFAULT_K))   # the audit's k: one setting, read by both
    out_dir = report_dir(cfg)
    extra_runs = [Path(p) for p in (rcfg.get("runs") or [])]
    runs = [run_dir] + extra_runs
    # The audit results of each run: this config's audit.out_dir for run_dir, each other run's own record.
    audits = {run: layout.audit_dir(run, cfg if run == run_dir else None) for run in runs}
    fig_dir = out_dir / "figures"

    grouped, table, prov = {}, [], {}
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        g, t, p = _load_run(run, audits[run], prefix)
        grouped.update(g)
        table += t
        prov.update(p)
    entries = A.summary_entries(grouped)
    summary: dict[str, Any] = {"entries": entries}
    head: list[tuple] = [("h", 1, f"memlens report: {', '.join(r.name for r in runs)}"),
                         ("p", f"Memorization = {k}-approximate counterfactual memorization (paper 003 Def. 3.1) "
                               "with sliding-window normalized edit distance; rates are over scored (not excluded) "
                               "examples. Every checkpoint of every model is listed."),
                         ("toc",)]
    # The report leads with what the run concluded (`lead`: the findings, then the comparison figure); `blocks`
    # holds the evidence and details after it, in the order a reader checks a conclusion.
    lead: list[tuple] = []
    blocks: list[tuple] = []

    blocks.append(("h", 2, "Memorization rates (final checkpoints)"))
    finals = A.final_entries(entries)
    blocks.append(_table(finals, ["model", "checkpoint", "dataset", "n_scored", "n_memorized", "rate", "ci95",
                                  "n_excluded", "excluded_by_reason"]))
    pii = [e for e in finals if e.get("pii_regurgitation_rate") is not None]
    if pii:
        blocks.append(("p", "PII paths (SD.Links, paper 003 Sec. 5.1-5.2): the share of scored positives whose "
                            "completion contains the example's path verbatim, for the model and its control; "
                            "counterfactual: the model does and the control does not; chance level: 1 / distinct "
                            "paths."))
        blocks.append(_table(pii, ["model", "checkpoint", "dataset", "pii_regurgitation_rate",
                                   "control_pii_regurgitation_rate", "pii_counterfactual_rate",
                                   "pii_counterfactual_ci95", "pii_chance_level"]))
    _breakdown_section(grouped, entries, fig_dir, blocks, summary)

    evidence = _run_evidence(runs, prov, audits)
    _training_section(evidence, runs, fig_dir, blocks, summary)
    _persistence_section(grouped, prov, k, fig_dir, blocks, summary)

    # Fig. 2: reward-score distributions by label.
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        for dataset, per_rm in _reward_scores(run, prefix).items():
            blocks.append(("h", 2, f"Reward scores by label on {dataset} (paper 003 Fig. 2)"))
            path = F.reward_scores_plot(per_rm, dataset, fig_dir / f"reward_scores_{_slug(prefix)}{_slug(dataset)}.png")
            blocks.append(("img", str(path), f"Reward scores on {dataset}"))
            stats = [{"reward_model": rm, "dataset": dataset, "mean_label_1": s["by_label"].get("1", {}).get("mean"),
                      "mean_label_0": s["by_label"].get("0", {}).get("mean"), "auc": s["auc"]}
                     for rm, s in ((rm, reward_score_stats([{"label": lbl, "score": x} for lbl, xs in by.items()
                                                               for x in xs])) for rm, by in per_rm.items())]
            blocks.append(_table(stats, ["reward_model", "dataset", "mean_label_1", "mean_label_0", "auc"]))
            summary.setdefault("reward_scores", []).extend(stats)

    _sweep_section(entries, fig_dir, blocks, summary)

    # Every checkpoint is scored: memorization over training.
    over = defaultdict(dict)
    for e in entries:
        over[e["model"]][e["dataset"]] = A.over_training(entries, e["model"], e["dataset"])
    trained = {m: d for m, d in over.items() if any(len([x for x in v if x["checkpoint"] != "final"]) >= 2
                                                    for v in d.values())}
    if trained:
        blocks.append(("h", 2, "Memorization over training (every checkpoint)"))
        for model, per_dataset in sorted(trained.items()):
            path = F.over_training_plot(model, per_dataset, fig_dir / f"over_training_{_slug(model)}.png")
            blocks.append(("img", str(path), f"{model} over training"))

    _loss_section(audits, fig_dir, blocks, summary)
    mia = _mia(audits)
    _mia_section(mia, entries, fig_dir, blocks, summary)
    _utility_section(runs, audits, blocks, summary)
    _registered_measures_section(audits, blocks, summary)
    _maps_section(grouped, finals, rcfg, k, fig_dir, blocks)

    blocks.append(("h", 2, "Provenance (paper 003 Table 1, generated from provenance.json)"))
    blocks.append(_table(table, ["model", "stage", "init", "reward_model", "datasets", "hyper_parameters",
                                 "code", "git_commit", "computed_on"]))
    summary["provenance_table"] = table

    _findings_section(cfg, audits, grouped, evidence, k, lead, summary, out_dir, mia)
    _comparison_section(rcfg, prov, entries, grouped, evidence, k, fig_dir, lead, summary, mia)
    blocks = head + lead + blocks

    out_dir.mkdir(parents=True, exist_ok=True)
    title = f"memlens report: {', '.join(r.name for r in runs)}"
    atomic_write_text(out_dir / "report.md", _to_markdown(blocks, out_dir))
    atomic_write_text(out_dir / "report.html", _to_html(blocks, title))
    summary["provenance"] = provenance(seed=cfg.get("seed"), runs=[str(r) for r in runs], k=k)
    atomic_write_json(out_dir / "summary.json", summary)
    for f in summary.get("findings", []):
        print(f"[memlens] {f['id']:<3} {f['status']:<15} ours {f['ours']:<40.40} paper {f['paper']}"
              + (f" ({f['reason']})" if f.get("reason") else ""))
    print(f"[memlens] report written to {out_dir / 'report.html'} (and report.md, summary.json, findings.json)")
    return 0


def main(cfg) -> int:
    """`memlens report`: render <run_dir>/report/ from <run_dir>/audit/."""
    return render_report(cfg)
