"""`memlens run launcher.kind=local|slurm`: the run's models as jobs, one `memlens train stage=<model>` each, through
submitit.

The driver plans the stage graph (recipes/orchestration/stage_plan.py), builds the data the jobs read (once, in the driver), submits one
job per model and waits for them; then it runs the audit and the report as `memlens run` does. Each job is the real
command line (`python -m memlens train <the run's overrides> stage=<model> build_data=false`), so a job holds exactly
what `memlens train` holds: the run shared, its model exclusively, the models it starts from shared
(harness/core/lock.py). A finished model is skipped by its job, so a killed driver, rerun, keeps what finished and
submits the rest; a failed job stops the driver with the path of its log.

- `local`: submitit's LocalExecutor, processes on this machine, level by level of the stage graph, at most
  `launcher.parallel` at a time.
- `slurm`: submitit's SlurmExecutor. Every model whose data exists is submitted at once, each with `afterok` on the
  jobs of the models it starts from (and `kill-on-invalid-dep`, so a failed upstream cancels its dependants instead
  of leaving them pending); the data that needs a trained model (sd_rl_prompts and its held-out twin, split by PT's
  tokenizer) is built when that model's job ends, then its readers are submitted; once every job has ended, the data
  only the audit reads. Resources per job from `launcher.slurm`, per stage
  from `launcher.stages.<NAME>`; a job with `gpus > 1` trains under `accelerate launch` on its node. The points of
  a `-m` sweep are submitted together by one driver (a model they share is one job).
The driver waits on each job's result file and asks `squeue` for the state of a job that has none: submitit's own
watcher reads `sacct`, which a cluster without accounting storage does not answer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, read_json
from memlens.harness.core.layout import LATE_DATASETS, RL_PROMPTS, dataset_lock_dir, datasets_dir
from memlens.harness.core.lock import EXCLUSIVE, SHARED, hold_directories
from memlens.recipes.orchestration import pipeline
from memlens.recipes.orchestration.stage_plan import REFERENCE_KEYS, needed_datasets
from memlens.recipes.stages import preemption

KINDS = ("local", "slurm")
JOBS_DIR = "jobs"          # <run_dir>/jobs/: submitit's pickles and each job's stdout / stderr
JOB_INDEX = "index.json"   # <run_dir>/jobs/index.json: each model's latest job (memlens status reads it)
# A SLURM job's resources: `launcher.slurm` for every job, `launcher.stages.<NAME>` for one stage's jobs.
SLURM_DEFAULTS: dict[str, Any] = {"partition": None, "account": None, "time_min": 1440, "cpus_per_task": 4,
                                  "mem_gb": None, "gpus": 0, "signal_delay_s": 120, "max_requeues": 3, "sbatch": {}}
# squeue states of a job that may still write its result (anything else, or a job squeue no longer knows, has ended)
LIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
               "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}
RESULT_GRACE_S = 30        # an ended job's result file may reach a shared filesystem's other clients late


def check_launcher(cfg, planned=None) -> dict | None:
    """The `launcher:` section, checked (None: train in this process, as before)."""
    section = cfg.get("launcher") or {}
    if not isinstance(section, dict):                  # a DictConfig from the composed config
        section = OmegaConf.to_container(section, resolve=True)
    kind = section.get("kind")
    if kind is None:
        return None
    if kind not in KINDS:
        raise UserError(f"launcher.kind={kind!r}: use one of {', '.join(KINDS)} (or null: train in this process)")
    parallel = section.get("parallel", 2)
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise UserError(f"launcher.parallel={parallel!r}: use a positive integer (jobs at once)")
    defaults = check_resources(dict(section.get("slurm") or {}), "launcher.slurm", SLURM_DEFAULTS)
    per_stage = flatten_resources(dict(section.get("stages") or {}))
    names = None if planned is None else {s.name for s in planned}
    for name, resources in per_stage.items():
        if names is not None and name not in names:
            raise UserError(f"launcher.stages.{name}: no stage {name!r} in this experiment (stages: "
                            f"{', '.join(sorted(names))})")
        per_stage[name] = check_resources(resources, f"launcher.stages.{name}", defaults)
    return {"kind": kind, "parallel": parallel, "slurm": defaults, "stages": per_stage}


def flatten_resources(node: dict, prefix: str = "") -> dict[str, dict]:
    """`{FT: {"1": {gpus: 4}}}` -> `{"FT.1": {gpus: 4}}`, nested as `stages:` is (recipes/orchestration/stage_plan.py)."""
    out: dict[str, dict] = {}
    for key, value in node.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if not isinstance(value, dict):
            raise UserError(f"launcher.stages.{name}: expected resources ({{gpus: 4, time_min: 120, ...}}), "
                            f"got {value!r}")
        if set(value) & set(SLURM_DEFAULTS):
            out[name] = dict(value)
        else:
            out.update(flatten_resources(value, name))
    return out


def check_resources(given: dict, where: str, defaults: dict) -> dict:
    """Resources over `defaults`, every key and type checked."""
    unknown = sorted(set(given) - set(SLURM_DEFAULTS))
    if unknown:
        raise UserError(f"{where}.{unknown[0]}: unknown; the keys are {', '.join(SLURM_DEFAULTS)} (any other "
                        f"sbatch option goes under {where}.sbatch, e.g. {{qos: high}})")
    out = {**defaults, **given}
    for key in ("time_min", "cpus_per_task", "gpus", "signal_delay_s", "max_requeues"):
        value = out[key]
        lowest = 0 if key in ("gpus", "max_requeues") else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
            raise UserError(f"{where}.{key}={value!r}: use a {'non-negative' if lowest == 0 else 'positive'} "
                            "integer")
    if out["mem_gb"] is not None and (not isinstance(out["mem_gb"], (int, float)) or out["mem_gb"] <= 0):
        raise UserError(f"{where}.mem_gb={out['mem_gb']!r}: use a positive number of GB (or null: the partition's "
                        "default)")
    for key in ("partition", "account"):
        if out[key] is not None and not isinstance(out[key], str):
            raise UserError(f"{where}.{key}={out[key]!r}: use a name (or null: the cluster's default)")
    if not isinstance(out["sbatch"], dict):
        raise UserError(f"{where}.sbatch={out['sbatch']!r}: use a mapping of sbatch options, e.g. {{qos: high}}")
    out["sbatch"] = {**defaults.get("sbatch", {}), **dict(out["sbatch"])}
    return out


def dependency_levels(planned) -> list[list]:
    """The planned models in levels: a model's level is one above the highest of the models it starts from."""
    level: dict[str, int] = {}
    for stage in planned:                      # the plan is in dependency order
        level[stage.model_name] = 1 + max((level[u] for u in upstream_models(stage, planned) if u in level),
                                          default=-1)
    out: list[list] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for stage in planned:
        out[level[stage.model_name]].append(stage)
    return out


