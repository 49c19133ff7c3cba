"""What every stage shares: where it reads and writes, device flags for TRL, provenance, completion.

A stage's output directory `<run_dir>/models/<NAME>/` holds the final model (weights, config,
tokenizer) at its root, its `checkpoint-<step>/` directories, and `provenance.json`, which is written
last: a directory with provenance.json is a finished stage, anything else is resumable work.

While a stage trains, its logged steps (the Trainer's per-step dictionaries) go to `train_log.jsonl` in
that directory, not to the console, which shows one progress bar per stage (harness/core/console.py):
every recipe hands its trainer to `attach_stage_console`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from omegaconf import OmegaConf

from memlens.harness.core.config import check_dataclass_values, require_bool
from memlens.harness.core.console import StageProgress
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, jsonl_line, read_json, read_jsonl
from memlens.harness.core.layout import (
    PROVENANCE_FILE,
    RUN_RECORD,
    TENSORBOARD_DIR,
    TRAIN_LOG,
    is_complete,
    models_dir,
    whole_checkpoints,
)
from memlens.harness.core.layout import data_dir as layout_data_dir
from memlens.harness.core.processes import is_main_process
from memlens.harness.core.provenance import provenance
from memlens.harness.model.encode import encode_texts
from memlens.harness.model.load import pick_device
from memlens.harness.text.fim import detect_sentinels
from memlens.recipes.models import load_tokenizer, parse_model

__all__ = ["PROVENANCE_FILE", "is_complete"]   # re-exported: the recipes' one import of the run layout
CONTEXT_MARGIN_TOKENS = 8     # FIM sentinels + BPE merge slack at the prompt's joins (fit_fim_context)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is present, else 'cpu' (one rule, in memlens.harness.model.decode)."""
    return pick_device(device)


def trl_device_kwargs(device: str, deepspeed_config: str | None = None) -> dict[str, Any]:
    """TRL/transformers TrainingArguments flags per device.

    Every TRL config defaults to bf16=True and gradient_checkpointing=True, which fail or crawl on
    CPU: there we pass use_cpu=True, bf16=False, gradient_checkpointing=False (bf16 matmuls measured
    ~1.8x slower than fp32 on CPU). On CUDA we train in bf16 with activation checkpointing and hand
    over the DeepSpeed config when one is given. On CPU a DeepSpeed config is used only when the stage
    gives one explicitly (`stages.<NAME>.deepspeed`): DeepSpeed's CPU accelerator over gloo, under a
    multi-process launch (deepspeed_on_cpu); without one the CPU flags are exactly as before.
    """
    if device == "cpu":
        # `activation_checkpointing`: transformers 5's name (`gradient_checkpointing` is its deprecated alias)
        kwargs: dict[str, Any] = {"use_cpu": True, "bf16": False, "activation_checkpointing": False,
                                  "report_to": "none", "dataloader_num_workers": 0}
        if deepspeed_config:
            del kwargs["use_cpu"]          # use_cpu=True makes accelerate skip DeepSpeed
            kwargs.update(deepspeed_on_cpu(deepspeed_config), dataloader_pin_memory=False)  # no accelerator to pin for
        return kwargs
    # Gradient checkpointing said explicitly: TRL's configs default it on, transformers' TrainingArguments
    # (the pointwise reward model's trainer) off; a 3 B model's activations need it on a GPU either way.
    kwargs = {"bf16": True, "report_to": "none", "gradient_checkpointing": True,
              "gradient_checkpointing_kwargs": {"use_reentrant": False}}
    if deepspeed_config:
        kwargs["deepspeed"] = deepspeed_config
    return kwargs


