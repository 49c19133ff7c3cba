"""What every stage shares: its settings, its context (where it reads and writes), provenance, completion, and the
one runner of the recipe contract.

A stage's output directory `<run_dir>/models/<NAME>/` holds the final model (weights, config,
tokenizer) at its root, its `checkpoint-<step>/` directories, and `provenance.json`, which is written
last: a directory with provenance.json is a finished stage, anything else is resumable work.

The stage's device flags and DeepSpeed are recipes/stages/devices.py, its FIM prompt trimming recipes/stages/fim_context.py, its
training log and console recipes/stages/training_log.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from omegaconf import OmegaConf

from memlens.harness.core.config import check_dataclass_values
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, read_json
from memlens.harness.core.layout import (
    PROVENANCE_FILE,
    RUN_RECORD,
    is_complete,
    models_dir,
    whole_checkpoints,
)
from memlens.harness.core.layout import data_dir as layout_data_dir
from memlens.harness.core.processes import is_main_process
from memlens.harness.core.provenance import provenance
from memlens.harness.text.fim import detect_sentinels
from memlens.recipes.stages import preemption
from memlens.recipes.stages.devices import deepspeed_left_behind_cleared
from memlens.recipes.stages.models import load_tokenizer, parse_model

__all__ = ["PROVENANCE_FILE", "is_complete"]   # re-exported: the recipes' one import of the run layout


@dataclass
class StageSettings:
    """What every recipe's settings share, as TRL's configs share TrainingArguments: the fields every stage has (a
    recipe redeclares one only to give it its own default, as DPOConfig does `learning_rate`), one strict loader (an
    unknown key, or a non-boolean for a bool field, is an error naming it and the valid keys) and one form for a bad
    value, `stages.<NAME>.<key>=<value>: <fix>`. Subclasses are dataclasses whose fields all have defaults; their
    __post_init__ receives `where` (e.g. "stages.RLFT.1") and calls this one first.

    A stage's settings are parsed once, when the run is planned (memlens.recipes.orchestration.stage_plan.plan), and the parsed object is what the
    stage trains from; `given` keeps the mapping as the experiment gave it, which provenance.json records and a rerun
    compares (memlens.recipes.orchestration.pipeline)."""

    where: InitVar[str] = "stages"   # where the settings came from, for error messages only; not a setting
    model: dict[str, Any] = field(default_factory=dict)   # the model preset (conf/model/): size, dtype, LoRA, FIM
                                                          # family; the plan injects cfg.model, a stage overrides keys
    deepspeed: str | None = None   # DeepSpeed JSON (launch/ds_zero*.json); on CPU only under a launch
    lr: float = 5e-5               # AdamW learning rate (TrainingArguments' default; every recipe sets its own)
    save_steps: int = 100          # a checkpoint-<step>/ every N optimizer steps (each is audited; resume granularity)
    logging_steps: int = 10        # log the trainer's metrics every N steps

    def __post_init__(self, where: str) -> None:
        self._where = where
        self._given: dict[str, Any] = {}

    @classmethod
    def load(cls, settings: dict[str, Any], stage: str):
        """The settings of stage `stage` from its config mapping (`stages.<stage>`), which `given` keeps."""
        where = f"stages.{stage}"
        check_dataclass_values(cls, settings, where)
        parsed = cls(**settings, where=where)
        parsed._given = json.loads(json.dumps(settings))
        return parsed

    @property
    def given(self) -> dict[str, Any]:
        """The settings as the experiment gave them (after the plan's preset and references): what provenance.json
        records and what decides whether a finished stage is skipped."""
        return self._given

    def bad(self, key: str, fix: str) -> UserError:
        """The error for a bad value of `key`, naming it, its value and the fix."""
        return UserError(f"{self._where}.{key}={getattr(self, key)!r}: {fix}")

    def require(self, ok: bool, key: str, fix: str) -> None:
        """Raise `bad(key, fix)` unless `ok`."""
        if not ok:
            raise self.bad(key, fix)

    def resolve_model(self, where: str) -> None:
        """What every trainer stage checks last: its model preset parsed (`model_settings`), its DeepSpeed file
        present, and an unset `fim_family` taken from the preset. ZeRO-3 with LoRA is allowed: a LoRA stage's save
        gathers the partitioned weights and merges them on the main process (memlens.recipes.stages.models.save_lora_stage)."""
        self.model_settings = parse_model(self.model, f"{where}.model")
        deepspeed = getattr(self, "deepspeed", None)
        self.require(deepspeed is None or Path(deepspeed).is_file(), "deepspeed",
                     "give an existing DeepSpeed JSON, e.g. launch/ds_zero2.json, or null")
        if getattr(self, "fim_family", "") is None:
            self.fim_family = self.model_settings.fim_family


def load_init_tokenizer(ctx: StageContext, init: str, preset, fim_family: str | None):
    """(init model directory, its tokenizer as the preset loads it, its FIM sentinels): how every stage that starts
    from another stage's model begins."""
    init_dir = ctx.model_dir(init)
    tokenizer = load_tokenizer(init_dir, preset)
    return init_dir, tokenizer, detect_sentinels(tokenizer, fim_family, model_name=str(init_dir))


@dataclass
class StageContext:
    """Everything a recipe needs besides its own stage config. Stages meet only through directories."""

    run_dir: Path
    name: str                      # model name, e.g. "FT.1" or "RLFT.4/beta=0.005,lr=3e-06"
    seed: int = 0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)
    tensorboard: bool = False      # root key `tensorboard`: also write TensorBoard event files

    @property
    def out_dir(self) -> Path:
        return models_dir(self.run_dir) / self.name

    def data_dir(self, dataset: str) -> Path:
        path = layout_data_dir(self.run_dir, dataset)
        if not (path / "manifest.json").is_file():
            raise UserError(f"dataset {dataset!r} not built: {path}/manifest.json missing; "
                            "run `memlens data experiment=...` first or fix the stage's dataset list")
        return path

    def dataset_hash(self, dataset: str) -> str:
        return read_json(self.data_dir(dataset) / "manifest.json")["sha256"]

    def model_dir(self, name_or_path: str) -> Path:
        """Another stage's finished model (by name) or an explicit model directory."""
        path = Path(name_or_path)
        candidate = models_dir(self.run_dir) / name_or_path
        if not path.is_absolute() and candidate.is_dir():
            if not is_complete(candidate):
                raise UserError(f"model {name_or_path!r} at {candidate} is not finished "
                                f"({PROVENANCE_FILE} missing); train that stage first")
            return candidate
        if path.is_dir():
            return path
        raise UserError(f"model {name_or_path!r}: neither a stage of this run ({candidate}) nor a "
                        "directory; set the stage's init/reward_model key to a trained stage name or path")


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The highest-step whole checkpoint directory, for resuming a killed stage (memlens.harness.core.layout), or a
    preempted job's `preempted-<step>/` where that is later (memlens.recipes.stages.preemption)."""
    whole = whole_checkpoints(out_dir) | preemption.preemption_checkpoints(out_dir)
    return whole[max(whole)] if whole else None