def upstream_models(stage, planned) -> list[str]:
    """The planned models `stage` starts from (init, reward model, reference...)."""
    by_name = {s.name: s for s in planned} | {s.model_name: s for s in planned}
    return [by_name[ref].model_name for key in REFERENCE_KEYS
            if isinstance(ref := stage.given.get(key), str) and ref in by_name]


def train_command(overrides: list[str], sweep_point: dict, model_name: str, has_stage_key: bool,
                  gpus: int = 0) -> list[str]:
    """The job's command line: the run's own overrides (a `-m` point's swept keys as one-value sweeps, so that the
    job names its model directory as the point does), this model, the data the driver built. With `gpus > 1`, under
    `accelerate launch` with one process per GPU of the job's node."""
    swept = {str(k) for k in sweep_point}
    fixed = [o for o in overrides if o.split("=", 1)[0] not in swept]
    points = [f"{k}=choice({v})" for k, v in sweep_point.items()]
    quoted = model_name.replace("'", "\\'")
    stage = f"{'' if has_stage_key else '+'}stage='{quoted}'"
    python = [sys.executable]
    if gpus > 1:
        python += ["-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu", "--num_machines", "1",
                   "--num_processes", str(gpus)]
    return [*python, "-m", "memlens", "train", *(["-m"] if points else []), *fixed, *points, stage,
            "build_data=false"]


@dataclass
class Point:
    """One run (one `-m` point) as the driver sees it: its config, plan, launcher settings, job command lines, the
    models its jobs train, and what `memlens run` holds while the audit and the report write."""

    cfg: Any
    run_dir: Path
    planned: list
    settings: dict
    commands: dict[str, list[str]]
    to_train: list
    after_locks: list[tuple]


