"""The paper's figures drawn from computed analyses (matplotlib, Agg). Each function writes one PNG."""

from __future__ import annotations

import contextvars
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from memlens.harness.measures.mia import ATTACKS, attack_label  # noqa: E402
from memlens.harness.report.analyses import Persistence, checkpoint_step  # noqa: E402

DPI = 110
# `report.figures=false` (conf/report/default.yaml): every figure is built but neither laid out, drawn nor written, and
# the report is its tables and text alone. Drawing is ~80 % of a report's time (53 PNGs, 30 of 37 s, for a toy
# `findings` run), and CI's toy runs check the numbers, not the pictures. render_report sets it for one report.
DRAW_FIGURES: contextvars.ContextVar[bool] = contextvars.ContextVar("memlens_draw_figures", default=True)


def save_figure(fig, path: Path) -> Path | None:
    """Lay out and write `fig` as a PNG at `path` (atomically), or, under report.figures=false, only close it: None."""
    if not DRAW_FIGURES.get():
        plt.close(fig)
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=DPI)
    plt.close(fig)
    tmp.replace(path)
    return path


def memorization_map(rows: list[dict], k: float, title: str, path: Path) -> Path | None:
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
    return save_figure(fig, path)


def persistence_plot(source: str, results: dict[str, Persistence], k: float, title: str, path: Path) -> Path | None:
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
    return save_figure(fig, path)


def _error_bars(values: list[float | None], intervals: list) -> list[list[float]]:
    """matplotlib yerr (in %) from each rate's 95 % Wilson interval; 0 where a rate has none."""
    low, high = [], []
    for y, ci in zip(values, intervals):
        if y is None or not ci:
            low.append(0.0)
            high.append(0.0)
        else:
            low.append(100 * (y - ci[0]))
            high.append(100 * (ci[1] - y))
    return [low, high]


