"""PT: the embedded base model — a code BPE tokenizer and a small Llama pre-trained from scratch with FIM.

Paper 003 Appendix A.3: the base model is pre-trained on public code with FIM formatting at a 0.8 FIM
rate (following CodeGemma); every FT model starts from it. Here the corpus is the `pd_pt` split and the
model is the `model=` preset (tiny ≈ 5 M parameters). With a public model preset
(`model.pretrained: <hub id or path>`) nothing is trained: PT imports that model into `models/PT/` so
every later stage and the audit read it like any other stage.

Trainer choice: transformers `Trainer` over pre-packed fixed-length blocks. Pre-training wants a plain
contiguous token stream (documents joined by EOS, cut into `max_seq_len` blocks, GPT style) at a token
budget (`max_tokens`); TRL's SFTTrainer packing keeps documents whole (best-fit decreasing) and targets
padding-free attention, which adds nothing here. Packing is a dozen lines below.

    memlens train stage=PT experiment=quickstart
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import file_sha256, read_json, read_jsonl
from memlens.harness.core.processes import is_main_process
from memlens.harness.text.fim import detect_sentinels, fim_transform
from memlens.recipes.stages.contract import (
    PROVENANCE_FILE,
    StageContext,
    StageSettings,
    latest_checkpoint,
    run_recipe,
    settings_match,
    write_provenance,
)
from memlens.recipes.stages.devices import trl_device_kwargs
from memlens.recipes.stages.models import build_llama, load_stage_model, load_tokenizer, resolve_pretrained, save_final
from memlens.recipes.stages.ship_base import WEIGHTS_FILE
from memlens.recipes.stages.tokenizer import train_code_tokenizer
from memlens.recipes.stages.training_log import attach_stage_console


@dataclass
class PretrainSettings(StageSettings):
    """`stages.PT` keys. Defaults are the quickstart's tiny-model choices."""

    datasets: list[str] = field(default_factory=lambda: ["pd_pt"])  # code corpora (id, text, source_file)
    max_tokens: int = 1_000_000    # training-token budget (corpus repeated with fresh FIM splits); ↑ better base
    max_seq_len: int = 256         # packed block length; ↑ longer context, slower steps
    batch_size: int = 16           # blocks per step
    lr: float = 2e-3               # peak LR (AdamW); small models from scratch take high LRs
    warmup_ratio: float = 0.05     # share of steps with linear LR warm-up
    lr_scheduler: str = "cosine"   # anneal to 0 over the budget
    weight_decay: float = 0.1
    fim_rate: float = 0.8          # Appendix A.3 (CodeGemma): share of documents in PSM form
    tokenizer_chars: int = 5_000_000  # characters of pd_pt the BPE tokenizer trains on; ↑ slower, marginal gain
    tokenizer: str | None = None   # a tokenizer directory to use instead of training one (e.g. assets/base_tiny:
                                   # the shipped base's, so a larger base shares its vocabulary); relative to the
                                   # project root when it exists there
    save_total_limit: int | None = 2  # PT checkpoints are for resuming only; the audit scores later stages

    def __post_init__(self, where: str) -> None:
        super().__post_init__(where)
        self.require(bool(self.datasets), "datasets", "name at least one code corpus, e.g. [pd_pt]")
        self.require(self.max_tokens >= self.max_seq_len, "max_tokens",
                     f"the budget must cover at least one block of max_seq_len={self.max_seq_len} tokens")
        self.require(self.max_seq_len >= 16, "max_seq_len", "use >= 16, e.g. 256")
        self.require(self.batch_size >= 1, "batch_size", "use >= 1")
        self.require(0 < self.lr < 1, "lr", "set a learning rate in (0, 1), e.g. 2e-3")
        self.require(0 <= self.fim_rate <= 1, "fim_rate", "a probability in [0, 1] (paper: 0.8)")
        self.require(self.save_steps >= 1, "save_steps", "use >= 1")
        if self.tokenizer is not None:
            self.tokenizer = resolve_pretrained(str(self.tokenizer))
            self.require(Path(self.tokenizer, "tokenizer.json").is_file(), "tokenizer",
                         f"{self.tokenizer} has no tokenizer.json: name a tokenizer directory, e.g. assets/base_tiny, "
                         "or null to train one")
        self.resolve_model(where)   # PT trains every weight from scratch (or is imported)
        # The embedded model's context is the preset's; a public model's is its own config's (`memlens check`).
        self.require(self.model_settings.pretrained is not None
                     or self.model_settings.max_position_embeddings >= self.max_seq_len, "max_seq_len",
                     "must not exceed model.max_position_embeddings")


