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


def test_the_driver_and_its_jobs_share_the_data_once_jobs_run_and_the_late_data_has_a_lock_of_its_own(tmp_path):
    """The race a SLURM sweep lost in CI: a job starting (the data shared) while the driver checked the next point's
    data (exclusive) was refused and failed. Before any job the driver holds the data exclusively; once jobs run it
    holds it shared, as they do, waiting for one that is taking it, and the late dataset (no manifest yet, read by
    no queued job) by a lock of its own; a job that only reads the data waits for the driver instead of failing."""
    from memlens.harness.core.layout import dataset_lock_dir, datasets_dir
    from memlens.harness.core.lock import EXCLUSIVE, SHARED, hold_directories
    from memlens.recipes.orchestration.launcher import data_locks
    from memlens.recipes.orchestration.pipeline import DATA_WAIT_S, training_locks

    run_dir = tmp_path / "run"
    (run_dir / "data" / "sd_base").mkdir(parents=True)
    (run_dir / "data" / "sd_base" / "manifest.json").write_text("{}")
    names = ["sd_base", "sd_rl_prompts"]
    assert data_locks(run_dir, names, jobs_started=False) == [("run_dir", datasets_dir(run_dir), EXCLUSIVE)]
    driver = data_locks(run_dir, names, jobs_started=True)
    assert driver == [("run_dir", datasets_dir(run_dir), SHARED, DATA_WAIT_S),
                      ("run_dir", dataset_lock_dir(run_dir, "sd_rl_prompts"), EXCLUSIVE)]
    planned = plan(compose(["experiment=smoke", f"run_dir={run_dir}"]))
    ft2 = [s for s in planned if s.model_name == "FT.2"]
    job = training_locks(run_dir, ft2, planned, ["sd_base"], reads_only=True)
    assert ("run_dir", datasets_dir(run_dir), SHARED, DATA_WAIT_S) in job
    assert ("run_dir", datasets_dir(run_dir), SHARED) in training_locks(run_dir, ft2, planned, ["sd_base"])
    with hold_directories(driver, "memlens run (data)"), hold_directories(job, "memlens train stage=FT.2"):
        pass                                       # both at once: neither is refused


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
