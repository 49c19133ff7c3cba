"""The plan of a run: which models an experiment trains, in which order, with which settings — read from the
composed config alone (nothing is trained or written here; `memlens check` and the tests plan without training).

An experiment (conf/experiment/<name>.yaml) declares `stages:`; each stage names its `recipe` (a registered stage
recipe: recipes/stages/registry.py) and its settings. Stages are linked only through model directories (`init:`,
`reward_model:`), from which the order follows (paper 003 Fig. 5: PT -> FT -> RM -> RLFT, PT -> IPO).

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
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from memlens.harness.core.config import audit_utility
from memlens.harness.core.errors import UserError
from memlens.harness.core.layout import (
    HELDOUT_BUILT,
    PAIR_HELDOUT_BUILT,
    PROMPT_HELDOUT,
    RL_PROMPTS_HELDOUT,
    check_listed_name,
    check_model_name,
    heldout_dataset,
)
from memlens.recipes.stages.contract import StageSettings
from memlens.recipes.stages.registry import STAGES, canonical_recipe, recipe_module, settings_class

REFERENCE_KEYS = ("init", "reward_model")    # settings that name another stage's model
DATASET_KEYS = ("datasets", "eval_datasets", "score_datasets", "prompts", "reward.heldout")   # dotted: nested



@dataclass
class PlannedStage:
    """One model to train: a stage, or one point of a swept stage, with its settings parsed (once, here)."""

    name: str                # stage name, e.g. "RLFT.4"
    model_name: str          # directory under models/, e.g. "RLFT.4/beta=0.005,lr=3e-06"
    recipe: str
    settings: StageSettings  # the recipe's settings dataclass, which the stage trains from

    @property
    def given(self) -> dict[str, Any]:
        """The settings as the experiment gave them (provenance.json records them; a rerun compares them)."""
        return self.settings.given


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
    cls = settings_class(recipe_module(recipe, stage), f"stages.{stage}.recipe={recipe!r}")
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
    name the run directory instead (memlens.harness.cli.sweep_run_suffix, applied when the config is composed)."""
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
            parsed = recipe_module(recipe, name).load_settings(settings, name)   # once; fails before any training
            planned.append(PlannedStage(name, point_name, recipe, parsed))
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
    """cfg.run_dir: a multirun point's own directory is already in it (memlens.harness.cli.compose), and so in
    every path resolved from ${run_dir}."""
    return Path(cfg.run_dir)


def needed_datasets(stages: list[PlannedStage], cfg, with_audit: bool = True) -> list[str]:
    """Datasets the stages read, plus (for a whole run) those the audit plan scores."""
    names: dict[str, None] = {}
    for stage in stages:
        for _, name in stage_datasets(stage.given):
            names[name] = None
    for entry in audit_plan(cfg) if with_audit else []:
        for name in entry.get("datasets") or []:
            names[name] = None
    audit = cfg.get("audit") or {}
    measures = audit.get("measures") or []
    if with_audit and "mia" in ([measures] if isinstance(measures, str) else list(measures)):
        # membership inference scores each planned SD set against its never-trained held-out partner (the RL-prompt
        # split's too, which harness/audit/mia.py pairs by the same <dataset>_heldout name)
        names.update({heldout_dataset(n): None for n in list(names)
                      if heldout_dataset(n) in HELDOUT_BUILT or heldout_dataset(n) == RL_PROMPTS_HELDOUT})
    if with_audit and "pair_mia" in ([measures] if isinstance(measures, str) else list(measures)):
        # preference-pair membership scores a preference stage's SD pairs against the same pairs of held-out programs
        names.update({heldout_dataset(n): None for n in list(names) if heldout_dataset(n) in PAIR_HELDOUT_BUILT})
    if with_audit and "prompt_mia" in ([measures] if isinstance(measures, str) else list(measures)):
        # RL-prompt membership samples an RL stage's policy on its prompts and on held-out prompts of the same source
        for stage in stages:
            if stage.recipe == "rl":
                prompts = stage.given.get("prompts") or []
                for name in [prompts] if isinstance(prompts, str) else prompts:
                    if name in PROMPT_HELDOUT:
                        names[PROMPT_HELDOUT[name]] = None
    utility = audit_utility(audit)            # checked whatever runs: a bad value is refused by `memlens data` too
    if with_audit and "audit" in list(cfg.get("after_training") or []) and utility:
        names.update({"humaneval_infill": None, "pd_eval": None})   # harness/measures/utility.py (Table 2 analogue)
    return list(names)


def audit_plan(cfg) -> list[dict[str, Any]]:
    """The experiment's `audit_plan`: [{models: [...], control: <model>, datasets: [...]}, ...].

    Read by the audit (a later issue): each entry scores `models` on `datasets` against `control`
    (FT.2 for the RLHF experiments, the base model PT for IPO; paper 003 Sec. 4.2, 5).
    """
    # An empty ListConfig is falsy, so `or []` would hand to_container a plain list, which it refuses.
    raw = cfg.get("audit_plan")
    plan_ = [] if raw is None else OmegaConf.to_container(raw, resolve=True)
    if not isinstance(plan_, list) or not all(isinstance(e, dict) for e in plan_):
        raise UserError("audit_plan: expected a list of {models: [...], control: <model>, datasets: [...]}")
    return plan_