def deepspeed_on_cpu(deepspeed_config: str) -> dict[str, Any]:
    """Make DeepSpeed (its CPU accelerator, gloo) the distributed state of this process and return the
    TrainingArguments flags that use it: `deepspeed` and `accelerator_config.use_configured_state`.

    accelerate finds no DeepSpeed backend without CUDA: its PartialState gives DeepSpeed a backend only on an
    accelerator, and with `use_cpu` it never takes DeepSpeed. So the state is made here — ACCELERATE_USE_DEEPSPEED
    set, accelerate's state reset, a PartialState over gloo (DeepSpeed's comm joins the process group the launch
    already set up) — and the Trainer told to use it as configured. Needs a launch (`accelerate launch`, e.g.
    launch/cpu_2proc.yaml): a plain process has no process group to join. The environment variable is restored after
    the stage (run_recipe)."""
    if "LOCAL_RANK" not in os.environ:
        raise UserError(f"deepspeed={deepspeed_config} with device=cpu: DeepSpeed on CPU needs a multi-process launch "
                        "(`accelerate launch --config_file launch/cpu_2proc.yaml -m memlens train ...`); "
                        "or remove the stage's deepspeed key to train in one process")
    if importlib.util.find_spec("deepspeed") is None:
        raise UserError(f"deepspeed={deepspeed_config}: DeepSpeed is not installed; `pip install -e '.[deepspeed]'`, "
                        "or remove the stage's deepspeed key")
    from accelerate import PartialState  # accelerate (~1 s): DeepSpeed on CPU only; every recipe imports common.py
    from accelerate.state import AcceleratorState  # accelerate: DeepSpeed on CPU only
    from accelerate.utils import DistributedType  # accelerate: DeepSpeed on CPU only
    from deepspeed.accelerator import get_accelerator, set_accelerator  # deepspeed: optional, checked above

    if get_accelerator().device_name() != "cpu":     # device=cpu on a machine that has an accelerator
        # deepspeed: optional (the deepspeed extra), DeepSpeed on CPU only
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

        set_accelerator(CPU_Accelerator())
    # Collectives over gloo, not DeepSpeed's shared-memory kernel: that one is compiled on first use (measured
    # 133 s on 2 cores, and it needs g++ and ninja); `compatible: false` makes DeepSpeed skip it (deepspeed.ops keeps
    # the edited table).
    import deepspeed.ops  # deepspeed: optional, checked above
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder  # deepspeed: optional, checked above

    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    # A fresh state for every trainer, as TrainingArguments makes one without use_configured_state (an Accelerator
    # takes a DeepSpeed plugin only when it is the first of its state: a second stage in this process needs its own).
    AcceleratorState._reset_state(reset_partial_state=True)
    device = os.environ.get("ACCELERATE_TORCH_DEVICE")
    os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"
    try:
        PartialState(backend="gloo")
    finally:
        if device is None:
            del os.environ["ACCELERATE_TORCH_DEVICE"]
        else:
            os.environ["ACCELERATE_TORCH_DEVICE"] = device
    if PartialState().distributed_type != DistributedType.DEEPSPEED:
        raise UserError(f"deepspeed={deepspeed_config} with device=cpu: accelerate did not set up DeepSpeed over gloo "
                        f"(distributed type {PartialState().distributed_type}); remove the stage's deepspeed key")
    return {"deepspeed": deepspeed_config, "accelerator_config": {"use_configured_state": True}}


@contextmanager
def deepspeed_left_behind_cleared():
    """Train and save a stage, then clear what a DeepSpeed trainer leaves in the process: accelerate sets
    ACCELERATE_USE_DEEPSPEED=true for good once it is given a DeepSpeed plugin (a later stage's TrainingArguments
    would then build a default DeepSpeed plugin of its own), and transformers' ZeRO-3 switch (HfDeepSpeedConfig, a
    weak reference) lives as long as the trainer does (the stage's evaluation, which loads the saved model in the main
    process alone, and a later stage's from_pretrained would build a partitioned model and wait for the other
    processes). Without DeepSpeed neither is set, and this changes nothing."""
    before = os.environ.get("ACCELERATE_USE_DEEPSPEED")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
        else:
            os.environ["ACCELERATE_USE_DEEPSPEED"] = before
        if "transformers.integrations.deepspeed" in sys.modules:
            sys.modules["transformers.integrations.deepspeed"].unset_hf_deepspeed_config()


def zero_stage(deepspeed_config: str | None) -> int | None:
    """The ZeRO stage a DeepSpeed JSON asks for (None: no DeepSpeed)."""
    if not deepspeed_config:
        return None
    return int((read_json(Path(deepspeed_config)).get("zero_optimization") or {}).get("stage", 0))


