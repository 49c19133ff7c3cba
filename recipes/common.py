"""What every stage shares: where it reads and writes, device flags for TRL, provenance, completion.

A stage's output directory `<run_dir>/models/<NAME>/` holds the final model (weights, config,
tokenizer) at its root, its `checkpoint-<step>/` directories, and `provenance.json`, which is written
last: a directory with provenance.json is a finished stage, anything else is resumable work.
"""

from __future__ import annotations

import json
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

from harness.config import check_dataclass_values
from harness.encode import encode_texts
from harness.errors import UserError
from harness.io import atomic_write_json, read_json
from harness.layout import PROVENANCE_FILE, is_complete, whole_checkpoints
from harness.layout import data_dir as layout_data_dir
from harness.layout import models_dir
from harness.provenance import provenance

__all__ = ["PROVENANCE_FILE", "is_complete"]   # re-exported: the recipes' one import of the run layout
CONTEXT_MARGIN_TOKENS = 8     # FIM sentinels + BPE merge slack at the prompt's joins (fit_fim_context)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is present, else 'cpu' (one rule, in harness.generation)."""
    from harness.generation import pick_device

    return pick_device(device)


def trl_device_kwargs(device: str, deepspeed_config: str | None = None) -> dict[str, Any]:
    """TRL/transformers TrainingArguments flags per device.

    Every TRL config defaults to bf16=True and gradient_checkpointing=True, which fail or crawl on
    CPU: there we pass use_cpu=True, bf16=False, gradient_checkpointing=False (bf16 matmuls measured
    ~1.8x slower than fp32 on CPU). On CUDA we train in bf16 with activation checkpointing and hand
    over the DeepSpeed config when one is given.
    """
    if device == "cpu":
        return {"use_cpu": True, "bf16": False, "gradient_checkpointing": False,
                "report_to": "none", "dataloader_num_workers": 0}
    # Gradient checkpointing said explicitly: TRL's configs default it on, transformers' TrainingArguments
    # (the pointwise reward model's trainer) off; a 3 B model's activations need it on a GPU either way.
    kwargs: dict[str, Any] = {"bf16": True, "report_to": "none", "gradient_checkpointing": True,
                              "gradient_checkpointing_kwargs": {"use_reentrant": False}}
    if deepspeed_config:
        kwargs["deepspeed"] = deepspeed_config
    return kwargs


def zero_stage(deepspeed_config: str | None) -> int | None:
    """The ZeRO stage a DeepSpeed JSON asks for (None: no DeepSpeed)."""
    if not deepspeed_config:
        return None
    return int((read_json(Path(deepspeed_config)).get("zero_optimization") or {}).get("stage", 0))


def refuse_zero3_with_lora(settings: StageSettings) -> None:
    """ZeRO-3 partitions every weight across processes; merging LoRA adapters into a partitioned base at
    save (recipes.models.save_final) would write empty or partial tensors. LoRA's few trainable parameters
    gain nothing from ZeRO-3 anyway: ZeRO-2 shards their optimizer state, and the base stays whole."""
    lora = settings.model_settings.lora_settings.enabled
    if lora and zero_stage(settings.deepspeed) == 3:
        raise settings.bad("deepspeed", "ZeRO-3 with LoRA would save partitioned weights; use "
                           "launch/ds_zero2.json with LoRA, or model.lora.enabled=false for full fine-tuning "
                           "under ZeRO-3")


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


@dataclass
class StageContext:
    """Everything a recipe needs besides its own stage config. Stages meet only through directories."""

    run_dir: Path
    name: str                      # model name, e.g. "FT.1" or "RLFT.4/beta=0.005,lr=3e-06"
    seed: int = 0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def out_dir(self) -> Path:
        return models_dir(self.run_dir) / self.name

    def data_dir(self, dataset: str) -> Path:
        path = layout_data_dir(self.run_dir, dataset)
        if not (path / "manifest.json").is_file():
            raise UserError(f"dataset {dataset!r} not built: {path}/manifest.json missing; "
                            "run `memaudit data experiment=...` first or fix the stage's dataset list")
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
    """The highest-step whole checkpoint directory, for resuming a killed stage (harness.layout)."""
    whole = whole_checkpoints(out_dir)
    return whole[max(whole)] if whole else None


def settings_match(out_dir: Path, settings: dict[str, Any]) -> bool:
    """True when a finished stage was trained with exactly these settings (so it can be skipped)."""
    if not is_complete(out_dir):
        return False
    recorded = read_json(Path(out_dir) / PROVENANCE_FILE).get("settings")
    return json.dumps(recorded, sort_keys=True, default=str) == json.dumps(settings, sort_keys=True, default=str)


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


def left_padded_prompts(tokenizer, prompts: list[str]):
    """Prompt ids by the one encoding rule (harness.encode: BOS where the family adds one), left-padded so
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
