"""The formal-language study's report: paper 004's Fig. 2-6 redrawn from our run, the languages' learning evidence
and the findings L1-L7 (harness/report/formal_findings.py), as <run_dir>/formal/report/report.md + findings.json.

Every number comes from harness/audit/formal.py's summary.json and strings.jsonl; per-epoch scores of a string
subset (Fig. 4's frequency groups) are recomputed with `memorization_measures`, the measures' one definition (the
measures are per string, so a subset's scores are its columns of the whole).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from memlens.harness.audit.formal import STRINGS_FILE, SUMMARY_FILE  # noqa: E402
from memlens.harness.core.errors import UserError  # noqa: E402
from memlens.harness.core.formal_study import (  # noqa: E402
    BASE,
    DEDUP,
    SEC3,
    FormalSettings,
    analysis_dir,
    formal_report_dir,
    size_variant,
)
from memlens.harness.core.io import atomic_write_json, atomic_write_text, read_json, read_jsonl  # noqa: E402
from memlens.harness.measures.losses import LOSS_MEASURES, memorization_measures  # noqa: E402
from memlens.harness.report.figures import save_figure  # noqa: E402
from memlens.harness.report.findings.verdict import FindingResult, status_label  # noqa: E402
from memlens.harness.report.formal_findings import FormalResults, findings_per_seed, formal_findings  # noqa: E402

COLORS = {"recollection": "tab:orange", "counterfactual": "tab:blue", "contextual": "tab:red"}
FINDINGS_FILE = "findings.json"
PER_SEED_FILE = "findings_per_seed.json"


def load_results(run_dir: str | Path, settings: FormalSettings) -> FormalResults:
    out = analysis_dir(run_dir)
    return FormalResults(settings, read_json(out / SUMMARY_FILE)["entries"], read_jsonl(out / STRINGS_FILE))


def _epochs(n: int) -> np.ndarray:
    return np.arange(1, n + 1)


def _mean_curve(entries: list[dict], measure: str, key: str = "frac") -> np.ndarray:
    return np.mean([e["measures"][measure][key] for e in entries], axis=0)


def _e_star_lines(ax, entries: list[dict], color: str = "k") -> None:
    for e in entries:
        ax.axvline(e["e_star"], color=color, linestyle=":", linewidth=0.8)


# ---------------------------------------------------------------- Fig. 2
def fig2_onsets(results: FormalResults, path: Path) -> Path | None:
    """Fig. 2: s0, s1, s2 (decreasing frequency) of the first seed, their training loss against each measure's
    threshold, the onset of each measure dotted."""
    strings = sorted((s for s in results.strings_of(results.settings.low_entropy, SEC3)
                      if s["seed"] == results.settings.seeds[0]), key=lambda s: s["sec3"])
    if not strings:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    colors = ["tab:green", "tab:purple", "tab:brown"]
    for ax, measure in zip(axes, LOSS_MEASURES):
        for s, color in zip(strings, colors):
            x = _epochs(len(s["train_loss"]))
            ax.plot(x, s["train_loss"], color=color, label=f"{s['sec3']} (x{s['count']}) training loss")
            if measure == "recollection":
                ax.axhline(results.settings.tau, color="grey", linestyle="--", linewidth=0.8)
            elif measure == "counterfactual":
                ax.plot(x, s["control_loss"], color=color, linestyle=":")
            else:
                ax.axhline(min(s["control_loss"]), color=color, linestyle="-.", linewidth=0.8)
            if s["onset"][measure] is not None:
                ax.axvline(s["onset"][measure], color=color, linestyle=":", linewidth=1.2)
        ax.set_title({"recollection": f"(a) recollection, tau = {results.settings.tau}",
                      "counterfactual": "(b) counterfactual (dotted: loss without s)",
                      "contextual": "(c) contextual (dash-dot: optimal contextual loss)"}[measure], fontsize=9)
        ax.set_xlabel("epoch")
    axes[0].set_ylabel("loss (nats/token)")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Fig. 2: onsets of s0 > s1 > s2 in {results.settings.low_entropy} (seed "
                 f"{results.settings.seeds[0]}); vertical dotted: onset", fontsize=10)
    return save_figure(fig, path)


# ---------------------------------------------------------------- Fig. 3
def fig3_entropy(results: FormalResults, path: Path) -> Path | None:
    """Fig. 3: fraction (top) and weighted score (bottom) memorized against epoch, per language, means over seeds;
    e* of each seed dotted."""
    languages = results.settings.languages
    fig, axes = plt.subplots(2, len(languages), figsize=(5.5 * len(languages), 6.4), squeeze=False)
    for col, lang in enumerate(languages):
        entries = results.entries_of(lang, BASE)
        if not entries:
            continue
        x = _epochs(entries[0]["epochs"])
        for row, key in enumerate(("frac", "weighted")):
            ax = axes[row][col]
            for measure in LOSS_MEASURES:
                ax.plot(x, _mean_curve(entries, measure, key), color=COLORS[measure], label=measure)
            _e_star_lines(ax, entries)
            entropy = entries[0]["language_entropy"]["nats_per_token"]
            ax.set_title(f"{lang} (H = {entropy:.3f} nats/token): "
                         f"{'fraction memorized' if key == 'frac' else 'weighted memorization'}", fontsize=9)
            ax.set_xlabel("epoch")
            ax.set_ylim(-0.02, 1.02)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Fig. 3: memorization against epoch (mean of seeds); dotted: e* of each seed", fontsize=10)
    return save_figure(fig, path)


# ---------------------------------------------------------------- Fig. 4
def group_fraction(strings: list[dict], tau: float) -> dict[str, np.ndarray]:
    """Per measure, the fraction of `strings` with score > 0 at each epoch (strings of several seeds pooled)."""
    if not strings:
        return {}
    train = np.array([s["train_loss"] for s in strings]).T
    control = np.array([s["control_loss"] for s in strings]).T
    m = memorization_measures(train, control, tau)
    return {measure: m[measure]["frac"] for measure in LOSS_MEASURES}


def paired_curves(curves: dict[str, tuple[dict, dict]], e_stars: list[tuple[list[dict], str]], title: str,
                  path: Path) -> Path | None:
    """One panel per measure, two curves each ({label: (solid {measure: curve}, dashed ...)}), e* of every seed dotted."""
    (solid_label, dashed_label), (solid, dashed) = zip(*curves.items())
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), sharey=True)
    for ax, measure in zip(axes, LOSS_MEASURES):
        x = _epochs(len(solid[measure]))
        ax.plot(x, solid[measure], color=COLORS[measure], label=solid_label)
        ax.plot(x, dashed[measure], color=COLORS[measure], linestyle="--", label=dashed_label)
        for entries, color in e_stars:
            _e_star_lines(ax, entries, color)
        ax.set_title(measure, fontsize=9)
        ax.set_xlabel("epoch")
    axes[0].set_ylabel("fraction memorized")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def fig4_frequency(results: FormalResults, path: Path) -> Path | None:
    """Fig. 4: top vs bottom 10 % frequent strings of the low-entropy D, per measure (seeds pooled)."""
    low = results.settings.low_entropy
    strings = results.strings_of(low, BASE)
    top = group_fraction([s for s in strings if s["group"] == "top"], results.settings.tau)
    bottom = group_fraction([s for s in strings if s["group"] == "bottom"], results.settings.tau)
    if not top or not bottom:
        return None
    return paired_curves({"top 10 %": top, "bottom 10 %": bottom}, [(results.entries_of(low, BASE), "k")],
                         f"Fig. 4: top vs bottom 10 % frequent strings of {low}", path)


def fig5_dedup(results: FormalResults, path: Path) -> Path | None:
    """Fig. 5: the low-entropy D with and without deduplication: fraction memorized per measure, e* dotted."""
    low = results.settings.low_entropy
    base, dedup = results.entries_of(low, BASE), results.entries_of(low, DEDUP)
    if not base or not dedup:
        return None
    curves = {"base": {m: _mean_curve(base, m) for m in LOSS_MEASURES}, "dedup": {m: _mean_curve(dedup, m) for m in LOSS_MEASURES}}
    return paired_curves(curves, [(base, "k"), (dedup, "grey")],
                         f"Fig. 5: deduplication of {low}'s D (dotted: e*, black base, grey dedup)", path)


# ---------------------------------------------------------------- Fig. 6
def size_variants(settings: FormalSettings) -> list[tuple[int, str]]:
    return [(n, BASE if n == settings.train_size else size_variant(n)) for n in sorted(settings.sizes)]


def fig6_size(results: FormalResults, path: Path) -> Path | None:
    """Fig. 6: test loss at e* against memorization at e*, one point per size and seed (marker size ~ |D|)."""
    low = results.settings.low_entropy
    points = [(n, e) for n, variant in size_variants(results.settings) for e in results.entries_of(low, variant)]
    if not points:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    largest = max(n for n, _ in points)
    for ax, measure in zip(axes, LOSS_MEASURES):
        for n, e in points:
            rate = e["measures"][measure]["k_at_e_star"] / max(e["measures"][measure]["n"], 1)
            ax.scatter(e["test_loss_at_e_star"], rate, s=20 + 180 * n / largest, color=COLORS[measure], alpha=0.6)
        ax.set_title(measure, fontsize=9)
        ax.set_xlabel("test loss at e* (nats/token)")
    axes[0].set_ylabel("fraction memorized at e*")
    sizes = ", ".join(str(n) for n, _ in size_variants(results.settings))
    fig.suptitle(f"Fig. 6: training-set size ({sizes}; larger marker = larger D) in {low}", fontsize=10)
    return save_figure(fig, path)


FIGURES = (("fig2_onsets.png", fig2_onsets), ("fig3_entropy.png", fig3_entropy),
           ("fig4_frequency.png", fig4_frequency), ("fig5_dedup.png", fig5_dedup), ("fig6_size.png", fig6_size))


# ---------------------------------------------------------------- the report
def language_table(results: FormalResults) -> list[str]:
    lines = ["| language | variant | seed | H(L) sampled (nats/token) | test strings' entropy | test loss at e* | gap "
             "| e* | strings |", "|---|---|---|---|---|---|---|---|---|"]
    for e in results.entries:
        lines.append(f"| {e['language']} | {e['variant']} | {e['seed']} | "
                     f"{e['language_entropy']['nats_per_token']:.4f} | {e['test_entropy_per_token']:.4f} | "
                     f"{e['test_loss_at_e_star']:.4f} | {e['learned_gap']:+.4f} | {e['e_star']} | {e['n_strings']} |")
    return lines


def findings_table(rows: list[FindingResult], per_seed: dict[int, list[FindingResult]]) -> list[str]:
    seeds = list(per_seed)
    lines = ["| id | claim | seeds pooled | status | " + " | ".join(f"seed {s}" for s in seeds) + " | why / note |",
             "|---|---|---|---|" + "---|" * len(seeds) + "---|"]
    for i, r in enumerate(rows):
        why = "; ".join(x for x in (r.reason, r.note) if x)
        p = f" (p = {r.p_value:.3g})" if r.p_value is not None else ""
        cells = " | ".join(status_label(per_seed[s][i]) for s in seeds)
        lines.append(f"| {r.id} | {r.claim} | {r.ours}{p} | {status_label(r)} | {cells} | {why} |")
    return lines


def write_formal_report(run_dir: str | Path, settings: FormalSettings) -> Path:
    """Figures, findings.json and report.md under <run_dir>/formal/report/; returns report.md's path."""
    results = load_results(run_dir, settings)
    out = formal_report_dir(run_dir)
    rows = formal_findings(results)
    figures = [(name, draw(results, out / "figures" / name)) for name, draw in FIGURES]
    per_seed = findings_per_seed(results)
    atomic_write_json(out / PER_SEED_FILE, {str(seed): [f.as_dict() for f in seed_rows]
                                            for seed, seed_rows in per_seed.items()})
    atomic_write_json(out / FINDINGS_FILE, [f.as_dict() for f in rows])
    text = [
        "# Paper 004 on its own formal languages", "",
        f"Languages {', '.join(settings.languages)} (low entropy: {settings.low_entropy}), seeds {settings.seeds}, "
        f"|D| = {settings.train_size}, sizes {sorted(settings.sizes)}, {settings.folds} counterfactual folds, "
        f"{settings.epochs} epochs, batch {settings.batch_size}, lr {settings.lr}, tau = {settings.tau}. "
        "How each rule is read: docs/methods.md, \"Paper 004's formal languages\".", "",
        "## Findings", "", "Each finding on every seed's strings pooled (its figure and status), then on each seed alone.",
        "", *findings_table(rows, per_seed), "",
        "## Did the models learn their language?", "",
        "The gap is the test loss at e* minus the test strings' own entropy per token (the loss of a model that knows "
        f"L exactly); the findings need <= {settings.learned_gap} at every seed.", "",
        *language_table(results), "",
        "## Figures", "",
        *[f"![{name}](figures/{name})" for name, path in figures if path is not None], "",
    ]
    atomic_write_text(out / "report.md", "\n".join(text))
    return out / "report.md"


def report_formal(cfg) -> int:
    """`memlens report` on a formal-language experiment: the report from the stored analysis alone (this layer never
    runs a measure; `memlens formal`, harness/study_commands.py, computes the analysis and then calls this)."""
    from omegaconf import OmegaConf  # lazy: the config library loads with the command

    settings = FormalSettings.load(OmegaConf.to_container(cfg.formal, resolve=True))
    summary = analysis_dir(cfg.run_dir) / SUMMARY_FILE
    if not summary.is_file():
        raise UserError(f"{summary}: no formal-language analysis to report; compute it with `memlens formal "
                        f"experiment={cfg.get('experiment_name') or '<formal experiment>'} run_dir={cfg.run_dir}` "
                        "(it writes the report too)")
    path = write_formal_report(cfg.run_dir, settings)
    print(f"[memlens] formal: report {path}", flush=True)
    return 0
