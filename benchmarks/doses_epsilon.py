"""One-run ε per route, design and dose: experiment=doses_designed_coins (unigram secrets) against
experiment=doses_coins (SD's own lines), seed by seed. Both runs of a seed share the pool, the coins and the doses
(conf/experiment/doses_coins.yaml), so their bounds compare canaries of the same count.

    memlens run experiment=doses_coins                                          # seed 0 -> runs/doses_coins
    memlens run experiment=doses_coins seed=1 run_dir=runs/doses_coins_seed1    # and seed 2
    memlens run experiment=doses_designed_coins                                 # seed 0 -> runs/doses_designed_coins
    memlens run experiment=doses_designed_coins seed=1 run_dir=runs/doses_designed_coins_seed1   # and seed 2
    python benchmarks/doses_epsilon.py --designed runs/doses_designed_coins runs/doses_designed_coins_seed1 \\
        runs/doses_designed_coins_seed2 --sd runs/doses_coins runs/doses_coins_seed1 runs/doses_coins_seed2 \\
        [--figure PNG]

Per route x canary x seed it prints what issue #67 asks for at each dose: the extraction rate with its interval
(findings D1-D3's rates: the counterfactual memorized flags at the final checkpoint), the LOSS attack's AUC and TPR
at 1 % FPR (that dose's members against every held-out canary but the prefix shots; the attack fixed
beforehand), beside it the best attack's (the highest AUC of those not marked degenerate, ties to the first name in
alphabetical order, picked after the scores were seen: a description only),
and the one-run ε lower bound (Steinke et al. 2023, at audit.epsilon_delta and 95 %) over that dose's canaries,
members and held-out alike (harness/audit/epsilon.py bounds_by_dose), and over all of them.

The rule, committed with this file before any run of either experiment ("the designed canaries give a larger ε bound
than SD at the same count", issue #67): per route, at a seed, read the Steinke ε lower bound on sd_base at the route's
final checkpoint over all its coin-decided canaries (one primary comparison; the per-dose bounds are reported, not
tested), in the designed run and the SD run of the same seed (the same count m, checked):
    inconclusive    where either run has no bound recorded for the route, where either run's route fails its
                    training gate (benchmarks/designed_doses.py `trained`: FT.3's loss fell; RLFT.2's RL evidence as
                    D3 reads it; IPO's preference accuracy), or where both bounds are 0 (nothing to compare)
    holds           where the designed bound is larger than SD's
    not reproduced  otherwise
Over seeds it holds (or is not reproduced) only where 3 seeds say so and none says otherwise
(harness/report/findings/verdict.py over_seeds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlens.harness.report.findings.verdict import FAILS, HOLDS, INCONCLUSIVE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.designed_doses import (  # noqa: E402  (the repo on sys.path first)
    ROUTES,
    compare,
    dose_panels,
    drawn_lines,
    over_seed_lines,
    paired_runs,
    save_dose_figure,
    seed_of,
    trained,
)

DATASET = "sd_base"
CHECKPOINT = "final"
ATTACK, SPAN = "loss", "target"        # the MIA columns: the attack audit.epsilon_attack fixes by default
RATE_FINDING = {"FT.3": "D1", "RLFT.2": "D3", "IPO": "D2"}   # the findings whose rates are a route's extraction by dose
CLAIM = "the designed canaries give a larger ε bound than SD's lines at the same count"

cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
cli.add_argument("--designed", nargs="+", type=Path, required=True,
                 help="experiment=doses_designed_coins runs, one per seed")
cli.add_argument("--sd", nargs="+", type=Path, required=True, help="experiment=doses_coins runs of the same seeds")
cli.add_argument("--figure", type=Path, help="also draw the ε bound against dose: a panel per route")


def epsilon_entry(run_dir: Path, model: str) -> dict | None:
    """The route's final ε summary entry on sd_base (m, r, v, epsilon_lower_bound, `doses`), None if not bounded."""
    path = run_dir / "audit" / "epsilon" / model / "summary.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())["results"].get(CHECKPOINT, {}).get(DATASET)


def _tiers(run_dir: Path, model: str) -> dict[int, dict]:
    """{dose: {attack: metrics}} on sd_base's target at the final checkpoint (audit/mia tiers)."""
    path = run_dir / "audit" / "mia" / model / "summary.json"
    if not path.is_file():
        return {}
    tiers = (json.loads(path.read_text())["results"].get(CHECKPOINT, {}).get(DATASET) or {}).get("tiers") or {}
    return {int(d): spans.get(SPAN) or {} for d, spans in tiers.items()}


def mia_by_dose(run_dir: Path, model: str) -> dict[int, dict]:
    """{dose: the LOSS attack's metrics on sd_base's target at the final checkpoint} (audit/mia tiers)."""
    return {d: attacks[ATTACK] for d, attacks in _tiers(run_dir, model).items() if ATTACK in attacks}


def best_by_dose(run_dir: Path, model: str) -> dict[int, tuple[str, dict]]:
    """{dose: (attack, metrics)} of the attack with the highest AUC among those not marked degenerate: picked after
    the scores were seen, so a description of what the attacks reach, never a test."""
    out = {}
    for dose, attacks in _tiers(run_dir, model).items():
        usable = {name: m for name, m in attacks.items() if not m.get("degenerate") and "auc" in m}
        if usable:
            name = max(sorted(usable), key=lambda a: usable[a]["auc"]["value"])
            out[dose] = (name, usable[name])
    return out


