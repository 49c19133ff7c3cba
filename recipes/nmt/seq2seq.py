"""Stage: train a small Marian-architecture translation model from scratch (Finding Memo, paper 002).

setup -> train -> save, like every recipe. The model is transformers' MarianMTModel built from a
MarianConfig (paper 002 App. A trains a Transformer with Marian; we keep the architecture family at a
CPU-sized scale). The tokenizer is a joint SentencePiece-style BPE (Metaspace) trained locally with
`tokenizers` on sources + references, as the paper learns a joint vocabulary (App. A). Training uses
transformers' Seq2SeqTrainer; checkpoints are `checkpoint-<step>/` with the tokenizer saved in each, a
killed run resumes from the latest one, a finished run with the same settings is skipped, and
provenance.json is written last.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from memlens.harness.core.errors import UserError
from memlens.recipes.stages.contract import (
    StageContext,
    is_complete,
    latest_checkpoint,
    settings_match,
    write_provenance,
)
from memlens.recipes.stages.devices import trl_device_kwargs
from memlens.recipes.stages.training_log import attach_stage_console

SPECIAL_TOKENS = ["<pad>", "</s>", "<unk>"]  # Marian convention: pad starts the decoder, </s> ends


@dataclass
class Seq2SeqSettings:
    """Model size and training knobs (recorded in provenance.json; a change retrains)."""

    vocab_size: int = 2000       # joint BPE vocabulary; the toy corpus needs ~400 word types
    d_model: int = 128           # wider -> more capacity to memorize, slower
    layers: int = 2              # encoder and decoder layers each
    heads: int = 4
    ffn_dim: int = 256
    dropout: float = 0.2         # more dropout -> less memorization of rare pairs
    max_length: int = 48         # tokens per side; longer pairs are truncated
    epochs: float = 14.0         # more epochs -> more memorization of noisy pairs
    max_steps: int = -1          # > 0 overrides epochs (smoke tests)
    batch_size: int = 32
    learning_rate: float = 1e-3
    lr_scheduler: str = "constant_with_warmup"  # transformers scheduler name; "constant_with_warmup" keeps learning late
    warmup_steps: int = 100
    save_steps: int = 200        # checkpoint cadence; the resume granularity after a kill
    save_total_limit: int = 2

    def __post_init__(self):
        if self.d_model % self.heads:
            raise UserError(f"nmt.train.d_model={self.d_model} must be divisible by nmt.train.heads={self.heads}")
        for name in ("vocab_size", "d_model", "layers", "heads", "ffn_dim", "max_length", "batch_size",
                     "save_steps"):
            if int(getattr(self, name)) <= 0:
                raise UserError(f"nmt.train.{name}={getattr(self, name)}: must be a positive integer")


def train_joint_tokenizer(texts, vocab_size: int):
    """Joint BPE over both languages with a Metaspace pre-tokenizer, `</s>` appended to every sequence."""
    # transformers (~1.5 s): when the model trains; nmt_pipeline reads Seq2SeqSettings without it
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    eos_id = tok.token_to_id("</s>")
    # Marian appends </s> to source and target alike; the decoder starts from <pad>.
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A $B </s>",
                                                       special_tokens=[("</s>", eos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>")


def build_model(tokenizer, settings: Seq2SeqSettings, seed: int):
    import torch  # torch (~1 s): when the model trains; nmt_pipeline reads Seq2SeqSettings without it
    from transformers import MarianConfig, MarianMTModel  # transformers (~1.5 s): when the model is built

    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=len(tokenizer), decoder_vocab_size=len(tokenizer), d_model=settings.d_model,
        encoder_layers=settings.layers, decoder_layers=settings.layers,
        encoder_attention_heads=settings.heads, decoder_attention_heads=settings.heads,
        encoder_ffn_dim=settings.ffn_dim, decoder_ffn_dim=settings.ffn_dim,
        max_position_embeddings=max(64, settings.max_length * 2), dropout=settings.dropout,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        forced_eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, scale_embedding=True)
    model = MarianMTModel(config)
    model.generation_config.num_beams = 1
    return model


def _encode(tokenizer, rows: list[dict], max_length: int):
    # datasets (~0.7 s): when the model trains; nmt_pipeline reads Seq2SeqSettings without it
    from datasets import Dataset

    enc = tokenizer([r["source"] for r in rows], text_target=[r["reference"] for r in rows],
                    truncation=True, max_length=max_length)
    return Dataset.from_dict({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                              "labels": enc["labels"]})


def train_seq2seq(ctx: StageContext, rows: list[dict], settings: Seq2SeqSettings, dataset: str,
                  init_dir: Path | None = None, log=print) -> Path:
    """Train (or resume, or skip) the translation model of this run into ctx.out_dir.

    From scratch (model and tokenizer built here), or, with `init_dir`, fine-tune that model with its
    own tokenizer (paper 002 Sec. 6).
    """
    recorded = {**asdict(settings), "dataset": dataset, "init": str(init_dir) if init_dir else None}
    if settings_match(ctx.out_dir, recorded):
        log(f"[seq2seq] {ctx.out_dir} already trained with these settings; skipping")
        return ctx.out_dir
    if is_complete(ctx.out_dir):
        raise UserError(f"{ctx.out_dir} holds a finished model trained with other settings; delete it or "
                        "set a different experiment_name/run_dir")
    # transformers (~1.5 s): when the model trains; nmt_pipeline reads Seq2SeqSettings without it
    from transformers import (
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
    )

    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    resume = latest_checkpoint(ctx.out_dir)
    # The model is always built the way the first attempt built it, so that the optimizer state in a
    # checkpoint matches its parameter groups; the Trainer then loads the checkpoint's weights.
    if init_dir is not None:
        tokenizer = AutoTokenizer.from_pretrained(str(init_dir), local_files_only=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(str(init_dir), use_safetensors=True, local_files_only=True)
    else:
        # A resumed run keeps the vocabulary its checkpoints were trained with.
        tokenizer = AutoTokenizer.from_pretrained(str(resume), local_files_only=True) if resume is not None else \
            train_joint_tokenizer([r["source"] for r in rows] + [r["reference"] for r in rows], settings.vocab_size)
        model = build_model(tokenizer, settings, ctx.seed)
    if resume is not None:
        log(f"[seq2seq] resuming from {resume}")
    train_set = _encode(tokenizer, rows, settings.max_length)
    args = Seq2SeqTrainingArguments(
        output_dir=str(ctx.out_dir), num_train_epochs=settings.epochs, max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size, learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup_steps, lr_scheduler_type=settings.lr_scheduler, weight_decay=0.0,
        save_strategy="steps", save_steps=settings.save_steps, save_total_limit=settings.save_total_limit,
        logging_steps=50, seed=ctx.seed, disable_tqdm=True, label_smoothing_factor=0.0,
        **trl_device_kwargs(ctx.device))
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=train_set,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
                             processing_class=tokenizer)  # the Trainer saves it in every checkpoint
    attach_stage_console(trainer, ctx)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    trainer.save_model(str(ctx.out_dir))
    tokenizer.save_pretrained(str(ctx.out_dir))
    final_loss = next((h["train_loss"] for h in reversed(trainer.state.log_history) if "train_loss" in h), None)
    write_provenance(ctx, stage="seq2seq", settings=recorded, datasets=[dataset],
                     init_model=str(init_dir) if init_dir else None,
                     train_loss=final_loss, global_step=trainer.state.global_step)
    return ctx.out_dir


def settings_from_cfg(section: Any) -> Seq2SeqSettings:
    """Seq2SeqSettings from the `nmt.train` config section; an unknown key is an error that names it."""
    known = set(Seq2SeqSettings.__dataclass_fields__)
    values = dict(section or {})
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"nmt.train: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return Seq2SeqSettings(**values)