def packed_blocks(texts: list[str], tokenizer, sentinels, settings: PretrainSettings, seed: int) -> list[list[int]]:
    """FIM-transform each document (seeded), join with EOS, cut into max_seq_len blocks up to max_tokens.

    When the budget exceeds the corpus, further passes draw fresh FIM splits (as multi-epoch
    pre-training with a random FIM transform does). The last partial block is dropped.
    """
    n_blocks = math.ceil(settings.max_tokens / settings.max_seq_len)
    blocks: list[list[int]] = []
    stream: list[int] = []
    epoch = 0
    while len(blocks) < n_blocks:
        rng = random.Random(f"{seed}-pt-{epoch}")
        order = list(range(len(texts)))
        rng.shuffle(order)
        # fim_transform appends EOS, so documents stay separated in the packed stream.
        docs = [fim_transform(texts[i], rng, sentinels, settings.fim_rate) for i in order]
        for ids in tokenizer(docs, add_special_tokens=False)["input_ids"]:
            stream.extend(ids)
            while len(stream) >= settings.max_seq_len and len(blocks) < n_blocks:
                blocks.append(stream[:settings.max_seq_len])
                stream = stream[settings.max_seq_len:]
        epoch += 1
    return blocks


class PretrainRecipe:
    """setup -> train -> save for the PT stage (memlens.recipes.stages.contract.run_recipe drives it, like a torchtune recipe)."""

    stage = "pretrain"

    def __init__(self, settings: PretrainSettings, ctx: StageContext):
        self.settings, self.ctx = settings, ctx
        self.model_preset = settings.model_settings

    def read_corpus(self) -> list[str]:
        texts = []
        for name in self.settings.datasets:
            path = self.ctx.data_dir(name) / "rows.jsonl"
            texts += [row["text"] for row in read_jsonl(path, required=["text"]) if row["text"]]
        if not texts:
            raise UserError(f"stages.{self.ctx.name}.datasets={self.settings.datasets}: no text rows; "
                            "rebuild the data (`memlens data`) or name a code corpus")
        return texts

    def import_pretrained(self) -> None:
        """Public model preset: load (safetensors, no remote code) and save it as this run's PT."""
        source = self.model_preset.pretrained
        tokenizer = load_tokenizer(source, self.model_preset)
        model = load_stage_model(source, self.model_preset, self.ctx.device)
        save_final(model, tokenizer, self.ctx.out_dir)

    def setup(self) -> None:
        import torch  # torch (~1 s): on training, not when plan.py loads the recipe
        from transformers import PreTrainedTokenizerFast, set_seed  # transformers (~1.5 s): on training

        set_seed(self.ctx.seed)
        texts = self.read_corpus()
        self.resume_from = latest_checkpoint(self.ctx.out_dir)
        if self.resume_from is not None or self.settings.tokenizer is not None:
            # A resumed run reuses its checkpoint's tokenizer (the weights are tied to its vocabulary); a named one
            # is used as it is.
            source = self.resume_from if self.resume_from is not None else self.settings.tokenizer
            self.tokenizer = PreTrainedTokenizerFast.from_pretrained(str(source), local_files_only=True)
        else:
            sample, size = [], 0
            for text in texts:
                if size >= self.settings.tokenizer_chars:
                    break
                sample.append(text)
                size += len(text)
            self.tokenizer = train_code_tokenizer(sample, vocab_size=self.model_preset.vocab_size)
        self.sentinels = detect_sentinels(self.tokenizer, self.model_preset.fim_family)
        blocks = packed_blocks(texts, self.tokenizer, self.sentinels, self.settings, self.ctx.seed)
        self.train_dataset = [{"input_ids": torch.tensor(b), "labels": torch.tensor(b)} for b in blocks]
        torch.manual_seed(self.ctx.seed)
        self.model = build_llama(self.model_preset, self.tokenizer)

    def train(self) -> None:
        # transformers (~1.5 s): on training, not when plan.py loads the recipe
        from transformers import Trainer, TrainingArguments, default_data_collator

        s = self.settings
        args = TrainingArguments(
            output_dir=str(self.ctx.out_dir), num_train_epochs=1, per_device_train_batch_size=s.batch_size,
            learning_rate=s.lr, warmup_steps=s.warmup_ratio, lr_scheduler_type=s.lr_scheduler,
            weight_decay=s.weight_decay, save_strategy="steps", save_steps=s.save_steps,
            save_total_limit=s.save_total_limit, save_only_model=False, logging_steps=s.logging_steps,
            seed=self.ctx.seed, data_seed=self.ctx.seed, disable_tqdm=True,
            **trl_device_kwargs(self.ctx.device, s.deepspeed))
        self.trainer = Trainer(model=self.model, args=args, train_dataset=self.train_dataset,
                               data_collator=default_data_collator, processing_class=self.tokenizer)
        attach_stage_console(self.trainer, self.ctx)
        self.trainer.train(resume_from_checkpoint=str(self.resume_from) if self.resume_from else None)

    def save(self) -> None:
        self.trainer.save_state()      # trainer_state.json: the loss curve, read by tests and the report
        self.trainer.save_model(str(self.ctx.out_dir))   # weights + tokenizer (gathers ZeRO-3 shards)

    def evaluate(self) -> None:
        """PT's evaluation is the audit's utility measure (held-out code loss)."""

    def provenance(self) -> dict[str, Any]:
        return dict(datasets=list(self.settings.datasets), init_model=None,
                    parameters=sum(p.numel() for p in self.model.parameters()))


