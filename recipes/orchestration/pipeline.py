"""The pipeline: data -> every stage of an experiment in dependency order -> (audit -> report).

    memlens run experiment=smoke                      # build data, train every stage, then audit + report
    memlens train stage=FT.1 experiment=smoke         # one stage; its upstream stages must be finished
    memlens run -m experiment=rl_prompts stages.RLFT.4.beta=0.005,0.1,0.5 stages.RLFT.4.lr=3e-6,3e-5

What to train and in which order is the plan (recipes/orchestration/stage_plan.py: stages, sweeps, datasets, the audit plan); this
module executes it: builds the data, trains each planned model through its recipe (recipes/stages/registry.py), resumes,
retires what changed, and hands the audit and the report to the measuring side.

Resume: a stage whose provenance.json records the same settings is skipped; a stage killed midway
resumes from its last `checkpoint-<step>/` (each recipe does that). If a stage's settings changed, its
old directory is moved to `<run_dir>/stale/` first, so a resume never mixes two configurations.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf, open_dict

from memlens.harness.core.config import require_bool
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, read_json
from memlens.harness.core.layout import (
    DATASET_MANIFEST,
    LATE_DATASETS,
    RL_PROMPTS,
    TRAINER_STATE,
    audit_dir,
    checkpoint_dirs,
    data_dir,
    datasets_dir,
    model_lock_dir,
    models_dir,
    report_dir,
    stale_dir,
)
from memlens.harness.core.lock import EXCLUSIVE, LOCK_FILE, READERS_DIR, SHARED, hold_directories
from memlens.harness.core.processes import is_main_process, process_rank, world_size
from memlens.harness.core.provenance import git_commit
from memlens.recipes.formal.language_models import run_formal
from memlens.recipes.orchestration.check import run_preflight
from memlens.recipes.orchestration.stage_plan import (
    REFERENCE_KEYS,
    PlannedStage,
    needed_datasets,
    plan,
    run_directory,
)
from memlens.recipes.stages import preemption
from memlens.recipes.stages.contract import (
    PROVENANCE_FILE,
    StageContext,
    is_complete,
    latest_checkpoint,
    same_settings,
    settings_match,
    write_run_record,
)
from memlens.recipes.stages.devices import resolve_device
from memlens.recipes.stages.registry import recipe_module
from memlens.recipes.stages.training_log import require_tensorboard

PENDING_FILE = "pending_settings.json"       # settings of an unfinished stage, to refuse a mixed resume
DATA_WAIT_S = 300    # how long a job that only reads the data waits for the driver that checks or builds it


# --- data ------------------------------------------------------------------------------------------------


def is_built(run_dir: Path, dataset: str) -> bool:
    """Whether a dataset of the run has been built (its manifest, written last, exists)."""
    return (data_dir(run_dir, dataset) / DATASET_MANIFEST).is_file()


def build_data(cfg, run_dir: Path, names: list[str]) -> None:
    """Build (or check) the datasets the stages read; `build_data: false` uses what is on disk."""
    if not names:
        return
    if require_bool(cfg.get("build_data", True), "build_data") and is_main_process():
        try:
            # inside the try: a data builder's missing dependency becomes the UserError below
            from memlens.synthetic_data.build import build_datasets
        except ModuleNotFoundError as e:
            raise UserError(f"cannot build datasets ({e}); set build_data=false and put them under "
                            f"{run_dir}/data/<name>/ yourself") from None
        build_datasets(cfg, names=names)
    wait_for_everyone(resolve_device(cfg.device))
    ctx = StageContext(run_dir, "data")
    for name in names:
        ctx.data_dir(name)   # raises a UserError naming the missing dataset


def check_user_files(cfg, names: list[str]) -> None:
    """The user's canary / preference files (data.canaries.file, data.preference.file) behind datasets
    `names`, read and checked before anything of the run is written: a bad row refuses the run."""
    if require_bool(cfg.get("build_data", True), "build_data") and is_main_process():
        # as in build_data: the pipeline runs without the builders (build_data=false)
        from memlens.synthetic_data.build import check_user_files as check

        check(cfg, names)


def set_rl_prompts_tokenizer(cfg, tokenizer_dir: Path):
    """sd_rl_prompts (and its held-out twin) splits SD into 50-token prefix/target in the policy's tokenizer: PT's."""
    cfg = cfg.copy()
    with open_dict(cfg):
        OmegaConf.update(cfg, "data.rl_prompts.tokenizer", str(tokenizer_dir), force_add=True)
    return cfg


# --- training ----------------------------------------------------------------------------------------------


def prepare_out_dir(run_dir: Path, stage: PlannedStage, seed: int | None = None,
                    results: Results | None = None) -> str:
    """'skipped' / 'resumed' / 'trained' for the status line; moves a stale directory aside first, and with
    it (`results`: the audit and report directories) every audit result and the report computed from it."""
    out_dir = models_dir(run_dir) / stage.model_name
    if settings_match(out_dir, stage.given):
        reason = outdated_reason(run_dir, out_dir, stage, seed)
        if reason is None:
            return "skipped"
        target = move_aside(out_dir, stale_dir(run_dir) / stage.model_name.replace("/", "__"))
        print(f"[memlens] {stage.model_name}: {reason}; old directory moved to {target}", flush=True)
        retire_results(stage.model_name, out_dir, target, results)
    pending = out_dir / PENDING_FILE
    stale = is_complete(out_dir) or (pending.is_file() and not same_settings(read_json(pending), stage.given))
    if stale:
        target = move_aside(out_dir, stale_dir(run_dir) / stage.model_name.replace("/", "__"))
        print(f"[memlens] {stage.model_name}: settings changed; old directory moved to {target}", flush=True)
        retire_results(stage.model_name, out_dir, target, results)
    quarantine_torn_checkpoints(run_dir, out_dir)
    status = "resumed" if latest_checkpoint(out_dir) is not None else "trained"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(pending, stage.given)
    return status


@dataclass(frozen=True)
class Measurement:
    """What the pipeline asks of the measuring side, handed over by the CLI (memlens.harness.cli): the recipes never
    import memlens.harness.audit or memlens.harness.report, the layers that measure what they train
    (docs/architecture.md: data flows one way). `run_command(name, cfg)` runs `memlens <name>` (audit, report) on the
    config; `retire_audit_results(audit_dir, model_dir, model_name, dest)` moves a replaced model's audit results aside
    (memlens.harness.audit.retire.retire_model_results)."""

    run_command: Callable[[str, Any], int]
    retire_audit_results: Callable[..., Any]
    check_audit: Callable[[Any], str] | None = None   # the audit's names and settings (harness.audit.command)


@dataclass(frozen=True)
class Results:
    """Where the results of a run's models are (its audit and report directories) and how to retire them."""

    audit: Path
    report: Path
    retire: Callable[..., Any]