def sweep_plot(series: dict[str, list[tuple]], axis: str, title: str, path: Path) -> Path | None:
    """Fig. 4 / Fig. 7: memorization rate against a swept hyper-parameter, one line per dataset, with
    95 % Wilson intervals as error bars. Points are (value, rate, ci95)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for dataset, points in series.items():
        kept = [p for p in points if p[1] is not None]
        ax.errorbar([p[0] for p in kept], [100 * p[1] for p in kept],
                    yerr=_error_bars([p[1] for p in kept], [p[2] for p in kept]), marker="o", capsize=3,
                    label=dataset)
    ax.set_xscale("log")
    ax.set(title=title, xlabel=f"{axis} (log scale)", ylabel="memorization rate (%), 95 % CI")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def over_training_plot(model: str, per_dataset: dict[str, list[dict]], path: Path) -> Path | None:
    """Memorization rate (and counterfactual PII regurgitation) against checkpoint step, with 95 % Wilson
    intervals: every checkpoint is scored."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for dataset, entries in per_dataset.items():
        steps = [e for e in entries if e["checkpoint"] != "final"]
        xs = [checkpoint_step(e["checkpoint"]) for e in steps]
        ys = [e["rate"] for e in steps]
        ax.errorbar(xs, [100 * (y or 0) for y in ys], yerr=_error_bars(ys, [e.get("ci95") for e in steps]),
                    marker="o", capsize=3, label=f"{dataset}: memorized")
        if any(e.get("pii_counterfactual_rate") is not None for e in steps):
            ys = [e.get("pii_counterfactual_rate") for e in steps]
            ax.errorbar(xs, [100 * (y or 0) for y in ys],
                        yerr=_error_bars(ys, [e.get("pii_counterfactual_ci95") for e in steps]),
                        marker="x", ls="--", capsize=3, label=f"{dataset}: PII regurgitated (counterfactual)")
    ax.set(title=f"{model}: memorization over training", xlabel="training step (checkpoint)",
           ylabel="rate (%), 95 % CI")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def runs_over_training_plot(series: dict[str, list[dict]], dataset: str, path: Path) -> Path | None:
    """Several runs' memorization rate on one dataset against training step, one line each (the paper's comparison
    across the user's own trainers), with 95 % Wilson intervals."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, entries in series.items():
        steps = [e for e in entries if e["checkpoint"] != "final"]
        ys = [e["rate"] for e in steps]
        ax.errorbar([checkpoint_step(e["checkpoint"]) for e in steps], [100 * (y or 0) for y in ys],
                    yerr=_error_bars(ys, [e.get("ci95") for e in steps]), marker="o", capsize=3, label=label)
    ax.set(title=f"{dataset}: memorization over training, by run", xlabel="training step (checkpoint)",
           ylabel="memorization rate (%), 95 % CI")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def reward_scores_plot(scores: dict[str, dict[int, list[float]]], dataset: str, path: Path) -> Path | None:
    """Fig. 2: reward-score distributions by label for each reward model."""
    fig, axes = plt.subplots(1, len(scores), figsize=(4 * len(scores), 3.4), squeeze=False)
    for ax, (rm, by_label) in zip(axes[0], scores.items()):
        for label, color in ((1, "tab:green"), (0, "tab:red")):
            if by_label.get(label):
                ax.hist(by_label[label], bins=30, alpha=0.55, color=color,
                        label=f"label {label} ({'positive' if label else 'negative'})")
        ax.set(title=f"{rm} on {dataset}", xlabel="reward score", ylabel="examples")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


EVIDENCE_MARK = {True: " ✓", False: " ✗", None: ""}


def comparison_plot(rows: list[dict], title: str, path: Path) -> Path | None:
    """Sec. 5.2 / 5.4: memorization rate per dataset, a bar per model of each group (FT, RLFT via a reward model,
    RLVR, each preference objective), with its 95 % Wilson interval, n and training evidence: a bar whose stage
    failed its evidence check (`evidence_ok` False) is hatched and marked ✗, one that passed is marked ✓."""
    datasets = sorted({r["dataset"] for r in rows})
    methods = list(dict.fromkeys((r["group"], r["model"]) for r in rows))
    per_group = {g: sum(1 for gg, _ in methods if gg == g) for g, _ in methods}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 + 0.45 * len(methods) * len(datasets)), 4.4))
    width = 0.8 / max(1, len(methods))
    for mi, (group, model) in enumerate(methods):
        shown = [next((r for r in rows if (r["group"], r["model"]) == (group, model) and r["dataset"] == d
                       and r["rate"] is not None), None) for d in datasets]
        ys = [r["rate"] if r else None for r in shown]
        xs = [i + mi * width for i in range(len(datasets))]
        label = group if per_group[group] == 1 else f"{group}: {model}"
        bars = ax.bar(xs, [100 * (y or 0) for y in ys], width=width, label=label,
                      yerr=_error_bars(ys, [r.get("ci95") if r else None for r in shown]), capsize=2)
        for bar, r in zip(bars, shown):
            if r is not None and r.get("evidence_ok") is False:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
        ax.bar_label(bars, labels=[f"{100 * r['rate']:.1f}{EVIDENCE_MARK[r.get('evidence_ok')]}\nn={r['n_scored']}"
                                   if r else "–" for r in shown], fontsize=6, padding=2)
    ax.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(datasets))], datasets)
    ax.set(title=title, ylabel="memorization rate (%), 95 % CI", xlabel="dataset")
    ax.set_ylim(0, 115)
    ax.legend(fontsize=7, ncol=2 if len(methods) > 5 else 1)
    return save_figure(fig, path)


def preference_displacement_plot(rows: list[dict], path: Path) -> Path | None:
    """Why an objective did or did not memorize its pairs: per preference model, the mean change of the chosen and
    of the rejected completion's summed log-probability from the initial to the trained model on the training pairs
    (recipes/stages/preference_eval.py). Likelihood displacement: the rejected falling far more than the chosen rises."""
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 + 0.9 * len(rows)), 3.8))
    xs = range(len(rows))
    for offset, key, label, color in ((-0.2, "pair_chosen_change", "chosen", "tab:green"),
                                      (0.2, "pair_rejected_change", "rejected", "tab:red")):
        ax.bar([x + offset for x in xs], [r.get(key) or 0.0 for r in rows], width=0.4, label=label, color=color)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(list(xs), [f"{r.get('objective') or r['model']}\nacc {r['pair_accuracy']:.2f}"
                             if r.get("pair_accuracy") is not None else str(r.get("objective") or r["model"])
                             for r in rows], fontsize=7)
    ax.set(title="Preference pairs: log-probability change from the initial model",
           ylabel="mean Δ summed log-prob (nats)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _curve(history: list[dict], key: str) -> tuple[list[float], list[float]]:
    logged = [h for h in history if key in h and "loss" in h]
    return [h.get("step", i + 1) for i, h in enumerate(logged)], [float(h[key]) for h in logged]


def rl_training_plots(histories: dict[str, list[dict]], fig_dir: Path) -> list[Path]:
    """One figure per RL stage: reward-model score and KL to the reference against step, one line per
    sweep point (colour = the point, e.g. α) — shows whether RL optimised and how far each α drifted."""
    by_stage: dict[str, dict[str, list[dict]]] = {}
    for model, history in histories.items():
        stage, _, point = model.partition("/")
        by_stage.setdefault(stage, {})[point or stage] = history
    paths = []
    for stage, points in sorted(by_stage.items()):
        fig, (ax_r, ax_k) = plt.subplots(1, 2, figsize=(10, 3.6))
        for point, history in sorted(points.items()):
            ax_r.plot(*_curve(history, "reward"), marker=".", label=point)
            ax_k.plot(*_curve(history, "kl"), marker=".", label=point)
        ax_r.set(title=f"{stage}: reward-model score", xlabel="step", ylabel="mean reward")
        ax_k.set(title=f"{stage}: KL to the reference", xlabel="step", ylabel="mean per-token KL (nats)")
        ax_r.legend(fontsize=7)
        paths.append(save_figure(fig, fig_dir / f"training_{stage.replace('/', '_').replace(':', '_')}.png"))
    return [p for p in paths if p is not None]     # none under report.figures=false


def ipo_training_plots(histories: dict[str, list[dict]], fig_dir: Path) -> list[Path]:
    """A preference stage's loss, preference accuracy (as its trainer logs it; KTO logs none), reward margin, and
    the chosen and rejected completions' log-probabilities against step."""
    paths = []
    for model, history in sorted(histories.items()):
        fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
        for ax, key, label in zip(axes, ("loss", "rewards/accuracies", "rewards/margins"),
                                  ("loss", "preference accuracy (trainer's)", "reward margin")):
            ax.plot(*_curve(history, key), marker=".")
            ax.set(title=f"{model}: {label}", xlabel="step")
        for side, color in (("chosen", "tab:green"), ("rejected", "tab:red")):
            axes[3].plot(*_curve(history, f"logps/{side}"), marker=".", color=color, label=side)
        axes[3].set(title=f"{model}: log-prob of the completions", xlabel="step")
        axes[3].legend(fontsize=7)
        paths.append(save_figure(fig, fig_dir / f"training_{model.replace('/', '_').replace(':', '_')}.png"))
    return [p for p in paths if p is not None]     # none under report.figures=false


