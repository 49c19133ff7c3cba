"""The pipeline: data -> every stage of an experiment in dependency order -> (audit -> report).

    memlens run experiment=smoke                      # build data, train every stage, then audit + report
    memlens train stage=FT.1 experiment=smoke         # one stage; its upstream stages must be finished
    memlens run -m experiment=rl_prompts stages.RLFT.4.beta=0.005,0.1,0.5 stages.RLFT.4.lr=3e-6,3e-5

An experiment (conf/experiment/<name>.yaml) declares `stages:`; each stage names its `recipe`
(pretrain, sft, reward, rl, ipo — modules of this package) and its settings. Stages are linked only
through model directories (`init:`, `reward_model:`), from which the order follows (paper 003 Fig. 5:
PT -> FT -> RM -> RLFT, PT -> IPO).

Stage names contain dots (FT.1, as in the paper), which Hydra's override grammar cannot address as one
key. So experiments write them nested — `FT: {"1": {recipe: sft, ...}}` — which makes `stages.FT.1.lr=...`
a valid override; a dict with a `recipe` key is a stage and the keys above it join with dots. Flat
`"FT.1": {...}` keys are read too (they just cannot be overridden from the command line). A stage set to null
is dropped: an experiment that inherits another's stages removes one that way.

Sweeps: a stage's `sweep: {beta: [0.005, 0.1, 0.5]}` trains one model per point; so does a `-m`
multirun over `stages.<NAME>.<key>` (the CLI passes the point as `cfg.sweep_point`). The model directory
is `<NAME>/<key>=<value>,...` with keys sorted (e.g. `RLFT.4/beta=0.005,lr=3e-06`). Upstream stages are
shared between points and skipped once trained (their settings match); swept keys outside `stages.`
(e.g. `seed=0,1`) get their own run directory `<run_dir>/<key>=<value>,...`.

Resume: a stage whose provenance.json records the same settings is skipped; a stage killed midway
resumes from its last `checkpoint-<step>/` (each recipe does that). If a stage's settings changed, its
old directory is moved to `<run_dir>/stale/` first, so a resume never mixes two configurations.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.harness.core.config import require_bool
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, read_json
from memlens.harness.core.layout import (
    HELDOUT_BUILT,
    RUN_RECORD,
    TRAINER_STATE,
    audit_dir,
    check_listed_name,
    check_model_name,
    checkpoint_dirs,
    data_dir,
    heldout_dataset,
    models_dir,
    report_dir,
    stale_dir,
)
from memlens.harness.core.lock import LOCK_FILE
from memlens.harness.core.processes import is_main_process, world_size
from memlens.harness.core.provenance import git_commit, provenance
from memlens.recipes.check import run_preflight
from memlens.recipes.common import (
    PROVENANCE_FILE,
    StageContext,
    is_complete,
    latest_checkpoint,
    require_tensorboard,
    resolve_device,
    same_settings,
    settings_match,
)
from memlens.recipes.stages import STAGES, canonical_recipe, recipe_module

REFERENCE_KEYS = ("init", "reward_model")    # settings that name another stage's model
DATASET_KEYS = ("datasets", "eval_datasets", "score_datasets", "prompts", "reward.heldout")   # dotted: nested
RL_PROMPTS = "sd_rl_prompts"                 # built with the PT tokenizer (50 + 50 tokens of each RL prompt)
PENDING_FILE = "pending_settings.json"       # settings of an unfinished stage, to refuse a mixed resume


@dataclass
class PlannedStage:
    """One model to train: a stage, or one point of a swept stage."""

    name: str                # stage name, e.g. "RLFT.4"
    model_name: str          # directory under models/, e.g. "RLFT.4/beta=0.005,lr=3e-06"
    recipe: str
    settings: dict[str, Any]


# --- reading the experiment --------------------------------------------------------------------------------


def flatten_stages(node: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """`{FT: {"1": {recipe: ...}}}` -> `{"FT.1": {recipe: ...}}`; a dict with `recipe` is a stage."""
    stages: dict[str, dict[str, Any]] = {}
    for key, value in node.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if value is None:        # `IPO: null`: an experiment drops a stage it inherits (preference_objectives.yaml)
            continue
        if not isinstance(value, dict):
            raise UserError(f"stages.{name}: expected a stage ({{recipe: ..., ...}}) or a group of stages, "
                            f"got {value!r}")
        if "recipe" in value:
            stages[name] = dict(value)
        elif value:
            stages.update(flatten_stages(value, name))
        else:
            raise UserError(f"stages.{name} is empty; give it `recipe:` ({', '.join(STAGES)}) and its settings")
    return stages


def settings_fields(recipe: str, stage: str) -> set[str]:
    """Keys the recipe's settings dataclass accepts (from its load_settings return annotation)."""
    cls = typing.get_type_hints(recipe_module(recipe, stage).load_settings)["return"]
    return {f.name for f in dataclasses.fields(cls)}


