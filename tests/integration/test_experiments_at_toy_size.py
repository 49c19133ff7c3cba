"""Every pipeline experiment runs end to end through `memlens run` at toy size.

As lightning-hydra-template's test_sweeps.py runs each experiment for a step: the experiment's own stages,
sweeps, datasets, audit plan and report, on the micro model with every stage cut to a few optimizer steps
and the data to the smoke run's sizes. It proves an experiment's wiring (which stage feeds which, the
datasets it names, its audit plan against the models it trains), not memorization. The smoke experiment
is the toy size already (tests/integration/test_pipeline_smoke.py). The nmt_* experiments belong to
`memlens nmt`: nmt_smoke runs in tests/integration/test_nmt_pipeline.py, and nmt_quickstart is its settings
at full size (tests/unit/harness/audit/test_nmt_pipeline_parts.py composes both). The first seven took ~3 min on 2 CPU cores;
preference_objectives (7 preference objectives beside FT.3 and RLFT.2) adds ~35 s and findings_rlvr (findings plus
11 RL points against a verifiable reward) ~50 s, measured on a shared machine (load average ~1.5). For those two the
test also checks what they measure (CHECKS_OF_EXPERIMENT). The runs share the stages they have in common, across both
workers (seed_from_previous_run) and draw no figures: measured alone, findings then quickstart then findings_rlvr_only take
78 + 22 + 38 s instead of 78 + 48 + 70.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from memlens.harness.cli import compose
from memlens.harness.core.objectives import OBJECTIVES
from memlens.recipes.orchestration.stage_plan import plan
from memlens.recipes.stages.contract import settings_match
from memlens.synthetic_data.data_settings import validate
from tests.integration.run_helpers import EXPERIMENTS, TOY_RUN, TOY_STAGE, memlens, toy_overrides

pytestmark = pytest.mark.slow

# own_canaries and own_preference run at this size in test_own_data.py, which also checks what they plant.
OWN_DATA = ("own_canaries", "own_preference")
TOY_EXPERIMENTS = [name for name in EXPERIMENTS if name != "smoke" and name not in OWN_DATA]


def test_the_toy_runs_cover_every_pipeline_experiment():
    assert set(TOY_EXPERIMENTS) | {"smoke", *OWN_DATA} == set(EXPERIMENTS)
    assert {"base", "quickstart", "findings", "ft_persistence", "rm_injection", "rl_prompts", "ipo"} \
        <= set(TOY_EXPERIMENTS)


def test_toy_overrides_cut_every_stage_of_an_experiment():
    cfg = compose(["experiment=findings", *TOY_RUN, *toy_overrides("findings")])
    for stage in plan(cfg):
        for key, value in TOY_STAGE[stage.recipe].items():
            assert stage.given[key] == value, (stage.model_name, key)


# The toy runs share what they have in common (the extension-points issue: "toy-size experiment runs sharing their
# upstream models"): a run starts from the finished models of the earlier toy run — of either pytest-xdist worker —
# that has the most of this run's stages with the same settings, and from that run's datasets and audit caches. The
# pipeline keeps a copied model only when its settings, seed, datasets and upstream models are this run's
# (recipes/orchestration/pipeline.py prepare_out_dir, outdated_reason) and retrains the others; the audit reuses a completion only
# for the same model fingerprint and examples. So each run still trains, audits and reports everything of its own.
# A finished run is listed (one line, appended once its test passed; nothing writes into it afterwards) in a file in
# the workers' shared temporary root, so the order the scheduler gives the runs does not decide what they share.


@pytest.fixture(scope="session")
def finished_runs(tmp_path_factory) -> Path:
    """The file that lists the session's finished toy runs, shared by the workers."""
    import os

    root = tmp_path_factory.getbasetemp()
    shared = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "toy_runs_shared"
    shared.mkdir(exist_ok=True)
    return shared / "finished.txt"


def previous_runs(index: Path) -> list[Path]:
    return [Path(line) for line in index.read_text().splitlines() if line] if index.is_file() else []


