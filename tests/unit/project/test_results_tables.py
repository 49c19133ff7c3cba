"""`python benchmarks/quickstart_seeds.py --write docs/results.md` rebuilds the marked tables from run directories
(report/findings.json, run.json as `memlens report` and `memlens run` write them), keeps a table whose runs are
absent, and leaves the rest of the page untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "quickstart_seeds.py"


def _module():
    return load_script("quickstart_seeds")


def _finding(fid, status, ours, p=None, reason=""):
    """A row as report/findings.json stores it (FindingResult.as_dict())."""
    return {"id": fid, "claim": f"claim {fid}", "paper": "17.6 %", "ours": ours, "status": status, "rule": "",
            "stages": [], "evidence": [], "rates": [], "n": None, "ci95": None, "p_value": p,
            "test": None if p is None else {"p_value": p}, "reason": reason, "note": "", "unstable": False}


def _run(root: Path, name: str, seed: int, findings: list[dict], seconds: float) -> None:
    (root / name / "report").mkdir(parents=True)
    (root / name / "report" / "findings.json").write_text(json.dumps({"findings": findings}))
    (root / name / "run.json").write_text(json.dumps({"seed": seed, "wall_seconds": seconds}))


def test_write_rebuilds_marked_tables_and_keeps_those_without_runs(tmp_path):
    _run(tmp_path, "runs/q", 0, [_finding("F1", "holds", "64.3 % [49–77] (27/42)", 1.5e-8),
                                  _finding("N1", "inconclusive", "13.5 %", 0.88, "within noise")], 807)
    _run(tmp_path, "runs/q_seed1", 1, [_finding("F1", "not reproduced", "0.0 % [0–9] (0/41)", 1.0),
                                        _finding("N1", "holds", "15 %")], 782)
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\nkept prose\n\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --one runs/q -->\nold table\n"
                   "<!-- END generated -->\n\nmiddle\n\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py runs/q runs/q_seed1 --ids F -->\n"
                   "old spread\n<!-- END generated -->\n\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --one runs/gone -->\nrecorded\n"
                   "<!-- END generated -->\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--write", str(doc), "--root", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    text = doc.read_text()
    assert "rebuilt: --one runs/q" in out and "kept as recorded: --one runs/gone" in out
    assert "old table" not in text and "old spread" not in text and "recorded\n" in text
    assert "kept prose" in text and "middle" in text
    assert "| F1 | claim F1 | 17.6 % | 64.3 % [49–77] (27/42) | 1.5e-08 | holds |  |" in text
    assert "| N1 | claim N1 | 17.6 % | 13.5 % | 0.88 | inconclusive | within noise |" in text
    spread = text.split("--ids F -->\n")[1].split("<!-- END")[0]
    assert "| F1 | 17.6 % | 64.3 % [49–77] (27/42) ✓ | 0.0 % [0–9] (0/41) ✗ | 1/2 |" in spread
    assert "N1" not in spread and "seed 0: 807 s, seed 1: 782 s" in spread
    # The same runs give the same page: rebuilding twice changes nothing.
    subprocess.run([sys.executable, str(SCRIPT), "--write", str(doc), "--root", str(tmp_path)], check=True,
                   capture_output=True)
    assert doc.read_text() == text


def test_only_rebuilds_the_selected_tables(tmp_path):
    """`--only "--marks"`: a run directory may exist without the measure another table reads (the seed runs have no
    MIA audit), so only the selected tables are rebuilt; the marks table gets the verdict over the seeds."""
    for i in range(3):
        _run(tmp_path, f"runs/q{i}", i, [{**_finding("F1", "holds", f"6{i}.0 % (n)"), "unstable": False,
                                          "evidence": [], "rates": [{"rate": 0.6 + i / 100}]}], 800)
    doc = tmp_path / "README.md"
    doc.write_text("<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --marks runs/q0 runs/q1 runs/q2 -->\n"
                   "old\n<!-- END generated -->\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --mia runs/q0 -->\nrecorded mia\n"
                   "<!-- END generated -->\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--write", str(doc), "--root", str(tmp_path), "--only",
                          "--marks"], capture_output=True, text=True, check=True).stdout
    text = doc.read_text()
    assert "kept as recorded: --mia runs/q0 (not selected by --only)" in out and "recorded mia" in text
    assert "| F1 claim F1 | 17.6 % | ✓ 60.0 % (n) | ✓ 61.0 % (n) | ✓ 62.0 % (n) | ✓ 3/3 hold · 60.0–62.0 % |" in text


def test_results_md_marks_every_recorded_findings_table():
    """Each findings table of docs/results.md sits in a marked block the command can rebuild."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    blocks = _module().GENERATED.findall(text)
    assert len(blocks) == 29                  # + the discoverable and epsilon tables, the formal-language study, seeds 0-2' RL,
    #                                           the newer attacks against LOSS, M1-M4 over seeds, the Xeon's seeds
    #                                           (findings and RL), experiment=doses (its findings and its doses), and
    #                                           M5 over seeds with seed 0's pair-membership table, and D4's pairs
    #                                           and D5's prompts per dose, and M6 over seeds with seed 0's
    #                                           prompt-membership table, and each preference objective's pairs,
    #                                           and experiment=doses_designed's findings
    outside = _module().GENERATED.sub("", text)
    assert "| id | finding | paper | this run |" not in outside and "| id | paper | seed 0 |" not in outside


