"""RM stage: a scalar reward model on top of a fine-tuned code model (paper 003 Sec. 2.1, Appendix A.3).

    memlens train experiment=smoke        # runs every stage of the experiment, RM.* among them

The reward model is the FT checkpoint with a one-unit sequence-classification head
(`AutoModelForSequenceClassification(num_labels=1)`: the LM backbone is reused, only `score.weight`
is new), loaded in the model preset's dtype. With `model.lora.enabled`, only LoRA adapters and the head
train, and the saved RM is merged into a plain model (checkpoints hold the adapters). It scores a
completion *in its FIM context*: the input is the PSM training text
`<fim_prefix>prefix<fim_suffix>suffix<fim_middle>completion<eos>`, the same text the RL stage scores.

Objectives:
- `pointwise` (default; the paper's "pointwise preference data", Appendix A.3): binary cross-entropy of
  the label (1 good / 0 bad) with the scalar score as the logit. TRL has no pointwise reward trainer, so
  this is the one small piece written here (a transformers Trainer overriding compute_loss).
- `pairwise`: TRL RewardTrainer on chosen/rejected rows (Bradley-Terry, -log sigmoid(r_c - r_r)).

After training, every example of the training and evaluation datasets is scored into
`scores/<dataset>.jsonl` (id, label, score, source) with `scores/summary.json` (mean score per label,
AUC) — the data of the paper's Fig. 2 (reward scores on SD.Links by label, per reward model).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from memlens.harness.core.stats import reward_score_stats
from memlens.harness.core.user_data import repeated
from memlens.harness.model.encode import encode_texts
from memlens.harness.model.rewards import score_texts
from memlens.harness.text import fim
from memlens.recipes.stages.contract import (
    StageContext,
    StageSettings,
    latest_checkpoint,
    load_init_tokenizer,
    run_recipe,
)
from memlens.recipes.stages.devices import trl_device_kwargs, zero_stage
from memlens.recipes.stages.models import load_sequence_classifier, save_lora_stage, wrap_lora
from memlens.recipes.stages.training_log import attach_stage_console

REWARD_OBJECTIVES = ("pointwise", "pairwise")
POINTWISE_FIELDS = ("id", "prefix", "suffix", "completion", "label")
PAIRWISE_FIELDS = ("id", "prefix", "suffix", "chosen", "rejected")


@dataclass
class RewardSettings(StageSettings):
    """Keys of a `recipe: reward` stage (conf/experiment/*.yaml, `stages.<NAME>`)."""

    init: str = ""                 # model to put the score head on: a stage name (FT.1) or a model directory
    datasets: list[str] = field(default_factory=list)       # training sets, mixed proportionally to size (A.3)
    eval_datasets: list[str] = field(default_factory=list)  # validation sets (eval loss every save_steps)
    score_datasets: list[str] = field(default_factory=list)  # only scored after training (Fig. 2: RM.1 on rm_sd_links)
    objective: str = "pointwise"   # pointwise: BCE on labelled completions (paper); pairwise: Bradley-Terry
    epochs: float = 1.0            # passes over the mixture; more -> fits (and memorizes) the RM data harder
    max_steps: int = -1            # > 0 stops after this many optimizer steps (overrides epochs)
    lr: float = 1e-5               # AdamW learning rate; higher -> faster fit, less stable
    batch_size: int = 8            # examples (pointwise) or pairs (pairwise) per device step
    grad_accum: int = 1            # gradient accumulation steps; effective batch = batch_size * grad_accum
    max_length: int = 512          # tokens per PSM text; pointwise: longer ones lose their start (the completion
                                   # is kept); pairwise: TRL RewardTrainer drops longer pairs
    fim_family: str | None = None  # FIM sentinel family (memlens.harness.text.fim); None = the preset's, else detected

    def __post_init__(self, where: str) -> None:
        super().__post_init__(where)
        if not self.init:
            raise self.bad("init", "set it to the FT stage (e.g. FT.1) or a model directory to put the reward head on")
        for key in ("datasets", "eval_datasets", "score_datasets"):
            value = getattr(self, key)
            setattr(self, key, [value] if isinstance(value, str) else list(value))
        if not self.datasets:
            raise self.bad("datasets", "list at least one reward dataset, e.g. [rm_pd2]")
        if self.objective not in REWARD_OBJECTIVES:
            raise self.bad("objective", f"use one of {', '.join(REWARD_OBJECTIVES)}")
        for key in ("lr", "epochs"):
            if not float(getattr(self, key)) > 0:
                raise self.bad(key, "must be > 0")
        for key in ("batch_size", "grad_accum", "max_length", "save_steps", "logging_steps"):
            if int(getattr(self, key)) < 1:
                raise self.bad(key, "must be a positive integer")
        self.resolve_model(where)


def load_settings(settings: dict[str, Any], stage: str) -> RewardSettings:
    return RewardSettings.load(settings, stage)


# --- the pointwise loss: the one piece TRL does not have --------------------------------------------------


def pointwise_reward_loss(scores, labels):
    """Mean binary cross-entropy of labels in {0, 1} with the reward scores as logits.

    Appendix A.3 trains the RM on pointwise preference data; a positive score means "good completion",
    so sigmoid(score) is the predicted probability of label 1.
    """
    import torch.nn.functional as F  # torch (~1 s): on training, not when plan.py loads the recipe

    return F.binary_cross_entropy_with_logits(scores.float(), labels.float())


def _pointwise_trainer_class():
    from transformers import Trainer  # transformers (~1.5 s): on training, not when plan.py loads the recipe

    class PointwiseRewardTrainer(Trainer):
        """transformers Trainer whose loss is BCE(label, score) instead of the head's regression loss."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            scores = model(**inputs).logits[:, 0]
            loss = pointwise_reward_loss(scores, labels)
            return (loss, {"scores": scores}) if return_outputs else loss

    return PointwiseRewardTrainer


# --- the recipe --------------------------------------------------------------------------------------------


class RewardRecipe:
    """setup -> train -> save -> evaluate for one RM stage (memlens.recipes.stages.contract.run_recipe drives it)."""

    stage = "reward"

    def __init__(self, cfg: RewardSettings, ctx: StageContext):
        self.cfg, self.ctx = cfg, ctx

    def setup(self) -> None:
        from transformers import set_seed  # transformers (~1.5 s): on training, not when plan.py loads the recipe

        preset = self.cfg.model_settings
        self.init_dir, self.tokenizer, self.sentinels = load_init_tokenizer(self.ctx, self.cfg.init, preset,
                                                                            self.cfg.fim_family)
        self.tokenizer.truncation_side = "left"  # a too-long PSM text keeps its end: the completion + EOS
        set_seed(self.ctx.seed)   # the new score head is drawn from the global RNG: make it the run's seed
        self.model = self.new_model()
        required = POINTWISE_FIELDS if self.cfg.objective == "pointwise" else PAIRWISE_FIELDS
        self.rows = {name: read_jsonl(self.ctx.data_dir(name) / "rows.jsonl", required=required)
                     for name in dict.fromkeys(self.cfg.datasets + self.cfg.eval_datasets)}
        for name in self.cfg.score_datasets:   # scored only: pointwise or pairwise rows, whatever the objective
            if name not in self.rows:
                self.rows[name] = read_jsonl(self.ctx.data_dir(name) / "rows.jsonl",
                                             required=("id", "prefix", "suffix"))
        for name, rows in self.rows.items():
            if not rows:
                raise UserError(f"{self.ctx.data_dir(name)}/rows.jsonl is empty; rebuild dataset {name!r}")

    def new_model(self):
        """The init model with a score head, in LoRA adapters when the preset enables them (before training)."""
        preset = self.cfg.model_settings
        return wrap_lora(load_sequence_classifier(self.init_dir, preset, self.ctx.device, self.tokenizer.pad_token_id),
                         preset, task_type="SEQ_CLS")

    def psm_text(self, row: dict, completion: str) -> str:
        return fim.format_psm_training(row["prefix"], completion, row["suffix"], self.sentinels)

    def _mixture(self, names: list[str]):
        """Rows of several datasets shuffled together: each contributes in proportion to its size (A.3)."""
        # A user canary's `repeat` copies (harness/core/user_data.py) train; write_scores scores each row once.
        rows = [row for name in names for row in repeated(self.rows[name])]
        random.Random(self.ctx.seed).shuffle(rows)
        return rows

    def _encode(self, rows: list[dict]):
        from datasets import Dataset  # datasets (~0.7 s): on training, not when plan.py loads the recipe

        if self.cfg.objective == "pairwise":
            # Full texts (ending in EOS) with no separate prompt: RewardTrainer then tokenizes them as they are.
            return Dataset.from_list([{"chosen": self.psm_text(r, r["chosen"]),
                                       "rejected": self.psm_text(r, r["rejected"])} for r in rows])
        # The same ids score_texts (and so the RL stages) give the RM: memlens.harness.model.encode's rule, end kept.
        ids = encode_texts(self.tokenizer, [self.psm_text(r, r["completion"]) for r in rows], self.cfg.max_length)
        return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids],
                                  "labels": [float(_label(r)) for r in rows]})

    def _args(self) -> dict[str, Any]:
        cfg, has_eval = self.cfg, bool(self.cfg.eval_datasets)
        return dict(output_dir=str(self.ctx.out_dir), learning_rate=cfg.lr, num_train_epochs=cfg.epochs,
                    max_steps=cfg.max_steps, per_device_train_batch_size=cfg.batch_size,
                    per_device_eval_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
                    save_strategy="steps", save_steps=cfg.save_steps, save_only_model=False,
                    logging_steps=cfg.logging_steps, eval_strategy="steps" if has_eval else "no",
                    eval_steps=cfg.save_steps if has_eval else None, seed=self.ctx.seed,
                    data_seed=self.ctx.seed, **trl_device_kwargs(self.ctx.device, self.cfg.deepspeed))

    def train(self) -> None:
        train_ds = self._encode(self._mixture(self.cfg.datasets))
        eval_ds = self._encode(self._mixture(self.cfg.eval_datasets)) if self.cfg.eval_datasets else None
        if self.cfg.objective == "pairwise":
            from trl import RewardConfig, RewardTrainer  # trl (~3 s): on training, not when plan.py loads the recipe

            args = RewardConfig(max_length=self.cfg.max_length, **self._args())
            self.trainer = RewardTrainer(model=self.model, args=args, train_dataset=train_ds,
                                         eval_dataset=eval_ds, processing_class=self.tokenizer)
        else:
            # transformers (~1.5 s): on training, not when plan.py loads the recipe
            from transformers import DataCollatorWithPadding, TrainingArguments

            args = TrainingArguments(remove_unused_columns=False, label_names=["labels"], **self._args())
            self.trainer = _pointwise_trainer_class()(
                model=self.model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                processing_class=self.tokenizer, data_collator=DataCollatorWithPadding(self.tokenizer))
        attach_stage_console(self.trainer, self.ctx)
        resume = latest_checkpoint(self.ctx.out_dir)
        self.trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    def save(self) -> None:
        if self.cfg.model_settings.lora_settings.enabled:
            # Merged, so the RL stage and the audit load a plain sequence classifier; the scores below are
            # then those of the saved model. Under ZeRO-3 gathered by every process first (save_lora_stage).
            merged = save_lora_stage(self.trainer, self.tokenizer, self.ctx.out_dir, self.new_model)
            if merged is not None:
                self.model = merged
        else:
            self.trainer.save_model(str(self.ctx.out_dir))      # gathers ZeRO-3 shards, main process writes
            self.tokenizer.save_pretrained(str(self.ctx.out_dir))

    def evaluate(self) -> None:
        """The saved model's scores of its datasets (scores/: Fig. 2's distributions, the AUC evidence)."""
        if self.trainer.is_world_process_zero():
            if zero_stage(self.cfg.deepspeed) == 3:
                # Partitioned weights cannot run a forward pass in one process: score the saved model.
                self.model = load_sequence_classifier(self.ctx.out_dir, self.cfg.model_settings, self.ctx.device,
                                                      self.tokenizer.pad_token_id).to(self.ctx.device)
            self.write_scores()

    def provenance(self) -> dict[str, Any]:
        return dict(datasets=list(self.rows), init_model=str(self.init_dir), hyperparameters=asdict(self.cfg))

    def write_scores(self) -> None:
        """scores/<dataset>.jsonl (id, label, score, source) and scores/summary.json for the Fig. 2 analysis."""
        scores_dir = self.ctx.out_dir / "scores"
        summary = {}
        for name, rows in self.rows.items():
            items = [item for r in rows for item in _labelled_completions(r, name)]
            scores = score_texts(self.model, self.tokenizer, [self.psm_text(r, c) for r, c, _, _ in items],
                                 max_length=self.cfg.max_length)
            out = []
            for (row, _, label, side), score in zip(items, scores):
                rec = {"id": row["id"], "label": label, "score": score, "source": row.get("source", name)}
                if side:
                    rec["side"] = side
                out.append(rec)
            atomic_write_jsonl(scores_dir / f"{name}.jsonl", out)
            # Fig. 2's statistics, defined once (memlens.harness.core.stats.reward_score_stats)
            summary[name] = {**reward_score_stats(out), "n": len(out)}
            summary[name]["split"] = ("train" if name in self.cfg.datasets else
                                      "eval" if name in self.cfg.eval_datasets else "scored")
        atomic_write_json(scores_dir / "summary.json", summary)


def _labelled_completions(row: dict, dataset: str) -> list[tuple[dict, str, int, str | None]]:
    """(row, completion, label, side) to score: a pointwise row once; a pair as chosen = 1, rejected = 0."""
    if "completion" in row and "label" in row:
        return [(row, row["completion"], _label(row), None)]
    if "chosen" in row and "rejected" in row:
        return [(row, row["chosen"], 1, "chosen"), (row, row["rejected"], 0, "rejected")]
    raise UserError(f"dataset {dataset!r}, row {row.get('id')!r}: needs completion + label (pointwise) "
                    "or chosen + rejected (pairwise) to be scored")


def _label(row: dict) -> int:
    if row["label"] in (0, 1, True, False):
        return int(row["label"])
    raise UserError(f"reward row {row.get('id')!r}: label={row['label']!r}; pointwise labels must be 1 or 0")


def run_stage(settings: RewardSettings, ctx: StageContext) -> None:
    run_recipe(RewardRecipe, settings, ctx)
