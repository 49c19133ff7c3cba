"""`memlens run experiment=formal_toy` through the real CLI: data, every model of the study (in the process pool),
the three measures, findings L1-L7 and the report; a rerun keeps every model; a model lost mid-run is retrained to
the same numbers. Toy size: the models do not learn their language, so every finding but L1 must be gated."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memlens.harness import cli
from memlens.harness.core.errors import UserError
from memlens.harness.core.formal_study import BASE, LOSSES_FILE, FormalSettings, analysis_dir, model_dir
from memlens.harness.core.io import read_json, read_jsonl
from memlens.harness.measures.losses import memorization_measures

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("formal_toy")
    code = cli.run(["run", "experiment=formal_toy", f"run_dir={run_dir}"])
    return run_dir, code


def settings_of(run_dir) -> FormalSettings:
    cfg = cli.compose(["experiment=formal_toy", f"run_dir={run_dir}"])
    from omegaconf import OmegaConf
    return FormalSettings.load(OmegaConf.to_container(cfg.formal, resolve=True))


def test_formal_toy_run_writes_every_model_finding_and_figure(toy_run):
    run_dir, code = toy_run
    assert code == 0
    settings = settings_of(run_dir)
    for job in settings.jobs():
        record = read_json(model_dir(run_dir, *job) / LOSSES_FILE)
        assert len(record["loss"]) == settings.epochs and record["provenance"]["git_commit"]
    report = run_dir / "formal" / "report"
    findings = read_json(report / "findings.json")
    assert [f["id"] for f in findings] == [f"L{i}" for i in range(1, 8)]
    assert findings[0]["status"] == "holds"
    per_seed = read_json(report / "findings_per_seed.json")
    assert list(per_seed) == ["0"] and [f["id"] for f in per_seed["0"]] == [f["id"] for f in findings]
    for f in findings[1:]:           # three epochs of a 16-wide model learn nothing: the gate must say so
        assert f["status"] == "inconclusive" and "learned gap" in f["reason"], f
    for name in ("fig2_onsets.png", "fig3_entropy.png", "fig4_frequency.png", "fig5_dedup.png", "fig6_size.png"):
        assert (report / "figures" / name).stat().st_size > 1000, name
    assert "| L7 |" in (report / "report.md").read_text()


def test_formal_measures_are_the_one_definition_on_the_models_losses(toy_run):
    run_dir, _ = toy_run
    settings = settings_of(run_dir)
    rows = read_jsonl(run_dir / "formal" / "data" / "G1" / "seed0" / "strings.jsonl")
    full = np.array(read_json(model_dir(run_dir, "G1", 0, BASE, "full") / LOSSES_FILE)["loss"])
    folds = [np.array(read_json(model_dir(run_dir, "G1", 0, BASE, f"fold{j}") / LOSSES_FILE)["loss"])
             for j in range(settings.folds)]
    members = [(i, r) for i, r in enumerate(rows) if r["count"].get(BASE)]
    train = full[:, [i for i, _ in members]]
    control = np.stack([folds[r["fold"][BASE]][:, i] for i, r in members], axis=1)
    expected = memorization_measures(train, control, settings.tau)
    strings = [s for s in read_jsonl(analysis_dir(run_dir) / "strings.jsonl")
               if s["language"] == "G1" and s["variant"] == BASE]
    assert [s["id"] for s in strings] == [r["id"] for _, r in members]
    for j, s in enumerate(strings):
        onset = expected["contextual"]["onset"][j]
        assert s["onset"]["contextual"] == (int(onset) + 1 if onset >= 0 else None)
        assert s["control_loss"] == pytest.approx(control[:, j].tolist())
    summary = read_json(analysis_dir(run_dir) / "summary.json")
    g1 = next(e for e in summary["entries"] if e["language"] == "G1" and e["variant"] == BASE)
    test = [r for r in rows if r["test"]]
    weights = np.array([r["test"] * r["predicted_tokens"] for r in test])
    curve = (full[:, [rows.index(r) for r in test]] * weights).sum(1) / weights.sum()
    assert g1["e_star"] == int(np.argmin(curve)) + 1
    assert g1["test_entropy_per_token"] == pytest.approx(36 * np.log(2) / 73)      # every G1 string: 36 fair choices


def test_rerun_keeps_models_and_a_lost_model_retrains_to_the_same_losses(toy_run, capsys):
    run_dir, _ = toy_run
    lost = model_dir(run_dir, "G2", 0, "dedup", "fold1") / LOSSES_FILE
    before = read_json(lost)
    untouched = model_dir(run_dir, "G2", 0, BASE, "full") / LOSSES_FILE
    stamp = untouched.stat().st_mtime_ns
    findings = (run_dir / "formal" / "report" / "findings.json").read_bytes()
    lost.unlink()                                     # as if the run was killed while this model trained
    capsys.readouterr()
    assert cli.run(["run", "experiment=formal_toy", f"run_dir={run_dir}"]) == 0
    assert "12 of 13 models finished; training 1" in capsys.readouterr().out
    after = read_json(lost)
    assert after["loss"] == before["loss"] and after["train_loss"] == before["train_loss"]
    assert untouched.stat().st_mtime_ns == stamp
    assert json.loads((run_dir / "formal" / "report" / "findings.json").read_bytes()) == json.loads(findings)


def test_formal_command_refuses_a_run_without_a_formal_section(tmp_path):
    with pytest.raises(UserError, match="experiment=formal_languages"):
        cli.run(["formal", "experiment=smoke", f"run_dir={tmp_path}"])


def test_an_unshipped_grammar_stops_the_run_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match="G8.*not shipped"):
        cli.run(["run", "experiment=formal_toy", f"run_dir={run_dir}", "formal.languages=[G2,G8]"])
    assert not run_dir.exists()


def test_report_and_data_commands_serve_the_study_and_train_points_to_run(toy_run, tmp_path):
    run_dir, _ = toy_run
    findings = read_json(run_dir / "formal" / "report" / "findings.json")
    summary = analysis_dir(run_dir) / "summary.json"
    stamp = summary.stat().st_mtime_ns
    assert cli.run(["report", "experiment=formal_toy", f"run_dir={run_dir}"]) == 0   # from the stored analysis
    assert read_json(run_dir / "formal" / "report" / "findings.json") == findings
    assert summary.stat().st_mtime_ns == stamp, "memlens report reads the analysis; it never measures"
    fresh = tmp_path / "data_only"
    assert cli.run(["data", "experiment=formal_toy", f"run_dir={fresh}"]) == 0
    for language in ("G1", "G2"):
        built = fresh / "formal" / "data" / language / "seed0" / "strings.jsonl"
        assert built.read_bytes() == (run_dir / "formal" / "data" / language / "seed0" / "strings.jsonl").read_bytes()
    assert not (fresh / "formal" / "models").exists()
    with pytest.raises(UserError, match="memlens run experiment=formal_toy"):
        cli.run(["train", "experiment=formal_toy", f"run_dir={fresh}"])


def test_report_on_a_formal_run_without_its_analysis_names_the_file_and_the_command(tmp_path):
    """The report layer renders stored results only: with no analysis it refuses, naming what computes one."""
    with pytest.raises(UserError, match=r"summary\.json: no formal-language analysis.*memlens formal "
                                        r"experiment=formal_toy"):
        cli.run(["report", "experiment=formal_toy", f"run_dir={tmp_path}"])
    assert not (tmp_path / "formal" / "report").exists()