def run_jobs(points: list[tuple], measurement) -> int:
    """The driver (see the module docstring) for `(cfg, overrides, after_locks)` per run or `-m` point. Every point is
    checked before anything is submitted. `local`: point by point. `slurm`: every point's models submitted together (a
    model two points share, e.g. their upstream PT, is one job), then each point's audit and report in turn, holding
    `after_locks`."""
    start = time.time()
    prepared = [prepare_point(*point, measurement=measurement) for point in points]
    kinds = {p.settings["kind"] for p in prepared}
    if len(kinds) > 1:
        raise UserError(f"launcher.kind differs between the sweep points ({', '.join(sorted(kinds))}): sweep it in "
                        "separate commands")
    if kinds == {"slurm"}:
        run_slurm(prepared)
    for point in prepared:
        if point.settings["kind"] == "local":
            run_local(point)
        finish_point(point, measurement, start)
    return 0


def prepare_point(cfg, overrides: list[str], after_locks: list[tuple], measurement=None) -> Point:
    """A point checked as `memlens run` checks it (refused with the fix before anything is written), its job
    command lines, and the models already finished (not submitted)."""
    if cfg.get("formal") is not None:
        raise UserError("launcher: the formal-language study trains its models in formal.workers processes of its "
                        "own; run it without launcher.kind")
    run_dir = Path(str(cfg.run_dir))
    planned = pipeline.plan(cfg)
    settings = check_launcher(cfg, planned)
    pipeline.run_preflight(cfg, quiet=True, planned=planned, check_audit=pipeline.audit_check(cfg, measurement))
    pipeline.check_user_files(cfg, pipeline.needed_datasets(planned, cfg))
    at_once = f"{settings['parallel']} at a time" if settings["kind"] == "local" else "afterok dependencies"
    point = dict(cfg.get("sweep_point") or {})
    print(f"[memlens] run {cfg.get('experiment_name')} in {run_dir}{f' {point}' if point else ''}: {len(planned)} "
          f"model(s) as jobs ({settings['kind']}, {at_once})", flush=True)
    name_thread_difference(settings, planned)
    commands = {s.model_name: train_command(overrides, point, s.model_name, "stage" in cfg,
                                            resources_of(settings, s)["gpus"]) for s in planned}
    finished = finished_models(run_dir, planned, cfg.get("seed"))
    for stage in planned:
        if stage.model_name in finished:
            print(f"[memlens] {stage.model_name:<28} {'job':<9} {'skipped':<8} (finished)", flush=True)
    return Point(cfg, run_dir, planned, settings, commands, [s for s in planned if s.model_name not in finished],
                 after_locks)


def finish_point(point: Point, measurement, start: float) -> None:
    """The point's audit and report (as `memlens run` after training), and its run record."""
    with hold_directories(point.after_locks, "memlens run (audit, report)"):
        pipeline.after_training(point.cfg, measurement)
    seconds = time.time() - start
    pipeline.write_run_record(point.cfg, point.run_dir, [], wall_seconds=round(seconds, 1),
                              launcher={"kind": point.settings["kind"], "parallel": point.settings["parallel"]})
    print(f"[memlens] run {point.cfg.get('experiment_name')} finished in {int(seconds // 60)} min {seconds % 60:.0f} s "
          f"(jobs: {point.run_dir / JOBS_DIR})", flush=True)


def finished_models(run_dir: Path, planned, seed) -> set[str]:
    """The models no job needs to train: finished, up to date, and every model they start from too (a model whose
    upstream a job will retrain is outdated once it has; its own job then retrains it)."""
    finished: set[str] = set()
    for stage in planned:                      # dependency order: upstream models are decided first
        if all(u in finished for u in upstream_models(stage, planned)) \
                and pipeline.is_up_to_date(run_dir, stage, seed):
            finished.add(stage.model_name)
    return finished


