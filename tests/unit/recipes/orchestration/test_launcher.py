"""The job driver's plan (recipes/orchestration/launcher.py): dependency levels from the stage graph, each job's command line, and
the `launcher:` settings refused with the key."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from memlens.harness.cli import compose
from memlens.harness.core.errors import UserError
from memlens.recipes.orchestration.launcher import check_launcher, dependency_levels, train_command
from memlens.recipes.orchestration.stage_plan import plan


def test_the_smoke_stages_fall_into_their_dependency_levels():
    levels = dependency_levels(plan(compose(["experiment=smoke"])))
    names = [sorted(s.model_name for s in level) for level in levels]
    # PT; FT.1, FT.2 and IPO start from PT; RM.1 from FT.2; the RL points from FT.1 with RM.1's reward
    assert names == [["PT"], ["FT.1", "FT.2", "IPO"], ["RM.1"], ["RLFT.1/beta=0.1", "RLFT.1/beta=0.5", "RLFT.4"]]


def test_a_job_is_memlens_train_of_its_model_with_the_runs_overrides():
    command = train_command(["experiment=smoke", "run_dir=/r"], {}, "RLFT.1/beta=0.1", has_stage_key=True)
    assert command == [sys.executable, "-m", "memlens", "train", "experiment=smoke", "run_dir=/r",
                       "stage='RLFT.1/beta=0.1'", "build_data=false"]
    swept = train_command(["experiment=rl_prompts", "stages.RLFT.4.beta=0.1"], {"stages.RLFT.4.beta": "0.1"},
                          "RLFT.4/beta=0.1", has_stage_key=False)
    assert swept[4:] == ["-m", "experiment=rl_prompts", "stages.RLFT.4.beta=choice(0.1)",
                         "+stage='RLFT.4/beta=0.1'", "build_data=false"]


def test_a_job_with_several_gpus_trains_under_accelerate_launch_one_process_per_gpu():
    command = train_command(["experiment=smoke"], {}, "FT.1", has_stage_key=True, gpus=4)
    assert command[:9] == [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu",
                           "--num_machines", "1", "--num_processes", "4"]
    assert command[9:] == ["-m", "memlens", "train", "experiment=smoke", "stage='FT.1'", "build_data=false"]
    assert train_command([], {}, "FT.1", True, gpus=1)[:3] == [sys.executable, "-m", "memlens"]


def test_slurm_resources_per_stage_override_the_defaults_and_nest_as_stages_do():
    cfg = compose(["experiment=smoke", "launcher.kind=slurm", "launcher.slurm.partition=gpu",
                   "+launcher.slurm.sbatch.qos=high", "+launcher.stages.FT.1.gpus=4",
                   "+launcher.stages.FT.1.sbatch.constraint=a100", "+launcher.stages.PT.time_min=60"])
    settings = check_launcher(cfg, plan(cfg))
    assert settings["slurm"] == {"partition": "gpu", "account": None, "time_min": 1440, "cpus_per_task": 4,
                                 "mem_gb": None, "gpus": 0, "sbatch": {"qos": "high"}}
    assert settings["stages"]["FT.1"] == {**settings["slurm"], "gpus": 4,
                                          "sbatch": {"qos": "high", "constraint": "a100"}}
    assert settings["stages"]["PT"]["time_min"] == 60 and settings["stages"]["PT"]["partition"] == "gpu"


@pytest.mark.parametrize("section, message", [
    ({"kind": "pbs"}, r"launcher.kind='pbs'.*local, slurm"),
    ({"kind": "local", "parallel": 0}, "launcher.parallel=0"),
    ({"kind": "slurm", "slurm": {"gpu": 1}}, r"launcher.slurm.gpu: unknown.*gpus.*sbatch"),
    ({"kind": "slurm", "slurm": {"cpus_per_task": 0}}, r"launcher.slurm.cpus_per_task=0: use a positive integer"),
    ({"kind": "slurm", "slurm": {"mem_gb": "lots"}}, r"launcher.slurm.mem_gb='lots'"),
    ({"kind": "slurm", "stages": {"FT": {"9": {"gpus": 2}}}}, r"launcher.stages.FT.9: no stage 'FT.9'"),
    ({"kind": "slurm", "stages": {"PT": 4}}, r"launcher.stages.PT: expected resources"),
    ({"kind": "slurm", "stages": {"PT": {"gpus": -1}}}, r"launcher.stages.PT.gpus=-1: use a non-negative"),
])
def test_bad_launcher_settings_name_the_key(section, message):
    planned = plan(compose(["experiment=smoke"]))
    with pytest.raises(UserError, match=message):
        check_launcher(OmegaConf.create({"launcher": section}), planned)
    assert check_launcher(OmegaConf.create({"launcher": {"kind": None}})) is None
