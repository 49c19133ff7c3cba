"""`memlens status experiment=<name>` (or `run_dir=...`, with the overrides the run was started with): where each
model of a run stands, one row per model (stage × sweep point), read from what is on disk and, for the launcher's
SLURM jobs, from `squeue` (and `sacct` where the cluster keeps accounting). Nothing is written and no lock is taken.

States, in the order a model passes them:
- not started: no directory, no job;
- queued: a SLURM job that waits (on which upstream models, or SLURM's own reason);
- running: a SLURM job that runs, a `memlens train` holding the model, or the model `memlens run` is training now
  (job id, host, step k/n, age of its last log line);
- stopped: a directory with progress but nothing working on it (killed or preempted; rerunning resumes);
- failed: its job ended without finishing it (exit code where SLURM accounts for it, the last error line, the log);
- stale: finished, but not with what the experiment now says (other settings, seed, data, or an upstream model
  retrained since): the next `memlens run` retrains it;
- done: finished and up to date (when).
`memlens status ... --watch[=SECONDS]` redraws the table until every model is done. The exit code is 0 when every
model is done, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from memlens.harness.core.io import read_json
from memlens.harness.core.layout import (
    PROVENANCE_FILE,
    TRAIN_LOG,
    is_complete,
    model_lock_dir,
    models_dir,
)
from memlens.harness.core.lock import holders, process_alive
from memlens.recipes.orchestration.launcher import JOB_INDEX, JOBS_DIR, LIVE_STATES, upstream_models
from memlens.recipes.orchestration.pipeline import outdated_reason
from memlens.recipes.orchestration.stage_plan import PlannedStage, plan
from memlens.recipes.stages.contract import settings_match

DONE = "done"


@dataclass(frozen=True)
class ModelStatus:
    model: str
    state: str
    detail: str


def read_job_index(run_dir: Path) -> dict[str, dict]:
    """{model: its latest job} as the launcher records them (`<run_dir>/jobs/index.json`)."""
    path = Path(run_dir) / JOBS_DIR / JOB_INDEX
    return read_json(path) if path.is_file() else {}


def squeue_states(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """{job id: {state, reason, host}} of the jobs squeue still knows ({} without SLURM here)."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    done = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%r|%N"],
                          capture_output=True, text=True, timeout=60)
    states = {}
    for line in done.stdout.splitlines():
        job_id, state, reason, host = (line.split("|") + ["", "", "", ""])[:4]
        states[job_id.strip()] = {"state": state.strip(), "reason": reason.strip(), "host": host.strip()}
    return states


def sacct_exit_code(job_id: str) -> str | None:
    """`ExitCode` of an ended job where the cluster keeps accounting (None where it does not)."""
    if shutil.which("sacct") is None:
        return None
    done = subprocess.run(["sacct", "-n", "-X", "-j", job_id, "-o", "ExitCode"], capture_output=True, text=True,
                          timeout=60)
    code = done.stdout.strip().splitlines()[0].strip() if done.returncode == 0 and done.stdout.strip() else ""
    return code or None


def progress(model_dir: Path, stage: PlannedStage) -> str:
    """`step k/n, last log line 12 s ago` from the stage's train_log.jsonl."""
    total = stage.given.get("max_steps")
    log = model_dir / TRAIN_LOG
    if not log.is_file():
        return f"step 0/{total or '?'}"
    step = 0
    for line in log.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            step = max(step, int(json.loads(line).get("step") or 0))
    return f"step {step}/{total or '?'}, last log line {time.time() - log.stat().st_mtime:.0f} s ago"


def last_error_line(log: Path) -> str:
    """The last `memlens: error:` line of a job's log, else its last non-empty line."""
    if not log.is_file():
        return "(no log)"
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("memlens: error:")]      # memlens's own message names the fix
    raised = [line for line in lines if line.split(":")[0].endswith(("Error", "Exception"))]
    return (ours or raised or lines or ["(empty log)"])[-1][:300]


def local_job_alive(job: dict) -> bool:
    """A launcher.kind=local job (submitit's LocalExecutor: its job id is the process id)."""
    job_id = str(job.get("job_id", ""))
    return job_id.isdigit() and process_alive(int(job_id))