def record_finished(index: Path, run_dir: Path) -> None:
    with open(index, "a", encoding="utf-8") as f:   # one short line in append mode: the workers' lines never mix
        f.write(f"{run_dir}\n")


def seed_from_previous_run(run_dir: Path, cfg, previous: list[Path]) -> list[str]:
    """Copy into `run_dir` the finished models `cfg` plans with the same settings from the earlier toy run (of
    `previous`) that has the most of them, with that run's datasets and audit caches; returns the models copied."""
    stages = plan(cfg)

    def same(run: Path) -> list:
        return [s for s in stages if settings_match(run / "models" / s.model_name, s.given)]

    best = max(previous, key=lambda run: len(same(run)), default=None)
    if best is None or not same(best):
        return []
    for stage in same(best):    # copytree keeps mtimes: an upstream model stays older than the models it started
        shutil.copytree(best / "models" / stage.model_name, run_dir / "models" / stage.model_name)
    for dataset in validate(OmegaConf.to_container(cfg.data, resolve=True))["datasets"]:
        if (best / "data" / dataset / "manifest.json").is_file():
            shutil.copytree(best / "data" / dataset, run_dir / "data" / dataset)
    if (best / "audit" / "cache").is_dir():
        shutil.copytree(best / "audit" / "cache", run_dir / "audit" / "cache")
    return [s.model_name for s in same(best)]


