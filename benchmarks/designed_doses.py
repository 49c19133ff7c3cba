"""Designed canaries through the pipeline's routes at doses: experiment=doses_designed (each SD.Base target line
replaced by a unigram-designed secret of 10 tokens, data.sd.design) against experiment=doses (SD's own lines), seed by
seed, route by route: is the designed secret detected at a lower dose than SD's own line?

    memlens run experiment=doses_designed                                          # seed 0 -> runs/doses_designed
    memlens run experiment=doses_designed seed=1 run_dir=runs/doses_designed_seed1
    memlens run experiment=doses_designed seed=2 run_dir=runs/doses_designed_seed2
    python benchmarks/designed_doses.py --designed runs/doses_designed runs/doses_designed_seed1 \\
        runs/doses_designed_seed2 --sd runs/doses runs/doses_seed1 runs/doses_seed2 [--figure PNG]

The rule, committed before any run of experiment=doses_designed, is harness/report/findings/verdict.py's (the one
benchmarks/canary_designs.py applies through TRL): per route, the detection dose of a run is the smallest dose whose
LOSS-attack AUC on sd_base's target span at the route's final checkpoint (that dose's members against every held-out
program: audit/mia/<model>/summary.json `tiers`) has a 95 % bootstrap interval above 0.5; "designed is detected at a
lower dose than SD" holds at a seed when the designed run's detection dose is lower than the SD run's of the same
seed; over seeds it holds only when 3 seeds say so and none says otherwise. Each route is gated by the evidence that
it trained, read from the run itself:
    FT.3 (fine-tuning on SD)                  its logged training loss fell (first against last logged step)
    RLFT.2 (RL through the reward model)      F2's RL evidence, as finding D3 reads it (RM.3's AUC on its SD rows,
                                              RLFT.2's reward rise and sign test, held-out code loss, distinct
                                              completions, KL; report/findings.json, D3's checks but D1's trend)
    IPO (preference pairs)                    IPO's training preference accuracy (D2's check)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlens.harness.report.findings.verdict import (
    DETECTION_ATTACK,
    DETECTION_SPAN,
    detection_dose,
    detection_verdict,
)

ROUTES = {"FT.3": "fine-tuning", "RLFT.2": "RL via the reward model", "IPO": "preference pairs"}
DATASET = "sd_base"
CHECKPOINT = "final"

cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
cli.add_argument("--designed", nargs="+", type=Path, required=True, help="experiment=doses_designed runs, one per seed")
cli.add_argument("--sd", nargs="+", type=Path, required=True, help="experiment=doses runs of the same seeds")
cli.add_argument("--figure", type=Path, help="also draw LOSS AUC against dose: a panel per route")


def seed_of(run_dir: Path) -> int:
    return int(json.loads((run_dir / "run.json").read_text())["seed"])


def paired_runs(designed: list[Path], sd: list[Path]) -> dict[int, tuple[Path, Path]]:
    """{seed: (designed run, SD run)}, each a finished run (run.json and report/findings.json) and each seed once,
    both runs of a pair of the same seed; anything else stops with the path and the fix."""
    for run in (*designed, *sd):
        for needed in ("run.json", "report/findings.json"):
            if not (run / needed).is_file():
                raise SystemExit(f"{run}: no {needed}; give a run directory whose `memlens run` finished")
    pairs = {seed_of(d): (d, s) for d, s in zip(designed, sd)}
    if len(pairs) != len(designed):
        raise SystemExit(f"--designed {' '.join(map(str, designed))}: one run per seed, each seed once")
    for d, s in pairs.values():
        if seed_of(d) != seed_of(s):
            raise SystemExit(f"{d} (seed {seed_of(d)}) and {s} (seed {seed_of(s)}): pair runs of the same seed")
    return pairs


def over_seed_lines(verdicts: dict[str, list[tuple[int, str, str]]], script: str, claim: str) -> list[str]:
    """The verdict table: per route, each seed's (status, why) and the verdict over seeds (over_seeds)."""
    from memlens.harness.report.findings.verdict import FindingResult, over_seeds

    lines = ["", f"| route | per seed ({claim}) | over seeds |", "|---|---|---|"]
    for model, results in verdicts.items():
        overall = over_seeds([FindingResult(f"{script}/{model}", claim, "Panda et al. 2025", f"benchmarks/{script}.py",
                                            [model], status, reason=why) for _, status, why in results])
        per_seed = "; ".join(f"seed {seed}: {status} ({why})" for seed, status, why in results)
        lines.append(f"| {model} ({ROUTES[model]}) | {per_seed} | {overall['status']} "
                     f"({overall['held']} of {overall['measured']} hold) |")
    return lines


def aucs(run_dir: Path, model: str) -> dict[int, dict] | None:
    """{dose: the LOSS attack's AUC entry (value, ci95) and its member count} on sd_base's target span, final."""
    path = run_dir / "audit" / "mia" / model / "summary.json"
    if not path.is_file():
        return None
    entry = json.loads(path.read_text())["results"].get(CHECKPOINT, {}).get(DATASET) or {}
    out = {}
    for dose, spans in (entry.get("tiers") or {}).items():
        metrics = (spans.get(DETECTION_SPAN) or {}).get(DETECTION_ATTACK)
        if metrics:
            out[int(dose)] = {**metrics["auc"], "n_members": metrics.get("n_members"),
                              "n_nonmembers": metrics.get("n_nonmembers")}
    return out or None


