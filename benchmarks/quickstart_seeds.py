"""Findings of several runs of one experiment (one per seed) side by side: the tables of docs/results.md.

    memlens run experiment=quickstart                                   # seed 0 -> runs/quickstart
    memlens run experiment=quickstart seed=1 run_dir=runs/quickstart_seed1
    memlens run experiment=quickstart seed=2 run_dir=runs/quickstart_seed2
    python benchmarks/quickstart_seeds.py runs/quickstart runs/quickstart_seed1 runs/quickstart_seed2

    python benchmarks/quickstart_seeds.py --one runs/quickstart          # one run's findings, in full
    python benchmarks/quickstart_seeds.py --one runs/findings            # the same for experiment=findings
    python benchmarks/quickstart_seeds.py runs/findings_sd175 ... --ids F  # only the findings whose id starts with F

    python benchmarks/quickstart_seeds.py --mia runs/quickstart          # extraction beside membership inference
    python benchmarks/quickstart_seeds.py --attacks runs/quickstart ...  # the newer attacks and the sequence vs LOSS
    python benchmarks/quickstart_seeds.py --doses runs/doses runs/doses_seed1 ...  # rates and attacks per dose
    python benchmarks/quickstart_seeds.py --pair-doses runs/doses runs/doses_seed1 ...  # pair membership per dose
    python benchmarks/quickstart_seeds.py --prompt-doses runs/doses runs/doses_seed1 ...  # RL-prompt membership per dose
    python benchmarks/quickstart_seeds.py --measure discoverable runs/quickstart   # a registered measure's table
    python benchmarks/quickstart_seeds.py --measure epsilon runs/quickstart_coins --final   # final checkpoints only
    python benchmarks/quickstart_seeds.py --marks runs/quickstart --ids F1,F2,F3,F8,N   # the README's table:
                                      # a verdict mark and figure per seed, and where each run was computed
    python benchmarks/quickstart_seeds.py --rl runs/findings_rlvr runs/findings_rlvr_only_seed1 --models RLVR
                                      # each RL point's training evidence (reward, its AUC, reward rise, KL)
    python benchmarks/quickstart_seeds.py --pref runs/preference_objectives   # each preference model's fit and rates
    python benchmarks/quickstart_seeds.py --formal runs/formal_languages      # paper 004's formal study, L1-L7

    python benchmarks/quickstart_seeds.py --write docs/results.md [--root DIR] [--only "--marks,--rl"]

--write rebuilds every table of a markdown file that sits between
    <!-- BEGIN generated: python benchmarks/quickstart_seeds.py ARGS -->  and  <!-- END generated -->
by running ARGS (run directories relative to --root, default the current directory) and writes the file once
(atomically). A table whose run directories are not on this machine is kept as recorded, and said so; with --only,
so is every table whose arguments start with none of the given (comma-separated) texts.

Reads each run's report/findings.json (written by `memlens report`) and run.json (wall time), and
prints a markdown table: each finding's figure per seed and in how many seeds it holds, then the wall
seconds of each `memlens run` (with --one: one run's findings with p-values and the reason for every
verdict that is not `holds`). Nothing is recomputed: the numbers are the reports'.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # for the annotations; the functions import memlens where they use it, as the rest of this file does
    from memlens.harness.report.findings.verdict import FindingResult


def computed_where(run_dir: Path) -> str:
    """'commit abc1234 · AMD EPYC (x86_64, 2 cores) · torch kernels DEFAULT (pinned) · 2 threads' from run.json."""
    from memlens.harness.report.analyses import computed_on  # the report's own wording of a provenance record

    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
    commit = (run.get("git_commit") or "unknown")[:7] + ("-dirty" if str(run.get("git_commit")).endswith("-dirty") else "")
    return f"commit {commit} · {computed_on(run)}"


def marks_table(run_dirs: list[Path], prefixes: list[str] | None) -> str:
    """The README's table: per finding its claim, the paper's figure, per run a mark with this run's figure
    ('✓ 64.3 % [49–77] (27/42)'), and the verdict over the runs (harness/report/findings/verdict.py `over_seeds`:
    decided only where at least three seeds agree and no kernel rerun disagreed), then the commit and machine of
    each run."""
    from memlens.harness.report.findings.verdict import MIN_SEEDS, over_seeds  # the rule, defined once

    runs = [(d, *load_run(d)) for d in run_dirs]
    ids = [f.id for f in only_ids(runs[0][2], prefixes)]
    lines = ["| finding | paper | " + " | ".join(f"seed {seed}" for _, seed, _, _ in runs) + " | over the seeds |",
             "|---|---|" + ":-:|" * len(runs) + "---|"]
    for fid in ids:
        first = next(f for f in runs[0][2] if f.id == fid)
        cells, per_seed = [], []
        for _, _, findings, _ in runs:
            f = next((x for x in findings if x.id == fid), None)
            per_seed.append(f)
            cells.append("–" if f is None else f"{mark(f)} {f.ours if f.status != 'not measured' else ''}".strip())
        lines.append(f"| {fid} {first.claim} | {first.paper} | " + " | ".join(cells) + " | "
                     + seeds_cell(over_seeds(per_seed)) + " |")
    lines += ["", "✓ holds, ✗ not reproduced, ? inconclusive, ?~ inconclusive (unstable: the verdict changed when "
                  "the run was repeated on other CPU kernels), n/m not measured. Over the seeds: a verdict only where "
                  f"all of at least {MIN_SEEDS} seeds give it and no kernel rerun changed it, else ? with how many "
                  "seeds held, the spread of the rates and the values of every evidence gate that failed. Computed "
                  "on: " + "; ".join(f"seed {seed}: {computed_where(d)}" for d, seed, _, _ in runs) + "."]
    return "\n".join(lines)


def seeds_cell(verdict: dict) -> str:
    """'? 1/3 hold · 0.0–0.0 % vs 54.8–64.3 % · gate: RLFT.2 ... 0.38 / 1.1 / 0.2 (needs >= 0.5)'."""
    if verdict["status"] == "not measured":
        return "n/m"
    parts = [f"{MARKS.get(verdict['status'], 'n/m')} {verdict['held']}/{verdict['measured']} hold"]
    parts += [verdict["spread"]] if verdict["spread"] else []
    parts += [f"gate: {verdict['gates']}"] if verdict["gates"] else []
    parts += [verdict["reason"]] if verdict["reason"] and verdict["status"] == "inconclusive" and not verdict["gates"] \
        else []
    return " · ".join(parts).replace("|", "/")


def formal_table(run_dir: Path) -> str:
    """Paper 004's formal-language study (`memlens run experiment=formal_languages`): each finding L1-L7 with its
    mark and figure, then how close each language came to its entropy and where the run was computed."""
    from memlens.harness.report.findings.verdict import FindingResult  # the stored rows, read back

    findings = [FindingResult.from_dict(f)
                for f in json.loads((run_dir / "formal" / "report" / "findings.json").read_text())]
    per_seed = {seed: [FindingResult.from_dict(f) for f in rows] for seed, rows in
                json.loads((run_dir / "formal" / "report" / "findings_per_seed.json").read_text()).items()}
    summary = json.loads((run_dir / "formal" / "analysis" / "summary.json").read_text())
    lines = ["| finding | paper | " + " | ".join(f"seed {s}" for s in per_seed) + " | seeds pooled |",
             "|---|---|" + ":-:|" * len(per_seed) + "---|"]
    for i, f in enumerate(findings):
        why = f" — {f.reason}" if f.status != "holds" and f.reason else ""
        p = f" (p = {f.p_value:.2g})" if f.p_value is not None else ""
        seeds = " | ".join(mark(rows[i]) for rows in per_seed.values())
        lines.append(f"| {f.id} {f.claim} | {f.paper} | {seeds} | {mark(f)} {f.ours}{p}{why} |")
    gaps = {}
    for e in summary["entries"]:
        gaps.setdefault((e["language"], e["variant"]), []).append(e["learned_gap"])
    learned = ", ".join(f"{lang}/{variant} {max(v):+.3f}" for (lang, variant), v in gaps.items())
    lines += ["", f"✓ holds, ✗ not reproduced, ? inconclusive. Learned-language gap (worst seed's test loss at e* "
                  f"minus the test strings' entropy, nats/token): {learned}. Computed on: {computed_where(run_dir)}."]
    return "\n".join(lines)


def load_run(run_dir: Path) -> tuple[int | None, list[FindingResult], float | None]:
    """(seed, findings as FindingResult rows, wall seconds of the run) from a rendered run."""
    from memlens.harness.report.findings.verdict import FindingResult  # the stored rows, read back

    findings_file = run_dir / "report" / "findings.json"
    if not findings_file.is_file():
        raise SystemExit(f"{findings_file}: missing; run `memlens report run_dir={run_dir}` first")
    findings = [FindingResult.from_dict(f) for f in json.loads(findings_file.read_text())["findings"]]
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
    seconds = run.get("wall_seconds")          # the whole `memlens run` (data, training, audit, report)
    stages = run.get("stages") or []
    if stages and all(s.get("status") == "skipped" for s in stages):
        seconds = None                         # a rerun that trained nothing (a re-audit): not the run's cost
    return run.get("seed"), findings, seconds


def load_summary(run_dir: Path) -> dict:
    summary_file = run_dir / "report" / "summary.json"
    if not summary_file.is_file():
        raise SystemExit(f"{summary_file}: missing; run `memlens report run_dir={run_dir}` first")
    return json.loads(summary_file.read_text())


def only_ids(findings: list[FindingResult], prefixes: list[str] | None) -> list[FindingResult]:
    return [f for f in findings if not prefixes or any(f.id.startswith(p) for p in prefixes)]


def spread_table(runs: list[tuple[str, int | None, list[FindingResult], float | None]]) -> str:
    ids = [f.id for f in runs[0][2]]
    head = "| id | paper | " + " | ".join(f"seed {seed}" for _, seed, _, _ in runs) + " | holds in |"
    lines = [head, "|" + "---|" * (len(runs) + 3)]
    for fid in ids:
        cells, held, measured, paper = [], 0, 0, ""
        for _, _, findings, _ in runs:
            f = next((x for x in findings if x.id == fid), None)
            if f is None:
                cells.append("–")
                continue
            paper = f.paper
            cells.append(f"{f.ours} {mark(f)}")
            measured += f.status != "not measured"
            held += f.status == "holds"
        lines.append(f"| {fid} | {paper} | " + " | ".join(cells) + f" | {held}/{measured} |")
    lines += ["", "✓ holds, ✗ not reproduced, ? inconclusive (a stage it depends on did not train, or the "
                  "difference is within noise; report/findings.json says which), ?~ inconclusive because the verdict "
                  "changed under other CPU kernels (unstable), n/m not measured."]
    times = ", ".join(f"seed {seed}: {secs:.0f} s" for _, seed, _, secs in runs if secs is not None)
    reran = [str(seed) for _, seed, _, secs in runs if secs is None]
    note = (f"\n\nseed {', '.join(reran)}: the last `memlens run` trained nothing (a re-audit of finished models); "
            "its wall time is not the run's cost") if reran else ""
    return "\n".join(lines) + (f"\n\n`memlens run` wall time: {times}" if times else "") + note


def one_run_table(findings: list[FindingResult]) -> str:
    """One run's findings: figure with interval and n, p-value, status, and why it is not `holds`."""
    from memlens.harness.report.findings import status_label  # the report's own wording of a status

    lines = ["| id | finding | paper | this run | p | status | why |", "|---|---|---|---|---|---|---|"]
    for f in findings:
        p = f.p_value
        why = (f.reason or f.note).replace("|", "/")
        lines.append(f"| {f.id} | {f.claim} | {f.paper} | {f.ours} | "
                     f"{'–' if p is None else f'{p:.2g}'} | {status_label(f)} | {why} |")
    return "\n".join(lines)


