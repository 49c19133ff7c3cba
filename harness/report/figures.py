"""The paper's figures drawn from computed analyses (matplotlib, Agg). Each function writes one PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harness.report.analyses import Persistence, checkpoint_step  # noqa: E402

DPI = 110


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    tmp.replace(path)
    return path


def memorization_map(rows: list[dict], k: float, title: str, path: Path) -> Path:
    """Fig. 3 / Fig. 8: control NED (x) against audited-model NED (y) with the k-regions shaded.

    Memorized = x > k and y <= k (Definition 3.1); x <= k are possible false positives, because the
    control (never trained on the example) also reproduces the target."""
    scored = [r for r in rows if not r.get("excluded")]
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    ax.axvspan(k, 1.0, ymin=0, ymax=k, color="tab:red", alpha=0.15, label=f"memorized (x > {k}, y ≤ {k})")
    ax.axvspan(0, k, color="tab:gray", alpha=0.2, label=f"possible false positive (x ≤ {k})")
    mem = [r for r in scored if r.get("memorized")]
    rest = [r for r in scored if not r.get("memorized")]
    ax.scatter([r["control_ned"] for r in rest], [r["ned"] for r in rest], s=8, alpha=0.5,
               color="tab:blue", label=f"not memorized (n={len(rest)})")
    ax.scatter([r["control_ned"] for r in mem], [r["ned"] for r in mem], s=10, alpha=0.8,
               color="tab:red", label=f"memorized (n={len(mem)})")
    ax.axhline(k, color="k", lw=0.8, ls="--")
    ax.axvline(k, color="k", lw=0.8, ls="--")
    ax.set(xlim=(0, 1), ylim=(0, 1), title=title,
           xlabel="control model: sliding-window NED to target", ylabel="audited model: sliding-window NED to target")
    ax.legend(fontsize=7, loc="upper left")
    return _save(fig, path)


def persistence_plot(source: str, results: dict[str, Persistence], k: float, title: str, path: Path) -> Path:
    """Fig. 1: NED after the later stage on the examples the source model memorized, per target model."""
    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(results)
    data = [results[n].ned_after or [float("nan")] for n in names]
    ax.boxplot(data, showfliers=True)
    labels = []
    for n in names:
        share = results[n].share
        labels.append(n + "\n" + ("n/a" if share is None else f"{100 * share:.0f}% still memorized"))
    ax.set_xticks(range(1, len(names) + 1), labels, fontsize=8)
    ax.axhline(k, color="tab:red", ls="--", lw=1, label=f"k = {k}")
    n_src = next(iter(results.values())).n_source_memorized if results else 0
    ax.set(ylim=(0, 1), title=f"{title}\n({n_src} examples memorized by {source})",
           ylabel="NED to target after the later stage", xlabel="model")
    ax.legend(fontsize=8)
    return _save(fig, path)


def sweep_plot(series: dict[str, list[tuple[float, float | None]]], axis: str, title: str, path: Path) -> Path:
    """Fig. 4 / Fig. 7: memorization rate against a swept hyper-parameter, one line per dataset."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for dataset, points in series.items():
        xs = [x for x, y in points if y is not None]
        ys = [100 * y for x, y in points if y is not None]
        ax.plot(xs, ys, marker="o", label=dataset)
    ax.set_xscale("log")
    ax.set(title=title, xlabel=f"{axis} (log scale)", ylabel="memorization rate (%)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def over_training_plot(model: str, per_dataset: dict[str, list[dict]], path: Path) -> Path:
    """Memorization rate (and PII regurgitation) against checkpoint step: every checkpoint is scored."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for dataset, entries in per_dataset.items():
        steps = [e for e in entries if e["checkpoint"] != "final"]
        xs = [checkpoint_step(e["checkpoint"]) for e in steps]
        ax.plot(xs, [100 * (e["rate"] or 0) for e in steps], marker="o", label=f"{dataset}: memorized")
        if any(e.get("pii_regurgitation_rate") is not None for e in steps):
            ax.plot(xs, [100 * (e["pii_regurgitation_rate"] or 0) for e in steps], marker="x", ls="--",
                    label=f"{dataset}: PII regurgitated")
    ax.set(title=f"{model}: memorization over training", xlabel="training step (checkpoint)",
           ylabel="rate (%)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return _save(fig, path)


def reward_scores_plot(scores: dict[str, dict[int, list[float]]], dataset: str, path: Path) -> Path:
    """Fig. 2: reward-score distributions by label for each reward model."""
    fig, axes = plt.subplots(1, len(scores), figsize=(4 * len(scores), 3.4), squeeze=False)
    for ax, (rm, by_label) in zip(axes[0], scores.items()):
        for label, color in ((1, "tab:green"), (0, "tab:red")):
            if by_label.get(label):
                ax.hist(by_label[label], bins=30, alpha=0.55, color=color,
                        label=f"label {label} ({'positive' if label else 'negative'})")
        ax.set(title=f"{rm} on {dataset}", xlabel="reward score", ylabel="examples")
        ax.legend(fontsize=7)
    return _save(fig, path)


def comparison_plot(rows: list[dict], title: str, path: Path) -> Path:
    """Sec. 5.4: memorization rate per dataset, side by side for FT, RLFT via RM and IPO."""
    datasets = sorted({r["dataset"] for r in rows})
    groups = list(dict.fromkeys(r["group"] for r in rows))
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / max(1, len(groups))
    for gi, group in enumerate(groups):
        ys = []
        for d in datasets:
            vals = [r["rate"] for r in rows if r["group"] == group and r["dataset"] == d and r["rate"] is not None]
            ys.append(100 * max(vals) if vals else 0.0)
        xs = [i + gi * width for i in range(len(datasets))]
        bars = ax.bar(xs, ys, width=width, label=group)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks([i + width * (len(groups) - 1) / 2 for i in range(len(datasets))], datasets)
    ax.set(title=title, ylabel="memorization rate (%)", xlabel="dataset")
    ax.legend(fontsize=8)
    return _save(fig, path)