def results_dirs(cfg, run_dir: Path, measurement: Measurement | None) -> Results | None:
    """This run's audit and report directories (None without a measuring side: nothing to retire)."""
    if measurement is None:
        return None
    return Results(audit_dir(run_dir, cfg), report_dir(cfg), measurement.retire_audit_results)


def retire_results(model_name: str, model_dir: Path, target: Path, results: Results | None) -> None:
    """Audits follow models: the audit rows and loss measures computed from the model just moved to `target`
    (as the audited model or as the control) go to `<target>/audit/`, and the report, which showed them, to
    `<target>/report/`; the next audit and report compute them for the new weights. Keeping them would
    refuse that audit (rows of another model fingerprint) and leave a report of weights that are gone."""
    if results is None:
        return
    results.retire(results.audit, model_dir, model_name, target / "audit")
    report = results.report
    shown = [p for p in report.iterdir() if p.name not in (LOCK_FILE, READERS_DIR)] if report.is_dir() else []
    if shown:                      # the report dir itself stays: this command holds its lock file
        (target / "report").mkdir(parents=True, exist_ok=True)
        for path in shown:
            with contextlib.suppress(FileNotFoundError):     # a training of another model beside this one moved it
                shutil.move(str(path), str(target / "report" / path.name))
        print(f"[memlens] {model_name}: the report of the replaced model moved to {target / 'report'}", flush=True)


