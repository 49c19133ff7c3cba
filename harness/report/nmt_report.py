"""The NMT run's report (paper 002): `report.md` and the figure of memorization by repetition bucket,
rendered from the audit's files in <run_dir>/nmt/ (harness/audit/nmt.py writes them; harness/measures/nmt.py
computes them): `memlens nmt` renders it right after the audit, and again from the files alone."""

from __future__ import annotations

from pathlib import Path

from memlens.harness.core.io import atomic_write_text, read_json, read_jsonl
from memlens.harness.measures import nmt
from memlens.harness.report.analyses import computed_on
from memlens.harness.report.findings.paper002 import NMT_RULES, nmt_numbers


def _fmt(x, digits: int = 2, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:.{digits}f}" + (" %" if pct else "")


def render_figure(path: Path, buckets: dict, per_bucket: dict, noisy_pct: list | None = None) -> None:
    """Left: Algorithm 1 ratio per repetition bucket (Table 1), with the share of noisy pairs per bucket
    when the corpus knows it (the most a model can memorize by construction). Right: Algorithm 2."""
    import matplotlib  # heavy, optional at import time: only rendering a figure needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the headless backend

    reps = [b["repetitions"] for b in buckets["buckets"]]
    ratios = [b["ratio_pct"] or 0.0 for b in buckets["buckets"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    bars = ax1.bar(reps, ratios, color="#4C72B0")
    top = max(ratios + [v or 0.0 for v in (noisy_pct or [])] + [1e-9])
    for bar, b in zip(bars, buckets["buckets"]):
        # Counts inside the bar top, so that they never collide with the noisy-share line above.
        inside = bar.get_height() > 0.15 * top
        ax1.annotate(f"{b['memorized']}/{b['total']}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                     ha="center", va="top" if inside else "bottom", fontsize=8,
                     color="white" if inside else "black", xytext=(0, -2 if inside else 2),
                     textcoords="offset points")
    ax1.set_ylim(0, top * 1.2)
    if noisy_pct and any(v is not None for v in noisy_pct):
        ax1.plot(reps, [v or 0.0 for v in noisy_pct], "k--", marker="_", label="noisy pairs in bucket (%)")
        ax1.legend(fontsize=8, loc="lower right")
    ax1.set_xlabel("repetitions of the pair in the training data")
    ax1.set_ylabel("memorized (%) - Algorithm 1")
    r = buckets["pearson"]
    ax1.set_title(f"Algorithm 1: memorized by repetitions (Pearson r = {_fmt(r)})", fontsize=10)
    ax1.set_xticks(reps)
    width = 0.27
    for j, (cls, color) in enumerate(zip(nmt.POSITION_CLASSES, ("#DD8452", "#55A868", "#C44E52"))):
        vals = [100 * (per_bucket[rep][cls] or 0.0) for rep in reps]
        xs = [x + (j - 1) * width for x in reps]
        ax2.bar(xs, vals, width, label=f"perturb {cls}", color=color)
        for x, rep in zip(xs, reps):
            if per_bucket[rep][cls] is None:   # nothing perturbed (no memorized source in the bucket)
                ax2.annotate("n/a", (x, 1), ha="center", va="bottom", fontsize=6, rotation=90)
            elif per_bucket[rep][cls] == 0:    # a real zero, not a missing bar
                ax2.annotate("0", (x, 0.5), ha="center", va="bottom", fontsize=6)
    ax2.set_xlabel("repetitions of the pair in the training data")
    ax2.set_ylabel("perturbed sources keeping the memorized output (%)")
    ax2.set_title("Algorithm 2: neighbourhood effect", fontsize=10)
    ax2.set_xticks(reps)
    ax2.set_ylim(0, 105)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def render_report(summary: dict) -> str:
    b, nb, rec = summary["buckets"], summary["neighbourhood"], summary["recovery"]
    per_bucket = {int(k): v for k, v in summary["neighbourhood_per_bucket"].items()}
    lines = [f"# Finding Memo audit - {summary['experiment_name']}", "",
             f"Model: `{summary['model_dir']}` - data: `{summary['dataset']}` ({summary['unique_pairs']} unique "
             f"pairs analysed, {summary['training_rows']} training rows). Prefix ratio p = {summary['settings']['prefix_ratio']}, "
             f"unit = {summary['settings']['unit']}, matching = "
             f"{'exact' if summary['settings']['approx_ned'] is None else 'NED <= ' + str(summary['settings']['approx_ned'])}.",
             "", f"Model quality: exact match on {(summary['heldout'] or {}).get('pairs', 0)} held-out rule-translated "
             f"pairs: {_fmt((summary['heldout'] or {}).get('exact_match_pct'), 1, True)}. M1 (translation equals the "
             f"reference): {summary['m1_size']} of {summary['unique_pairs']}. Memorized by pair kind: "
             + (", ".join(f"{k} {v['memorized']}/{v['total']}" for k, v in sorted(summary['memorized_by_kind'].items()))
                or "unknown (user corpus)") + ".",
             "", "## Table 1 - extractive memorization (Algorithm 1) and neighbourhood effect (Algorithm 2, K = "
             f"{nb['k']})", "",
             "| Repetitions | Total Samples | Memorized | Ratio (%) | Perturb Prefix | Perturb Suffix | Perturb Start |",
             "|---|---|---|---|---|---|---|"]
    for row in b["buckets"]:
        pb = per_bucket[row["repetitions"]]
        lines.append(f"| {row['repetitions']} | {row['total']} | {row['memorized']} | {_fmt(row['ratio_pct'])} | "
                     + " | ".join(_fmt(None if pb[c] is None else 100 * pb[c], pct=True) for c in nmt.POSITION_CLASSES)
                     + " |")
    lines.append(f"| {b['all']['repetitions']} | {b['all']['total']} | {b['all']['memorized']} | "
                 f"{_fmt(b['all']['ratio_pct'])} | " + " | ".join(
                     _fmt(None if nb[c]['share'] is None else 100 * nb[c]['share'], pct=True)
                     for c in nmt.POSITION_CLASSES) + " |")
    lines += ["", f"Pearson r (repetitions vs memorization ratio): {_fmt(b['pearson'], 3)}. "
              f"Perturbation counts: " + ", ".join(f"{c} {nb[c]['kept']}/{nb[c]['perturbed']}"
                                                   for c in nmt.POSITION_CLASSES) + ".",
              f"Substitutes: {summary['substitutes']}.", "",
              "![memorization by repetition bucket](memorization_by_repetition.png)", "",
              "## Algorithm 3 - recovery symbols", "",
              "| Symbol | Recovered | Rate |", "|---|---|---|"]
    for sym, r in rec["per_symbol"].items():
        lines.append(f"| `{sym}` | {r['recovered']}/{r['total']} | {_fmt(None if r['rate'] is None else 100 * r['rate'], 1, True)} |")
    lines += ["", f"Best symbol: `{rec['best_symbol']}`; any symbol: "
              f"{_fmt(None if rec['any_symbol_rate'] is None else 100 * rec['any_symbol_rate'], 1, True)}. "
              f"Recovered corpus F: {rec['F_size']} pairs (`recovered_F.jsonl`).", "",
              "## Table 4 - quality of non-memorized outputs", "",
              "COMET-QE needs a hub model, so quality is the share of outputs equal to the rule translation "
              "(known for the synthetic corpus only) next to the paper's TTR.", "",
              "| Set | Count | Rule-translation match (%) | TTR (%) |", "|---|---|---|---|"]
    for name, q in summary["quality"].items():
        lines.append(f"| {name} | {q['count']} | {_fmt(q['rule_match_pct'], 1)} | {_fmt(q['ttr'], 1)} |")
    ft = summary.get("finetune")
    lines += ["", "## Sec. 6 - fine-tuning on F (Table 5)", ""]
    if ft and ft.get("skipped"):
        lines.append(f"Skipped: {ft['skipped']}.")
    elif ft and ft.get("enabled"):
        lines += ["| Measurement | Base | Fine-tuned |", "|---|---|---|",
                  f"| Held-out exact match (%) | {_fmt(ft['base']['heldout_exact_pct'], 1)} | {_fmt(ft['finetuned']['heldout_exact_pct'], 1)} |",
                  f"| Memorized sources: rule-translation match (%) | {_fmt(ft['base']['memorized_rule_match_pct'], 1)} | {_fmt(ft['finetuned']['memorized_rule_match_pct'], 1)} |",
                  f"| Still memorized (Algorithm 1) | {ft['base']['still_memorized']} | {ft['finetuned']['still_memorized']} |",
                  "", f"Fine-tuned on |F| = {ft['F_size']} recovered pairs + {ft['sample_size']} random training pairs."]
    else:
        lines.append("Not run (nmt.finetune.enabled=false).")
    f = summary["finding_numbers"]
    held = {fid: rule.holds(f) for fid, rule in NMT_RULES.items()}
    lines += ["", "## Findings", "",
              "The rules, as harness/report/findings/paper002.py judges them (the run's findings table adds N1's "
              "test and the stability check):", "",
              f"- N1 memorization rises with repetitions: **{held['N1']}** (Pearson r = {_fmt(f['N1_pearson'], 3)})",
              f"- N2 suffix perturbations keep the memorized output more often than prefix ones, start perturbations "
              f"least: **{held['N2']}** ({nmt_numbers(f['N2_shares'])})",
              f"- N3 the recovery symbol gives new outputs for most memorized sources: "
              f"**{held['N3']}** (`{f['N3_best_symbol']}`: "
              f"{_fmt(None if f['N3_best_rate'] is None else 100 * f['N3_best_rate'], 1, True)})", "",
              *stability_lines(summary),
              "## Examples (memorized)", "", "| Source | Reference (memorized output) | Prefix | Ratio |", "|---|---|---|---|"]
    for ex in summary["examples"]:
        lines.append(f"| {ex['source']} | {ex['reference']} | {ex['prefix']} | {_fmt(ex['prefix_ratio'])} |")
    lines += ["", f"Provenance: git {summary['provenance'].get('git_commit')}, seed {summary['provenance'].get('seed')}, "
              f"datasets {summary['provenance'].get('datasets')}; computed on {computed_on(summary['provenance'])}."]
    return "\n".join(lines) + "\n"


def stability_lines(summary: dict) -> list[str]:
    """The stability rerun (harness/audit/nmt.py step 8) beside this run: memorized counts and each N1-N3
    rule under both kernel levels."""
    st = summary.get("stability")
    if not st:
        return []
    here, there = st["kernels"], st["second_kernels"]
    lines = ["## Stability under a second level of torch's CPU kernels", ""]
    if not st.get("informative"):
        return lines + [f"Not informative: the rerun computed with the same kernels ({here}).", ""]
    lines += [f"The model retrained and Algorithms 1-3 rerun with {there} kernels (this run: {here}); the report's "
              f"findings table marks a verdict that differs `inconclusive` (unstable).", "",
              f"| | {here} | {there} |", "|---|---|---|",
              f"| memorized of {summary['unique_pairs']} | {summary['memorized']} | {st['memorized']} |"]
    lines += [f"| {fid} rule | {rule.holds(summary['finding_numbers'])} | {rule.holds(st['finding_numbers'])} |"
              for fid, rule in NMT_RULES.items()]
    return lines + [""]


def write_nmt_report(out_dir: str | Path, log=print) -> Path:
    """report.md and memorization_by_repetition.png of the NMT audit in `out_dir` (its summary.json and
    memorization.jsonl)."""
    out_dir = Path(out_dir)
    summary = read_json(out_dir / "summary.json")
    alg1 = read_jsonl(out_dir / "memorization.jsonl")
    per_bucket = {int(k): v for k, v in summary["neighbourhood_per_bucket"].items()}   # JSON keys are strings
    render_figure(out_dir / "memorization_by_repetition.png", summary["buckets"], per_bucket,
                  nmt.noisy_share_by_bucket(alg1) if summary.get("memorized_by_kind") else None)
    atomic_write_text(out_dir / "report.md", render_report(summary))
    log(f"[nmt] wrote {out_dir / 'report.md'}")
    return out_dir / "report.md"
