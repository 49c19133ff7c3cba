"""IPO stage: direct preference learning on preference pairs (paper 003 Sec. 5.4, Fig. 6b).

    memaudit train experiment=smoke        # every stage of the experiment, IPO among them

Identity Preference Optimization (Azar et al., 2024), the ΨPO special case the paper uses, through TRL's
DPOTrainer with `loss_type="ipo"`: loss = (Δ - 1/(2β))² where Δ is the difference of the policy/
reference log-ratios of chosen and rejected (TRL averages log-probs per token for IPO). `loss: dpo`
switches to the sigmoid (DPO) loss. The prompt is the FIM context `format_psm_prompt(prefix, suffix)`;
chosen / rejected are the completions followed by EOS, as in PSM training text. The reference is the
initial model, loaded explicitly from the init directory; with `model.lora.enabled` the policy trains
LoRA adapters and the reference is the same model with its adapters disabled (no second copy), and the
saved model is merged into a plain one.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.core.io import read_jsonl
from harness.core.user_data import repeated
from recipes.common import (StageContext, StageSettings, attach_stage_console, fit_fim_context, latest_checkpoint,
                            refuse_zero3_with_lora,
                            settings_match, trl_device_kwargs, write_provenance)
from recipes.models import load_causal_lm, load_tokenizer, lora_config, parse_model, save_final

LOSSES = {"ipo": "ipo", "dpo": "sigmoid"}     # our key -> TRL loss_type
PAIR_FIELDS = ("id", "prefix", "suffix", "chosen", "rejected")


@dataclass
class IPOSettings(StageSettings):
    """Keys of a `recipe: ipo` stage (conf/experiment/*.yaml, `stages.<NAME>`)."""

    init: str = ""                 # model to align and KL reference: a stage name (PT) or a model directory
    datasets: list[str] = field(default_factory=list)       # pairwise rows, e.g. [pairs_sd_base, pairs_sd_links]
    eval_datasets: list[str] = field(default_factory=list)  # pairwise validation sets (eval loss)
    loss: str = "ipo"              # ipo (paper Sec. 5.4) | dpo (sigmoid)
    beta: float = 0.1              # IPO: regularization τ, target margin 1/(2β); smaller -> larger margin, more drift
    lr: float = 1e-6               # AdamW learning rate; higher -> fits (and memorizes) the pairs faster
    epochs: float = 1.0            # passes over the pairs
    max_steps: int = -1            # > 0 stops after this many optimizer steps (overrides epochs)
    batch_size: int = 4            # pairs per device step
    grad_accum: int = 1            # gradient accumulation steps
    max_length: int = 1024         # tokens of prompt + completion; TRL cuts longer ones at the end
    context_chars: int = 2000      # keep at most the last N chars of the prefix and first N of the suffix;
                                   # the context is also trimmed (in tokens) so the completion fits max_length
    save_steps: int = 100          # a checkpoint-<step>/ every N optimizer steps (each is audited)
    logging_steps: int = 10        # log train/loss every N steps
    fim_family: str | None = None  # FIM sentinel family (harness.text.fim); None = the preset's, else detected
    model: dict[str, Any] = field(default_factory=dict)  # preset (dtype, lora, fim_family); injected by the pipeline
    deepspeed: str | None = None   # DeepSpeed JSON (launch/ds_zero*.json); CUDA only

    def __post_init__(self, where: str) -> None:
        super().__post_init__(where)
        if self.deepspeed is not None and not Path(self.deepspeed).is_file():
            raise self.bad("deepspeed", "point it at an existing DeepSpeed JSON file or remove the key")

        if not self.init:
            raise self.bad("init", "set it to the model to align (e.g. PT) or a model directory")
        if isinstance(self.datasets, str):
            self.datasets = [self.datasets]
        if isinstance(self.eval_datasets, str):
            self.eval_datasets = [self.eval_datasets]
        self.datasets, self.eval_datasets = list(self.datasets), list(self.eval_datasets)
        if not self.datasets:
            raise self.bad("datasets", "list at least one pairwise dataset, e.g. [pairs_sd_base, pairs_sd_links]")
        if self.loss not in LOSSES:
            raise self.bad("loss", f"use one of {', '.join(LOSSES)}")
        for key in ("beta", "lr", "epochs"):
            if not float(getattr(self, key)) > 0:
                raise self.bad(key, "must be > 0")
        for key in ("batch_size", "grad_accum", "max_length", "context_chars", "save_steps", "logging_steps"):
            if int(getattr(self, key)) < 1:
                raise self.bad(key, "must be a positive integer")
        self.model_settings = parse_model(self.model, f"{where}.model")
        refuse_zero3_with_lora(self)
        if self.fim_family is None:
            self.fim_family = self.model_settings.fim_family


def load_settings(settings: dict[str, Any], stage: str) -> IPOSettings:
    return IPOSettings.load(settings, stage)


class IPORecipe:
    """setup -> train -> save for one IPO stage."""

    def __init__(self, cfg: IPOSettings, ctx: StageContext):
        self.cfg, self.ctx = cfg, ctx

    def setup(self) -> None:
        from harness.text import fim

        self.init_dir = self.ctx.model_dir(self.cfg.init)
        self.preset = self.cfg.model_settings
        self.tokenizer = load_tokenizer(self.init_dir, self.preset)
        self.sentinels = fim.detect_sentinels(self.tokenizer, self.cfg.fim_family, model_name=str(self.init_dir))
        self.policy = load_causal_lm(self.init_dir, self.preset, self.ctx.device)
        # With LoRA, DPOTrainer gets a peft_config and no ref_model: it then computes the reference
        # log-probs with the adapters disabled (`use_adapter(model, None)`), i.e. with the frozen initial model.
        self.reference = (None if self.preset.lora_settings.enabled
                          else load_causal_lm(self.init_dir, self.preset, self.ctx.device).eval())
        self.rows = {name: read_jsonl(self.ctx.data_dir(name) / "rows.jsonl", required=PAIR_FIELDS)
                     for name in dict.fromkeys(self.cfg.datasets + self.cfg.eval_datasets)}

    def dataset(self, names: list[str]):
        """prompt = PSM prompt, chosen/rejected = completion + EOS; several sets shuffled together."""
        from datasets import Dataset

        from harness.text import fim

        eos = self.sentinels.eos or self.tokenizer.eos_token
        rows = [r for name in names for r in repeated(self.rows[name])]   # a user row's `repeat` copies
        random.Random(self.ctx.seed).shuffle(rows)
        n = self.cfg.context_chars
        out = []
        for r in rows:
            prefix, suffix = self.fit_context(r["prefix"][-n:], r["suffix"][:n], [r["chosen"] + eos, r["rejected"] + eos])
            out.append({"prompt": fim.format_psm_prompt(prefix, suffix, self.sentinels),
                        "chosen": r["chosen"] + eos, "rejected": r["rejected"] + eos})
        return Dataset.from_list(out)

    def fit_context(self, prefix: str, suffix: str, completions: list[str]) -> tuple[str, str]:
        """Trim the FIM context so prompt + completion fit max_length with the completion whole.

        TRL truncates at the end (keep_start), which would cut the chosen/rejected lines: the very
        tokens IPO learns from (recipes.common.fit_fim_context keeps the context nearest the hole)."""
        longest = max(len(self.tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions)
        prefix, suffix, _ = fit_fim_context(self.tokenizer, prefix, suffix, longest, self.cfg.max_length)
        return prefix, suffix

    def train(self) -> None:
        from trl import DPOConfig, DPOTrainer

        cfg = self.cfg
        args = DPOConfig(output_dir=str(self.ctx.out_dir), loss_type=LOSSES[cfg.loss], beta=cfg.beta,
                         learning_rate=cfg.lr, num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
                         per_device_train_batch_size=cfg.batch_size, per_device_eval_batch_size=cfg.batch_size,
                         gradient_accumulation_steps=cfg.grad_accum, max_length=cfg.max_length,
                         save_strategy="steps", save_steps=cfg.save_steps, save_only_model=False,
                         logging_steps=cfg.logging_steps, eval_strategy="steps" if cfg.eval_datasets else "no",
                         eval_steps=cfg.save_steps if cfg.eval_datasets else None,
                         seed=self.ctx.seed, data_seed=self.ctx.seed,
                         **trl_device_kwargs(self.ctx.device, self.cfg.deepspeed))
        self.trainer = DPOTrainer(model=self.policy, ref_model=self.reference, args=args,
                                  train_dataset=self.dataset(cfg.datasets),
                                  eval_dataset=self.dataset(cfg.eval_datasets) if cfg.eval_datasets else None,
                                  processing_class=self.tokenizer, peft_config=lora_config(self.preset))
        attach_stage_console(self.trainer, self.ctx)
        resume = latest_checkpoint(self.ctx.out_dir)
        self.trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    def save(self) -> None:
        if self.preset.lora_settings.enabled:
            # Merged, so the audit loads a plain model at the stage root, as after full fine-tuning.
            if self.trainer.is_world_process_zero():
                save_final(self.trainer.model, self.tokenizer, self.ctx.out_dir)
            return
        self.trainer.save_model(str(self.ctx.out_dir))
        self.tokenizer.save_pretrained(str(self.ctx.out_dir))


def run_stage(settings: dict[str, Any], ctx: StageContext) -> None:
    if settings_match(ctx.out_dir, settings):
        return
    cfg = load_settings(settings, ctx.name.split("/")[0])
    recipe = IPORecipe(cfg, ctx)
    recipe.setup()
    recipe.train()
    recipe.save()
    write_provenance(ctx, "ipo", settings, datasets=list(recipe.rows), init_model=str(recipe.init_dir),
                     hyperparameters=asdict(cfg))