def move_aside(path: Path, stem: Path) -> Path:
    """Move `path` to `<stem>-<UTC time>[-n]` (never into an existing directory); returns the target."""
    base = f"{stem}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    target, n = Path(base), 1
    while target.exists():
        target, n = Path(f"{base}-{n}"), n + 1
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(path), str(target))
    return target


def outdated_reason(run_dir: Path, out_dir: Path, stage: PlannedStage, seed: int | None = None) -> str | None:
    """Why a finished stage with unchanged settings must still be retrained, or None.

    Settings alone do not identify a model: it may have been trained with another seed, its datasets
    may have been rebuilt (other data settings) and the stage it starts from (init / reward_model)
    may have been retrained since.
    """
    prov = read_json(out_dir / PROVENANCE_FILE)
    if seed is not None and prov.get("seed") is not None and int(prov["seed"]) != int(seed):
        return f"it was trained with seed {prov['seed']}, this run uses seed {seed}"
    for dataset, sha in (prov.get("datasets") or {}).items():
        manifest = data_dir(run_dir, dataset) / DATASET_MANIFEST
        if manifest.is_file() and read_json(manifest).get("sha256") != sha:
            return f"dataset {dataset} was rebuilt"
    finished = (out_dir / PROVENANCE_FILE).stat().st_mtime_ns
    for key in REFERENCE_KEYS:
        ref = stage.given.get(key)
        upstream = models_dir(run_dir) / ref / PROVENANCE_FILE if isinstance(ref, str) else None
        if upstream is not None and upstream.is_file() and upstream.stat().st_mtime_ns > finished:
            return f"{key} {ref} was retrained after it"
    return None


def is_up_to_date(run_dir: Path, stage: PlannedStage, seed: int | None = None) -> bool:
    """A finished model `prepare_out_dir` would skip: same settings, and nothing it was trained from has changed."""
    out_dir = models_dir(run_dir) / stage.model_name
    return settings_match(out_dir, stage.given) and outdated_reason(run_dir, out_dir, stage, seed) is None


def quarantine_torn_checkpoints(run_dir: Path, out_dir: Path) -> None:
    """Move aside checkpoints a kill interrupted mid-save, so the resume starts from a whole one.

    transformers' Trainer writes `checkpoint-<step>/` in place and its trainer_state.json last; a
    directory without it was cut short (resuming from it would fail on missing optimizer state).
    """
    for ckpt in checkpoint_dirs(out_dir).values():
        if not (ckpt / TRAINER_STATE).is_file():
            stale = stale_dir(run_dir) / f"{out_dir.relative_to(run_dir / 'models')}".replace("/", "__")
            target = move_aside(ckpt, stale / f"{ckpt.name}-torn")
            print(f"[memlens] {ckpt}: incomplete checkpoint (killed while saving) moved to {target}", flush=True)


def wait_for_everyone(device: str) -> None:
    """Barrier across the processes of `accelerate launch`; a no-op in a single process.

    `cpu=True` on CPU: accelerate's default state there is a single process (DistributedType.NO) whose
    barrier returns at once, so process 1 would read a stage process 0 has not finished writing (measured
    with the 2-process CPU launcher). The trainers then join the same gloo group (use_cpu=True)."""
    if world_size() > 1:
        from accelerate import PartialState  # accelerate (~1 s): a multi-process launch only

        PartialState(cpu=device == "cpu").wait_for_everyone()


def release_process_group() -> None:
    """Once this process is done with the launch: rank 0 destroys the process group; any other rank leaves at once,
    without destroying it and without the interpreter's teardown. There the group's (and DeepSpeed's) C++ threads
    can abort a rank whose work is complete ("terminate called without an active exception"), which the launcher
    reports as a failed run: seen on rank 1 of the two-process ZeRO-3 test at 0c3229d, and again, with the group
    destroyed first, in the fresh-clone CI of ee2a2a9. A rank > 0 holds no lock and writes no result
    (harness/core/lock.py; the main process saves), so only its output is flushed; rank 0 exits normally, so its
    atexit handlers (trackers, loggers) run."""
    if world_size() <= 1:
        return
    if process_rank() > 0:            # the OS closes its sockets; destroying the group is where it can abort too
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    import torch.distributed as dist  # torch (~1 s): a multi-process launch only

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def identical_finished_stage(run_dir: Path, stage: PlannedStage, done: list[PlannedStage]) -> PlannedStage | None:
    """An earlier stage of this run with exactly the same recipe and settings (init, data, hyperparameters).

    Same settings, same seed and same upstream models give the same model, so training it again only
    costs time: e.g. a sweep point or a second stage that repeats another stage's settings exactly."""
    for other in done:
        if other.recipe == stage.recipe and same_settings(other.given, stage.given) \
                and is_complete(models_dir(run_dir) / other.model_name):
            return other
    return None