def _checkpoint_x(checkpoints: list[str]) -> list[float]:
    """x of each checkpoint: its step; 'final' one step-gap after the last (or 1 when it is the only one)."""
    steps = [checkpoint_step(c) for c in checkpoints if c != "final"]
    gap = (steps[-1] - steps[-2]) if len(steps) >= 2 else (steps[-1] if steps else 1.0)
    return [checkpoint_step(c) if c != "final" else (steps[-1] + gap if steps else 1.0) for c in checkpoints]


ATTACK_MARKERS = ("o", "s", "^", "D", "v", "P", "X")    # 7 shapes against 10 colours: a pair is unique up to 70


def attack_style(attack: str) -> dict:
    """One look per attack in every figure, from its place in the ATTACKS registry: a colour of tab10, a marker, and a
    dashed line from the eleventh on (matplotlib's colour cycle alone has 10, and reused LOSS's blue for EZ-MIA).
    An attack not registered here (a summary from elsewhere) gets a place after the registered ones by name."""
    names = ATTACKS.names()
    i = names.index(attack) if attack in names else len(names) + sum(map(ord, attack)) % 60
    return {"color": f"C{i % 10}", "marker": ATTACK_MARKERS[i % len(ATTACK_MARKERS)], "ls": "-" if i < 10 else "--"}