def order_stages(stages: dict[str, dict[str, Any]]) -> list[str]:
    """Dependency order (init / reward_model first), otherwise the order of the experiment file."""
    deps = {name: [s[k] for k in REFERENCE_KEYS if isinstance(s.get(k), str) and s[k] in stages]
            for name, s in stages.items()}
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name in visiting:
            raise UserError(f"stages.{name}: init/reward_model references form a cycle; fix the experiment")
        visiting.add(name)
        for dep in deps[name]:
            visit(dep)
        visiting.discard(name)
        ordered.append(name)

    for name in stages:
        visit(name)
    return ordered


def format_value(value: Any) -> str:
    """A swept value in a directory name, as Python prints the parsed value (3e-6 -> 3e-06)."""
    return str(value)


def split_sweep_point(cfg, stage_names: list[str]) -> dict[str, list[str]]:
    """cfg.sweep_point -> {stage: [swept keys]} for model directory names. Swept keys outside `stages.`
    name the run directory instead (harness.cli.sweep_run_suffix, applied when the config is composed)."""
    per_stage: dict[str, list[str]] = {}
    for key in dict(cfg.get("sweep_point") or {}):
        key = key.lstrip("+~")
        if key.startswith("stages."):
            rest = key[len("stages."):]
            owner = max((n for n in stage_names if rest.startswith(n + ".")), key=len, default=None)
            if owner is None:
                raise UserError(f"sweep key {key}: no stage of this experiment is called that; "
                                f"stages are {stage_names}")
            per_stage.setdefault(owner, []).append(rest[len(owner) + 1:])
    return per_stage


