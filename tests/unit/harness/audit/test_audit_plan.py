"""The experiment's audit_plan resolved against a run directory (harness/audit_run.plan_audits)."""

import json

import pytest

from memlens.harness.audit.plan import plan_audits
from memlens.harness.cli import compose
from memlens.harness.core.errors import UserError


@pytest.fixture()
def run_dir(tmp_path):
    for name in ("PT", "FT.1", "FT.2", "RLFT.1/beta=0.1", "RLFT.1/beta=0.5", "RLFT.4", "IPO"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "provenance.json").write_text("{}")
    (tmp_path / "models" / "RLFT.1" / "beta=0.9").mkdir()          # unfinished sweep point: not audited
    for name in ("sd_base", "sd_links_pos", "sd_rl_prompts"):
        (tmp_path / "data" / name).mkdir(parents=True)
        (tmp_path / "data" / name / "rows.jsonl").write_text(json.dumps({"id": 1}) + "\n")
    return tmp_path


def test_smoke_plan_expands_sweep_points_per_dataset(run_dir):
    planned = plan_audits(compose(["experiment=smoke", f"run_dir={run_dir}"]))
    pairs = [(p.model_name, p.dataset, p.control_name) for p in planned]
    assert pairs == [("FT.1", "sd_base", "FT.2"), ("FT.1", "sd_links_pos", "FT.2"),
                     ("RLFT.1/beta=0.1", "sd_base", "FT.2"), ("RLFT.1/beta=0.5", "sd_base", "FT.2"),
                     ("RLFT.1/beta=0.1", "sd_links_pos", "FT.2"), ("RLFT.1/beta=0.5", "sd_links_pos", "FT.2"),
                     ("RLFT.4", "sd_rl_prompts", "FT.2"), ("IPO", "sd_base", "PT")]
    assert planned[0].model_dir == run_dir / "models" / "FT.1"
    assert planned[0].examples == run_dir / "data" / "sd_base" / "rows.jsonl"


def test_a_swept_stage_cannot_be_the_control(run_dir):
    cfg = compose(["experiment=smoke", f"run_dir={run_dir}",
                   "audit_plan=[{models: [FT.1], control: RLFT.1, datasets: [sd_base]}]"])
    with pytest.raises(UserError, match=r"audit_plan\[0\]\.control='RLFT\.1'"):
        plan_audits(cfg)


def test_missing_key_is_named(run_dir):
    cfg = compose(["experiment=smoke", f"run_dir={run_dir}", "audit_plan=[{models: [FT.1], control: FT.2}]"])
    with pytest.raises(UserError, match=r"audit_plan\[0\]\.datasets is missing"):
        plan_audits(cfg)


def test_checkpoints_final_audits_only_the_finished_model(run_dir):
    cfg = compose(["experiment=smoke", f"run_dir={run_dir}",
                   "audit_plan=[{models: [FT.1], control: FT.2, datasets: [sd_base]},"
                   "{models: [FT.1], control: FT.2, datasets: [sd_links_pos], checkpoints: final}]"])
    assert [(p.dataset, p.all_checkpoints) for p in plan_audits(cfg)] == [("sd_base", True), ("sd_links_pos", False)]
    bad = compose(["experiment=smoke", f"run_dir={run_dir}",
                   "audit_plan=[{models: [FT.1], control: FT.2, datasets: [sd_base], checkpoints: last}]"])
    with pytest.raises(UserError, match=r"audit_plan\[0\]\.checkpoints='last'"):
        plan_audits(bad)


def test_an_experiment_without_an_audit_plan_plans_nothing():
    # The default config's `audit_plan: []` composes to an empty ListConfig, which is falsy.
    from memlens.recipes.orchestration.stage_plan import audit_plan

    assert audit_plan(compose(["experiment=base"])) == []