def status_of(stage: PlannedStage, planned: list[PlannedStage], run_dir: Path, seed, job: dict | None,
              queue: dict[str, dict], states: dict[str, ModelStatus], run_holders: list[dict]) -> ModelStatus:
    """One model's state (see the module docstring); `states`: the models before it in the plan."""
    name = stage.model_name
    model_dir = models_dir(run_dir) / name
    if is_complete(model_dir):
        if not settings_match(model_dir, stage.given):
            return ModelStatus(name, "stale", "trained with other settings; the next run retrains it")
        reason = outdated_reason(run_dir, model_dir, stage, seed)
        behind = [u for u in upstream_models(stage, planned) if states.get(u) and states[u].state != DONE]
        if reason is None and behind:        # the run retrains an upstream model first, then this one from it
            reason = f"{behind[0]}, which it starts from, is {states[behind[0]].state}"
        if reason:
            return ModelStatus(name, "stale", f"{reason}; the next run retrains it")
        when = read_json(model_dir / PROVENANCE_FILE).get("created_utc") or "?"
        return ModelStatus(name, DONE, f"finished {when}")
    if job is not None and job.get("kind") == "slurm" and job["job_id"] in queue:
        seen = queue[job["job_id"]]
        if seen["state"] in ("RUNNING", "COMPLETING"):
            return ModelStatus(name, "running", f"job {job['job_id']} on {seen['host'] or '?'}, "
                                                f"{progress(model_dir, stage)}")
        if seen["state"] in LIVE_STATES:
            waits = [u for u in upstream_models(stage, planned) if states.get(u, ModelStatus(u, "", "")).state != DONE]
            why = f"waits on {', '.join(waits)}" if waits and seen["reason"] == "Dependency" else seen["reason"]
            return ModelStatus(name, "queued", f"job {job['job_id']} {seen['state'].lower()} ({why})")
    holding = holders(model_lock_dir(run_dir, name))
    if holding:
        who = holding[0]
        return ModelStatus(name, "running", f"pid {who.get('pid')} on {who.get('host')}, {progress(model_dir, stage)}")
    if job is not None and job.get("kind") == "local" and local_job_alive(job):
        return ModelStatus(name, "running", f"local job {job['job_id']}, {progress(model_dir, stage)}")
    if job is not None:
        log = Path(job.get("stderr") or "")
        code = sacct_exit_code(job["job_id"]) if job.get("kind") == "slurm" else None
        return ModelStatus(name, "failed", f"job {job['job_id']} ended without finishing it"
                                           f"{f' (exit code {code})' if code else ''}: {last_error_line(log)}; log {log}")
    if model_dir.is_dir() and any(model_dir.iterdir()):
        if run_holders:
            return ModelStatus(name, "running", f"in `{run_holders[0].get('command')}` (pid {run_holders[0].get('pid')}), "
                                                f"{progress(model_dir, stage)}")
        return ModelStatus(name, "stopped", f"{progress(model_dir, stage)}; nothing is training it: rerun to resume")
    return ModelStatus(name, "not started", "")


def run_status(cfg) -> list[ModelStatus]:
    """Every planned model's state, in plan order."""
    run_dir = Path(str(cfg.run_dir))
    planned = plan(cfg)
    jobs = read_job_index(run_dir)
    queue = squeue_states(sorted({j["job_id"] for j in jobs.values() if j.get("kind") == "slurm"}))
    # A `memlens run` without a launcher trains its models in its own process, holding the run exclusively.
    run_holders = [h for h in holders(run_dir) if " run " in f" {h.get('command', '')} "]
    states: dict[str, ModelStatus] = {}
    for stage in planned:
        states[stage.model_name] = status_of(stage, planned, run_dir, cfg.get("seed"), jobs.get(stage.model_name),
                                             queue, states, run_holders)
    return list(states.values())


def render(rows: list[ModelStatus], run_dir: Path) -> str:
    width = max([len(r.model) for r in rows] + [5])
    counts = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    lines = [f"memlens status: {run_dir} ({', '.join(f'{n} {s}' for s, n in counts.items())})"]
    lines += [f"  {r.model:<{width}}  {r.state:<11}  {r.detail}".rstrip() for r in rows]
    return "\n".join(lines)


def main(cfg, watch: float | None = None) -> int:
    """Print the table (redrawn every `watch` seconds until every model is done); 0 when all are done, else 1."""
    run_dir = Path(str(cfg.run_dir))
    while True:
        rows = run_status(cfg)
        text = render(rows, run_dir)
        if watch and sys.stdout.isatty():
            print("\033[2J\033[H", end="")
        print(text, flush=True)
        finished = all(r.state == DONE for r in rows)
        if finished or not watch:
            return 0 if finished else 1
        time.sleep(watch)
        print(flush=True)
