"""`memlens run launcher.kind=local`: the run's models as jobs, one `memlens train stage=<model>` each, through submitit.

The driver plans the stage graph (recipes/plan.py), builds the data each dependency level needs (once, in the
driver), submits the level's models as jobs — at most `launcher.parallel` at a time — waits for them, and goes on
to the next level; then it runs the audit and the report as `memlens run` does. Each job is the real command
line (`python -m memlens train <the run's overrides> stage=<model> build_data=false`), so a job holds exactly
what `memlens train` holds: the run shared, its model exclusively, the models it starts from shared
(harness/core/lock.py). A finished model is skipped by its job, so a killed driver, rerun, keeps what finished and
submits the rest; a failed job stops the driver with the path of its log.

`launcher.kind`: `local` (submitit's LocalExecutor: processes on this machine). SLURM (`slurm`, submitit's
SlurmExecutor with `afterok` dependencies) is not built yet.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.core.lock import EXCLUSIVE, hold_directories
from memlens.recipes import pipeline
from memlens.recipes.plan import REFERENCE_KEYS

KINDS = ("local",)
JOBS_DIR = "jobs"          # <run_dir>/jobs/: submitit's pickles and each job's stdout / stderr


def check_launcher(cfg) -> dict | None:
    """The `launcher:` section, checked (None: train in this process, as before)."""
    section = cfg.get("launcher") or {}
    kind = section.get("kind")
    if kind is None:
        return None
    if kind not in KINDS:
        raise UserError(f"launcher.kind={kind!r}: use one of {', '.join(KINDS)} (or null: train in this process); "
                        "SLURM is not built yet")
    parallel = section.get("parallel", 2)
    if not isinstance(parallel, int) or parallel < 1:
        raise UserError(f"launcher.parallel={parallel!r}: use a positive integer (jobs at once)")
    return {"kind": kind, "parallel": parallel}


def dependency_levels(planned) -> list[list]:
    """The planned models in levels: a model's level is one above the highest of the models it starts from."""
    by_name = {s.name: s for s in planned} | {s.model_name: s for s in planned}
    level: dict[str, int] = {}
    for stage in planned:                      # the plan is in dependency order
        ups = [by_name[ref].model_name for key in REFERENCE_KEYS
               if isinstance(ref := stage.settings.get(key), str) and ref in by_name]
        level[stage.model_name] = 1 + max((level[u] for u in ups if u in level), default=-1)
    out: list[list] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for stage in planned:
        out[level[stage.model_name]].append(stage)
    return out


def train_command(overrides: list[str], sweep_point: dict, model_name: str, has_stage_key: bool) -> list[str]:
    """The job's command line: the run's own overrides (a `-m` point's swept keys as one-value sweeps, so that the
    job names its model directory as the point does), this model, the data the driver built."""
    swept = {str(k) for k in sweep_point}
    fixed = [o for o in overrides if o.split("=", 1)[0] not in swept]
    points = [f"{k}=choice({v})" for k, v in sweep_point.items()]
    quoted = model_name.replace("'", "\\'")
    stage = f"{'' if has_stage_key else '+'}stage='{quoted}'"
    return [sys.executable, "-m", "memlens", "train", *(["-m"] if points else []), *fixed, *points, stage,
            "build_data=false"]


def run_jobs(cfg, overrides: list[str], measurement, after_locks: list[tuple]) -> int:
    """The driver (see the module docstring); the audit and the report run holding `after_locks` (what
    `memlens run` holds) once every job has finished."""
    import submitit  # lazy: only a run with a launcher needs it

    settings = check_launcher(cfg)
    if cfg.get("formal") is not None:
        raise UserError("launcher: the formal-language study trains its models in formal.workers processes of its "
                        "own; run it without launcher.kind")
    run_dir = Path(str(cfg.run_dir))
    planned = pipeline.plan(cfg)
    start = time.time()
    pipeline.run_preflight(cfg, quiet=True)           # as `memlens run`: refused with the fix before anything is written
    pipeline.check_user_files(cfg, pipeline.needed_datasets(planned, cfg))
    print(f"[memlens] run {cfg.get('experiment_name')} in {run_dir}: {len(planned)} model(s) as jobs "
          f"({settings['kind']}, {settings['parallel']} at a time)", flush=True)
    executor = submitit.AutoExecutor(folder=str(run_dir / JOBS_DIR), cluster=settings["kind"])
    executor.update_parameters(timeout_min=24 * 60)
    threads = max(1, (os.cpu_count() or 1) // settings["parallel"])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    for level in dependency_levels(planned):
        build_level_data(cfg, run_dir, planned)
        for i in range(0, len(level), settings["parallel"]):
            batch = level[i:i + settings["parallel"]]
            jobs = [(stage, executor.submit(submitit.helpers.CommandFunction(
                train_command(overrides, dict(cfg.get("sweep_point") or {}), stage.model_name, "stage" in cfg),
                cwd=os.getcwd(), env=env))) for stage in batch]
            for stage, job in jobs:
                wait_for(job, stage.model_name)
    with hold_directories(after_locks, "memlens run (audit, report)"):
        pipeline.after_training(cfg, measurement)
    seconds = time.time() - start
    pipeline.write_run_record(cfg, run_dir, [], wall_seconds=round(seconds, 1), launcher=settings)
    print(f"[memlens] run {cfg.get('experiment_name')} finished in {int(seconds // 60)} min {seconds % 60:.0f} s "
          f"(jobs: {run_dir / JOBS_DIR})", flush=True)
    return 0


def build_level_data(cfg, run_dir: Path, planned) -> None:
    """Every dataset the run reads (its stages and its audit), built once by the driver before a level's jobs start,
    as `memlens run` builds them: sd_rl_prompts once the stage whose tokenizer splits it has trained. Held
    exclusively while it builds; what is built already is kept."""
    names = pipeline.needed_datasets(planned, cfg)
    tokenizer_stage = pipeline.rl_prompts_source(planned, run_dir)
    if pipeline.RL_PROMPTS in names:
        if tokenizer_stage is not None and pipeline.is_complete(tokenizer_stage):
            cfg = pipeline.set_rl_prompts_tokenizer(cfg, tokenizer_stage)
        elif tokenizer_stage is not None:
            names = [n for n in names if n != pipeline.RL_PROMPTS]
    with hold_directories([("run_dir", pipeline.datasets_dir(run_dir), EXCLUSIVE)], "memlens run (data)"):
        pipeline.build_data(cfg, run_dir, names)


def wait_for(job, model_name: str) -> None:
    """The job's result; a failed job stops the driver naming its log."""
    try:
        job.result()
    except Exception as e:           # submitit raises FailedJobError / UncompletedJobError with the job's output
        raise UserError(f"the job training {model_name} failed (log: {job.paths.stderr}); the models that "
                        f"finished are kept: rerun the same command to continue. {str(e).strip()[-1500:]}") from None
    print(f"[memlens] {model_name:<28} {'job':<9} {'done':<8} {job.job_id}", flush=True)