def job_threads(settings: dict, stage) -> int:
    """The torch threads a job computes with: a share of this machine's cores (local), its cpus_per_task (slurm)."""
    if settings["kind"] == "local":
        return max(1, (os.cpu_count() or 1) // settings["parallel"])
    return int(resources_of(settings, stage)["cpus_per_task"])


def name_thread_difference(settings: dict, planned) -> None:
    """Say so when jobs compute with another thread count than a sequential run here would: where MKL honours
    MKL_CBWR (Intel processors) the weights' last bits follow the thread count (docs/methods.md, "What reproduces
    where"), so the two are not expected to be byte-identical there."""
    here = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    other = sorted({job_threads(settings, stage) for stage in planned} - {here})
    if other:
        print(f"[memlens] jobs compute with {'/'.join(map(str, other))} torch thread(s), a sequential run here with "
              f"{here}: on processors where MKL honours MKL_CBWR (Intel) their weights may differ in the last bits",
              flush=True)


def resources_of(settings: dict, stage) -> dict:
    """A stage's SLURM resources: its own `launcher.stages.<NAME>`, else `launcher.slurm`."""
    return settings["stages"].get(stage.name, settings["slurm"])


def run_local(point: Point) -> None:
    """Level by level, `parallel` jobs at a time, each with cores / parallel torch threads."""
    import submitit  # lazy: only a run with a launcher needs it

    executor = submitit.AutoExecutor(folder=str(point.run_dir / JOBS_DIR), cluster="local")
    executor.update_parameters(timeout_min=24 * 60)
    parallel = point.settings["parallel"]
    threads = job_threads(point.settings, None)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    for level in dependency_levels(point.planned):
        level = [s for s in level if s in point.to_train]
        build_level_data(point.cfg, point.run_dir, point.planned)
        for i in range(0, len(level), parallel):
            jobs = [(stage, executor.submit(submitit.helpers.CommandFunction(
                point.commands[stage.model_name], cwd=os.getcwd(), env=env))) for stage in level[i:i + parallel]]
            for stage, job in jobs:
                record_job(point.run_dir, stage.model_name, job, "local")
            for stage, job in jobs:
                wait_for(job, stage.model_name)


def run_slurm(points: list[Point]) -> None:
    """Every model whose data exists submitted at once with `afterok` on its upstream jobs; the late data (built from
    a trained model) once that model's job ends, then its readers; then every job waited for, in plan order. A model
    that several points plan (same directory, same settings: their shared upstream) is one job."""
    jobs: dict[str, Any] = {}
    waited: set[str] = set()
    waiting = {i: list(point.to_train) for i, point in enumerate(points)}
    while any(waiting.values()):
        submitted = False
        for i, point in enumerate(points):
            late = build_level_data(point.cfg, point.run_dir, point.planned, jobs_started=bool(jobs))
            ready = [s for s in waiting[i] if not late & set(needed_datasets([s], point.cfg, with_audit=False))]
            for stage in ready:
                if stage.model_name not in jobs:
                    jobs[stage.model_name] = queue_slurm(point, stage, jobs)
                    submitted = True
            waiting[i] = [s for s in waiting[i] if s not in ready]
        if not submitted and any(waiting.values()):  # the late data waits for the model whose tokenizer splits it
            point = points[next(i for i, w in waiting.items() if w)]
            source = pipeline.rl_prompts_source(point.planned, point.run_dir)
            name = next((s.model_name for s in point.planned
                         if pipeline.models_dir(point.run_dir) / s.model_name == source), None)
            if name not in jobs or name in waited:
                raise UserError(f"{RL_PROMPTS} waits for {source}, which no job trains: train it first "
                                f"(memlens train stage={source.name})")
            wait_for_slurm(jobs[name], name)
            waited.add(name)
    for name, job in jobs.items():
        if name not in waited:
            wait_for_slurm(job, name)
    for point in points:     # the data only the audit reads, when no job was left waiting for it (all were finished)
        build_level_data(point.cfg, point.run_dir, point.planned)


def queue_slurm(point: Point, stage, jobs: dict[str, Any]):
    """Submit one model's job, `afterok` on the jobs of the models it starts from; print its line."""
    after = [jobs[u].job_id for u in upstream_models(stage, point.planned) if u in jobs]
    job = submit_slurm(point.run_dir, stage, resources_of(point.settings, stage), point.commands[stage.model_name],
                       after)
    record_job(point.run_dir, stage.model_name, job, "slurm")
    print(f"[memlens] {stage.model_name:<28} {'job':<9} {'queued':<8} {job.job_id}"
          + (f" (afterok:{':'.join(after)})" if after else ""), flush=True)
    return job


@dataclass
class TrainJob:
    """One model's SLURM job: `memlens train` as a child process, a callable submitit pickles and calls on the node.
    It is checkpointable in submitit's sense (it has `checkpoint`): when SLURM signals the job (SIGUSR2
    `signal_delay_s` before its time limit, or `scancel --signal=USR2` for a preemption), submitit calls
    `checkpoint()`, which has the child save a checkpoint at its next step and exit
    (memlens.recipes.stages.preemption), then requeues the job with this callable, whose `memlens train` resumes from
    that checkpoint. A child that fails for any other reason fails the job: it is never requeued. After
    `max_requeues` requeues the job is not requeued again and fails, naming the setting."""

    command: list[str]
    cwd: str
    max_requeues: int
    requeues: int = 0
    wait_s: float = 600.0       # how long checkpoint() waits for the child to save and exit

    def __call__(self) -> str:
        env = {**os.environ, preemption.ENVIRONMENT: "1"}
        self._child = subprocess.Popen(self.command, cwd=self.cwd, env=env)   # its output: the job's own log
        code = self._child.wait()
        if code == preemption.PREEMPTED_EXIT_CODE:
            return self.stopped_by_slurm()
        if code:
            raise RuntimeError(f"`memlens train` exited with code {code} (its error is above in this log)")
        return "trained"

    def checkpoint(self):
        """submitit's hook on SLURM's signal: the child saves and stops; then this job, requeued (or None: not)."""
        from submitit.helpers import DelayedSubmission  # lazy: only a job on a cluster calls it

        child = getattr(self, "_child", None)
        if child is not None and not child_exited(child.pid):
            with contextlib.suppress(ProcessLookupError):   # SLURM may have signalled it already: the same request
                os.kill(child.pid, signal.SIGUSR2)
            if not child_exited(child.pid, self.wait_s):    # the step outlasted the wait: the last scheduled save
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
                child_exited(child.pid, 60)
        if self.requeues >= self.max_requeues:
            print(f"memlens: not requeued again: requeued {self.requeues} time(s) already "
                  "(launcher.slurm.max_requeues); rerun the driver to continue from the last checkpoint",
                  file=sys.stderr, flush=True)
            return None
        return DelayedSubmission(TrainJob(self.command, self.cwd, self.max_requeues, self.requeues + 1, self.wait_s))

    def stopped_by_slurm(self) -> str:
        """The child saved and stopped on a SIGTERM that did not pass through submitit (SLURM preempting or
        requeueing the job kills it after KillWait): ask SLURM to requeue it, as submitit does, and wait to be
        stopped, so that no result is written for a job that will run again."""
        job_id = os.environ.get("SLURM_JOB_ID")
        if job_id is None:
            raise RuntimeError("`memlens train` stopped for a preemption outside SLURM; rerun it to resume")
        subprocess.run(["scontrol", "requeue", job_id], capture_output=True, timeout=60)
        time.sleep(300)
        raise RuntimeError(f"job {job_id} saved a checkpoint for a preemption but was not stopped within 300 s")

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_child"}     # a process is not pickled


def child_exited(pid: int, wait_s: float = 0.0) -> bool:
    """Whether the child `pid` has exited, waiting up to `wait_s`. With os.waitpid, not Popen's methods: this runs in a
    signal handler that interrupted Popen.wait, whose lock that frame still holds (Popen.poll would answer None, and
    Popen.wait time out, however long ago the child exited)."""
    deadline = time.time() + wait_s
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return True
        except ChildProcessError:                  # reaped already
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.2)