def extraction_by_dose(run_dir: Path, model: str) -> list[dict]:
    """The route's extraction rates by dose, with intervals, as its dose finding (D1-D3) recorded them."""
    findings = json.loads((run_dir / "report" / "findings.json").read_text())["findings"]
    return next((f["rates"] for f in findings if f["id"] == RATE_FINDING[model]), [])


def verdict(designed: dict | None, sd: dict | None, gates: tuple[bool, bool]) -> tuple[str, str]:
    """The module docstring's rule at one seed and route: (status, why)."""
    if designed is None or sd is None:
        return INCONCLUSIVE, "no ε bound recorded"
    counts = [(e["m"], {d: b["m"] for d, b in (e.get("doses") or {}).items()}) for e in (designed, sd)]
    if counts[0] != counts[1]:
        raise SystemExit(f"the designed and SD runs bound {designed['m']} and {sd['m']} canaries (per dose: "
                         f"{counts[0][1]} and {counts[1][1]}): pair runs of one seed of "
                         "experiment=doses_designed_coins and experiment=doses_coins")
    if not all(gates):
        return INCONCLUSIVE, "a run's route failed its training gate"
    e_designed, e_sd = designed["epsilon_lower_bound"], sd["epsilon_lower_bound"]
    if e_designed == 0 and e_sd == 0:
        return INCONCLUSIVE, f"both bounds 0 (m = {sd['m']})"
    why = f"ε ≥ {e_designed:.3f} vs {e_sd:.3f} (m = {sd['m']})"
    return (HOLDS if e_designed > e_sd else FAILS), why


NOT_MEASURABLE = "n/m:"


def _tpr(metrics: dict) -> str:
    """TPR at 1 % FPR, marked n/m where the non-members are too few for that FPR to exist (the audit's flag)."""
    entry = metrics["tpr_at_fpr<1%"]
    return f"{'' if entry.get('measurable', True) else NOT_MEASURABLE + ' '}{entry['value']:.2f}"


def _eps(entry: dict | None) -> str:
    return "–" if entry is None else f"{entry['epsilon_lower_bound']:.2f} ({entry['v']}/{entry['r']} of {entry['m']})"


def _by_dose_cell(values: list[str]) -> str:
    return " / ".join(values) if values else "–"


def table(designed: list[Path], sd: list[Path]) -> str:
    pairs = paired_runs(designed, sd)
    lines = ["| route | canary | seed | extracted x1 / x4 / x16 (k/n [95 % interval]) | LOSS AUC x1 / x4 / x16 [TPR at 1 % "
             "FPR] | best attack x1 / x4 / x16: AUC [TPR at 1 % FPR] | ε ≥, all (v/r of m) | ε ≥ x1 / x4 / x16 (m) | "
             "trained |", "|---|---|---|---|---|---|---|---|---|"]
    verdicts: dict[str, list[tuple[int, str, str]]] = {m: [] for m in ROUTES}
    for seed, (d_run, s_run) in sorted(pairs.items()):
        for model in ROUTES:
            entries, gates = {}, {}
            for label, run in (("SD line", s_run), ("unigram secret", d_run)):
                entry = epsilon_entry(run, model)
                ok, why = trained(run, model)
                entries[label], gates[label] = entry, ok
                rates = [f"{r['k']}/{r['n']} [{100 * r['ci95'][0]:.0f}–{100 * r['ci95'][1]:.0f} %]"
                         for r in extraction_by_dose(run, model)]
                aucs = [f"{m['auc']['value']:.2f} [{_tpr(m)}]" for _, m in sorted(mia_by_dose(run, model).items())]
                best = [f"{name} {m['auc']['value']:.2f} [{_tpr(m)}]"
                        for _, (name, m) in sorted(best_by_dose(run, model).items())]
                doses = sorted(((entry or {}).get("doses") or {}).items(), key=lambda item: int(item[0]))
                eps = [f"{b['epsilon_lower_bound']:.2f} ({b['m']})" for _, b in doses]
                lines.append(f"| {model} | {label} | {seed} | {_by_dose_cell(rates)} | {_by_dose_cell(aucs)} | "
                             f"{_by_dose_cell(best)} | "
                             f"{_eps(entry)} | {_by_dose_cell(eps)} | {'yes' if ok else 'no'} ({why}) |")
            status, why = verdict(entries["unigram secret"], entries["SD line"],
                                  (gates["unigram secret"], gates["SD line"]))
            verdicts[model].append((seed, status, why))
    if any(NOT_MEASURABLE in line for line in lines[2:]):
        lines += ["", f"{NOT_MEASURABLE} TPR at 1 % FPR is not measurable with fewer than 100 non-members (the n/m rule, "
                      "memlens.harness.core.stats.fpr_measurable): the value is the TPR at FPR 0."]
    return "\n".join(lines + over_seed_lines(verdicts, "doses_epsilon", CLAIM))


def figure(designed: list[Path], sd: list[Path], path: Path) -> Path:
    """The Steinke ε lower bound (final checkpoint, sd_base) against dose: a panel per route, a line per run."""
    fig, axes = dose_panels()
    for ax, model in zip(axes[0], ROUTES):
        for runs, label, color, shift in drawn_lines(designed, sd):
            for run in runs:
                doses = sorted((((epsilon_entry(run, model) or {}).get("doses")) or {}).items(),
                               key=lambda item: int(item[0]))
                if doses:
                    ax.plot([int(d) * shift for d, _ in doses], [b["epsilon_lower_bound"] for _, b in doses],
                            marker="o", color=color, alpha=0.7, label=f"{label} seed {seed_of(run)}")
    return save_dose_figure(fig, axes, "one-run ε lower bound (Steinke 2023, 95 %)", path)


if __name__ == "__main__":
    sys.exit(compare(cli.parse_args(), table, figure))
