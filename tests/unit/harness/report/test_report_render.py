"""`memlens report` on a hand-built run directory: files exist and the numbers equal the rows."""

import json
import random

import pytest

from memlens.harness.cli import run
from memlens.harness.core.errors import UserError
from memlens.harness.measures.memorization import summarize_rows
from tests.chromium import LAYOUT_JS, Chromium, chromium_or_skip


def _write_rows(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(rng, n, p_mem, with_pii=False):
    rows = []
    for i in range(n):
        mem = rng.random() < p_mem
        ned = rng.uniform(0, 0.1) if mem else rng.uniform(0.1, 1)
        r = {"id": f"ex{i}", "ned": ned, "control_ned": rng.uniform(0.2, 1), "memorized": mem,
             "excluded": "short_target" if i % 10 == 0 else None}
        if r["excluded"]:
            r["memorized"] = False
        if with_pii:
            r["pii_regurgitated"] = mem
        rows.append(r)
    return rows


@pytest.fixture()
def fake_run(tmp_path):
    rng = random.Random(0)
    run_dir = tmp_path / "run"
    models = {"FT.1": ("sft", None), "FT.2": ("sft", None), "RLFT.1/beta=0.1": ("rl", "FT.1"),
              "RLFT.1/beta=0.5": ("rl", "FT.1"), "IPO": ("ipo", None), "RM.1": ("reward", "FT.1")}
    for name, (stage, init) in models.items():
        d = run_dir / "models" / name
        d.mkdir(parents=True)
        (d / "provenance.json").write_text(json.dumps({
            "stage": stage, "init_model": str(run_dir / "models" / init) if init else None,
            "settings": {"lr": 1e-3}, "datasets": {"sd_base": "abc"}, "git_commit": "deadbeef"}))
    rates = {"FT.1": 0.6, "RLFT.1/beta=0.1": 0.3, "RLFT.1/beta=0.5": 0.5, "IPO": 0.4}
    for name, p in rates.items():
        for ckpt in ("checkpoint-1", "checkpoint-2", "final"):
            _write_rows(run_dir / "audit" / name / ckpt / "sd_base.jsonl", _rows(rng, 40, p))
            _write_rows(run_dir / "audit" / name / ckpt / "sd_links_pos.jsonl", _rows(rng, 30, p, True))
    # One RL point kept its Trainer log (as RLOO writes it); the other lacks it, like a run made before logs
    # were read: the report must render both.
    log = [{"loss": 0.0, "reward": 0.1 * s, "reward_std": 0.2, "kl": 0.01 * s, "step": s} for s in range(1, 11)]
    state = run_dir / "models" / "RLFT.1/beta=0.1" / "checkpoint-10" / "trainer_state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"global_step": 10, "log_history": log}))
    # ... and its fixed-prompt reward evaluation (recipes/stages/rl_eval.py writes it this way).
    (state.parent.parent / "reward_eval.json").write_text(json.dumps(
        {"n_prompts": 4, "mean_initial": 0.5, "mean_final": 1.5, "change": 1.0, "change_ci95": [0.2, 1.8],
         "change_in_sd": 2.0, "up": 4, "down": 0, "p_value": 0.125}))
    scores = [{"id": i, "label": i % 2, "score": (i % 2) * 2 + rng.gauss(0, 0.5)} for i in range(60)]
    _write_rows(run_dir / "models" / "RM.1" / "scores" / "rm_sd_links.jsonl", scores)
    return run_dir


def test_report_files_and_numbers_equal_rows(fake_run):
    assert run(["report", f"run_dir={fake_run}"]) == 0
    out = fake_run / "report"
    for name in ("report.md", "report.html", "summary.json"):
        assert (out / name).is_file()
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<img" in html
    summary = json.loads((out / "summary.json").read_text())
    for e in summary["entries"]:
        rows = [json.loads(line) for line in
                (fake_run / "audit" / e["model"] / e["checkpoint"] / f"{e['dataset']}.jsonl").read_text().splitlines()]
        expected = summarize_rows(rows)
        assert {k: e[k] for k in expected} == expected
    # Persistence was found through provenance (RLFT.1/* were initialised from FT.1).
    pers = {(p["target"], p["dataset"]) for p in summary["persistence"]}
    assert ("RLFT.1/beta=0.1", "sd_base") in pers and ("RLFT.1/beta=0.5", "sd_links_pos") in pers
    assert {s["value"] for s in summary["sweeps"]} == {0.1, 0.5}
    assert list(dict.fromkeys(c["group"] for c in summary["comparison"])) == ["FT", "RLFT", "IPO"]   # pipeline order
    assert summary["reward_scores"][0]["auc"] > 0.9
    assert len(summary["provenance_table"]) == 6
    assert summary["provenance"]["git_commit"] is not None
    assert list((out / "figures").glob("*.png"))
    # Every rate carries its interval; the training evidence of the logged RL point is read and plotted.
    assert all(e["ci95"][0] <= e["rate"] <= e["ci95"][1] for e in summary["entries"] if e["n_scored"])
    rl = {r["model"]: r for r in summary["training"]["rl"]}
    assert rl["RLFT.1/beta=0.1"]["reward_change_in_std"] == pytest.approx(0.9 / 0.2)
    assert rl["RLFT.1/beta=0.5"]["kl_final"] is None
    assert rl["RLFT.1/beta=0.1"]["eval_change_in_sd"] == 2.0 and rl["RLFT.1/beta=0.1"]["eval_change_ci95"] == [0.2, 1.8]
    assert rl["RLFT.1/beta=0.5"]["eval_change_in_sd"] is None
    assert (out / "figures" / "training_RLFT.1.png").is_file()
    # A run without the evidence a finding needs: the finding is inconclusive, never an error or "holds".
    f4 = next(f for f in json.loads((out / "findings.json").read_text())["findings"] if f["id"] == "F4")
    assert f4["status"] == "inconclusive" and "RLFT.1/beta=0.5: reward rise on fixed prompts (in initial sd) = missing" in f4["reason"]


def test_report_without_figures_says_the_same_in_its_tables_and_writes_no_png(fake_run, tmp_path):
    assert run(["report", f"run_dir={fake_run}"]) == 0
    assert run(["report", f"run_dir={fake_run}", f"report.out_dir={tmp_path / 'plain'}", "report.figures=false"]) == 0
    drawn, plain = fake_run / "report", tmp_path / "plain"
    assert list((drawn / "figures").glob("*.png")) and not (plain / "figures").exists()
    for name in ("summary.json", "findings.json"):
        a, b = (json.loads((d / name).read_text()) for d in (drawn, plain))
        a.pop("provenance", None), b.pop("provenance", None)
        assert a == b, name
    # The Markdown is the drawn report's without its image lines; the HTML embeds no image.
    def text_lines(path, drop_images=False):
        return [line for line in path.read_text().splitlines() if line and not (drop_images and line.startswith("!["))]

    assert text_lines(plain / "report.md") == text_lines(drawn / "report.md", drop_images=True)
    assert "<img" not in (plain / "report.html").read_text()


def test_report_figures_must_be_a_boolean(fake_run):
    with pytest.raises(UserError, match="report.figures='maybe': must be true or false"):
        run(["report", f"run_dir={fake_run}", "report.figures=maybe"])


def test_report_without_audit_is_a_clear_error(tmp_path):
    from memlens.harness.core.errors import UserError

    with pytest.raises(UserError, match="memlens audit"):
        run(["report", f"run_dir={tmp_path}"])


def test_report_compare_keeps_the_users_groups_in_their_order(fake_run):
    # "IPO" is also a default group label: it used to be sorted ahead of the user's other groups.
    groups = "{rlft_via_rm: ['RLFT.1/beta=0.5'], ft_direct: [FT.1], IPO: [IPO]}"
    assert run(["report", f"run_dir={fake_run}", f"report.compare={groups}"]) == 0
    summary = json.loads((fake_run / "report" / "summary.json").read_text())
    assert list(dict.fromkeys(c["group"] for c in summary["comparison"])) == ["rlft_via_rm", "ft_direct", "IPO"]
    assert {c["model"] for c in summary["comparison"]} == {"FT.1", "RLFT.1/beta=0.5", "IPO"}


def test_report_reads_the_audit_where_audit_out_dir_put_it(fake_run, tmp_path):
    """`audit.out_dir` moves the audit; the report (and findings) must follow it, for this run and, through
    run.json, for another run combined into the report."""
    import shutil

    moved = tmp_path / "elsewhere" / "audit"
    shutil.move(str(fake_run / "audit"), str(moved))
    assert run(["report", f"run_dir={fake_run}", f"audit.out_dir={moved}"]) == 0
    entries = json.loads((fake_run / "report" / "summary.json").read_text())["entries"]
    assert {e["model"] for e in entries} == {"FT.1", "RLFT.1/beta=0.1", "RLFT.1/beta=0.5", "IPO"}
    # Without the override the report names the missing directory and how to point at the right one.
    from memlens.harness.core.errors import UserError

    with pytest.raises(UserError, match="audit.out_dir"):
        run(["report", f"run_dir={fake_run}"])
    # A second run recorded its moved audit in run.json: combined into another run's report, it is found.
    (fake_run / "run.json").write_text(json.dumps({"config": {"run_dir": str(fake_run),
                                                              "audit": {"out_dir": str(moved)}}}))
    other = tmp_path / "other"
    shutil.copytree(fake_run, other, ignore=shutil.ignore_patterns("run.json", "report"))
    shutil.copytree(moved, other / "audit")
    assert run(["report", f"run_dir={other}", f"report.runs=[{fake_run}]"]) == 0
    combined = json.loads((other / "report" / "summary.json").read_text())["entries"]
    assert {e["model"].split(":")[0] for e in combined} == {"other", "run"}


def test_comparison_has_a_bar_per_method_with_its_training_evidence(fake_run):
    """Preference objectives and an RL stage against a verifiable reward beside FT and RLFT: each model its own
    bar (not the group's highest), each row naming whether its stage passed its training evidence."""
    rng = random.Random(1)
    fit = {"ipo": 0.95, "dpo+sft": 0.97, "kto": 0.5}         # kto did not fit its pairs
    for objective, accuracy in fit.items():
        d = fake_run / "models" / f"PREF/objective={objective}"
        d.mkdir(parents=True)
        (d / "provenance.json").write_text(json.dumps({
            # IPO's record as a run made before the recipe's rename writes it (stage "ipo"): read the same way.
            "stage": "ipo" if objective == "ipo" else "preference", "settings": {"objective": objective},
            "hyperparameters": {"objective": objective},
            "datasets": {"sd_base": "abc"}}))
        (d / "preference_eval.json").write_text(json.dumps({
            "n_pairs": 20, "accuracy": accuracy, "accuracy_ci95": [accuracy - 0.1, 1.0], "chosen_change": 2.0,
            "rejected_change": -30.0, "p_value": 0.01}))
        _write_rows(fake_run / "audit" / f"PREF/objective={objective}" / "final" / "sd_base.jsonl",
                    _rows(rng, 40, 0.2))
    d = fake_run / "models" / "RLVR.2"
    (d / "reward_function").mkdir(parents=True)
    (d / "provenance.json").write_text(json.dumps({"stage": "rl", "reward_function": "identifier_reuse",
                                                   "init_model": str(fake_run / "models" / "FT.2"),
                                                   "settings": {"beta": 0.1}, "datasets": {"sd_base": "abc"}}))
    (d / "reward_function" / "summary.json").write_text(json.dumps({"rm_pd2_val": {"auc": 0.86, "split": "eval"}}))
    _write_rows(fake_run / "audit" / "RLVR.2" / "final" / "sd_base.jsonl", _rows(rng, 40, 0.1))

    assert run(["report", f"run_dir={fake_run}"]) == 0
    out = fake_run / "report"
    summary = json.loads((out / "summary.json").read_text())
    comparison = [c for c in summary["comparison"] if c["dataset"] == "sd_base"]
    assert [c["group"] for c in comparison] == ["FT", "RLFT", "RLFT", "RLVR", "IPO", "IPO", "DPO+SFT", "KTO"]
    assert len({c["model"] for c in comparison}) == len(comparison)            # a bar per model
    by_model = {c["model"]: c for c in comparison}
    assert by_model["PREF/objective=dpo+sft"]["evidence_ok"] is True
    assert by_model["PREF/objective=kto"]["evidence_ok"] is False
    assert "preference accuracy on its pairs vs the initial model = 0.5 FAILS" in by_model["PREF/objective=kto"]["evidence"]
    assert by_model["FT.1"]["evidence_ok"] is None                               # fine-tuning has no such check
    assert "reward function identifier_reuse: AUC on its held-out rows = 0.86 ok" in by_model["RLVR.2"]["evidence"]
    assert by_model["RLVR.2"]["evidence_ok"] is False                            # no fixed-prompt reward evaluation
    prefs = {r["model"]: r for r in summary["training"]["preference"]}
    assert prefs["PREF/objective=kto"]["objective"] == "kto" and prefs["PREF/objective=kto"]["pair_accuracy"] == 0.5
    assert prefs["PREF/objective=ipo"]["pair_rejected_change"] == -30.0
    assert {r["model"]: r["reward_heldout_auc"] for r in summary["training"]["rl"]}["RLVR.2"] == 0.86
    assert (out / "figures" / "preference_displacement.png").is_file() and (out / "figures" / "rlhf_vs_ipo.png").is_file()
    ids = [f["id"] for f in json.loads((out / "findings.json").read_text())["findings"]]
    assert {"V4", "V5", "V6", "V7", "P1", "P2", "P3"} <= set(ids)


def test_membership_inference_is_reported_beside_extraction(fake_run):
    """An audit/mia/ summary (as harness/audit/mia.py writes it) gives a figure per model with AUC over checkpoints
    beside the extraction rate, a table, the comparison's MIA panel and rows M1-M3; its rows are never read as NED
    rows. In the table each model x dataset x span group starts with the blind baseline's row (no model, unranked;
    hand-built here for FT.1's target span), then the attacks ranked; an attack marked degenerate (FT.1's EZ-MIA, as
    harness/audit/mia.py marks it) is left out of the ranking and listed apart, with its reason."""
    from memlens.harness.core.errors import UserError
    from memlens.harness.core.stats import TPR_AT_FPR_RULE, bootstrap_mia_metrics
    from memlens.harness.report import analyses as A

    rng = random.Random(1)
    results = {}
    for name, shift in (("FT.1", 2.0), ("IPO", 0.5)):
        per_ck = {}
        for ck in ("checkpoint-1", "checkpoint-2", "final"):
            spans = {span: {attack: bootstrap_mia_metrics([rng.gauss(shift, 1) for _ in range(30)],
                                                          [rng.gauss(0, 1) for _ in range(30)], n_boot=100)
                            for attack in ("loss", "min_k")} for span in ("target", "program")}
            per_ck[ck] = {"sd_base": {"n_members": 30, "n_nonmembers": 30, "spans": spans}}
            _write_rows(fake_run / "audit" / "mia" / name / ck / "sd_base.jsonl",
                        [{"id": "x", "member": 1, "score": {"target": {"loss": 1.0}}}])
        results[name] = {"model": name, "spans": ["target", "program"], "results": per_ck}
    blind = bootstrap_mia_metrics([0.4, 0.6] * 15, [0.5] * 30, n_boot=100)      # AUC 0.5 by hand: half above, half below
    results["FT.1"]["blind"] = {"sd_base": {"n_members": 30, "n_nonmembers": 30, "spans": {"target": blind}}}
    ez = bootstrap_mia_metrics([0.0] * 30, [1.0 + i for i in range(30)], n_boot=100)
    ez.update(fallback={"members": 30, "nonmembers": 0}, degenerate=[
        "30 of 30 members and 0 of 30 non-members took the authors' fallback", "AUC 0.00 ... below 0.5 (not flipped)"])
    results["FT.1"]["results"]["final"]["sd_base"]["spans"]["target"]["ez_mia"] = ez
    (fake_run / "audit" / "mia" / "summary.json").write_text(json.dumps({"results": results}))
    with pytest.raises(UserError, match=r"mia/summary\.json: model 'FT\.1' has TPRs read as FPR <= a .* Rerun"):
        A.load_mia(fake_run / "audit")            # an older summary (no rule recorded) is refused, not mixed in
    for record in results.values():
        record["tpr_at_fpr_rule"] = TPR_AT_FPR_RULE
    (fake_run / "audit" / "mia" / "summary.json").write_text(json.dumps({"results": results}))
    assert run(["report", f"run_dir={fake_run}"]) == 0
    out = fake_run / "report"
    summary = json.loads((out / "summary.json").read_text())
    assert not any(e["model"].startswith("mia") for e in summary["entries"])
    assert (out / "figures" / "mia_FT.1.png").is_file() and (out / "figures" / "rlhf_vs_ipo_mia.png").is_file()
    table = summary["membership_inference"]
    assert {(r["model"], r["span"], r["attack"]) for r in table} >= {("FT.1", "target", "loss"), ("IPO", "program", "min_k")}
    assert all(r["auc_ci95"][0] <= r["auc"] <= r["auc_ci95"][1] and r["n_boot"] == 100 for r in table)
    # 30 held out: no FPR below 1 / 30 exists, so neither TPR is shown as a number; attacks ranked by AUC per group.
    assert {r["tpr_at_fpr<1%"] for r in table} == {"n/m: needs ≥ 100 held out"}
    assert {r["tpr_at_fpr<0.1%"] for r in table} == {"n/m: needs ≥ 1,000 held out"}
    for model, span in {(r["model"], r["span"]) for r in table}:
        group = [r for r in table if (r["model"], r["span"]) == (model, span)]
        if (model, span) == ("FT.1", "target"):
            assert group[0]["attack_label"] == "blind baseline (no model)" and group[0]["rank"] is None
            assert group[0]["auc"] == 0.5
            group = group[1:]
        assert [r["rank"] for r in group] == [1, 2] and group[0]["auc"] >= group[1]["auc"]
        assert "ez_mia" not in {r["attack"] for r in group}                # degenerate: never ranked
    assert [(r["model"], r["span"], r["attack"], r["auc"]) for r in summary["membership_inference_degenerate"]] == [
        ("FT.1", "target", "ez_mia", 0.0)]                                   # listed apart, its AUC not flipped
    assert ("FT.1 / sd_base / target: degenerate here: EZ-MIA (30 of 30 members and 0 of 30 non-members took the "
            "authors' fallback; AUC 0.00 ... below 0.5 (not flipped))") in (out / "report.md").read_text()
    panel = {r["model"]: r for r in summary["comparison_mia"]}
    assert set(panel) == {"FT.1", "IPO"} and panel["FT.1"]["auc"] > 0.8 and panel["FT.1"]["rate"] is not None
    md = (out / "report.md").read_text()
    assert md.index("## Membership inference, by what each stage trains on") < md.index(
        "### Target strings, beside extraction (audit.measures: mia)") < md.index("#### Degenerate attacks (not ranked)")
    found = {f["id"]: f for f in json.loads((out / "findings.json").read_text())["findings"]}
    assert found["M3"]["status"] != "not measured" and found["M1"]["status"] == "not measured"   # no RLFT.2 here


def test_report_html_leads_with_findings_then_comparison_and_folds_the_maps(fake_run):
    """A reader sees what the run concluded first: contents, the findings table (status, rate with interval, why),
    the comparison figure; then the evidence and details. Maps are grouped per model in folded sections, and no
    table shows a raw key as a header."""
    import re

    assert run(["report", f"run_dir={fake_run}"]) == 0
    html = (fake_run / "report" / "report.html").read_text()
    h2 = re.findall(r"<h2 id='[^']+'>([^<]+)</h2>", html)
    assert h2[0] == "Findings: what this run concluded"
    assert h2[1].startswith("Memorization by training method")
    assert h2[2] == "Memorization rates (final checkpoints)"
    assert h2[-1].startswith("Provenance")
    assert html.index("<nav><strong>Contents</strong>") < html.index("<h2")
    contents = re.findall(r"<li><a href='#([^']+)'>", html)
    assert contents == re.findall(r"<h2 id='([^']+)'>", html)            # every section listed, in order
    assert html.index("<img alt='Memorization by training method'") < html.index("<h2 id='s-memorization-rates")
    findings_header = re.search(r"<h2 id='s-findings[^']*'>.*?<tr>(.*?)</tr>", html, re.S).group(1)
    assert re.findall(r"<th>([^<]+)</th>", findings_header) == [
        "id", "finding", "status", "this run", "paper", "p", "why (when not holds)"]
    assert "class='short status-inconclusive'" in html
    maps = html[html.index("id='s-memorization-maps"):]
    assert maps.count("<details><summary>") == 4                         # one folded group per audited model
    assert "<summary>FT.1: 2 map(s)</summary>" in maps
    headers = re.findall(r"<th>([^<]+)</th>", html)
    assert not [h for h in headers if "_" in h], headers                 # n_scored -> "scored", ci95 -> "95 % CI"


def test_report_html_fits_1400_px_in_chromium(fake_run, tmp_path):
    """A rendered report in headless Chromium at 1400 px (tests/chromium.py, Debian's chromium over its DevTools
    pipe; .ci/run installs it): no table wider than the page with every fold open, findings and comparison first,
    maps folded. Skipped only where Chromium is absent outside CI."""
    chromium = chromium_or_skip()
    assert run(["report", f"run_dir={fake_run}"]) == 0
    with Chromium(chromium) as page:
        page.open((fake_run / "report" / "report.html").resolve().as_uri())
        layout = page.evaluate(LAYOUT_JS)
        shot = page.screenshot(tmp_path / "shots" / "report_top.png")
    wide = [t for t in layout["tables"] if t["right"] > layout["viewport"] or t["box_scrolls"]]
    assert layout["tables"] and not wide and layout["page_scroll_width"] <= layout["viewport"], (wide, shot)
    assert layout["h2"][0].startswith("Findings") and layout["h2"][1].startswith("Memorization by training method")
    assert layout["details"] > 0
    assert shot.stat().st_size > 10_000


def test_writers_lay_out_each_block_type(tmp_path):
    """report.md and report.html from one hand-built list holding each block type once (a Details folding a
    Table): the exact Markdown of a heading, a paragraph and a 2x2 table; the HTML's anchor, contents, fold, table
    and embedded figure."""
    from memlens.harness.report.blocks import (
        Contents,
        Details,
        Heading,
        Image,
        Paragraph,
        Table,
        table,
        to_html,
        to_markdown,
    )

    figure = tmp_path / "figures" / "rate a.png"
    figure.parent.mkdir()
    figure.write_bytes(b"\x89PNG not really")
    grid = table([{"model": "FT.1", "rate": 0.25}, {"model": "a|b", "rate": None}], ["model", "rate"])
    assert grid == Table(("model", "rate"), (("FT.1", "0.25"), ("a|b", "–")))
    blocks = [Heading(1, "Report"), Contents(), Heading(2, "Rates & <more>"), Paragraph("See [this] table."), grid,
              Image(figure, "Rate figure"), Details("Folded rows", (Table(("id", "rule"), (("F1", "r1"),)),))]

    md = to_markdown(blocks, tmp_path)
    assert md.startswith("# Report\n\n- Rates &amp; &lt;more&gt;\n\n## Rates &amp; &lt;more&gt;\n\n"
                         "See \\[this\\] table.\n\n"
                         "| model | rate |\n|---|---|\n| FT.1 | 0.25 |\n| a\\|b | – |\n\n")
    assert "![Rate figure](figures/rate%20a.png)\n\n### Folded rows\n\n| id | rule |\n|---|---|\n| F1 | r1 |\n" in md

    page = to_html(blocks, "Report")
    assert "<h1>Report</h1>" in page and "<h2 id='s-rates-more'>Rates &amp; &lt;more&gt;</h2>" in page
    assert "<nav><strong>Contents</strong><ol><li><a href='#s-rates-more'>" in page
    assert "<p>See [this] table.</p>" in page
    assert "<div class='tablebox'><table><tr><th>model</th><th>rate</th></tr>" in page
    assert "<tr><td class='short'>a|b</td><td class='short'>–</td></tr>" in page
    assert "<img alt='Rate figure' src='data:image/png;base64," in page
    folded = page[page.index("<details><summary>Folded rows</summary>"):page.index("</details>")]
    assert "<table><tr><th>id</th><th>rule</th></tr>" in folded


def test_each_report_section_is_a_pure_function_of_the_stored_results(fake_run):
    """The report is an ordered list of sections (render.SECTIONS); each reads the stored results it is given and
    returns its blocks and what it files in summary.json, changing nothing it was given, the same on a second call;
    no two sections file the same key."""
    import copy

    from memlens.harness.cli import compose
    from memlens.harness.report import render
    from memlens.harness.report.figures import DRAW_FIGURES

    cfg = compose([f"run_dir={fake_run}"])
    inputs, _ = render.load_inputs(cfg, cfg.report)
    token = DRAW_FIGURES.set(False)          # the sections' tables, not their pictures
    try:
        frozen = copy.deepcopy({k: getattr(inputs, k) for k in ("grouped", "entries", "finals", "prov", "evidence",
                                                                 "mia")})
        filed: dict = {}
        for section in render.SECTIONS:
            first, second = section(inputs), section(inputs)
            assert (first.filed, len(first.blocks)) == (second.filed, len(second.blocks))
            render.file_in(filed, first.filed, section)
        assert {k: getattr(inputs, k) for k in frozen} == frozen, "a section changed what it was given"
        assert {"breakdowns", "persistence", "sweeps", "training", "reward_scores"} - set(filed) == {"breakdowns"}
        with pytest.raises(RuntimeError, match="persistence filed twice"):
            render.file_in(filed, {"persistence": []}, "a second section")
    finally:
        DRAW_FIGURES.reset(token)