def submit_slurm(run_dir: Path, stage, resources: dict, command: list[str], after: list[str]):
    """One sbatch job through submitit's SlurmExecutor: requeued on SLURM's signal (TrainJob)."""
    import submitit  # lazy: only a run with a launcher needs it

    executor = submitit.SlurmExecutor(folder=str(run_dir / JOBS_DIR))
    params: dict[str, Any] = {"job_name": f"memlens:{stage.model_name}", "time": resources["time_min"],
                              "signal_delay_s": resources["signal_delay_s"],
                              "cpus_per_task": resources["cpus_per_task"], "ntasks_per_node": 1,
                              "setup": [f"export OMP_NUM_THREADS={resources['cpus_per_task']}",
                                        f"export MKL_NUM_THREADS={resources['cpus_per_task']}"],
                              "additional_parameters": {**({"kill-on-invalid-dep": "yes"} if after else {}),
                                                        **resources["sbatch"]}}
    optional = {"partition": resources["partition"], "account": resources["account"],
                "gpus_per_node": resources["gpus"] or None,
                "mem": f"{resources['mem_gb']}GB" if resources["mem_gb"] is not None else None,
                "dependency": f"afterok:{':'.join(after)}" if after else None}
    params.update({k: v for k, v in optional.items() if v is not None})
    executor.update_parameters(**params)
    try:
        return executor.submit(TrainJob(command, os.getcwd(), resources["max_requeues"]))
    except Exception as e:          # sbatch refused it (bad partition or account, no SLURM here)
        raise UserError(f"sbatch refused the job training {stage.model_name}: {str(e).strip()[-1500:]} "
                        f"(resources: launcher.stages.{stage.name} or launcher.slurm)") from None