def nested_get(settings: dict[str, Any], dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        value = value[part]
    return value


def nested_set(settings: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        settings = settings.setdefault(part, {})
    settings[last] = value


def expand_stage(name: str, stage: dict[str, Any], cli_keys: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """One (model directory name, settings) per sweep point; `recipe` and `sweep` are removed."""
    settings = {k: v for k, v in stage.items() if k not in ("recipe", "sweep")}
    points = []
    for assignment in sweep_assignments(name, stage.get("sweep"), cli_keys):
        point_settings = json.loads(json.dumps(settings))
        for key, value in assignment.items():
            nested_set(point_settings, key, value)
        try:
            named = {key: nested_get(point_settings, key) for key in list(assignment) + cli_keys}
        except (KeyError, TypeError):
            raise UserError(f"stages.{name}: swept key {list(assignment) + cli_keys} is not set in the stage; "
                            "give it a value in the experiment first") from None
        suffix = ",".join(f"{k}={format_value(named[k])}" for k in sorted(named))
        points.append((f"{name}/{suffix}" if suffix else name, point_settings))
    return points


def sweep_assignments(name: str, sweep: Any, cli_keys: list[str]) -> list[dict[str, Any]]:
    """`sweep:` as a grid `{key: [values]}` (cartesian product) or as explicit points `[{key: value}]`.

    A command-line sweep of the same key wins over the file's (that key is dropped from the grid).
    """
    if not sweep:
        return [{}]
    if isinstance(sweep, list):
        if not all(isinstance(p, dict) and p for p in sweep):
            raise UserError(f"stages.{name}.sweep: a list of points must hold non-empty dicts, e.g. "
                            "[{beta: 0.005, lr: 3e-5}, {beta: 0.1, lr: 3e-6}]")
        points = [{k: v for k, v in p.items() if k not in cli_keys} for p in sweep]
        unique = {json.dumps(p, sort_keys=True): p for p in points}
        return list(unique.values())
    grid = {k: v for k, v in dict(sweep).items() if k not in cli_keys}
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"stages.{name}.sweep.{key}={values!r}: give a non-empty list of values")
    return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]


def plan(cfg) -> list[PlannedStage]:
    """The experiment's stages, validated, ordered and sweep-expanded, with references resolved."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg.get("stages") or {}, resolve=True)
    if not raw:
        raise UserError("no stages to train: choose an experiment (experiment=smoke, quickstart, ...) "
                        "or define `stages:` in your config")
    stages = flatten_stages(raw)
    model_preset = OmegaConf.to_container(cfg.model, resolve=True) if cfg.get("model") else {}
    cli_keys = split_sweep_point(cfg, list(stages))
    planned: list[PlannedStage] = []
    model_names: dict[str, list[str]] = {}
    for name in order_stages(stages):
        stage = stages[name]
        recipe = canonical_recipe(stage.get("recipe"), name)
        accepted = settings_fields(recipe, name)
        for point_name, settings in expand_stage(name, stage, cli_keys.get(name, [])):
            check_model_name(point_name, f"stages.{name}")        # models/<point_name> must stay in the run
            for key, dataset in stage_datasets(settings):
                check_listed_name(dataset, f"stages.{name}.{key}")
            if "model" in accepted:
                # Every recipe's settings have a `model` key and get the whole preset (conf/model/): PT's
                # size, the dtype/LoRA every later stage loads its models with, the FIM family; a stage
                # may override single keys.
                settings["model"] = {**model_preset, **dict(settings.get("model") or {})}
            for key in REFERENCE_KEYS:
                ref = settings.get(key)
                if isinstance(ref, str) and ref not in stages and not Path(ref).is_dir():
                    raise UserError(f"stages.{name}.{key}={ref!r}: neither a stage of this experiment "
                                    f"({', '.join(stages)}) nor a model directory")
                if isinstance(ref, str) and ref in model_names:
                    if len(model_names[ref]) != 1:
                        raise UserError(f"stages.{name}.{key}={ref}: that stage is swept into "
                                        f"{model_names[ref]}; point {key} at one of them")
                    settings[key] = model_names[ref][0]
            recipe_module(recipe, name).load_settings(dict(settings), name)   # fail before any training
            planned.append(PlannedStage(name, point_name, recipe, settings))
            model_names.setdefault(name, []).append(point_name)
    return planned


def stage_datasets(settings: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, dataset) for every dataset a stage's settings name under DATASET_KEYS (a dotted key is nested:
    an RL stage's `reward.heldout`)."""
    out = []
    for key in DATASET_KEYS:
        value: Any = settings
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        for name in [value] if isinstance(value, str) else (value or []):
            out.append((key, name))
    return out


def run_directory(cfg) -> Path:
    """cfg.run_dir: a multirun point's own directory is already in it (harness.cli.compose), and so in
    every path resolved from ${run_dir}."""
    return Path(cfg.run_dir)


def needed_datasets(stages: list[PlannedStage], cfg, with_audit: bool = True) -> list[str]:
    """Datasets the stages read, plus (for a whole run) those the audit plan scores."""
    names: dict[str, None] = {}
    for stage in stages:
        for _, name in stage_datasets(stage.settings):
            names[name] = None
    for entry in audit_plan(cfg) if with_audit else []:
        for name in entry.get("datasets") or []:
            names[name] = None
    audit = cfg.get("audit") or {}
    measures = audit.get("measures") or []
    if with_audit and "mia" in ([measures] if isinstance(measures, str) else list(measures)):
        # membership inference scores each planned SD set against its never-trained held-out partner
        names.update({heldout_dataset(n): None for n in list(names) if heldout_dataset(n) in HELDOUT_BUILT})
    utility = require_bool(audit.get("utility", False), "audit.utility")
    if with_audit and "audit" in list(cfg.get("after_training") or []) and utility:
        names.update({"humaneval_infill": None, "pd_eval": None})   # harness/measures/utility.py (Table 2 analogue)
    return list(names)


def audit_plan(cfg) -> list[dict[str, Any]]:
    """The experiment's `audit_plan`: [{models: [...], control: <model>, datasets: [...]}, ...].

    Read by the audit (a later issue): each entry scores `models` on `datasets` against `control`
    (FT.2 for the RLHF experiments, the base model PT for IPO; paper 003 Sec. 4.2, 5).
    """
    from omegaconf import OmegaConf

    # An empty ListConfig is falsy, so `or []` would hand to_container a plain list, which it refuses.
    raw = cfg.get("audit_plan")
    plan_ = [] if raw is None else OmegaConf.to_container(raw, resolve=True)
    if not isinstance(plan_, list) or not all(isinstance(e, dict) for e in plan_):
        raise UserError("audit_plan: expected a list of {models: [...], control: <model>, datasets: [...]}")
    return plan_


# --- data ------------------------------------------------------------------------------------------------


def build_data(cfg, run_dir: Path, names: list[str]) -> None:
    """Build (or check) the datasets the stages read; `build_data: false` uses what is on disk."""
    if not names:
        return
    if require_bool(cfg.get("build_data", True), "build_data") and is_main_process():
        try:
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
        from memlens.synthetic_data.build import check_user_files as check

        check(cfg, names)


def set_rl_prompts_tokenizer(cfg, tokenizer_dir: Path):
    """sd_rl_prompts splits SD into 50-token prefix/target in the policy's tokenizer: PT's."""
    from omegaconf import OmegaConf, open_dict

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
    if settings_match(out_dir, stage.settings):
        reason = outdated_reason(run_dir, out_dir, stage, seed)
        if reason is None:
            return "skipped"
        target = move_aside(out_dir, stale_dir(run_dir) / stage.model_name.replace("/", "__"))
        print(f"[memlens] {stage.model_name}: {reason}; old directory moved to {target}", flush=True)
        retire_results(stage.model_name, out_dir, target, results)
    pending = out_dir / PENDING_FILE
    stale = is_complete(out_dir) or (pending.is_file() and not same_settings(read_json(pending), stage.settings))
    if stale:
        target = move_aside(out_dir, stale_dir(run_dir) / stage.model_name.replace("/", "__"))
        print(f"[memlens] {stage.model_name}: settings changed; old directory moved to {target}", flush=True)
        retire_results(stage.model_name, out_dir, target, results)
    quarantine_torn_checkpoints(run_dir, out_dir)
    status = "resumed" if latest_checkpoint(out_dir) is not None else "trained"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(pending, stage.settings)
    return status


@dataclass(frozen=True)
class Measurement:
    """What the pipeline asks of the measuring side, handed over by the CLI (harness.cli): the recipes never
    import harness.audit or harness.report, the layers that measure what they train (docs/architecture.md: data flows
    one way). `run_command(name, cfg)` runs `memlens <name>` (audit, report) on the config;
    `retire_audit_results(audit_dir, model_dir, model_name, dest)` moves a replaced model's audit results
    aside (harness.audit.plan.retire_model_results)."""

    run_command: Callable[[str, Any], int]
    retire_audit_results: Callable[..., Any]


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
    shown = [p for p in report.iterdir() if p.name != LOCK_FILE] if report.is_dir() else []
    if shown:                      # the report dir itself stays: this command holds its lock file
        (target / "report").mkdir(parents=True, exist_ok=True)
        for path in shown:
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
        manifest = data_dir(run_dir, dataset) / "manifest.json"
        if manifest.is_file() and read_json(manifest).get("sha256") != sha:
            return f"dataset {dataset} was rebuilt"
    finished = (out_dir / PROVENANCE_FILE).stat().st_mtime_ns
    for key in REFERENCE_KEYS:
        ref = stage.settings.get(key)
        upstream = models_dir(run_dir) / ref / PROVENANCE_FILE if isinstance(ref, str) else None
        if upstream is not None and upstream.is_file() and upstream.stat().st_mtime_ns > finished:
            return f"{key} {ref} was retrained after it"
    return None


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
        from accelerate import PartialState

        PartialState(cpu=device == "cpu").wait_for_everyone()


def identical_finished_stage(run_dir: Path, stage: PlannedStage, done: list[PlannedStage]) -> PlannedStage | None:
    """An earlier stage of this run with exactly the same recipe and settings (init, data, hyperparameters).

    Same settings, same seed and same upstream models give the same model, so training it again only
    costs time: e.g. a sweep point or a second stage that repeats another stage's settings exactly."""
    for other in done:
        if other.recipe == stage.recipe and same_settings(other.settings, stage.settings) \
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
        status = "skipped" if settings_match(out_dir, stage.settings) else "trained"
    # "resumed" too: a reuse killed mid-copy leaves whole checkpoints behind, and copying again is cheaper.
    twin = identical_finished_stage(run_dir, stage, done) if status in ("trained", "resumed") else None
    if twin is not None:
        if is_main_process():
            reuse_stage(run_dir, twin, stage)
        wait_for_everyone(device)
        status = "reused"
    elif status != "skipped":
        ctx = StageContext(run_dir, stage.model_name, seed, device, tensorboard=tensorboard)
        recipe_module(stage.recipe, stage.name).run_stage(dict(stage.settings), ctx)
        wait_for_everyone(device)
        if not is_complete(out_dir):
            raise UserError(f"stage {stage.model_name} ended without {PROVENANCE_FILE}; see the log above")
        if is_main_process():
            (out_dir / PENDING_FILE).unlink(missing_ok=True)
        if stage.recipe == "pretrain" and stage.settings.get("model", {}).get("pretrained"):
            status = "imported"
    seconds, cpu_seconds = time.time() - start, time.process_time() - cpu_start
    if is_main_process():
        print(f"[memlens] {stage.model_name:<28} {stage.recipe:<9} {status:<8} {seconds:8.1f} s", flush=True)
    # CPU seconds (all threads of this process) stay comparable when the machine is shared.
    return {"model": stage.model_name, "recipe": stage.recipe, "status": status, "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu_seconds, 1)}


def write_run_record(cfg, run_dir: Path, stages: list[dict[str, Any]], **extra: Any) -> None:
    """<run_dir>/run.json: the resolved experiment, git commit, versions, and what each stage did."""
    from omegaconf import OmegaConf

    if not is_main_process():
        return
    record = provenance(seed=cfg.seed, datasets={}, experiment=cfg.get("experiment_name"),
                        config=OmegaConf.to_container(cfg, resolve=True), stages=stages, **extra)
    atomic_write_json(run_dir / RUN_RECORD, record)


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
    late = [n for n in names if n == RL_PROMPTS]
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
    control (harness/audit/plan.py). Under `accelerate launch` every process takes part in the audit
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


def run_main(cfg, measurement: Measurement) -> int:
    """`memlens run`: data -> every stage in dependency order -> audit -> report."""
    planned = plan(cfg)
    run_dir = run_directory(cfg)
    start = time.time()
    run_preflight(cfg, quiet=is_main_process() or None)   # `memlens check`: exit 2 with the fix, nothing written
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
    return 0


def train_main(cfg, measurement: Measurement | None = None) -> int:
    """`memlens train stage=<NAME> experiment=<name>`: one stage (every sweep point of it)."""
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
            if isinstance(stage.settings.get(key), str):
                StageContext(run_dir, stage.model_name).model_dir(stage.settings[key])
    names = needed_datasets(chosen, cfg, with_audit=False)
    tokenizer_stage = rl_prompts_source(planned, run_dir)
    if RL_PROMPTS in names and tokenizer_stage is not None:
        cfg = set_rl_prompts_tokenizer(cfg, tokenizer_stage)
    build_data(cfg, run_dir, names)
    for stage in chosen:
        train_stage(stage, run_dir, int(cfg.seed), device, results=results_dirs(cfg, run_dir, measurement),
                    tensorboard=tensorboard)
    return 0