def _pct(rate, ci) -> str:
    return "–" if rate is None else f"{100 * rate:.1f} % [{100 * ci[0]:.0f}–{100 * ci[1]:.0f}]"


def mia_table(run_dir: Path) -> str:
    """Extraction beside membership inference (report/summary.json `comparison_mia`, written when the audit ran
    `audit.measures=[...,mia]`): per model and dataset, the extraction rate with its interval and n, the best
    attack's AUC with its bootstrap interval and its TPR at FPR < 1 %, and the number of members / non-members."""
    from memlens.harness.core.stats import fpr_key, fpr_measurable, min_nonmembers  # a TPR at FPR < a, when it exists
    from memlens.harness.measures.mia import attack_label  # the registry's label, the one the report prints

    rows = load_summary(run_dir).get("comparison_mia") or []
    lines = ["| model | dataset | extraction [95 % CI] (n) | best attack | AUC [95 % CI] | TPR at FPR < 1 % | "
             "members / held out |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        auc = "–" if r.get("auc") is None else f"{r['auc']:.2f} [{r['auc_ci95'][0]:.2f}, {r['auc_ci95'][1]:.2f}]"
        tpr = r.get(fpr_key(0.01))
        if tpr is not None and not fpr_measurable(r.get("n_nonmembers") or 0, 0.01):
            tpr = f"n/m (< {min_nonmembers(0.01)} held out)"
        elif tpr is not None:
            tpr = f"{tpr:.2f}"
        lines.append(f"| {r['model']} | {r['dataset']} | {_pct(r.get('rate'), r.get('ci95'))} ({r.get('n_scored')}) | "
                     f"{attack_label(r['best_attack']) if r.get('best_attack') else '–'} | {auc} | "
                     f"{'–' if tpr is None else tpr} | {r.get('n_members')} / {r.get('n_nonmembers')} |")
    return "\n".join(lines)


def doses_table(run_dirs: list[Path]) -> str:
    """Memorization against dose (experiment=doses, data.sd.doses), per run, model, dataset and dose: the final
    checkpoint's extraction rate with its interval and n (report/summary.json `breakdowns`, by `repeat`); LOSS, the
    attack fixed in advance, on that dose's members against every non-member (audit/mia's `tiers`, target span); and
    the best of all attacks there, picked after the fact (so biased upward: read it beside LOSS), with its AUC
    interval and its TPR at FPR < 1 % ("n/m" where there are too few non-members for that FPR)."""
    from memlens.harness.core.stats import fpr_key, min_nonmembers  # the TPR's key and when it exists
    from memlens.harness.measures.mia import attack_label, best_attack  # the report's own pick and label
    from memlens.harness.report.analyses import load_mia, mia_entry  # the stored MIA summary, as the report reads it

    lines = ["| run | model | dataset | dose | extraction [95 % CI] (n) | LOSS AUC [95 % CI] | best attack: AUC [95 % CI] | "
             "TPR at FPR < 1 % |", "|---|---|---|---|---|---|---|---|"]
    for run_dir in run_dirs:
        breakdowns = [b for b in load_summary(run_dir).get("breakdowns") or [] if b["by"] == "repeat"]
        mia = load_mia(run_dir / "audit")
        for b in sorted(breakdowns, key=lambda b: (b["model"], b["dataset"], b["value"])):
            entry = mia_entry(mia, b["model"], b["dataset"])
            tiers = (((mia.get(b["model"]) or {}).get("results") or {}).get(b["checkpoint"]) or {}) \
                .get(b["dataset"], {}).get("tiers", {})
            at_dose = ((tiers.get(str(b["value"])) or {}).get("target") or {}) if entry else {}
            best = best_attack(at_dose)
            loss = at_dose.get("loss")
            loss_auc = "–" if loss is None else \
                f"{loss['auc']['value']:.2f} [{loss['auc']['ci95'][0]:.2f}, {loss['auc']['ci95'][1]:.2f}]"
            auc = tpr = "–"
            if best is not None:
                attack, m = best
                auc = f"{attack_label(attack)}: {m['auc']['value']:.2f} [{m['auc']['ci95'][0]:.2f}, {m['auc']['ci95'][1]:.2f}]"
                t = m[fpr_key(0.01)]
                tpr = f"{t['value']:.2f}" if t.get("measurable") else f"n/m (< {min_nonmembers(0.01)} held out)"
            lines.append(f"| {run_dir.name} | {b['model']} | {b['dataset']} | x{b['value']} | "
                         f"{_pct(b['rate'], b['ci95'])} ({b['n_scored']}) | {loss_auc} | {auc} | {tpr} |")
    return "\n".join(lines)


def membership_doses_table(run_dirs: list[Path], measure: str) -> str:
    """Membership against dose (experiment=doses; findings D4, D5): per run and model of `measure` (pair_mia: IPO's
    pairs_sd_base; prompt_mia: the RL stages' sd_base prompts), each dose's members against every held-out example
    (the measure's `tiers`, final checkpoint), its primary attack (fixed in advance) with its AUC interval and TPR at
    FPR < 1 %, and the one-sided Jonckheere-Terpstra p that the members' scores rise with dose (`dose_trend`)."""
    from memlens.harness.core.stats import fpr_key, min_nonmembers  # the TPR's key and when it exists
    from memlens.harness.measures.preference_mia import PRIMARY_PAIR_ATTACK, pair_attack_label
    from memlens.harness.measures.prompt_mia import PRIMARY_PROMPT_ATTACK, prompt_attack_label
    from memlens.harness.report.analyses import load_pair_mia, load_prompt_mia, membership_entry  # as the report

    load, dataset, attack, label = {
        "pair_mia": (load_pair_mia, "pairs_sd_base", PRIMARY_PAIR_ATTACK, pair_attack_label(PRIMARY_PAIR_ATTACK)),
        "prompt_mia": (load_prompt_mia, "sd_base", PRIMARY_PROMPT_ATTACK, prompt_attack_label(PRIMARY_PROMPT_ATTACK)),
    }[measure]
    lines = [f"| run | model | dose | members | held out | {label} AUC [95 % CI] | TPR at FPR < 1 % | "
             "trend p (scores rise with dose) |", "|---|---|---|---|---|---|---|---|"]
    for run_dir in run_dirs:
        summaries = load(run_dir / "audit")
        for model in sorted(summaries):
            found = membership_entry(summaries, model, dataset)
            tiers = (found or (None, {}))[1].get("tiers") or {}
            trend = ((found or (None, {}))[1].get("dose_trend") or {}).get(attack) or {}
            for dose in sorted(tiers, key=int):
                m = tiers[dose][attack]
                t = m[fpr_key(0.01)]
                tpr = f"{t['value']:.2f}" if t.get("measurable") else f"n/m (< {min_nonmembers(0.01)} held out)"
                lines.append(f"| {run_dir.name} | {model} ({found[0]}) | x{dose} | {m['n_members']} | "
                             f"{m['n_nonmembers']} | {m['auc']['value']:.2f} [{m['auc']['ci95'][0]:.2f}, "
                             f"{m['auc']['ci95'][1]:.2f}] | {tpr} | {trend.get('p_value', float('nan')):.3g} |")
    return "\n".join(lines)


def attacks_table(run_dirs: list[Path], dataset: str = "sd_base") -> str:
    """The newer attacks against LOSS, per run and audited model (report/summary.json `membership_inference`, target
    span, final checkpoint): LOSS's AUC, the newer attack with the highest AUC and its paired gain over LOSS with the
    bootstrap interval (Bonferroni-free: finding M4 corrects), and the best sequence attack against the best
    single-checkpoint attack (`membership_inference_sequence`)."""
    from memlens.harness.measures.mia import CLASSIC_ATTACKS  # the attacks the newer ones are set against

    def fmt(x, ci):
        return f"{x:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"

    lines = ["| run | model | LOSS AUC | best newer attack (AUC) | gain over LOSS [95 % CI] | best sequence (AUC) vs "
             "best single (AUC) | sequence gain [95 % CI] | members / held out |", "|---|---|---|---|---|---|---|---|"]
    for run_dir in run_dirs:
        summary = load_summary(run_dir)
        rows = [r for r in summary.get("membership_inference") or [] if r["dataset"] == dataset and r["span"] == "target"]
        sequence = {r["model"]: r for r in sorted(summary.get("membership_inference_sequence") or [],
                                                   key=lambda r: r["auc"]) if r["dataset"] == dataset
                    and r["span"] == "target"}
        for model in sorted({r["model"] for r in rows}):
            mine = {r["attack"]: r for r in rows if r["model"] == model}
            newer = [r for a, r in mine.items() if a not in CLASSIC_ATTACKS and r.get("auc_vs_loss") is not None]
            best = max(newer, key=lambda r: r["auc"], default=None)
            loss = mine.get("loss")    # absent where the report listed LOSS as degenerate (not ranked, issue #68)
            best_row = loss or next(iter(mine.values()))
            seq = sequence.get(model)
            lines.append(
                f"| {run_dir.name} | {model} | {'degenerate' if loss is None else format(loss['auc'], '.2f')} | "
                + (f"{best['attack_label']} ({best['auc']:.2f}) | {fmt(best['auc_vs_loss'], best['auc_vs_loss_ci95'])}"
                   if best else "– | –")
                + (f" | {seq['attack_label']} ({seq['auc']:.2f}) vs {seq['best_single']} ({seq['best_single_auc']:.2f})"
                   f" | {fmt(seq['gain'], seq['gain_ci95'])}" if seq else " | – | –")
                + f" | {best_row['n_members']} / {best_row['n_nonmembers']} |")
    return "\n".join(lines)


def measure_table(name: str, run_dir: Path, final_only: bool = False) -> str:
    """A registered audit measure's report table (its `report_rows`, harness/audit/measure_registry.py: e.g. discoverable,
    epsilon) read back from the run's audit directory, as markdown: the numbers the report prints. `final_only`
    keeps the final checkpoint's rows of a table that lists every checkpoint (and drops that column)."""
    from memlens.harness.audit.measure_registry import MEASURES  # the registry loads its built-in measures itself
    from memlens.harness.core.layout import default_audit_dir

    if name not in MEASURES or MEASURES[name].report_rows is None:
        raise SystemExit(f"--measure {name}: use one of {', '.join(MEASURES.where(lambda m: m.report_rows))}")
    got = MEASURES[name].report_rows(default_audit_dir(run_dir))
    if got is None:
        raise SystemExit(f"{run_dir}: the audit holds no {name} results; run `memlens audit experiment=... "
                         f"run_dir={run_dir} audit.measures=[...,{name}]` first")
    columns, rows = got
    if final_only and "checkpoint" in columns:
        rows = [r for r in rows if r["checkpoint"] == "final"]
        columns = [c for c in columns if c != "checkpoint"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("–" if r.get(c) is None else str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def _held_out_auc(point: dict, reward_models: list[dict]) -> float | None:
    """The reward's ranking of held-out labelled rows: the function's (stored with the point) or the reward
    model's `eval` split."""
    if point.get("reward_heldout_auc") is not None:
        return point["reward_heldout_auc"]
    aucs = [r["auc"] for r in reward_models if r.get("reward_model") == point.get("reward_model")
            and r.get("split") == "eval" and r.get("auc") is not None]
    return min(aucs) if aucs else None


def rl_table(run_dirs: list[Path], prefixes: list[str] | None) -> str:
    """Per RL point of each run (report/summary.json `training`), the evidence its findings read: the reward and
    its held-out AUC, the reward rise on the fixed prompts in initial spreads, prompts up / down with the sign
    test's p, and the final KL to the reference."""
    lines = ["| seed | model | reward | held-out AUC | reward rise (initial sd) | prompts up / down (p) | "
             "final KL (nats/token) |", "|---|---|---|---|---|---|---|"]
    for run_dir in run_dirs:
        seed = load_run(run_dir)[0]
        training = load_summary(run_dir).get("training") or {}
        for point in sorted(training.get("rl") or [], key=lambda p: p["model"]):
            if prefixes and not any(point["model"].startswith(x) for x in prefixes):
                continue
            auc, rise, kl, p = (_held_out_auc(point, training.get("reward_models") or []),
                                point.get("eval_change_in_sd"), point.get("kl_final"), point.get("eval_p_value"))
            lines.append(f"| {seed} | {point['model']} | {point.get('reward_function') or point.get('reward_model')} | "
                         f"{'–' if auc is None else f'{auc:.2f}'} | {'–' if rise is None else f'{rise:+.2f}'} | "
                         f"{point.get('eval_up')} / {point.get('eval_down')} ({'–' if p is None else f'{p:.2g}'}) | "
                         f"{'–' if kl is None else f'{kl:.3f}'} |")
    return "\n".join(lines)


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}"


def pref_table(run_dir: Path) -> str:
    """Per preference model (report/summary.json `training.ipo`, recipes/stages/preference_eval.py): how well it fit its
    pairs (pair accuracy with its Wilson interval and n; the mean change of the chosen and the rejected completion's
    summed log-probability from the initial model) beside its final memorization rate on each audited SD set."""
    summary = load_summary(run_dir)
    rates = {(r["model"], r["dataset"]): r for r in summary.get("comparison") or []}
    datasets = sorted({d for _, d in rates if d.startswith("sd_")})
    lines = ["| model | objective | pair accuracy [95 % CI] (n) | Δ chosen / Δ rejected log-prob (nats) | "
             + " | ".join(datasets) + " |", "|---|---|---|---|" + "---|" * len(datasets)]
    for m in sorted((summary.get("training", {}).get("preference") or summary.get("training", {}).get("ipo") or []), key=lambda m: m["model"]):
        acc, ci, n = m.get("pair_accuracy"), m.get("pair_accuracy_ci95") or [0, 0], m.get("pair_n")
        fit = "–" if acc is None else f"{acc:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] ({n})"
        cells = [f"{_pct(r['rate'], r['ci95'])} ({r['n_scored']})" if (r := rates.get((m["model"], d))) else "–"
                 for d in datasets]
        lines.append(f"| {m['model']} | {m.get('objective') or 'ipo'} | {fit} | "
                     f"{_signed(m.get('pair_chosen_change'))} / {_signed(m.get('pair_rejected_change'))} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


MARKS = {"holds": "✓", "not reproduced": "✗", "inconclusive": "?"}


def mark(finding: FindingResult) -> str:
    """A finding's verdict as one mark; '?~' where it is inconclusive because it was unstable."""
    return "?~" if finding.unstable else MARKS.get(finding.status, "n/m")


def table_for(args: list[str], root: Path) -> str:
    """The table one command line prints (`--one RUN` or `RUN ...`, optionally `--ids F,N`; `--rl RUN ...`,
    optionally `--models RLVR,RLFT`)."""
    ids = models = None
    if "--ids" in args:
        i = args.index("--ids")
        ids, args = args[i + 1].split(","), args[:i] + args[i + 2:]
    if "--models" in args:
        i = args.index("--models")
        models, args = args[i + 1].split(","), args[:i] + args[i + 2:]
    if args[0] == "--pref":
        return pref_table(root / args[1])
    if args[0] == "--rl":
        return rl_table([root / a for a in args[1:]], models)
    if args[0] == "--mia":
        return mia_table(root / args[1])
    if args[0] == "--attacks":
        return attacks_table([root / a for a in args[1:]])
    if args[0] == "--doses":
        return doses_table([root / a for a in args[1:]])
    if args[0] == "--pair-doses":
        return membership_doses_table([root / a for a in args[1:]], "pair_mia")
    if args[0] == "--prompt-doses":
        return membership_doses_table([root / a for a in args[1:]], "prompt_mia")
    if args[0] == "--measure":
        return measure_table(args[1], root / args[2], final_only="--final" in args)
    if args[0] == "--formal":
        return formal_table(root / args[1])
    if args[0] == "--marks":
        return marks_table([root / a for a in args[1:]], ids)
    if args[0] == "--one":
        return one_run_table(only_ids(load_run(root / args[1])[1], ids))
    runs = []
    for p in args:
        seed, findings, seconds = load_run(root / p)
        runs.append((p, seed, only_ids(findings, ids), seconds))
    return spread_table(runs)


# A block's body never crosses another marker, so an empty block (BEGIN then END on the next line, as a new one
# is written) is rebuilt in place instead of swallowing the text up to the next block's END.
GENERATED = re.compile(r"(<!-- BEGIN generated: python benchmarks/quickstart_seeds\.py (?P<args>[^>]*?) -->\n)"
                       r"(?P<body>(?:(?!<!-- (?:BEGIN|END) generated).)*?)\n?(<!-- END generated -->)", re.S)


def write_generated(doc: Path, root: Path, only: str | None = None) -> int:
    """Rebuild every marked table of `doc` whose runs exist under `root` (and whose arguments start with `only`, when
    given: a run directory can exist without the measure another table reads); keep (and name) the others."""
    from memlens.harness.core.io import atomic_write_text  # the project's one atomic write

    text = doc.read_text(encoding="utf-8")
    rebuilt, kept = [], []

    def replace(match: re.Match) -> str:
        args = shlex.split(match["args"])
        if only is not None and not match["args"].startswith(tuple(only.split(","))):
            kept.append(f"{match['args']} (not selected by --only)")
            return match.group(0)
        missing = [a for a in args if not a.startswith("--") and "/" in a and not (root / a).is_dir()]
        if missing:
            kept.append(f"{match['args']} (not here: {', '.join(missing)})")
            return match.group(0)
        rebuilt.append(match["args"])
        return match.group(1) + table_for(args, root) + "\n" + match.group(4)

    new = GENERATED.sub(replace, text)
    if not rebuilt and not kept:
        raise SystemExit(f"{doc}: no `<!-- BEGIN generated: python benchmarks/quickstart_seeds.py ... -->` block")
    if new != text:
        atomic_write_text(doc, new)
    for args in rebuilt:
        print(f"rebuilt: {args}")
    for args in kept:
        print(f"kept as recorded: {args}")
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    root = Path(".")
    if "--root" in argv:
        i = argv.index("--root")
        root, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2:]
    only = None
    if "--only" in argv:
        i = argv.index("--only")
        only, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if argv[0] == "--write":
        return write_generated(Path(argv[1]), root, only)
    print(table_for(argv, root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