def record_job(run_dir: Path, model_name: str, job, kind: str) -> None:
    """Note the model's job in `<run_dir>/jobs/index.json` (the driver alone writes it), for `memlens status`."""
    path = run_dir / JOBS_DIR / JOB_INDEX
    index = read_json(path) if path.is_file() else {}
    index[model_name] = {"job_id": str(job.job_id), "kind": kind, "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                         "stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)}
    atomic_write_json(path, index)


def build_level_data(cfg, run_dir: Path, planned, jobs_started: bool = False) -> set[str]:
    """Every dataset the run reads (its stages and its audit) that can be built now, built once by the driver, as
    `memlens run` builds them: sd_rl_prompts (and its held-out twin) once the stage whose tokenizer splits it has trained. What is built
    already is kept. Returns the datasets that must wait (late). Before any job: the data held exclusively. Once
    jobs run (each holds the data shared while it trains): the data held shared, waiting for a job that is just
    taking it, and each dataset still to build (the late data, which no queued job reads yet) by a lock of its
    own, so that neither a starting job nor the driver is refused by the other."""
    names = pipeline.needed_datasets(planned, cfg)
    tokenizer_stage = pipeline.rl_prompts_source(planned, run_dir)
    late: set[str] = set()
    if set(LATE_DATASETS) & set(names):
        if tokenizer_stage is not None and pipeline.is_complete(tokenizer_stage):
            cfg = pipeline.set_rl_prompts_tokenizer(cfg, tokenizer_stage)
        elif tokenizer_stage is not None:
            late = set(LATE_DATASETS) & set(names)
            names = [n for n in names if n not in late]
    with hold_directories(data_locks(run_dir, names, jobs_started), "memlens run (data)"):
        pipeline.build_data(cfg, run_dir, names)
    return late


def data_locks(run_dir: Path, names: list[str], jobs_started: bool) -> list[tuple]:
    """What the driver holds while it checks and builds `names` (build_level_data)."""
    if not jobs_started:
        return [("run_dir", datasets_dir(run_dir), EXCLUSIVE)]
    to_build = [n for n in names if not pipeline.is_built(run_dir, n)]
    return [("run_dir", datasets_dir(run_dir), SHARED, pipeline.DATA_WAIT_S),
            *(("run_dir", dataset_lock_dir(run_dir, n), EXCLUSIVE) for n in to_build)]


def wait_for(job, model_name: str) -> None:
    """The job's result; a failed job stops the driver naming its log."""
    try:
        job.result()
    except Exception as e:           # submitit raises FailedJobError / UncompletedJobError with the job's output
        raise UserError(f"the job training {model_name} failed (log: {job.paths.stderr}); the models that "
                        f"finished are kept: rerun the same command to continue. {str(e).strip()[-1500:]}") from None
    print(f"[memlens] {model_name:<28} {'job':<9} {'done':<8} {job.job_id}", flush=True)


def wait_for_slurm(job, model_name: str, poll_s: float = 1.0) -> None:
    """Wait until the job's result file exists (then as `wait_for`); a job that ended without one (cancelled,
    timed out, killed, its upstream failed) stops the driver with its state and log."""
    ended_at = None
    checked = 0.0
    while not job.paths.result_pickle.exists():
        if time.time() - checked > 10 * poll_s:
            checked = time.time()
            state = slurm_state(job.job_id)
            if state.split(" ")[0] in LIVE_STATES:
                ended_at = None
            elif ended_at is None:
                ended_at = time.time()
            elif time.time() - ended_at > RESULT_GRACE_S:
                raise UserError(f"the job training {model_name} ({job.job_id}) ended as {state or 'unknown to squeue'}"
                                f" without a result (log: {job.paths.stderr}); the models that finished are kept: "
                                "rerun the same command to continue")
        time.sleep(poll_s)
    wait_for(job, model_name)


def slurm_state(job_id: str) -> str:
    """`STATE REASON` of a job as squeue reports it ('' when squeue no longer knows it)."""
    proc = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T %r"], capture_output=True,
                          text=True, timeout=60)
    return proc.stdout.strip() if proc.returncode == 0 else ""