def test_rl_table_reads_each_points_evidence_and_the_reward_models_held_out_auc(tmp_path):
    """`--rl RUN ... --models PREFIX`: one row per RL point of each run, a function's AUC from the point, a reward
    model's from its `eval` split (not its training rows), filtered by model-name prefix."""
    _run(tmp_path, "runs/a", 0, [], 100)
    _run(tmp_path, "runs/b", 1, [], 100)
    point = {"eval_change_in_sd": 0.933, "eval_up": 38, "eval_down": 10, "eval_p_value": 6.17e-05, "kl_final": 0.1727}
    training = {"reward_models": [{"reward_model": "RM.1", "split": "train", "auc": 0.98},
                                  {"reward_model": "RM.1", "split": "eval", "auc": 0.519}],
                "rl": [{**point, "model": "RLVR.4/lr=3e-4", "reward_function": "identifier_reuse",
                        "reward_heldout_auc": 0.8546},
                       {**point, "model": "RLFT.1/beta=0.1", "reward_model": "RM.1", "eval_change_in_sd": -0.0294}]}
    for name in ("runs/a", "runs/b"):
        (tmp_path / name / "report" / "summary.json").write_text(json.dumps({"training": training}))
    table = _module().table_for(["--rl", "runs/a", "runs/b"], tmp_path)
    assert "| 0 | RLVR.4/lr=3e-4 | identifier_reuse | 0.85 | +0.93 | 38 / 10 (6.2e-05) | 0.173 |" in table
    assert "| 1 | RLFT.1/beta=0.1 | RM.1 | 0.52 | -0.03 | 38 / 10 (6.2e-05) | 0.173 |" in table
    only = _module().table_for(["--rl", "runs/a", "--models", "RLVR"], tmp_path)
    assert "RLVR.4" in only and "RLFT.1" not in only and only.count("\n") == 2


def test_pref_table_puts_each_objectives_fit_beside_its_rates(tmp_path):
    """`--pref RUN`: per preference model its pair accuracy (interval, n), the chosen / rejected log-prob change,
    and its final rate on every audited SD set (a set it was not audited on reads –)."""
    _run(tmp_path, "runs/p", 0, [], 100)
    summary = {"training": {"ipo": [{"model": "PREF/objective=dpo", "objective": "dpo", "pair_accuracy": 1.0,
                                     "pair_accuracy_ci95": [0.9408, 1.0], "pair_n": 61, "pair_chosen_change": 32.58,
                                     "pair_rejected_change": -19.69}]},
               "comparison": [{"model": "PREF/objective=dpo", "dataset": "sd_base", "rate": 0.0,
                               "ci95": [0.0, 0.084], "n_scored": 42},
                              {"model": "FT.3", "dataset": "sd_links_pos", "rate": 0.5, "ci95": [0.3, 0.7],
                               "n_scored": 18},
                              {"model": "FT.3", "dataset": "pd_eval", "rate": 0.0, "ci95": [0, 0.06], "n_scored": 60}]}
    (tmp_path / "runs/p/report/summary.json").write_text(json.dumps(summary))
    table = _module().table_for(["--pref", "runs/p"], tmp_path)
    assert table.splitlines()[0].endswith("| sd_base | sd_links_pos |")        # SD sets only, not pd_eval
    assert "| PREF/objective=dpo | dpo | 1.00 [0.94, 1.00] (61) | +32.6 / -19.7 | 0.0 % [0–8] (42) | – |" in table
    assert "FT.3" not in table