def settings_match(out_dir: Path, settings: dict[str, Any]) -> bool:
    """True when a finished stage was trained with exactly these settings (so it can be skipped)."""
    if not is_complete(out_dir):
        return False
    return same_settings(read_json(Path(out_dir) / PROVENANCE_FILE).get("settings"), settings)


def same_settings(a: Any, b: Any) -> bool:
    """Two stages' settings are equal key for key."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def write_provenance(ctx: StageContext, stage: str, settings: dict[str, Any], datasets: Sequence[str] = (),
                     init_model: str | None = None, reward_model: str | None = None,
                     **extra: Any) -> None:
    """Write provenance.json last, atomically: the marker that this stage is finished. A stage that reads no dataset
    of the run (a plugin's checkpoint average) may leave `datasets` out of its `provenance()`: it is written as {}
    rather than failing after the stage has trained and saved."""
    record = provenance(
        seed=ctx.seed,
        datasets={d: ctx.dataset_hash(d) for d in datasets},
        stage=stage, model_name=ctx.name, init_model=init_model, reward_model=reward_model,
        settings=settings, device=ctx.device, **extra,
    )
    atomic_write_json(ctx.out_dir / PROVENANCE_FILE, record)


def write_run_record(cfg, run_dir: Path, stages: list[dict[str, Any]], **extra: Any) -> None:
    """<run_dir>/run.json: the resolved experiment, git commit, versions, and what each stage did."""
    if not is_main_process():
        return
    record = provenance(seed=cfg.seed, datasets={}, experiment=cfg.get("experiment_name"),
                        config=OmegaConf.to_container(cfg, resolve=True), stages=stages, **extra)
    atomic_write_json(run_dir / RUN_RECORD, record)


class Recipe(Protocol):
    """The contract every stage recipe follows (torchtune's recipe interface): built from its settings and the
    stage's context, then setup -> train -> save -> evaluate; `provenance()` is what provenance.json records
    besides the common fields: `datasets` (the run's datasets it trained on, hashed; none if left out), `init_model`,
    `reward_model` and anything else of its own. `stage` is provenance.json's `stage`."""

    stage: ClassVar[str]

    def __init__(self, cfg: Any, ctx: StageContext) -> None: ...
    def setup(self) -> None: ...
    def train(self) -> None: ...
    def save(self) -> None: ...
    def evaluate(self) -> None: ...
    def provenance(self) -> dict[str, Any]: ...


def run_recipe(recipe_class: type[Recipe], settings: StageSettings, ctx: StageContext) -> None:
    """The one stage runner: skip a stage whose provenance records these settings (finished), else set up (the
    trainers resume from the last whole checkpoint), train, save, evaluate, and write provenance.json last — on
    the main process only, as the marker that the stage finished."""
    if settings_match(ctx.out_dir, settings.given):
        return
    recipe = recipe_class(settings, ctx)
    with deepspeed_left_behind_cleared():
        recipe.setup()
        recipe.train()
        preemption.raise_if_stopped(ctx.out_dir, ctx.name)   # a job being stopped: its checkpoint saved, no model yet
        recipe.save()
    preemption.discard_preemption_checkpoints(ctx.out_dir)   # finished: what was kept only to resume from goes
    # After DeepSpeed's switches are cleared: an evaluation loads saved models whole, in the main process alone.
    recipe.evaluate()
    if is_main_process():
        write_provenance(ctx, recipe.stage, settings.given, **recipe.provenance())