@dataclass
class StageSettings:
    """What every recipe's settings share, as TRL's configs share TrainingArguments: one strict loader
    (an unknown key, or a non-boolean for a bool field, is an error naming it and the valid keys) and one
    form for a bad value, `stages.<NAME>.<key>=<value>: <fix>`. Subclasses are dataclasses whose fields all
    have defaults; their __post_init__ receives `where` (e.g. "stages.RLFT.1") and calls this one first."""

    where: InitVar[str] = "stages"   # where the settings came from, for error messages only; not a setting

    def __post_init__(self, where: str) -> None:
        self._where = where

    @classmethod
    def load(cls, settings: dict[str, Any], stage: str):
        """The settings of stage `stage` from its config mapping (`stages.<stage>`)."""
        where = f"stages.{stage}"
        check_dataclass_values(cls, settings, where)
        return cls(**settings, where=where)

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
        gathers the partitioned weights and merges them on the main process (recipes.models.save_lora_stage)."""
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
    """The highest-step whole checkpoint directory, for resuming a killed stage (memlens.harness.core.layout)."""
    whole = whole_checkpoints(out_dir)
    return whole[max(whole)] if whole else None


def settings_match(out_dir: Path, settings: dict[str, Any]) -> bool:
    """True when a finished stage was trained with exactly these settings (so it can be skipped)."""
    if not is_complete(out_dir):
        return False
    return same_settings(read_json(Path(out_dir) / PROVENANCE_FILE).get("settings"), settings)


def same_settings(a: Any, b: Any) -> bool:
    """Two stages' settings are equal key for key."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def write_provenance(ctx: StageContext, stage: str, settings: dict[str, Any], datasets: list[str],
                     init_model: str | None = None, reward_model: str | None = None,
                     **extra: Any) -> None:
    """Write provenance.json last, atomically: the marker that this stage is finished."""
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
    besides the common fields (datasets, init model, settings...). `stage` is provenance.json's `stage`."""

    stage: ClassVar[str]

    def __init__(self, cfg: Any, ctx: StageContext) -> None: ...
    def setup(self) -> None: ...
    def train(self) -> None: ...
    def save(self) -> None: ...
    def evaluate(self) -> None: ...
    def provenance(self) -> dict[str, Any]: ...


def run_recipe(recipe_class: type[Recipe], load: Callable[[dict[str, Any], str], Any], settings: dict[str, Any],
               ctx: StageContext) -> None:
    """The one stage runner: skip a stage whose provenance records these settings (finished), else set up (the
    trainers resume from the last whole checkpoint), train, save, evaluate, and write provenance.json last — on
    the main process only, as the marker that the stage finished."""
    if settings_match(ctx.out_dir, settings):
        return
    recipe = recipe_class(load(settings, ctx.name.split("/")[0]), ctx)
    with deepspeed_left_behind_cleared():
        recipe.setup()
        recipe.train()
        recipe.save()
    # After DeepSpeed's switches are cleared: an evaluation loads saved models whole, in the main process alone.
    recipe.evaluate()
    if is_main_process():
        write_provenance(ctx, recipe.stage, settings, **recipe.provenance())


def left_padded_prompts(tokenizer, prompts: list[str]):
    """Prompt ids by the one encoding rule (memlens.harness.model.encode: BOS where the family adds one), left-padded so
    that every prompt ends where sampling starts (PPO's rollouts, the RL reward evaluation); tensors."""
    return tokenizer.pad({"input_ids": encode_texts(tokenizer, prompts)}, padding_side="left", return_tensors="pt")