def test_an_empty_block_is_filled_in_place_and_keeps_the_text_after_it(tmp_path):
    """A block just written (BEGIN, then END on the next line) is rebuilt where it stands; the prose and the blocks
    after it stay (the first version of the pattern let an empty block's body run to the next block's END)."""
    _run(tmp_path, "runs/q", 0, [_finding("F1", "holds", "64.3 %", 1.5e-8)], 807)
    doc = tmp_path / "results.md"
    doc.write_text("<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --one runs/q -->\n"
                   "<!-- END generated -->\n\n## Next section\n\nprose kept\n\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --one runs/gone -->\n"
                   "<!-- END generated -->\n")
    subprocess.run([sys.executable, str(SCRIPT), "--write", str(doc), "--root", str(tmp_path)], check=True,
                   capture_output=True)
    text = doc.read_text()
    assert "## Next section\n\nprose kept" in text
    assert text.count("<!-- BEGIN generated") == 2 and text.count("<!-- END generated -->") == 2
    first = text.split("--one runs/q -->\n")[1].split("<!-- END")[0]
    assert "| F1 | claim F1 | 17.6 % | 64.3 % | 1.5e-08 | holds |  |\n" == first.splitlines(keepends=True)[-1]
    assert "--one runs/gone -->\n<!-- END generated -->" in text          # absent runs: kept as it was


def test_a_registered_measures_table_reads_what_the_audit_wrote(tmp_path):
    """`--measure epsilon RUN [--final]`: the measure's own report rows (harness/audit/epsilon.py) as markdown;
    --final keeps the final checkpoint and drops the column; an unknown measure or one not run says so."""
    qs = _module()
    audit = tmp_path / "runs" / "q" / "audit"
    bound = {"m": 86, "r": 8, "v": 8, "epsilon_lower_bound": 1.2345, "delta": 1e-05}
    (audit / "mia" / "FT.3").mkdir(parents=True)
    (audit / "mia" / "FT.3" / "summary.json").write_text("{}")
    (audit / "epsilon" / "FT.3").mkdir(parents=True)
    (audit / "epsilon" / "FT.3" / "summary.json").write_text(json.dumps({
        "model": "FT.3", "checkpoints": ["checkpoint-10", "final"],
        "results": {"checkpoint-10": {"sd_base": {**bound, "epsilon_lower_bound": 0.0}}, "final": {"sd_base": bound}}}))
    every = qs.table_for(["--measure", "epsilon", "runs/q"], tmp_path).splitlines()
    assert every[0] == "| model | checkpoint | dataset | m | guesses r | correct v | ε lower bound | δ |"
    assert len(every) == 4 and every[3] == "| FT.3 | final | sd_base | 86 | 8 | 8 | 1.234 | 1e-05 |"
    final = qs.table_for(["--measure", "epsilon", "runs/q", "--final"], tmp_path).splitlines()
    assert final == ["| model | dataset | m | guesses r | correct v | ε lower bound | δ |", "|---|---|---|---|---|---|---|",
                     "| FT.3 | sd_base | 86 | 8 | 8 | 1.234 | 1e-05 |"]
    with pytest.raises(SystemExit, match=r"--measure ned: use one of discoverable, epsilon"):
        qs.table_for(["--measure", "ned", "runs/q"], tmp_path)
    with pytest.raises(SystemExit, match=r"the audit holds no discoverable results"):
        qs.table_for(["--measure", "discoverable", "runs/q"], tmp_path)


