"""`memlens report`: figures, report.md, a self-contained report.html and report/summary.json.

Everything is rendered from stored audit rows, reward-model score files and provenance.json files;
nothing re-scores. The document is built once as a list of typed blocks (harness/report/blocks.py) and written
as Markdown and as HTML (figures embedded as base64), so both always say the same thing. Each section returns its
blocks: the evidence sections are in harness/report/sections.py, what the run concluded (the findings and the
comparison by training method, which the report leads with) here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.harness.core import layout
from memlens.harness.core.config import require_bool
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_text
from memlens.harness.core.layout import models_dir
from memlens.harness.core.objectives import OBJECTIVES, is_preference_stage, recorded_objective
from memlens.harness.core.provenance import provenance
from memlens.harness.measures.memorization import DEFAULT_K
from memlens.harness.measures.utility import load_utility
from memlens.harness.report import analyses as A
from memlens.harness.report import figures as F
from memlens.harness.report import sections as S
from memlens.harness.report.blocks import (
    Block,
    Contents,
    Details,
    Heading,
    Image,
    Paragraph,
    table,
    to_html,
    to_markdown,
)
from memlens.harness.report.evidence import stage_evidence
from memlens.harness.report.findings import Roles, RunResults, findings, load_loss_rows, method_checks, status_label
from memlens.harness.report.findings.registry import not_measured_line
from memlens.harness.report.findings.verdict import NOT_MEASURED, FindingResult
from memlens.harness.report.formal_report import report_formal

# Default groups when report.compare is empty: by the recipe that produced each model (an RL stage against a
# verifiable reward is RLVR, a preference stage is named by its objective). The recipe does not say how SD
# entered (RLFT.1 inherits it from FT.1, RLFT.2 only saw it through the reward model), so the experiments that
# make that comparison set report.compare themselves (conf/experiment/quickstart.yaml).
STAGE_GROUPS = {"sft": "FT", "rl": "RLFT"}
def group_order() -> tuple[str, ...]:
    """The comparison's default groups in pipeline order; a preference model's group is its objective, read from the
    registry when asked (an objective registered from its own module is placed too)."""
    return ("FT", "RLFT", "RLVR", *(name.upper() for name in OBJECTIVES))


def default_group(prov: dict) -> str | None:
    """The comparison group of a model from its provenance: FT, RLFT, RLVR, or its preference objective."""
    stage = prov.get("stage")
    if stage == "rl" and prov.get("reward_function"):
        return "RLVR"
    if is_preference_stage(stage):
        return recorded_objective(prov.get("hyperparameters") or {}).upper()
    return STAGE_GROUPS.get(stage)


# ---------------------------------------------------------------- inputs
def _load_run(run_dir: Path, audit_dir: Path, prefix: str) -> tuple[dict, list[dict], dict[str, dict]]:
    """(rows grouped by key, provenance table, provenance by model) of one run; model names prefixed."""
    if not audit_dir.is_dir():
        raise UserError(f"{audit_dir} does not exist: run `memlens audit experiment=...` before the report "
                        "(or set run_dir / report.runs to a run that has been audited, and audit.out_dir to "
                        "where its audit wrote)")
    grouped = {(prefix + m, c, d): rows for (m, c, d), rows in A.load_audit_rows(audit_dir).items()}
    prov_table = A.provenance_table(models_dir(run_dir))
    for row in prov_table:
        row["model"] = prefix + row["model"]
    prov = {}
    for path in models_dir(run_dir).rglob("provenance.json"):
        prov[prefix + str(path.parent.relative_to(models_dir(run_dir)))] = json.loads(path.read_text())
    return grouped, prov_table, prov


def _run_evidence(runs: list[Path], prov: dict, audits: dict[Path, Path]) -> dict:
    """Stage evidence of every run, model names prefixed as the rest of the report prefixes them."""

    out = {}
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        own = {m[len(prefix):]: p for m, p in prov.items() if m.startswith(prefix) and ":" not in m[len(prefix):]}
        utility = (load_utility(audits[run]) or {}).get("results") or {}
        out.update({prefix + m: ev for m, ev in stage_evidence(models_dir(run), own, utility).items()})
    return out


def _by_model(audits: dict[Path, Path], load) -> dict:
    """{model: what `load(audit dir)` gives for it} over every run (a run's name prefixes its models when several
    are reported)."""
    out = {}
    for run, audit in audits.items():
        prefix = "" if len(audits) == 1 else f"{run.name}:"
        out.update({prefix + model: entry for model, entry in load(audit).items()})
    return out


def _mia(audits: dict[Path, Path]) -> dict:
    """{model: MIA summary} of every run."""
    return _by_model(audits, A.load_mia)


# ---------------------------------------------------------------- what the run concluded (the report's lead)
def _fmt_value(v: Any) -> str:
    return "missing" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def judge_findings(cfg, audits: dict[Path, Path], grouped: dict, evidence: dict, k: float,
                   mia: dict | None = None) -> list[FindingResult]:
    """The papers' findings (F1-F8, N1-N3, C1-C2, ...) against this run, each with its training evidence, rates with
    n and 95 % intervals, and the exact test."""
    roles = Roles.load((cfg.get("report") or {}).get("findings_models"))
    nmt_path = (cfg.get("report") or {}).get("nmt_summary")
    nmt = json.loads(Path(nmt_path).read_text()) if nmt_path and Path(nmt_path).is_file() else None
    loss_rows = [r for audit in audits.values() for r in load_loss_rows(audit)]
    return findings(RunResults(grouped, evidence, loss_rows, nmt, k, roles, mia or {},
                               _by_model(audits, A.load_discoverable), _by_model(audits, A.load_epsilon),
                               _by_model(audits, A.load_pair_mia), _by_model(audits, A.load_prompt_mia)))


def findings_section(judged: list[FindingResult]) -> S.Section:
    """The judged findings as the report's lead; filed as `findings`, each in its stored form (render writes
    report/findings.json)."""
    # the findings this run measured lead; the rest are one line, with what measures each (findings.json keeps all)
    rows = [{**f.as_dict(), "why": f.reason or f.note, "status": status_label(f),
             "evidence": "; ".join(f"{e['check']} = {_fmt_value(e['value'])} {'ok' if e['ok'] else 'FAILS'} "
                                   f"({e['threshold']})" for e in f.evidence)}
            for f in judged if f.status != NOT_MEASURED]
    unmeasured = not_measured_line(judged)
    filed = {"findings": [f.as_dict() for f in judged]}
    if not rows:           # a run that measured none of the papers' findings (a callback run): the line alone
        return S.Section([Heading(2, "The papers' findings"),
                          Paragraph(f"None measured by this run (no models or data for them): {unmeasured}.")], filed)
    return S.Section([
        Heading(2, "Findings: what this run concluded"),
        Paragraph("A finding holds only when the stages it depends on trained (evidence), its rule's "
                  "margin is met, and a comparison passes an exact test (McNemar on the same examples) at "
                  "p < 0.05. 'inconclusive' names what is missing; 'inconclusive (unstable)' a verdict "
                  "that changed when the run was repeated on other CPU kernels. Rates: percentage [95 % Wilson "
                  "interval] (k/n)."),
        # What the run concluded first; each finding's rule and the evidence checks behind it (long strings) folded.
        table(rows, ["id", "claim", "status", "ours", "paper", "p_value", "why"]),
        Details("Each finding's rule and the training evidence it checked",
                (table(rows, ["id", "rule", "evidence"]),)),
    ] + ([Paragraph(f"Not measured by this run (no models or data for them): {unmeasured}.")] if unmeasured else []),
        filed)


def comparison_section(rcfg, prov: dict, entries: list[dict], grouped: dict, evidence: dict, k: float,
                       fig_dir: Path, mia: dict | None = None) -> S.Section:
    """Sec. 5.2 / 5.4 and beyond: a bar per model a run trained (FT, RLFT via a reward model, RLVR, each preference
    objective) per dataset, each with its 95 % interval, n and whether its stage passed its training evidence
    (memlens.harness.report.findings.method_checks: an RL point's reward rise, a preference model's fit to its
    pairs)."""
    compare = dict(rcfg.get("compare") or {})
    if not compare:
        for model, p in sorted(prov.items()):
            group = default_group(p)
            if group and any(e["model"] == model for e in entries):
                compare.setdefault(group, []).append(model)
        order = {g: i for i, g in enumerate(group_order())}    # default groups in pipeline order;
        compare = dict(sorted(compare.items(), key=lambda kv: order.get(kv[0], len(order))))  # report.compare: its own
    comp_rows = A.rlhf_vs_ipo(entries, compare, sorted({e["dataset"] for e in entries}))
    if len({r["model"] for r in comp_rows}) < 2:
        return S.Section([])
    run = RunResults(grouped, evidence, k=k)
    for r in comp_rows:
        checks = method_checks(run, r["model"], r["dataset"])
        r["evidence_ok"] = all(c["ok"] for c in checks) if checks else None
        r["evidence"] = "; ".join(f"{c['check']} = {_fmt_value(c['value'])} {'ok' if c['ok'] else 'FAILS'} "
                                  f"({c['threshold']})" for c in checks) or "no training check (fine-tuning)"
    path = F.comparison_plot(comp_rows, "Memorization of SD by training method", fig_dir / "rlhf_vs_ipo.png")
    blocks: list[Block] = [
        Heading(2, "Memorization by training method (paper 003 Sec. 5.2, 5.4, and the objectives since)"),
        Paragraph("Groups: " + "; ".join(f"{g}: {', '.join(ms)}" for g, ms in compare.items())
                  + (" (from report.compare)" if rcfg.get("compare") else
                     " (grouped by the stage that produced each model; set report.compare to choose)")
                  + ". A bar per model, with its 95 % Wilson interval and n; ✓ its stage passed its training "
                    "evidence, ✗ it did not (hatched: its rate says nothing about the method), no mark: "
                    "fine-tuning, which has no such check."),
        Image(path, "Memorization by training method"),
        table(comp_rows, ["group", "model", "dataset", "rate", "ci95", "n_scored", "pii_counterfactual_rate",
                          "pii_counterfactual_ci95", "evidence_ok", "evidence"]),
    ]
    filed = {"comparison": comp_rows}
    mia_rows = A.mia_comparison(comp_rows, mia or {})
    if mia_rows:
        path = F.mia_comparison_plot(mia_rows, fig_dir / "rlhf_vs_ipo_mia.png")
        blocks += [
            Paragraph("Extractable vs detectable: the extraction rate beside the best membership attack's AUC "
                      "(target span, final checkpoint; members vs held-out canaries) for the same models."),
            Image(path, "Extraction rate and membership AUC by training method"),
            table(mia_rows, ["group", "model", "dataset", "rate", "ci95", "n_scored", "best_attack", "auc",
                             "auc_ci95", A.TPR_1, "n_members", "n_nonmembers"]),
        ]
        filed["comparison_mia"] = mia_rows
    return S.Section(blocks, filed)



# ---------------------------------------------------------------- the evidence sections, in order
@dataclass(frozen=True)
class ReportInputs:
    """What every section reads: the stored results of the reported runs, loaded once."""

    runs: list[Path]
    audits: dict[Path, Path]
    grouped: dict              # (model, checkpoint, dataset) -> audit rows
    entries: list[dict]        # one summary entry per model x checkpoint x dataset
    finals: list[dict]         # the final checkpoint's entries
    prov: dict[str, dict]      # model -> provenance.json
    evidence: dict             # model -> its stage's training evidence
    mia: dict                  # model -> its membership-inference summary
    k: float
    rcfg: Any                  # the `report` config group
    fig_dir: Path


SECTIONS: tuple[Callable[[ReportInputs], S.Section], ...] = (
    lambda r: S.runs_section(r.runs, r.entries, r.mia, r.fig_dir),
    lambda r: S.rates_section(r.finals),
    lambda r: S.breakdown_section(r.grouped, r.entries, r.fig_dir),
    lambda r: S.training_section(r.evidence, r.runs, r.fig_dir),
    lambda r: S.persistence_section(r.grouped, r.entries, r.prov, r.k, r.fig_dir),
    lambda r: S.reward_scores_section(r.runs, r.fig_dir),
    lambda r: S.sweep_section(r.entries, r.fig_dir),
    lambda r: S.over_training_section(r.entries, r.fig_dir),
    lambda r: S.loss_section(r.audits, r.fig_dir),
    lambda r: S.membership_section(r.mia, r.entries, r.audits, r.fig_dir),
    lambda r: S.utility_section(r.runs, r.audits),
    lambda r: S.discoverable_section(r.audits, r.fig_dir),
    lambda r: S.callback_section(r.audits),
    lambda r: S.registered_measures_section(r.audits),
    lambda r: S.maps_section(r.grouped, r.finals, r.rcfg, r.k, r.fig_dir),
)


def file_in(summary: dict, filed: dict, section) -> None:
    """Add a section's rows to summary.json: each key is one section's alone."""
    clash = sorted(set(filed) & set(summary))
    if clash:
        raise RuntimeError(f"report sections: {', '.join(clash)} filed twice (the second by {section})")
    summary.update(filed)


def report_dir(cfg) -> Path:
    """Where `memlens report` writes (memlens.harness.core.layout.report_dir)."""
    return layout.report_dir(cfg)


def render_report(cfg) -> int:
    rcfg = cfg.get("report") or {}
    token = F.DRAW_FIGURES.set(require_bool(rcfg.get("figures", True), "report.figures"))
    try:
        return _render(cfg, rcfg)
    finally:
        F.DRAW_FIGURES.reset(token)


def load_inputs(cfg, rcfg) -> tuple[ReportInputs, list[dict]]:
    """The stored results every section reads (and the provenance table), loaded once from the reported runs."""
    run_dir = Path(cfg.run_dir)
    k = float((cfg.get("audit") or {}).get("k", DEFAULT_K))   # the audit's k: one setting, read by both
    runs = [run_dir] + [Path(p) for p in (rcfg.get("runs") or [])]
    # The audit results of each run: this config's audit.out_dir for run_dir, each other run's own record.
    audits = {run: layout.audit_dir(run, cfg if run == run_dir else None) for run in runs}
    grouped, prov_rows, prov = {}, [], {}
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.name}:"
        g, t, p = _load_run(run, audits[run], prefix)
        grouped.update(g)
        prov_rows += t
        prov.update(p)
    entries = A.summary_entries(grouped)
    inputs = ReportInputs(runs=runs, audits=audits, grouped=grouped, entries=entries, finals=A.final_entries(entries),
                          prov=prov, evidence=_run_evidence(runs, prov, audits), mia=_mia(audits), k=k, rcfg=rcfg,
                          fig_dir=report_dir(cfg) / "figures")
    return inputs, prov_rows


def _render(cfg, rcfg) -> int:
    out_dir = report_dir(cfg)
    inputs, prov_rows = load_inputs(cfg, rcfg)
    runs, audits, grouped, entries, prov, evidence, mia, k, fig_dir = (
        inputs.runs, inputs.audits, inputs.grouped, inputs.entries, inputs.prov, inputs.evidence, inputs.mia,
        inputs.k, inputs.fig_dir)
    summary: dict[str, Any] = {"entries": entries}
    head: list[Block] = [
        Heading(1, f"memlens report: {', '.join(r.name for r in runs)}"),
        Paragraph(f"Memorization = {k}-approximate counterfactual memorization (paper 003 Def. 3.1) "
                  "with sliding-window normalized edit distance; rates are over scored (not excluded) "
                  "examples. Every checkpoint of every model is listed."),
        Contents(),
    ]
    # The report leads with what the run concluded (the findings, then the comparison figure); the evidence sections
    # follow, in the order a reader checks a conclusion (SECTIONS; summary.json keeps it).
    blocks: list[Block] = []
    for section in SECTIONS:
        part = section(inputs)
        blocks += part.blocks
        file_in(summary, part.filed, section)
    blocks += [Heading(2, "Provenance (paper 003 Table 1, generated from provenance.json)"),
               table(prov_rows, ["model", "stage", "init", "reward_model", "datasets", "hyper_parameters", "code",
                                 "git_commit", "computed_on"])]
    summary["provenance_table"] = prov_rows

    judged = judge_findings(cfg, audits, grouped, evidence, k, mia)
    lead = findings_section(judged)
    file_in(summary, lead.filed, findings_section)
    atomic_write_json(out_dir / "findings.json", {"findings": lead.filed["findings"],
                                                  "nmt_summary": (cfg.get("report") or {}).get("nmt_summary"),
                                                  "evidence": evidence})
    comparison = comparison_section(rcfg, prov, entries, grouped, evidence, k, fig_dir, mia)
    file_in(summary, comparison.filed, comparison_section)
    if any(f.status != NOT_MEASURED for f in judged):
        blocks = head + lead.blocks + comparison.blocks + blocks
    else:   # nothing of the papers measured: the run's own results lead, the papers' findings are one line after
        blocks = head + comparison.blocks + blocks[:-2] + lead.blocks + blocks[-2:]

    out_dir.mkdir(parents=True, exist_ok=True)
    title = f"memlens report: {', '.join(r.name for r in runs)}"
    atomic_write_text(out_dir / "report.md", to_markdown(blocks, out_dir))
    atomic_write_text(out_dir / "report.html", to_html(blocks, title))
    summary["provenance"] = provenance(seed=cfg.get("seed"), runs=[str(r) for r in runs], k=k)
    atomic_write_json(out_dir / "summary.json", summary)
    for f in judged:
        if f.status != NOT_MEASURED:
            print(f"[memlens] {f.id:<3} {f.status:<15} ours {f.ours:<40.40} paper {f.paper}"
                  + (f" ({f.reason})" if f.reason else ""))
    if unmeasured := not_measured_line(judged):
        print(f"[memlens] not measured by this run: {unmeasured}")
    print(f"[memlens] report written to {out_dir / 'report.html'} (and report.md, summary.json, findings.json)")
    return 0


def main(cfg) -> int:
    """`memlens report`: render <run_dir>/report/ from <run_dir>/audit/ (for paper 004's formal-language study, its
    own report, from its stored analysis: harness/report/formal_report.py)."""
    if cfg.get("formal") is not None:
        return report_formal(cfg)
    return render_report(cfg)