def mia_over_training_plot(model: str, per_dataset: dict[str, tuple[dict, list[dict]]], path: Path) -> Path | None:
    """Membership inference beside extraction, one panel per dataset: each attack's ROC AUC (members vs held-out,
    95 % bootstrap interval) over the checkpoints, and on a second axis the extraction (memorization) rate with its
    95 % Wilson interval on the same canaries. per_dataset: {dataset: (analyses.mia_over_training, over_training)}."""
    fig, axes = plt.subplots(1, len(per_dataset), figsize=(5.6 * len(per_dataset), 4), squeeze=False)
    for ax, (dataset, (aucs, extraction)) in zip(axes[0], per_dataset.items()):
        for attack, points in aucs.items():
            xs = _checkpoint_x([p[0] for p in points])
            ys = [p[1] for p in points]
            err = [[y - p[2][0] for y, p in zip(ys, points)], [p[2][1] - y for y, p in zip(ys, points)]]
            ax.errorbar(xs, ys, yerr=err, ms=3, capsize=2, label=f"AUC {attack_label(attack)}", **attack_style(attack))
        ax.axhline(0.5, color="gray", ls=":", lw=1)
        ax.set(ylim=(0, 1.05), title=f"{model} on {dataset}", xlabel="training step (last point: final)",
               ylabel="membership ROC AUC (95 % bootstrap CI)")
        if extraction:
            twin = ax.twinx()
            rates = [e["rate"] for e in extraction]
            twin.errorbar(_checkpoint_x([e["checkpoint"] for e in extraction]), [100 * (r or 0) for r in rates],
                          yerr=_error_bars(rates, [e.get("ci95") for e in extraction]), color="k", ls="--",
                          marker="x", capsize=2, label="extraction rate")
            twin.set(ylim=(0, 105), ylabel="extraction (memorization) rate (%), 95 % CI")
            twin.legend(fontsize=7, loc="upper right")
        ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)


def mia_comparison_plot(rows: list[dict], path: Path) -> Path | None:
    """The RLHF-vs-IPO comparison's MIA panel: per model and dataset, the extraction rate (left) and the best
    attack's AUC (right), each with its 95 % interval (Wilson; bootstrap) and n."""
    labels = [f"{r['model']}\n{r['dataset']}" for r in rows]
    xs = list(range(len(rows)))
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(8.0, 1.6 * len(rows) + 3), 4))
    rates = [r["rate"] for r in rows]
    bars = left.bar(xs, [100 * (y or 0) for y in rates], yerr=_error_bars(rates, [r.get("ci95") for r in rows]),
                    capsize=3, color="tab:red")
    left.bar_label(bars, labels=[f"{100 * (r['rate'] or 0):.1f}\nn={r['n_scored']}" for r in rows], fontsize=6)
    left.set(title="extractable: memorization rate", ylabel="rate (%), 95 % Wilson CI", ylim=(0, 115))
    aucs = [r["auc"] for r in rows]
    bars = right.bar(xs, aucs, yerr=[[a - r["auc_ci95"][0] for a, r in zip(aucs, rows)],
                                     [r["auc_ci95"][1] - a for a, r in zip(aucs, rows)]], capsize=3, color="tab:blue")
    right.bar_label(bars, labels=[f"{r['auc']:.2f} {attack_label(r['best_attack'])}\n{r['n_members']} vs "
                                  f"{r['n_nonmembers']}" for r in rows], fontsize=6)
    right.axhline(0.5, color="gray", ls=":", lw=1)
    right.set(title="detectable: best membership attack's AUC", ylabel="ROC AUC, 95 % bootstrap CI", ylim=(0, 1.15))
    for ax in (left, right):
        ax.set_xticks(xs, labels, fontsize=7)
    return save_figure(fig, path)


def discoverable_curve_plot(curves: dict[str, dict], dataset: str, path: Path) -> Path | None:
    """Probabilistic extraction against the number of queries n (Hayes et al. 2024, Fig. 1's axes): per model, the
    counterfactual (n, p)-discoverable rate of its sampling scheme with 95 % Wilson intervals, and its greedy NED
    rate as a dashed line of the same colour. curves: {model: {"label", "points": [(n, rate, ci95)], "greedy"}}."""
    fig, ax = plt.subplots(figsize=(5.8, 4.2))
    for i, (model, curve) in enumerate(curves.items()):
        colour = f"C{i % 10}"
        kept = [p for p in curve["points"] if p[1] is not None]
        ax.errorbar([p[0] for p in kept], [100 * p[1] for p in kept],
                    yerr=_error_bars([p[1] for p in kept], [p[2] for p in kept]), marker="o", capsize=3,
                    color=colour, label=f"{model}: {curve['label']}")
        if curve["greedy"] is not None:
            ax.axhline(100 * curve["greedy"], color=colour, linestyle="--", linewidth=1,
                       label=f"{model}: greedy NED test")
    ax.set_xscale("log")
    ax.set(title=f"Extraction by sampling vs greedy decoding on {dataset}", xlabel="queries n (log scale)",
           ylabel="counterfactual extraction rate (%), 95 % CI", ylim=(-3, 103))
    ax.legend(fontsize=7)
    return save_figure(fig, path)
