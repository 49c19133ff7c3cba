"""Figures of the loss-based measures (paper 004 Fig. 2-3) and of canary exposure, from stored results.

Input is what `memlens.harness.audit.losses.audit_losses` wrote (summary.json, <set>.jsonl); nothing here re-scores a
model. matplotlib Agg; each function writes one PNG atomically and returns its path.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from memlens.harness.core.io import read_json, read_jsonl  # noqa: E402
from memlens.harness.report.figures import save_figure  # noqa: E402

MEASURE_STYLE = {"recollection": ("tab:green", "o"), "counterfactual": ("tab:orange", "s"),
                 "contextual": ("tab:purple", "^")}


def checkpoint_axis(summary: dict) -> tuple[list[float], str]:
    """x values of the checkpoints: training epochs when every checkpoint recorded one, else steps."""
    cks = summary["checkpoints"]
    if cks and all(c.get("epoch") is not None for c in cks):
        return [c["epoch"] for c in cks], "epoch"
    return [c["step"] for c in cks], "checkpoint step"


def _mark_best(ax, summary: dict, xs: list[float]) -> None:
    best = summary.get("best_epoch")
    if best is not None:
        ax.axvline(xs[best], color="k", ls=":", lw=1.2,
                   label=f"lowest held-out loss ({summary.get('heldout')})")



def memorization_fraction_plot(summary: dict, dataset: str, path: Path) -> Path | None:
    """Paper 004 Fig. 3: share of strings memorized (left) and weighted memorization (right) per epoch,
    for the three measures, with the epoch of lowest held-out loss (optimal learning e*) marked."""
    xs, xlabel = checkpoint_axis(summary)
    measures = summary["datasets"][dataset]["measures"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, ylabel in ((axes[0], "frac", "fraction of strings memorized"),
                            (axes[1], "weighted", "weighted memorization (mean score)")):
        for name, (color, marker) in MEASURE_STYLE.items():
            label = name if name != "recollection" else f"recollection (τ={summary['tau']})"
            ax.plot(xs, measures[name][key], color=color, marker=marker, label=label)
        _mark_best(ax, summary, xs)
        ax.set(xlabel=xlabel, ylabel=ylabel, ylim=(-0.03, 1.03))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    variant = "" if summary["variant"] == "control_run" else " [reference-model upper-bound variant]"
    # Say so rather than silently omit the paper's e* marker.
    no_best = "" if summary.get("best_epoch") is not None else "\n(no held-out set given: e* not marked)"
    fig.suptitle(f"{Path(summary['audited']).name} on {dataset}: memorization per epoch{variant}{no_best}")
    return save_figure(fig, path)


def loss_curves_plot(summary: dict, rows: list[dict], path: Path, title: str) -> Path | None:
    """Paper 004 Fig. 2: training loss (solid) and control loss (dotted) of a few strings, with the
    thresholds of the three measures: tau (recollection), the same-epoch control loss (counterfactual)
    and the optimal contextual loss min_e control (contextual, dash-dot)."""
    xs, xlabel = checkpoint_axis(summary)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(rows):
        c = colors[i % len(colors)]
        ax.plot(xs, r["train_loss"], color=c, lw=1.8, label=f"{r['id']}: audited (train) loss")
        ax.plot(xs, r["control_loss"], color=c, lw=1.4, ls=":", label=f"{r['id']}: control loss")
        ax.axhline(r["optimal_contextual_loss"], color=c, lw=0.9, ls="-.",
                   label=f"{r['id']}: optimal contextual loss")
        onset = r["onset"]["contextual"]
        if onset >= 0:
            ax.plot([xs[onset]], [r["train_loss"][onset]], marker="*", ms=12, color=c, ls="none")
    ax.axhline(summary["tau"], color="k", ls="--", lw=1, label=f"recollection threshold τ={summary['tau']}")
    ax.set(xlabel=xlabel, ylabel="mean token cross-entropy of the target", title=title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="★ = contextual onset",
              title_fontsize=7)
    return save_figure(fig, path)


def exposure_plot(summary: dict, dataset: str, path: Path) -> Path | None:
    """Canary exposure of the planted PII paths over training: mean and median (left axis) and the share
    of canaries at maximal exposure, i.e. ranked first among all candidates (right axis)."""
    xs, xlabel = checkpoint_axis(summary)
    exp = summary["datasets"][dataset]["exposure"]
    top = exp[0]["max_exposure"]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(xs, [e["mean"] for e in exp], marker="o", color="tab:red", label="mean exposure")
    ax.plot(xs, [e["median"] for e in exp], marker="s", ls="--", color="tab:brown", label="median exposure")
    ax.axhline(top, color="k", ls=":", lw=1, label=f"max exposure log2({summary['n_candidates']}) = {top:.2f}")
    ax.set(xlabel=xlabel, ylabel="exposure (bits)", ylim=(-0.1, top + 0.5),
           title=f"{Path(summary['audited']).name}: exposure of {dataset} PII paths "
                 f"(n={exp[0]['count']})")
    ax2 = ax.twinx()
    ax2.bar(xs, [e["share_max"] for e in exp], width=0.25 * (xs[-1] - xs[0]) / max(len(xs), 1) or 0.5,
            alpha=0.25, color="tab:blue", label="share at max exposure")
    ax2.set(ylabel="share ranked first", ylim=(0, 1.05))
    lines = ax.get_legend_handles_labels()
    bars = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + bars[0], lines[1] + bars[1], fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.16), ncol=2)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def pick_strings(rows: list[dict], n: int = 3) -> list[dict]:
    """A few illustrative strings: prefer contextually memorized ones, earliest onset first, then others."""
    memorized = sorted((r for r in rows if r["onset"]["contextual"] >= 0), key=lambda r: r["onset"]["contextual"])
    rest = [r for r in rows if r["onset"]["contextual"] < 0]
    return (memorized + rest)[:n]


def render_loss_figures(audit_dir: str | Path, fig_dir: str | Path, n_strings: int = 3) -> list[Path]:
    """All loss/exposure figures of one `audit_losses` output directory; returns the written paths."""
    audit_dir, fig_dir = Path(audit_dir), Path(fig_dir)
    summary = read_json(audit_dir / "summary.json")
    name = Path(summary["audited"]).name
    written = []
    for dataset, entry in summary["datasets"].items():
        written.append(memorization_fraction_plot(summary, dataset,
                                                  fig_dir / f"loss_memorization_{name}_{dataset}.png"))
        rows = pick_strings(read_jsonl(audit_dir / f"{dataset}.jsonl"), n_strings)
        written.append(loss_curves_plot(summary, rows, fig_dir / f"loss_curves_{name}_{dataset}.png",
                                        f"{name} on {dataset}: loss of {len(rows)} strings"))
        if entry.get("exposure"):
            written.append(exposure_plot(summary, dataset, fig_dir / f"exposure_{name}_{dataset}.png"))
    return [p for p in written if p is not None]     # none under report.figures=false