def test_attacks_table_sets_the_best_newer_attack_and_the_sequence_against_their_baselines(tmp_path):
    """`--attacks RUN ...`: per run and model (sd_base, target span), LOSS's AUC, the newer attack with the highest AUC
    with its paired gain over LOSS, and the best sequence attack against the best single-checkpoint attack."""
    def row(attack, label, auc, gain=None):
        return {"model": "IPO", "dataset": "sd_base", "span": "target", "attack": attack, "attack_label": label,
                "auc": auc, "auc_vs_loss": gain, "auc_vs_loss_ci95": None if gain is None else [gain - 0.1, gain + 0.1],
                "n_members": 40, "n_nonmembers": 40}
    rows = [row("loss", "LOSS", 0.6), row("zlib", "zlib", 0.9, 0.3), row("recall", "ReCaLL", 0.7, 0.1),
            row("ez_mia", "EZ-MIA", 0.65, 0.05), {**row("recall", "ReCaLL", 0.99, 0.2), "span": "program"}]
    sequence = [{"model": "IPO", "dataset": "sd_base", "span": "target", "attack": "sequence_loss",
                 "attack_label": "sequence (LOSS)", "auc": 0.62, "best_single": "zlib", "best_single_auc": 0.9,
                 "gain": -0.28, "gain_ci95": [-0.4, -0.1]}]
    (tmp_path / "runs" / "a" / "report").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "report" / "summary.json").write_text(json.dumps(
        {"membership_inference": rows, "membership_inference_sequence": sequence}))
    table = _module().table_for(["--attacks", "runs/a"], tmp_path)
    # zlib is a classic attack: the best *newer* one is ReCaLL (the program span's row is not read)
    assert ("| a | IPO | 0.60 | ReCaLL (0.70) | +0.10 [+0.00, +0.20] | sequence (LOSS) (0.62) vs zlib (0.90) | "
            "-0.28 [-0.40, -0.10] | 40 / 40 |") in table


def test_doses_table_puts_each_doses_extraction_beside_its_members_best_attack(tmp_path):
    """`--doses RUN ...`: per model, dataset and dose the final breakdown by `repeat` (rate, interval, n), LOSS (fixed in
    advance) and the best not-degenerate attack on that dose's members (audit/mia tiers, target span); a TPR at
    FPR < 1 % with fewer than 100 non-members reads n/m."""
    _run(tmp_path, "runs/d", 0, [], 100)
    summary = {"breakdowns": [
        {"model": "FT.3", "checkpoint": "final", "dataset": "sd_base", "by": "repeat", "value": 16, "n_scored": 14,
         "n_memorized": 14, "rate": 1.0, "ci95": [0.78, 1.0], "n_excluded": 0},
        {"model": "FT.3", "checkpoint": "final", "dataset": "sd_base", "by": "repeat", "value": 1, "n_scored": 15,
         "n_memorized": 0, "rate": 0.0, "ci95": [0.0, 0.2], "n_excluded": 0},
        {"model": "FT.3", "checkpoint": "final", "dataset": "sd_base", "by": "group", "value": None, "n_scored": 29,
         "n_memorized": 14, "rate": 0.48, "ci95": [0.3, 0.7], "n_excluded": 0}]}
    (tmp_path / "runs/d/report/summary.json").write_text(json.dumps(summary))

    def metrics(auc):
        return {"auc": {"value": auc, "ci95": [auc - 0.1, min(1.0, auc + 0.05)]}, "n_members": 14, "n_nonmembers": 42,
                "tpr_at_fpr<1%": {"value": 0.5, "measurable": False}}
    tiers = {"1": {"target": {"loss": metrics(0.6), "zlib": metrics(0.7)}}, "16": {"target": {"loss": metrics(1.0)}}}
    from memlens.harness.core.stats import TPR_AT_FPR_RULE  # the rule a summary must carry to be read

    mia = {"results": {"FT.3": {"tpr_at_fpr_rule": TPR_AT_FPR_RULE, "results": {
        "final": {"sd_base": {"spans": {"target": {"loss": metrics(0.8)}}, "tiers": tiers}}}}}}
    (tmp_path / "runs/d/audit/mia").mkdir(parents=True)
    (tmp_path / "runs/d/audit/mia/summary.json").write_text(json.dumps(mia))
    lines = _module().table_for(["--doses", "runs/d"], tmp_path).splitlines()
    assert len(lines) == 4                                                  # the header, its rule, two doses in order
    assert lines[2] == ("| d | FT.3 | sd_base | x1 | 0.0 % [0–20] (15) | 0.60 [0.50, 0.65] | zlib: 0.70 [0.60, 0.75] | "
                        "n/m (< 100 held out) |")
    assert lines[3].startswith("| d | FT.3 | sd_base | x16 | 100.0 % [78–100] (14) | 1.00 [0.90, 1.00] | LOSS: 1.00 [0.90, 1.00] |")