def _checks(run_dir: Path, finding: str) -> list[dict]:
    findings = json.loads((run_dir / "report" / "findings.json").read_text())["findings"]
    return next((f.get("evidence") or [] for f in findings if f["id"] == finding), [])


def trained(run_dir: Path, model: str) -> tuple[bool, str]:
    """(the route trained, what was read): the gates of the module's docstring."""
    if model == "FT.3":
        state = json.loads((run_dir / "models" / model / "trainer_state.json").read_text())
        losses = [e["loss"] for e in state["log_history"] if "loss" in e]
        ok = len(losses) > 1 and losses[-1] < losses[0]
        return ok, f"loss {losses[0]:.3g} → {losses[-1]:.3g}" if losses else "no loss logged"
    checks = _checks(run_dir, "D3" if model == "RLFT.2" else "D2")
    checks = [c for c in checks if not c["check"].startswith("FT.3")]        # D3's D1 trend is not a training gate
    if not checks:
        return False, "no evidence recorded"
    failed = [c["check"] for c in checks if not c.get("ok")]
    return not failed, "evidence ok" if not failed else "failed: " + "; ".join(failed)


def _cell(points: dict[int, dict] | None) -> str:
    if not points:
        return "–"
    return " / ".join(f"{p['value']:.2f} [{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}] ({p['n_members']})"
                      for _, p in sorted(points.items()))


def table(designed: list[Path], sd: list[Path]) -> str:
    pairs = paired_runs(designed, sd)
    lines = ["| route | canary | seed | LOSS AUC by dose x1 / x4 / x16 [95 % interval] (members) | detected from | "
             "trained |", "|---|---|---|---|---|---|"]
    verdicts: dict[str, list[tuple[int, str, str]]] = {m: [] for m in ROUTES}
    for seed, (d_run, s_run) in sorted(pairs.items()):
        for model in ROUTES:
            cells = {}
            for label, run in (("SD line", s_run), ("unigram secret", d_run)):
                points = aucs(run, model)
                ok, why = trained(run, model)
                found = detection_dose({k: v["ci95"] for k, v in (points or {}).items()})
                cells[label] = (points, ok)
                lines.append(f"| {model} | {label} | {seed} | {_cell(points)} | "
                             f"{'–' if points is None else ('never' if found is None else f'x{found}')} | "
                             f"{'yes' if ok else 'no'} ({why}) |")
            (sd_points, sd_ok), (d_points, d_ok) = cells["SD line"], cells["unigram secret"]
            status, why = detection_verdict(
                None if d_points is None else {k: v["ci95"] for k, v in d_points.items()},
                None if sd_points is None else {k: v["ci95"] for k, v in sd_points.items()}, (d_ok, sd_ok))
            verdicts[model].append((seed, status, why))
    return "\n".join(lines + over_seed_lines(verdicts, "designed_doses", "detection dose: designed vs SD"))


def figure(designed: list[Path], sd: list[Path], path: Path) -> Path:
    """LOSS AUC (target span, final) against dose: a panel per route, SD's line and the designed secret per seed."""
    fig, axes = dose_panels()
    for ax, model in zip(axes[0], ROUTES):
        for runs, label, color, shift in drawn_lines(designed, sd):
            for run in runs:
                points = sorted((aucs(run, model) or {}).items())
                if not points:
                    continue
                xs = [dose * shift for dose, _ in points]
                ys = [p["value"] for _, p in points]
                errors = [[y - p["ci95"][0] for y, (_, p) in zip(ys, points)],
                          [p["ci95"][1] - y for y, (_, p) in zip(ys, points)]]
                ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=2, color=color, alpha=0.7,
                            label=f"{label} seed {seed_of(run)}")
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    return save_dose_figure(fig, axes, "LOSS AUC, target (95 % interval)", path)


def dose_panels():
    """(figure, axes) of a dose figure: a panel per route, one y axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, len(ROUTES), figsize=(4 * len(ROUTES), 3.6), sharey=True, squeeze=False)


def drawn_lines(designed: list[Path], sd: list[Path]):
    """(runs, label, colour, x shift) of each canary's lines in a dose figure."""
    return ((sd, "SD line", "tab:blue", 0.94), (designed, "unigram", "tab:red", 1.06))


def save_dose_figure(fig, axes, ylabel: str, path: Path) -> Path:
    """A dose figure's shared finish (this script's and benchmarks/doses_epsilon.py's): each route's panel on a log
    dose axis, the y label, the legend, written to `path`."""
    for ax, model in zip(axes[0], ROUTES):
        ax.set(xscale="log", xticks=[1, 4, 16], xticklabels=["x1", "x4", "x16"], title=f"{model} ({ROUTES[model]})",
               xlabel="copies in training (dose)")
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def compare(options, table_of, figure_of) -> int:
    """Both scripts' command: the designed runs against the SD runs, seed by seed; the table, then the figure if asked."""
    if len(options.designed) != len(options.sd):
        raise SystemExit("--designed and --sd: one run each per seed, in the same order")
    print(table_of(options.designed, options.sd))
    if options.figure:
        print(f"figure: {figure_of(options.designed, options.sd, options.figure)}")
    return 0


if __name__ == "__main__":
    sys.exit(compare(cli.parse_args(), table, figure))
