"""The command line as a Hydra user expects it (issue: a newcomer's first hour): `--help`, `--cfg job`, `--info` print
and run nothing; a key that only an experiment defines points to `experiment=`; and every name the audit will read
(measures, the ε attack, each measure's settings) or a stage trains with (a preference objective) is refused by
`memlens check` and before `memlens run` trains its first stage."""

from __future__ import annotations

import pytest
import yaml

from tests.integration.run_helpers import memlens, refused


def test_help_lists_the_groups_and_the_composed_config_and_runs_nothing(tmp_path):
    run_dir = tmp_path / "run"
    done = memlens("run", "--help", "experiment=smoke", f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.startswith("memlens run: data -> every stage"), out[:300]
    assert "== Configuration groups ==" in out and "== Config ==" in out
    experiments = next(line for line in out.splitlines() if line.startswith("experiment: "))
    assert "quickstart" in experiments and "smoke" in experiments
    assert "experiment_name: smoke" in out
    assert not run_dir.exists()


def test_cfg_job_prints_the_config_the_command_would_run(tmp_path):
    run_dir = tmp_path / "run"
    done = memlens("run", "--cfg", "job", "experiment=smoke", f"run_dir={run_dir}", "audit.k=0.25")
    assert done.returncode == 0, done.stderr[-2000:]
    cfg = yaml.safe_load(done.stdout)
    assert cfg["experiment_name"] == "smoke" and cfg["audit"]["k"] == 0.25
    assert "hydra" not in cfg and "FT" in cfg["stages"]
    assert cfg["audit"]["out_dir"] == "${run_dir}/audit"           # as Hydra prints it: interpolations kept
    resolved = memlens("run", "--cfg", "job", "--resolve", "-p", "audit", "experiment=smoke", f"run_dir={run_dir}")
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    assert resolved.stdout.startswith("# @package audit")
    assert yaml.safe_load(resolved.stdout)["out_dir"] == f"{run_dir}/audit"
    assert not run_dir.exists()


def test_info_shows_the_defaults_with_the_experiment():
    done = memlens("run", "--info", "defaults", "experiment=smoke")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "experiment/smoke" in done.stdout and "model/micro" in done.stdout


def test_cfg_refuses_a_bad_key_as_the_command_would():
    refused(memlens("run", "--cfg", "job", "experiment=smoke", "audit.kk=0.2"), r"audit\.kk", "spelling")


def test_a_stage_without_an_experiment_names_experiment_not_plus():
    err = refused(memlens("train", "stage=FT.1"), r"add experiment=<name>", r"quickstart")
    assert "+stage" not in err


@pytest.mark.parametrize("override, named", [
    ("audit.measures=[ned,mai]", r"\['mai'\].*ned, loss, mia"),
    ("audit.epsilon_attack=lossx", r"'lossx'.*min_k"),
    ("audit.mia_bootstrap=0", r"audit\.mia_bootstrap=0"),
    ("stages.IPO.objective=ipox", r"'ipox'.*dpo"),
])
def test_check_refuses_a_misspelt_name_before_anything_trains(override, named):
    overrides = [override, "audit.measures=[ned,mia]"] if "bootstrap" in override else [override]
    refused(memlens("check", "experiment=quickstart", *overrides), named)


@pytest.mark.parametrize("launcher", [[], ["launcher.kind=local"]], ids=["in-process", "as-jobs"])
def test_run_refuses_a_misspelt_measure_before_its_first_stage(tmp_path, launcher):
    run_dir = tmp_path / "run"
    refused(memlens("run", "experiment=smoke", f"run_dir={run_dir}", "audit.measures=[ned,mai]", *launcher), r"'mai'")
    assert not (run_dir / "models").exists() and not (run_dir / "data").exists() and not (run_dir / "jobs").exists()


def test_multirun_and_flags_may_stand_anywhere_among_the_overrides():
    done = memlens("run", "experiment=smoke", "-m", "seed=0,1", "--cfg", "job", "-p", "seed")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["#", "sweep", "point", "1/2:", "{'seed':", "'0'}", "0",
                                   "#", "sweep", "point", "2/2:", "{'seed':", "'1'}", "1"]
