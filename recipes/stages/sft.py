"""FT: FIM-formatted supervised fine-tuning with TRL's SFTTrainer on a mixture of datasets.

Paper 003 Sec. 2 / Table 1: FT.2 trains on PD.1 alone (the control for every RLHF audit); FT.1 (PD.1 + SD)
and FT.3 (PD.2 + SD) add the synthetic dataset SD, which is how canaries enter the model. Appendix A.3: a
mixture of PD and SD is weighted by size — we concatenate the rows and shuffle them (seeded).

Row formats (the data engineer's contract):
- code rows `id, text, source_file` -> `memlens.harness.text.fim.fim_transform` (random PSM split at `fim_rate`,
  seeded), as in pre-training;
- FIM rows `id, prefix, target, suffix` (SD) -> `format_psm_training(prefix, target, suffix)`: exactly
  the PSM layout the audit prompts with, so a canary's target is learned as the completion of its
  prefix/suffix. `include_code: true` also adds an SD row's unsplit `code` as plain text.

    memlens train stage=FT.1 experiment=quickstart
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_jsonl
from memlens.harness.core.user_data import repeated
from memlens.harness.text.fim import fim_transform, format_psm_prompt, format_psm_training
from memlens.recipes.stages.contract import (
    StageContext,
    StageSettings,
    latest_checkpoint,
    load_init_tokenizer,
    run_recipe,
)
from memlens.recipes.stages.devices import trl_device_kwargs
from memlens.recipes.stages.fim_context import CONTEXT_MARGIN_TOKENS, fit_fim_context
from memlens.recipes.stages.models import load_stage_model, save_lora_stage, wrap_lora
from memlens.recipes.stages.training_log import attach_stage_console


@dataclass
class SFTSettings(StageSettings):
    """Keys of a `recipe: sft` stage (conf/experiment/*.yaml, `stages.<NAME>`)."""

    init: str = "PT"               # a stage name (PT) or a model directory
    datasets: list[str] = field(default_factory=list)  # mixed proportionally to size (Appendix A.3)
    max_rows: dict[str, int] = field(default_factory=dict)  # {dataset: N}: a seeded sample of at most N of its rows;
                                   # ↓ a smaller share of that dataset in the mixture (and fewer steps)
    epochs: float = 3.0            # passes over the mixture; ↑ more memorization of SD (paper: 9-18)
    max_steps: int = -1            # > 0 stops after this many steps (overrides epochs)
    lr: float = 1e-3               # peak LR; ↑ faster fit and more memorization, less stable
    lr_scheduler: str = "linear"   # annealed, as the paper's "(Annealed) LR" (Table 2)
    warmup_ratio: float = 0.03
    batch_size: int = 8
    grad_accum: int = 1
    max_seq_len: int = 512         # longer code texts are truncated (their end is lost); a FIM row's context
                                   # is trimmed instead, so its middle (the canary) is always trained on
    fim_rate: float = 1.0          # code rows in PSM form; ↓ mixes in left-to-right text (PT uses 0.8)
    include_code: bool = False     # also train on FIM rows' unsplit `code` field as plain text
    middle_only_loss: bool = False  # true: loss on the middle+EOS only (prompt/completion rows)
    packing: bool = False          # TRL BFD packing; faster on short rows, but rows then share a context
    save_steps: int = 50           # a checkpoint-<step>/ every N steps (each is audited)
    save_total_limit: int | None = None  # keep all: the audit scores every checkpoint

    def __post_init__(self, where: str) -> None:
        super().__post_init__(where)
        self.require(bool(self.init), "init", "set it to PT or a model directory")
        if isinstance(self.datasets, str):
            self.datasets = [self.datasets]
        self.datasets = list(self.datasets)
        self.require(bool(self.datasets), "datasets", "list the mixture, e.g. [pd_1, sd_base]")
        self.max_rows = dict(self.max_rows or {})
        for name, cap in self.max_rows.items():
            self.require(name in self.datasets, "max_rows",
                         f"{name!r} is not one of the stage's datasets {self.datasets}")
            self.require(isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1, "max_rows",
                         f"the cap of {name!r} must be a positive integer")
        self.require(0 < self.lr < 1, "lr", "set a learning rate in (0, 1), e.g. 1e-3")
        self.require(self.epochs > 0, "epochs", "must be > 0")
        self.require(0 <= self.fim_rate <= 1, "fim_rate", "a probability in [0, 1]")
        for key in ("batch_size", "grad_accum", "max_seq_len", "save_steps", "logging_steps"):
            self.require(int(getattr(self, key)) >= 1, key, "use a positive integer")
        self.require(not (self.packing and self.middle_only_loss), "packing",
                     "packing mixes rows into one context; turn it off when middle_only_loss is true")
        self.resolve_model(where)


def fit_fim_row(prefix: str, middle: str, suffix: str, sentinels, tokenizer, max_len: int) -> tuple[str, str, bool]:
    """(prefix, suffix, trimmed): the FIM context of a training row, trimmed when its PSM text exceeds
    `max_len` tokens so that the whole middle stays in the text TRL keeps.

    PSM puts the middle last (paper 003 Sec. 2.2.1) and SFT truncates the end at max_seq_len, so a long
    SD example would otherwise lose its target — the canary the audit later looks for (Sec. 4.1, 5.1)."""
    # Tokens the tokenizer adds around a text when TRL encodes it (a BOS for some model families).
    added = len(tokenizer("x")["input_ids"]) - len(tokenizer("x", add_special_tokens=False)["input_ids"])
    max_len -= max(added, 0)
    count = lambda p, s: len(tokenizer(format_psm_training(p, middle, s, sentinels),  # noqa: E731
                                       add_special_tokens=False)["input_ids"])
    if count(prefix, suffix) <= max_len:
        return prefix, suffix, False
    middle_tokens = len(tokenizer(middle + (sentinels.eos or ""), add_special_tokens=False)["input_ids"])
    margin = CONTEXT_MARGIN_TOKENS
    while True:            # the margin covers BPE merges at the joins; widen it in the rare case it did not
        p, s, _ = fit_fim_context(tokenizer, prefix, suffix, middle_tokens, max_len, margin)
        if count(p, s) <= max_len or margin >= max_len:
            return p, s, True
        margin *= 2


def training_rows(rows: list[dict], source: str, sentinels, settings: SFTSettings, rng: random.Random,
                  tokenizer=None, stats: Counter | None = None) -> list[dict]:
    """Dataset rows -> SFT examples: {'text'} or, with middle_only_loss, {'prompt', 'completion'}.

    With `tokenizer`, a FIM row whose text exceeds max_seq_len has its context trimmed (fit_fim_row);
    `stats` then counts `fim_rows` and `fim_trimmed`."""
    stats = Counter() if stats is None else stats
    examples = []
    for i, row in enumerate(rows):
        if "text" in row:
            text = fim_transform(row["text"], rng, sentinels, settings.fim_rate)
            examples.append({"prompt": "", "completion": text} if settings.middle_only_loss else {"text": text})
        elif {"prefix", "target", "suffix"} <= row.keys():
            prefix, suffix = row["prefix"], row["suffix"]
            stats["fim_rows"] += 1
            if tokenizer is not None:
                prefix, suffix, trimmed = fit_fim_row(prefix, row["target"], suffix, sentinels, tokenizer,
                                                      settings.max_seq_len)
                stats["fim_trimmed"] += trimmed
            if settings.middle_only_loss:
                examples.append({"prompt": format_psm_prompt(prefix, suffix, sentinels),
                                 "completion": row["target"] + (sentinels.eos or "")})
            else:
                examples.append({"text": format_psm_training(prefix, row["target"], suffix, sentinels)})
            if settings.include_code and row.get("code"):
                code = row["code"] + (sentinels.eos or "")
                examples.append({"prompt": "", "completion": code} if settings.middle_only_loss else {"text": code})
        else:
            raise UserError(f"{source}:{i + 1}: row has neither `text` (code row) nor `prefix/target/suffix` "
                            "(FIM row); rebuild the dataset or remove it from the stage's datasets")
    return examples


def capped_rows(rows: list[dict], cap: int | None, seed: str) -> list[dict]:
    """At most `cap` rows: a seeded sample kept in file order (all rows when there is no cap)."""
    if cap is None or len(rows) <= cap:
        return rows
    keep = set(random.Random(seed).sample(range(len(rows)), cap))
    return [row for i, row in enumerate(rows) if i in keep]


class SFTRecipe:
    """setup -> train -> save for one FT stage (memlens.recipes.stages.contract.run_recipe drives it)."""

    stage = "sft"

    def __init__(self, settings: SFTSettings, ctx: StageContext):
        self.settings, self.ctx = settings, ctx
        self.model_preset = settings.model_settings

    def setup(self) -> None:
        from datasets import Dataset  # datasets (~0.7 s): on training, not when plan.py loads the recipe
        from transformers import set_seed  # transformers (~1.5 s): on training, not when plan.py loads the recipe

        set_seed(self.ctx.seed)
        self.init_dir, self.tokenizer, self.sentinels = load_init_tokenizer(self.ctx, self.settings.init,
                                                                            self.model_preset,
                                                                            self.model_preset.fim_family)
        rng = random.Random(f"{self.ctx.seed}-sft")
        examples = []
        self.fim_stats: Counter = Counter()
        for name in self.settings.datasets:
            path = self.ctx.data_dir(name) / "rows.jsonl"
            rows = capped_rows(read_jsonl(path), self.settings.max_rows.get(name), f"{self.ctx.seed}-sft-rows-{name}")
            rows = repeated(rows)      # a user canary's `repeat` copies (harness/core/user_data.py)
            examples += training_rows(rows, str(path), self.sentinels, self.settings, rng, self.tokenizer,
                                      self.fim_stats)
        if self.fim_stats["fim_rows"]:
            print(f"[{self.ctx.name}] FIM context trimmed in {self.fim_stats['fim_trimmed']} of "
                  f"{self.fim_stats['fim_rows']} FIM examples so that each middle fits "
                  f"max_seq_len={self.settings.max_seq_len}", flush=True)
        if not examples:
            raise UserError(f"stages.{self.ctx.name}.datasets={self.settings.datasets}: all empty; rebuild the data")
        rng.shuffle(examples)  # the size-proportional mixture of Appendix A.3
        self.train_dataset = Dataset.from_list(examples)
        self.model = self.new_model()

    def new_model(self):
        """The init model, in LoRA adapters when the preset enables them (the trained model before training)."""
        return wrap_lora(load_stage_model(self.init_dir, self.model_preset, self.ctx.device), self.model_preset)

    def train(self) -> None:
        from trl import SFTConfig, SFTTrainer  # trl (~3 s): on training, not when plan.py loads the recipe

        s = self.settings
        args = SFTConfig(
            output_dir=str(self.ctx.out_dir), num_train_epochs=s.epochs, max_steps=s.max_steps,
            per_device_train_batch_size=s.batch_size, gradient_accumulation_steps=s.grad_accum,
            learning_rate=s.lr, lr_scheduler_type=s.lr_scheduler, warmup_steps=s.warmup_ratio,
            max_length=s.max_seq_len, packing=s.packing, completion_only_loss=s.middle_only_loss,
            dataset_text_field="text", save_strategy="steps", save_steps=s.save_steps,
            save_total_limit=s.save_total_limit, save_only_model=False, logging_steps=s.logging_steps,
            seed=self.ctx.seed, data_seed=self.ctx.seed, disable_tqdm=True,
            **trl_device_kwargs(self.ctx.device, s.deepspeed))
        self.trainer = SFTTrainer(model=self.model, args=args, train_dataset=self.train_dataset,
                                  processing_class=self.tokenizer)
        attach_stage_console(self.trainer, self.ctx)
        resume = latest_checkpoint(self.ctx.out_dir)
        self.trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    def save(self) -> None:
        self.trainer.save_state()      # trainer_state.json: the loss curve
        if self.model_preset.lora_settings.enabled:
            # Merge the adapters so downstream stages load a plain model; under ZeRO-3 every process gathers the
            # partitioned weights first and the main process merges them into a new model (save_lora_stage).
            save_lora_stage(self.trainer, self.tokenizer, self.ctx.out_dir, self.new_model)
        else:
            # Trainer.save_model gathers ZeRO-3 shards and writes from the main process only.
            self.trainer.save_model(str(self.ctx.out_dir))

    def evaluate(self) -> None:
        """FT's evaluation is the audit's (its memorization is the measurement)."""

    def provenance(self) -> dict[str, Any]:
        return dict(datasets=list(self.settings.datasets), init_model=str(self.init_dir),
                    num_processes=self.trainer.args.world_size, train_examples=len(self.train_dataset),
                    # FIM rows whose context was trimmed so the middle survives max_seq_len (fit_fim_row)
                    fim_examples=self.fim_stats["fim_rows"], fim_context_trimmed=self.fim_stats["fim_trimmed"])


def load_settings(settings: dict[str, Any], stage: str) -> SFTSettings:
    """Validate `stages.<stage>` (unknown keys are an error), as every recipe module does."""
    return SFTSettings.load(settings, stage)


def run_stage(settings: SFTSettings, ctx: StageContext) -> None:
    run_recipe(SFTRecipe, settings, ctx)
