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
                                 "mem_gb": None, "gpus": 0, "signal_delay_s": 120, "max_requeues": 3,
                                 "sbatch": {"qos": "high"}}
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
    ({"kind": "slurm", "slurm": {"signal_delay_s": 0}}, r"launcher.slurm.signal_delay_s=0: use a positive integer"),
    ({"kind": "slurm", "slurm": {"max_requeues": -1}}, r"launcher.slurm.max_requeues=-1: use a non-negative"),
])
def test_bad_launcher_settings_name_the_key(section, message):
    planned = plan(compose(["experiment=smoke"]))
    with pytest.raises(UserError, match=message):
        check_launcher(OmegaConf.create({"launcher": section}), planned)
    assert check_launcher(OmegaConf.create({"launcher": {"kind": None}})) is None


def test_a_job_requeues_on_slurms_signal_until_max_requeues_then_fails_naming_the_setting(capsys):
    """TrainJob.checkpoint (submitit calls it on SLURM's signal; here its child has exited): the same job, one requeue
    counted, while fewer than max_requeues; then None, which submitit turns into a failed job, and a line saying why."""
    from memlens.recipes.orchestration.launcher import TrainJob

    job = TrainJob(["memlens", "train"], "/tmp", max_requeues=2)
    first = job.checkpoint()
    assert first.function.requeues == 1 and first.function.command == job.command
    second = first.function.checkpoint()
    assert second.function.requeues == 2
    assert second.function.checkpoint() is None
    assert "not requeued again: requeued 2 time(s) already (launcher.slurm.max_requeues)" in capsys.readouterr().err


def test_a_job_that_fails_is_not_requeued(tmp_path):
    """A child that exits non-zero for any reason but a preemption fails the job's callable (submitit then writes the
    error, and never requeues it)."""
    from memlens.recipes.orchestration.launcher import TrainJob

    job = TrainJob([sys.executable, "-c", "import sys; sys.exit(2)"], str(tmp_path), max_requeues=3)
    with pytest.raises(RuntimeError, match="exited with code 2"):
        job()