def reuse_stage(run_dir: Path, source: PlannedStage, stage: PlannedStage) -> None:
    """Give `stage` the finished model of its identical twin: hard links (a copy across devices), then
    provenance.json last, naming the twin in `reused_from`, so the stage reads as finished only when whole."""
    src, dst = models_dir(run_dir) / source.model_name, models_dir(run_dir) / stage.model_name

    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, copy_function=link_or_copy,
                    ignore=shutil.ignore_patterns(PROVENANCE_FILE, PENDING_FILE))
    record = read_json(src / PROVENANCE_FILE)
    record.update(model_name=stage.model_name, reused_from=source.model_name)
    atomic_write_json(dst / PROVENANCE_FILE, record)


def train_stage(stage: PlannedStage, run_dir: Path, seed: int, device: str,
                done: list[PlannedStage] = (), results: Results | None = None,
                tensorboard: bool = False) -> dict[str, Any]:
    """Run one stage (or skip it, or reuse an identical earlier one) and print its one-line status.

    Under `accelerate launch` every process runs the recipe (the trainer shards the batches); only the
    main process moves stale directories and writes marker files, and all meet at barriers.
    """
    start, cpu_start = time.time(), time.process_time()
    out_dir = models_dir(run_dir) / stage.model_name
    status = prepare_out_dir(run_dir, stage, seed, results) if is_main_process() else ""
    wait_for_everyone(device)        # the main process has moved stale directories aside by now
    if not is_main_process():
        status = "skipped" if settings_match(out_dir, stage.given) else "trained"
    # "resumed" too: a reuse killed mid-copy leaves whole checkpoints behind, and copying again is cheaper.
    twin = identical_finished_stage(run_dir, stage, done) if status in ("trained", "resumed") else None
    if twin is not None:
        if is_main_process():
            reuse_stage(run_dir, twin, stage)
        wait_for_everyone(device)
        status = "reused"
    elif status != "skipped":
        ctx = StageContext(run_dir, stage.model_name, seed, device, tensorboard=tensorboard)
        recipe_module(stage.recipe, stage.name).run_stage(stage.settings, ctx)
        wait_for_everyone(device)
        if not is_complete(out_dir):
            raise UserError(f"stage {stage.model_name} ended without {PROVENANCE_FILE}; see the log above")
        if is_main_process():
            (out_dir / PENDING_FILE).unlink(missing_ok=True)
        if stage.recipe == "pretrain" and stage.settings.model_settings.pretrained:
            status = "imported"
    seconds, cpu_seconds = time.time() - start, time.process_time() - cpu_start
    if is_main_process():
        print(f"[memlens] {stage.model_name:<28} {stage.recipe:<9} {status:<8} {seconds:8.1f} s", flush=True)
    # CPU seconds (all threads of this process) stay comparable when the machine is shared.
    return {"model": stage.model_name, "recipe": stage.recipe, "status": status, "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu_seconds, 1)}


def rl_prompts_source(planned: list[PlannedStage], run_dir: Path) -> Path | None:
    """The stage whose tokenizer splits sd_rl_prompts: the first pretrain stage."""
    for stage in planned:
        if stage.recipe == "pretrain":
            return models_dir(run_dir) / stage.model_name
    return None


def train_all(cfg, planned: list[PlannedStage], run_dir: Path, measurement: Measurement | None = None
              ) -> list[dict[str, Any]]:
    device = resolve_device(cfg.device)
    tensorboard = require_tensorboard(cfg.get("tensorboard", False))
    names = needed_datasets(planned, cfg)
    late = [n for n in names if n in LATE_DATASETS]
    build_data(cfg, run_dir, [n for n in names if n not in late])
    tokenizer_stage = rl_prompts_source(planned, run_dir)
    results = []
    for stage in planned:
        if late and (tokenizer_stage is None or is_complete(tokenizer_stage)):
            data_cfg = set_rl_prompts_tokenizer(cfg, tokenizer_stage) if tokenizer_stage else cfg
            build_data(data_cfg, run_dir, late)
            late = []
        results.append(train_stage(stage, run_dir, int(cfg.seed), device, planned[:len(results)],
                                   results_dirs(cfg, run_dir, measurement), tensorboard))
    if late:
        build_data(set_rl_prompts_tokenizer(cfg, tokenizer_stage), run_dir, late)
    return results


def after_training(cfg, measurement: Measurement) -> None:
    """Hook: audit, then report (`after_training: [audit, report]` in the experiment).

    `audit` is `memlens audit` on this run: every model and checkpoint of `audit_plan` against its
    control (harness/audit/plan.py, the measures harness/audit/command.py runs). Under `accelerate launch` every process takes part in the audit
    (it shards the examples and merges in process 0); the report is rendered once, by process 0.
    Both are the CLI's own commands on the composed config (`measurement.run_command`), so a rerun
    continues where a killed audit stopped.
    """
    for command in list(cfg.get("after_training") or []):
        if command != "audit" and not is_main_process():
            continue
        start = time.time()
        status = int(measurement.run_command(command, cfg) or 0)
        if is_main_process():
            print(f"[memlens] {command:<28} {'':<9} {'done':<8} {time.time() - start:8.1f} s", flush=True)
        if status:
            raise UserError(f"`memlens {command}` failed with exit code {status}; rerun "
                            f"`memlens run experiment={cfg.get('experiment_name')}` to continue")


def audit_check(cfg, measurement: Measurement | None):
    """The audit's settings check a run makes before it trains, when the run audits (None otherwise)."""
    if measurement is None or "audit" not in (cfg.get("after_training") or []):
        return None
    return measurement.check_audit


def run_main(cfg, measurement: Measurement) -> int:
    """`memlens run`: data -> every stage in dependency order -> audit -> report (paper 004's formal-language study,
    an experiment with a `formal:` section, has its own models: recipes/formal/language_models.py)."""
    if cfg.get("formal") is not None:
        return run_formal(cfg, measurement)
    planned = plan(cfg)
    run_dir = run_directory(cfg)
    start = time.time()
    run_preflight(cfg, quiet=is_main_process() or None, planned=planned,   # `memlens check`: exit 2 with the fix
                  check_audit=audit_check(cfg, measurement))
    check_user_files(cfg, needed_datasets(planned, cfg))
    require_tensorboard(cfg.get("tensorboard", False))      # refused before anything is written
    print(f"[memlens] run {cfg.get('experiment_name')} in {run_dir}: "
          f"{len(planned)} model(s): {', '.join(s.model_name for s in planned)}", flush=True)
    # run.json is rewritten as the run goes, and `git_commit` is read at each write: a checkout that moved while
    # the run trained would otherwise name only the later commit, so the one the run started from is kept too.
    at_start = git_commit()
    write_run_record(cfg, run_dir, [], git_commit_at_start=at_start)
    results = train_all(cfg, planned, run_dir, measurement)
    write_run_record(cfg, run_dir, results, git_commit_at_start=at_start)
    after_training(cfg, measurement)
    seconds = time.time() - start
    write_run_record(cfg, run_dir, results, wall_seconds=round(seconds, 1), git_commit_at_start=at_start)
    if is_main_process():
        where = f"results in {run_dir}"
        if "report" in list(cfg.get("after_training") or []):
            where = f"report: {report_dir(cfg) / 'report.html'}"
        print(f"[memlens] run {cfg.get('experiment_name')} finished in {int(seconds // 60)} min {seconds % 60:.0f} s "
              f"(data, training, {', '.join(cfg.get('after_training') or []) or 'no audit'}); {where}", flush=True)
    release_process_group()
    return 0


def train_main(cfg, measurement: Measurement | None = None) -> int:
    """`memlens train stage=<NAME> experiment=<name>`: one stage (every sweep point of it)."""
    if cfg.get("formal") is not None:
        raise UserError(f"experiment {cfg.get('experiment_name')!r} is paper 004's formal-language study, whose "
                        f"models are not stages: train them with `memlens run experiment={cfg.get('experiment_name')}` "
                        "(finished models are kept; formal.workers sets how many train at once)")
    preemption.listen()      # a job of the launcher's: SIGUSR2 / SIGTERM save a checkpoint and stop (exit 75)
    name = cfg.get("stage")
    planned = plan(cfg)
    known = list(dict.fromkeys(s.name for s in planned))
    if not name:
        raise UserError(f"say which stage to train: memlens train stage=<NAME> (one of {known})")
    chosen = [s for s in planned if s.name == name or s.model_name == name]
    if not chosen:
        raise UserError(f"stage={name!r} is not a stage of experiment {cfg.get('experiment_name')!r}; "
                        f"use one of {known}")
    run_dir = run_directory(cfg)
    device = resolve_device(cfg.device)
    tensorboard = require_tensorboard(cfg.get("tensorboard", False))
    for stage in chosen:
        for key in REFERENCE_KEYS:       # upstream must be finished: a clear error otherwise
            if isinstance(stage.given.get(key), str):
                StageContext(run_dir, stage.model_name).model_dir(stage.given[key])
    names = needed_datasets(chosen, cfg, with_audit=False)
    if RL_PROMPTS in names:      # its held-out twin, when the audit asks for it: built with it, as `memlens run` does
        names += [n for n in needed_datasets(chosen, cfg) if n in LATE_DATASETS and n not in names]
    tokenizer_stage = rl_prompts_source(planned, run_dir)
    if set(LATE_DATASETS) & set(names) and tokenizer_stage is not None:
        cfg = set_rl_prompts_tokenizer(cfg, tokenizer_stage)
    reads_only = not require_bool(cfg.get("build_data", True), "build_data")
    with hold_directories(training_locks(run_dir, chosen, planned, names, reads_only),
                          f"memlens train stage={name}"):
        build_data(cfg, run_dir, names)
        for stage in chosen:
            train_stage(stage, run_dir, int(cfg.seed), device, results=results_dirs(cfg, run_dir, measurement),
                        tensorboard=tensorboard)
    release_process_group()
    return 0


def training_locks(run_dir: Path, chosen: list[PlannedStage], planned: list[PlannedStage],
                   datasets: list[str], reads_only: bool = False) -> list[tuple]:
    """What `memlens train` holds beside its run (which it shares with other trainings, harness/cli.py): each model
    it trains exclusively, each model they start from (init, reward model) shared, so that two sweep points train
    at once while the same model started twice, or a retraining of a model another training reads, is refused; the
    data shared when every dataset is built, else exclusively while this command builds it. A training that only
    reads the data (`build_data=false`: every launcher job) waits up to DATA_WAIT_S for a builder that holds the
    data (the launcher's driver checking it, or building the late data while other jobs start)."""
    own = {s.model_name for s in chosen}
    by_name = {s.name: s for s in planned} | {s.model_name: s for s in planned}
    locks = [(f"stage={s.model_name}", model_lock_dir(run_dir, s.model_name), EXCLUSIVE) for s in chosen]
    for stage in chosen:
        for key in REFERENCE_KEYS:
            upstream = by_name.get(stage.given.get(key)) if isinstance(stage.given.get(key), str) else None
            if upstream is not None and upstream.model_name not in own:
                locks.append((f"stages.{stage.name}.{key}", model_lock_dir(run_dir, upstream.model_name), SHARED))
    built = all(is_built(run_dir, d) for d in datasets)
    if reads_only:
        locks.append(("run_dir", datasets_dir(run_dir), SHARED, DATA_WAIT_S))
    else:
        locks.append(("run_dir", datasets_dir(run_dir), SHARED if built else EXCLUSIVE))
    return locks