def fit_fim_context(tokenizer, prefix: str, suffix: str, middle_tokens: int, max_length: int,
                    margin: int = CONTEXT_MARGIN_TOKENS) -> tuple[str, str, bool]:
    """Trim a FIM context (in tokens) so that `[PRE]prefix[SUF]suffix[MID]` + a middle of `middle_tokens`
    tokens fits `max_length`; returns (prefix, suffix, trimmed).

    PSM puts the middle last (paper 003 Sec. 2.2.1) and TRL's trainers cut a too-long text at its end,
    which would cut the middle: the canary an FT stage plants, the chosen/rejected lines IPO learns from.
    The context nearest the hole (the end of the prefix, the start of the suffix) is kept, each side
    getting at least half of the budget when it needs it. BPE merges across the joins may differ by a few
    tokens, hence the margin. One definition for every stage that trains on FIM rows (SFT, IPO).
    """
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    budget = max_length - middle_tokens - margin
    p, s = encode(prefix), encode(suffix)
    if len(p) + len(s) <= budget:
        return prefix, suffix, False
    keep_s = min(len(s), max(budget // 2, budget - len(p), 0))
    keep_p = max(budget - keep_s, 0)
    return (tokenizer.decode(p[len(p) - keep_p:]) if keep_p else ""), tokenizer.decode(s[:keep_s]), True


# --- the console and the training log ----------------------------------------------------------------------


def require_tensorboard(enabled: Any) -> bool:
    """The root key `tensorboard`, checked before any training: a boolean, and the package when true."""
    if not require_bool(enabled, "tensorboard"):
        return False
    try:
        import tensorboard  # noqa: F401  (torch.utils.tensorboard needs it)
    except ModuleNotFoundError:
        raise UserError("tensorboard=true: the tensorboard package is not installed; `pip install tensorboard` "
                        "into this environment, or leave tensorboard=false (every logged step is in "
                        "models/<NAME>/train_log.jsonl either way)") from None
    return True


def _loggable(value: Any) -> Any:
    """A log value as JSON keeps it: numbers and strings as they are, anything else (a tensor) as a number
    when it has one, else its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class TrainLog:
    """`models/<NAME>/train_log.jsonl`: one object per logged training step, `step` first, then what the
    trainer logged (loss, learning rate, reward, KL, ...); with `tensorboard`, the numbers also go to
    `models/<NAME>/tensorboard/`. trainer_state.json keeps its own copy (harness/report/evidence.py reads it).

    A resumed stage logs again every step after the checkpoint it resumes from, so `start(step)` first drops
    what a killed run logged past that step: the file never holds a step twice."""

    def __init__(self, out_dir: Path, tensorboard: bool = False, main_process: bool = True):
        self.path = Path(out_dir) / TRAIN_LOG
        self.tensorboard_dir = Path(out_dir) / TENSORBOARD_DIR if tensorboard else None
        self.main_process = main_process
        self.writer = None

    def start(self, step: int) -> None:
        if not self.main_process:
            return
        if self.path.is_file():
            rows = read_jsonl(self.path)
            kept = [r for r in rows if isinstance(r.get("step"), int) and r["step"] <= step]
            if len(kept) != len(rows):
                atomic_write_jsonl(self.path, kept)
        if self.tensorboard_dir is not None and self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # torch (~1 s): only tensorboard=true writes events

            # purge_step: TensorBoard drops the events a killed run wrote after the resumed step
            self.writer = SummaryWriter(log_dir=str(self.tensorboard_dir), purge_step=step + 1 if step else None)

    def append(self, step: int, logs: dict[str, Any]) -> None:
        if not self.main_process:
            return
        row = {"step": int(step), **{k: _loggable(v) for k, v in logs.items() if k != "step"}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(jsonl_line(row))
        if self.writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(key, value, int(step))
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _stage_console_callback():
    """The TrainerCallback class (built on first use: importing transformers costs seconds)."""
    # transformers (~1.5 s): when a stage trains; every recipe imports common.py
    from transformers import TrainerCallback

    class StageConsoleCallback(TrainerCallback):
        """Logged steps -> train_log.jsonl; progress -> one bar (terminal) or a few lines (elsewhere)."""

        def __init__(self, name: str, log: TrainLog):
            self.name, self.log, self.progress = name, log, None

        def on_train_begin(self, args, state, control, **kwargs):
            # Called after a resumed run has loaded its checkpoint's state: global_step is where it resumes.
            self.log.main_process = state.is_world_process_zero
            self.log.start(state.global_step)
            self.progress = StageProgress(self.name, state.max_steps, initial=state.global_step,
                                          enabled=state.is_world_process_zero)

        def on_step_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.update(state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                self.log.append(state.global_step, {"epoch": state.epoch, **logs})
                if self.progress is not None and isinstance(logs.get("loss"), (int, float)):
                    self.progress.update(state.global_step, loss=float(logs["loss"]))

        def on_train_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.close()
            self.log.close()

    return StageConsoleCallback


def attach_stage_console(trainer, ctx: StageContext) -> None:
    """Give a transformers/TRL trainer the project's console: its per-step dictionaries go to
    `models/<NAME>/train_log.jsonl` (and TensorBoard with `tensorboard=true`) instead of being printed,
    and its progress is one bar per stage on a terminal, a line per 25 % elsewhere (harness/core/console.py).
    Replaces the Trainer's PrinterCallback (disable_tqdm=True) or ProgressCallback, whichever it has."""
    # transformers (~1.5 s): when a stage trains; every recipe imports common.py
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(_stage_console_callback()(ctx.name, TrainLog(ctx.out_dir, ctx.tensorboard)))
