"""A SLURM job preempted mid-stage resumes from the checkpoint it saved and trains the bits an uninterrupted run trains
(memlens.recipes.stages.preemption, launcher.TrainJob), on the one-node cluster of tests/slurm_cluster.py.

The job is the launcher's own (submit_slurm: submitit's SlurmExecutor with `--signal=USR2@<signal_delay_s>`, a
TrainJob running the real `memlens train`); the preemption is SLURM's own signal, `scancel --signal=USR2`, sent while
the stage is between two scheduled saves. Both runs compute with one torch thread (the job's cpus_per_task, the
reference's OMP_NUM_THREADS), as the launcher's thread note requires for byte-identical weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlens.harness.cli import compose_only
from memlens.harness.core.errors import UserError
from memlens.harness.core.layout import checkpoint_dirs
from memlens.recipes.orchestration import launcher, status
from memlens.recipes.orchestration.stage_plan import plan
from tests.integration.run_helpers import OFFLINE, REPO, copy_run

pytestmark = pytest.mark.slow

STAGE = "FT.2"
STEPS = ["stages.FT.2.max_steps=150", "stages.FT.2.save_steps=50", "stages.FT.2.logging_steps=1"]


def last_logged_step(model_dir: Path) -> int:
    log = model_dir / "train_log.jsonl"
    if not log.is_file():
        return 0
    steps = [json.loads(line).get("step", 0) for line in log.read_text().splitlines() if line.strip()]
    return max(steps, default=0)


def losses(model_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) of every logged training step (the Trainer's end-of-training summary rows left out)."""
    rows = [json.loads(line) for line in (model_dir / "train_log.jsonl").read_text().splitlines() if line.strip()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def status_row(cfg, model: str) -> tuple[str, str]:
    row = next(r for r in status.run_status(cfg) if r.model == model)
    return row.state, row.detail


def a_job_that_fails_is_failed_in_status(run_dir: Path, common: list[str], cfg) -> None:
    """A job whose `memlens train` exits 2 (a bad setting) fails, is not requeued, and status names its error."""
    stage = next(s for s in plan(cfg) if s.model_name == "FT.1")
    command = launcher.train_command([f"run_dir={run_dir}", *common, "stages.FT.1.lr=-1"], {}, "FT.1", True)
    job = launcher.submit_slurm(run_dir, stage, {**launcher.SLURM_DEFAULTS, "cpus_per_task": 1, "time_min": 30},
                                command, [])
    launcher.record_job(run_dir, "FT.1", job, "slurm")
    with pytest.raises(UserError, match="the job training FT.1 failed"):
        launcher.wait_for_slurm(job, "FT.1")
    # The job's result is written before its process ends, and SLURM lists the job as running until it has: status
    # reads SLURM, so it says `failed` once squeue no longer lists the job as live (seen: RUNNING for a moment, loaded).
    deadline = time.time() + 60
    while launcher.slurm_state(job.job_id).split(" ")[0] in launcher.LIVE_STATES and time.time() < deadline:
        time.sleep(0.2)
    state, detail = status_row(cfg, "FT.1")
    assert state == "failed" and "stages.FT.1.lr" in detail and str(job.paths.stderr) in detail, detail
    assert "Requeued" not in Path(job.paths.stderr).read_text()


def wait_until_requeued(job_id: str, env: dict[str, str], cfg, timeout_s: float = 120) -> None:
    """SLURM holds a requeued batch job until its old step credential expires (Reason=BeginTime; the test cluster's
    cred_expire is 15 s, tests/slurm_cluster.py): `memlens status` shows it queued meanwhile."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        reason = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%r"], env=env, capture_output=True,
                                text=True, timeout=60).stdout.strip()
        if reason == "BeginTime":
            state, detail = status_row(cfg, STAGE)
            assert state == "queued" and f"job {job_id} pending (BeginTime)" in detail, detail
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} was not requeued within {timeout_s:.0f} s")


def files_of(model_dir: Path) -> dict[str, bytes]:
    """Weights and tokenizer of the final model and of every checkpoint, by relative path."""
    return {str(p.relative_to(model_dir)): p.read_bytes() for p in sorted(model_dir.rglob("*.safetensors"))}


def test_a_preempted_job_resumes_from_its_checkpoint_and_trains_the_same_bits(smoke, tmp_path):
    from tests.slurm_cluster import missing

    if why := missing():
        pytest.skip(why)
    source, _ = smoke
    reference, preempted = tmp_path / "reference", tmp_path / "preempted"
    for run_dir in (reference, preempted):
        copy_run(source, run_dir, ["data", "models/PT"])
    common = ["experiment=smoke", "device=cpu", "build_data=false", *STEPS]

    # The uninterrupted reference trains beside the job (a process of its own, one thread): the job's test spends most
    # of its time waiting (the cluster's start, scheduling, SLURM's 15 s hold of the requeued job), so the two overlap.
    reference_log = tmp_path / "reference.log"
    with open(reference_log, "w") as log:
        reference_run = subprocess.Popen(
            [sys.executable, "-m", "memlens", "train", f"stage={STAGE}", f"run_dir={reference}", *common], cwd=REPO,
            env={**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, stdout=log,
            stderr=subprocess.STDOUT)
    try:
        preempt_and_requeue(preempted, common)
    finally:
        if reference_run.wait(timeout=600) != 0:
            pytest.fail(f"the reference run failed:\n{reference_log.read_text()[-5000:]}")
    assert losses(preempted / "models" / STAGE) == losses(reference / "models" / STAGE), \
        "the same loss at every step, each logged once"
    assert sorted(checkpoint_dirs(preempted / "models" / STAGE)) \
        == sorted(checkpoint_dirs(reference / "models" / STAGE)) == [50, 100, 150]
    ours, theirs = files_of(preempted / "models" / STAGE), files_of(reference / "models" / STAGE)
    assert ours.keys() == theirs.keys() and ours, (sorted(ours), sorted(theirs))
    different = [name for name in ours if ours[name] != theirs[name]]
    assert not different, f"weights differ from the uninterrupted run's: {different}"


def preempt_and_requeue(preempted: Path, common: list[str]) -> None:
    """The job on a one-node cluster: preempted by SLURM's USR2 between two saves, requeued, done; then a job that
    fails is shown failed."""
    from tests.slurm_cluster import one_node_slurm

    cfg = compose_only(["train", f"stage={STAGE}", f"run_dir={preempted}", *common])[0]
    stage = next(s for s in plan(cfg) if s.model_name == STAGE)
    command = launcher.train_command([f"run_dir={preempted}", *common], {}, STAGE, True)
    resources = {**launcher.SLURM_DEFAULTS, "cpus_per_task": 1, "time_min": 30, "signal_delay_s": 60}
    model_dir = preempted / "models" / STAGE
    with one_node_slurm(preempted.parent / "cluster") as env:
        saved = dict(os.environ)
        os.environ.update(env)                     # submitit's sbatch and the driver's squeue find this cluster
        try:
            job = launcher.submit_slurm(preempted, stage, resources, command, [])
            launcher.record_job(preempted, STAGE, job, "slurm")
            deadline = time.time() + 300
            while last_logged_step(model_dir) < 60:        # between the saves at 50 and 100
                assert time.time() < deadline, "the job never reached step 60"
                time.sleep(0.2)
            state, detail = status_row(cfg, STAGE)
            assert state == "running" and f"job {job.job_id} on " in detail and "/150" in detail, detail
            subprocess.run(["scancel", "--signal=USR2", str(job.job_id)], env=env, check=True, timeout=60)
            wait_until_requeued(str(job.job_id), env, cfg)
            launcher.wait_for_slurm(job, STAGE)
            assert status_row(cfg, STAGE)[0] == "done"
            a_job_that_fails_is_failed_in_status(preempted, common, cfg)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    log = Path(job.paths.stderr).read_text() + Path(job.paths.stdout).read_text()
    assert "Requeued job" in log, log[-3000:]
    assert f"stage {STAGE} stopped for its job's preemption (SIGUSR2)" in log, log[-3000:]
    assert not list(model_dir.glob("preempted-*")), "the checkpoint kept to resume from is removed at the end"
