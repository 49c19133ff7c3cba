"""`memlens status` on copies of the smoke run, in each state a model takes without a cluster: done, stale (its own
settings, and a model downstream of a stale one), stopped (progress, no process), running (a live holder of its lock),
failed (a local job that ended without finishing it, its error line and log), not started; exit 0 only when every
model is done. The SLURM states (queued, running as a job, failed as a job) are checked on the one-node cluster in
test_slurm_preemption.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from memlens.harness.core.layout import PROVENANCE_FILE, model_lock_dir
from memlens.harness.core.lock import hold_directories
from tests.integration.run_helpers import copy_run, memlens

pytestmark = pytest.mark.slow


def rows(stdout: str) -> dict[str, tuple[str, str]]:
    """{model: (state, detail)} from the table."""
    out = {}
    for line in stdout.splitlines()[1:]:
        parts = line.split(maxsplit=1)
        if len(parts) == 2:
            state, _, detail = parts[1].strip().partition("  ")
            if parts[1].startswith("not started"):
                state, detail = "not started", parts[1][len("not started"):]
            out[parts[0]] = (state.strip(), detail.strip())
    return out


def status(run_dir, *overrides):
    return memlens("status", "experiment=smoke", f"run_dir={run_dir}", *overrides)


def test_a_finished_run_is_done_and_exits_0(smoke):
    run_dir, _ = smoke
    done = status(run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {state for state, _ in rows(done.stdout).values()} == {"done"} and len(rows(done.stdout)) == 8


def test_each_state_of_a_model_without_a_cluster(smoke, tmp_path):
    source, _ = smoke
    run_dir = tmp_path / "run"
    copy_run(source, run_dir)
    (run_dir / "models" / "IPO" / PROVENANCE_FILE).unlink()            # IPO: progress on disk, nothing running
    shutil.rmtree(run_dir / "models" / "RLFT.4")                        # RLFT.4: nothing at all
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()                     # RLFT.1/beta=0.5: its local job died
    (run_dir / "models" / "RLFT.1" / "beta=0.5" / PROVENANCE_FILE).unlink()
    log = run_dir / "jobs" / "1_0_log.err"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("loading...\nmemlens: error: stages.RLFT.1.lr=-1.0: must be > 0\n")
    (run_dir / "jobs" / "index.json").write_text(json.dumps(
        {"RLFT.1/beta=0.5": {"job_id": dead, "kind": "local", "stderr": str(log)}}))
    (run_dir / "models" / "RLFT.1" / "beta=0.1" / PROVENANCE_FILE).unlink()   # beta=0.1: being trained
    with hold_directories([("stage", model_lock_dir(run_dir, "RLFT.1/beta=0.1"))], "memlens train stage=RLFT.1"):
        shown = status(run_dir, "stages.FT.2.lr=0.01")                  # FT.2's settings changed: stale
    assert shown.returncode == 1, shown.stdout + shown.stderr
    table = rows(shown.stdout)
    assert table["PT"][0] == "done" and table["FT.1"][0] == "done"
    assert table["FT.2"] == ("stale", "trained with other settings; the next run retrains it")
    assert table["RM.1"][0] == "stale" and "FT.2, which it starts from, is stale" in table["RM.1"][1]
    assert table["IPO"][0] == "stopped" and "rerun to resume" in table["IPO"][1]
    assert table["RLFT.4"][0] == "not started"
    assert table["RLFT.1/beta=0.1"][0] == "running" and "step " in table["RLFT.1/beta=0.1"][1]
    state, detail = table["RLFT.1/beta=0.5"]
    assert state == "failed" and "stages.RLFT.1.lr=-1.0: must be > 0" in detail and str(log) in detail


def test_watch_is_a_flag_of_status_alone(smoke):
    run_dir, _ = smoke
    assert status(run_dir, "--watch=0.5").returncode == 0          # all done: returns at once
    refused = memlens("report", "experiment=smoke", f"run_dir={run_dir}", "--watch")
    assert refused.returncode == 2 and "--watch is a flag of `memlens status`" in refused.stderr