def shipped_base_record(source: str) -> dict[str, Any]:
    """A shipped base (recipes/stages/ship_base.py) carries its own provenance; the PT stage that imports it
    records that and the weights' hash, so a run traces back to the command that built its base."""
    prov = Path(source) / PROVENANCE_FILE
    if not prov.is_file():
        return {}
    record = read_json(prov)
    weights = Path(source) / record.get("weights", {}).get("file", WEIGHTS_FILE)
    return {"base_provenance": record, "base_weights_sha256": file_sha256(weights) if weights.is_file() else None}


def load_settings(settings: dict[str, Any], stage: str) -> PretrainSettings:
    """Validate `stages.<stage>` (unknown keys are an error), as every recipe module does."""
    return PretrainSettings.load(settings, stage)


def run_stage(settings: PretrainSettings, ctx: StageContext) -> None:
    if not settings.model_settings.pretrained:
        run_recipe(PretrainRecipe, settings, ctx)
        return
    # A public model preset is imported, not trained. One process imports; under `accelerate launch` the others
    # wait at the pipeline's barrier (memlens.recipes.orchestration.pipeline.train_stage) instead of each loading and writing a host copy.
    if settings_match(ctx.out_dir, settings.given) or not is_main_process():
        return
    PretrainRecipe(settings, ctx).import_pretrained()
    write_provenance(ctx, PretrainRecipe.stage, settings.given, datasets=[],
                     init_model=settings.model_settings.pretrained,
                     **shipped_base_record(settings.model_settings.pretrained))