@pytest.mark.parametrize("name", TOY_EXPERIMENTS)
def test_experiment_runs_end_to_end_at_toy_size(name, tmp_path, finished_runs):
    run_dir = tmp_path / "run"
    seed_from_previous_run(run_dir, compose([f"experiment={name}", *TOY_RUN, *toy_overrides(name)]),
                           previous_runs(finished_runs))
    # The report's numbers are checked, not its pictures: figures off (report.figures=false; drawing them is most of a
    # report's time, and test_report_render.py checks that the tables are the same either way).
    result = memlens("run", f"experiment={name}", f"run_dir={run_dir}", *TOY_RUN, *toy_overrides(name),
                      "report.figures=false", timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    cfg = compose([f"experiment={name}", *TOY_RUN])
    for stage in plan(cfg):                                    # every model it plans was trained and finished
        assert (run_dir / "models" / stage.model_name / "provenance.json").is_file(), stage.model_name
    if "audit" in cfg.after_training:                          # its audit plan scored what it names
        summary = json.loads((run_dir / "audit" / "summary.json").read_text())
        planned = {m for entry in cfg.audit_plan for m in entry["models"]}
        audited = {m.split("/")[0] for m in summary["results"]}
        assert planned <= audited, planned - audited
    if "report" in cfg.after_training:
        assert (run_dir / "report" / "findings.json").is_file()
    if "mia" in list(cfg.audit.measures):                      # every planned model with an SD set, vs held-out
        mia = json.loads((run_dir / "audit" / "mia" / "summary.json").read_text())["results"]
        assert {"FT.3", "RLFT.2", "IPO"} <= {m.split("/")[0] for m in mia}, sorted(mia)
        found = {f["id"]: f for f in json.loads((run_dir / "report" / "findings.json").read_text())["findings"]}
        assert all(found[fid]["status"] != "not measured" for fid in ("M1", "M2", "M3")), found["M1"]
    if "pair_mia" in list(cfg.audit.measures):                 # the preference models' pairs, vs held-out pairs
        pairs = json.loads((run_dir / "audit" / "pair_mia" / "summary.json").read_text())["results"]
        preference = {s.model_name for s in plan(cfg) if s.recipe == "preference"}     # every objective's model
        assert preference and all(pairs[m]["results"]["final"] for m in preference), sorted(pairs)
    if "prompt_mia" in list(cfg.audit.measures):               # the RL stage's own prompts, vs held-out prompts
        prompts = json.loads((run_dir / "audit" / "prompt_mia" / "summary.json").read_text())["results"]
        assert "sd_base" in prompts["RLFT.2"]["results"]["final"], sorted(prompts)
        if cfg.audit.prompt_mia_checkpoints == "final":               # the stage saved checkpoints; none is sampled
            assert prompts["RLFT.2"]["checkpoints"] == ["final"]
            assert any((run_dir / "models" / "RLFT.2").glob("checkpoint-*"))
        found = {f["id"]: f for f in json.loads((run_dir / "report" / "findings.json").read_text())["findings"]}
        assert found["M6"]["status"] != "not measured", found["M6"]
    if name in CHECKS_OF_EXPERIMENT:
        CHECKS_OF_EXPERIMENT[name](run_dir)
    record_finished(finished_runs, run_dir)


def _report(run_dir):
    findings = {f["id"]: f for f in json.loads((run_dir / "report" / "findings.json").read_text())["findings"]}
    return json.loads((run_dir / "report" / "summary.json").read_text()), findings


def _preference_objectives_measured(run_dir):
    """Every objective trained, scored its pairs and got its own comparison bar; P1-P3 and F8 read them."""
    summary, findings = _report(run_dir)
    objectives = tuple(OBJECTIVES)
    for objective in objectives:
        record = json.loads((run_dir / "models" / f"PREF/objective={objective}" / "preference_eval.json").read_text())
        assert record["objective"] == objective and record["n_pairs"] > 0
    bars = {c["model"] for c in summary["comparison"] if c["dataset"] == "sd_base"}
    assert bars == {"FT.3", "RLFT.2", *(f"PREF/objective={o}" for o in objectives)}
    assert {r["objective"] for r in summary["training"]["preference"]} == set(objectives)
    for fid in ("P1", "P2", "P3", "F8"):
        assert findings[fid]["status"] != "not measured", fid
    assert "PREF/objective=ipo" in findings["F8"]["stages"]


def _findings_rlvr_measured(run_dir):
    """V4-V7 are measured on the RLVR stages, GRPO beside RLOO is audited and drawn in the α sweep, RLVR.2 has a bar."""
    summary, findings = _report(run_dir)
    for fid in ("V4", "V5", "V6", "V7"):
        assert findings[fid]["status"] != "not measured", fid
        assert any("reward function identifier_reuse: AUC" in e["check"] for e in findings[fid]["evidence"]), fid
    audited = {e["model"] for e in summary["entries"]}
    assert {"RLVR.1/algorithm=grpo,beta=0.1", "RLVR.1/algorithm=rloo,beta=0.1", "RLVR.2"} <= audited
    series = {s["series"] for s in summary["sweeps"] if s["model"] == "RLVR.1" and s["axis"] == "beta"}
    assert {"sd_base @ algorithm=grpo", "sd_base @ algorithm=rloo"} <= series
    assert "RLVR.2" in {c["model"] for c in summary["comparison"]}
    rl = {r["model"]: r for r in summary["training"]["rl"]}
    assert rl["RLVR.2"]["reward_function"] == "identifier_reuse" and rl["RLVR.2"]["reward_heldout_auc"] is not None


def _doses_measured(run_dir):
    """D1-D4 are measured: the tiers reach the extraction rows and IPO's pair audit (its `tiers` and `dose_trend`)."""
    _, findings = _report(run_dir)
    for fid in ("D1", "D2", "D3", "D4"):
        assert findings[fid]["status"] != "not measured", fid
    pairs = json.loads((run_dir / "audit" / "pair_mia" / "summary.json").read_text())["results"]["IPO"]
    entry = pairs["results"]["final"]["pairs_sd_base"]
    assert sorted(entry["tiers"], key=int) == ["1", "4", "16"] and "premia_pair" in entry["dose_trend"]


CHECKS_OF_EXPERIMENT = {"preference_objectives": _preference_objectives_measured, "findings_rlvr": _findings_rlvr_measured,
                        "doses": _doses_measured}
