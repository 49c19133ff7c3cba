"""Train the formal-language study's models (paper 004 Sec. 3-4, App. E) and score every string at every epoch.

One model per (language, seed, variant, role) of `FormalSettings.jobs()`: a LlamaForCausalLM of the tiny family
(its size from `formal.model`), trained from scratch with transformers' Trainer on the model's training multiset
(`training_counts`), App. E's schedule (batch 8, linear decay, warm-up ratio 0.05), `formal.epochs` epochs. At the
end of every epoch a callback scores every string of the language and seed — the string's mean cross-entropy over
its tokens and its end, given BOS, as paper 004's loss(M_e, s) — from the model in memory, in eval mode, with every
random generator restored (`rng_untouched`), so scoring does not change training. That replaces a checkpoint per
epoch on disk (a few hundred models x 30 epochs) by the numbers the study reads from it.

Models of one seed share their initial weights (the study seed), as the paper's D and D' models share their
pretrained start; they differ in their data. Jobs run in `formal.workers` processes with one torch thread each
(tiny models do not use a second thread). A finished model (its losses.json, written last, records the same
settings and data hash) is kept on a rerun; an unfinished one is trained again from the start, with the same
seed, so a killed run loses nothing and duplicates nothing.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers

from memlens.harness.core.errors import UserError
from memlens.harness.core.formal_study import (
    LANGUAGE_FILE,
    LOSSES_FILE,
    STRINGS_FILE,
    FormalSettings,
    formal_report_dir,
    language_data_dir,
    model_dir,
    training_counts,
)
from memlens.harness.core.io import atomic_write_json, read_json, read_jsonl
from memlens.harness.core.provenance import git_commit, provenance
from memlens.harness.model.logprobs import token_losses_batched
from memlens.harness.model.training import rng_untouched, trainer_callback_base
from memlens.recipes.stages.contract import write_run_record
from memlens.synthetic_data.formal_data import build_all

SPECIALS = ["<pad>", "<bos>", "<eos>"]
EVAL_BATCH = 64


def build_tokenizer(terminals: list[str]):
    """A word-level tokenizer over the language's terminals (one token each) with pad, BOS and end tokens."""
    # transformers (~1.5 s): pipeline.py imports formal_lm.py for every run
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *terminals])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")


def encode(tokenizer, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [tokenizer.bos_token_id, *ids, tokenizer.eos_token_id]


def build_model(settings: FormalSettings, tokenizer):
    # transformers (~1.5 s): pipeline.py imports formal_lm.py for every run
    from transformers import LlamaConfig, LlamaForCausalLM

    m = settings.model_settings
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=m.hidden_size, num_hidden_layers=m.num_layers,
                         num_attention_heads=m.num_heads, num_key_value_heads=m.num_heads,
                         intermediate_size=m.intermediate_size, max_position_embeddings=256,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return LlamaForCausalLM(config)


def string_losses(model, tokenizer, encoded: list[list[int]]) -> list[float]:
    """Paper 004's loss(M, s): mean cross-entropy of each string's tokens and end, given BOS."""
    examples = [(ids[:1], ids[1:]) for ids in encoded]
    return [float(x) for x in token_losses_batched(model, examples, batch_size=EVAL_BATCH,
                                                   pad_id=tokenizer.pad_token_id, progress=False)]


def epoch_scorer(tokenizer, encoded: list[list[int]], out: list[list[float]]):
    """A TrainerCallback that appends every string's loss at each epoch's end to `out`."""
    class EpochScorer(trainer_callback_base()):
        def on_epoch_end(self, args, state, control, model=None, **kwargs):
            with rng_untouched():
                was_training = model.training
                model.eval()
                out.append(string_losses(model, tokenizer, encoded))
                model.train(was_training)

    return EpochScorer()


def job_data_hash(run_dir: Path, language: str, seed: int) -> str:
    return read_json(language_data_dir(run_dir, language, seed) / LANGUAGE_FILE)["strings_sha256"]


def is_finished(run_dir: Path, settings: FormalSettings, job: tuple[str, int, str, str]) -> bool:
    path = model_dir(run_dir, *job) / LOSSES_FILE
    if not path.is_file():
        return False
    record = read_json(path)
    return (record.get("settings") == settings.training_settings()
            and record.get("data_sha256") == job_data_hash(run_dir, job[0], job[1]))


def train_job(run_dir: str, section: dict[str, Any], job: tuple[str, int, str, str]) -> dict:
    """Train one model of the study and write its per-epoch losses (a worker process runs this)."""
    import torch  # torch (~1 s): pipeline.py imports formal_lm.py for every run
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments  # ~1.5 s, in the worker
    from transformers.trainer_callback import PrinterCallback  # transformers: loaded in the worker only
    from transformers.utils import logging as hf_logging  # transformers: loaded in the worker only

    hf_logging.disable_progress_bar()       # no shard-writing bar per model: the study trains hundreds

    start = time.time()
    torch.set_num_threads(1)
    run_dir_path, settings = Path(run_dir), FormalSettings.load(section)
    language, seed, variant, role = job
    data = language_data_dir(run_dir_path, language, seed)
    rows = read_jsonl(data / STRINGS_FILE)
    tokenizer = build_tokenizer(read_json(data / LANGUAGE_FILE)["terminals"])
    encoded = [encode(tokenizer, r["text"]) for r in rows]
    by_id = {r["id"]: ids for r, ids in zip(rows, encoded)}
    counts = training_counts(rows, variant, role)
    train = [{"input_ids": by_id[sid]} for sid, count in counts.items() for _ in range(count)]
    torch.manual_seed(seed)
    model = build_model(settings, tokenizer)
    out = model_dir(run_dir_path, *job)
    args = TrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size, learning_rate=settings.lr, lr_scheduler_type="linear",
        warmup_steps=settings.warmup_ratio, weight_decay=0.0, save_strategy="no", logging_strategy="epoch",
        report_to=[], seed=seed, data_seed=seed, disable_tqdm=True, use_cpu=True, dataloader_num_workers=0)
    losses: list[list[float]] = []
    trainer = Trainer(model=model, args=args, train_dataset=train,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                      callbacks=[epoch_scorer(tokenizer, encoded, losses)])
    trainer.remove_callback(PrinterCallback)      # the run prints one line per model instead
    trainer.train()
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    record = {
        "job": {"language": language, "seed": seed, "variant": variant, "role": role},
        "ids": [r["id"] for r in rows], "loss": losses,
        "train_loss": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "training_strings": len(train), "steps": trainer.state.global_step,
        "settings": settings.training_settings(), "data_sha256": job_data_hash(run_dir_path, language, seed),
        "seconds": round(time.time() - start, 2), "provenance": provenance(seed=seed),
    }
    atomic_write_json(out / LOSSES_FILE, record)     # last: the model is finished
    return {"job": list(job), "seconds": record["seconds"]}


def train_all(run_dir: str | Path, settings: FormalSettings, section: dict[str, Any], log=print) -> list[dict]:
    """Every unfinished model of the study, `settings.workers` at a time; the finished ones are kept."""
    run_dir = Path(run_dir)
    todo = [job for job in settings.jobs() if not is_finished(run_dir, settings, job)]
    log(f"[memlens] formal: {len(settings.jobs()) - len(todo)} of {len(settings.jobs())} models finished; "
        f"training {len(todo)} in {min(settings.workers, max(len(todo), 1))} process(es)")
    if not todo:
        return []
    results = []
    if settings.workers == 1:
        for job in todo:
            results.append(train_job(str(run_dir), section, job))
            log(f"[memlens] formal: {'/'.join(map(str, job))} {results[-1]['seconds']:.1f} s")
        return results
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=settings.workers, mp_context=context) as pool:
        futures = {pool.submit(train_job, str(run_dir), section, job): job for job in todo}
        for future, job in futures.items():
            try:
                results.append(future.result())
            except Exception as e:
                raise UserError(f"formal: training {'/'.join(map(str, job))} failed: {e}; rerun to continue "
                                "(finished models are kept)") from e
            log(f"[memlens] formal: {'/'.join(map(str, job))} {results[-1]['seconds']:.1f} s")
    return results



def run_formal(cfg, measurement) -> int:
    """`memlens run experiment=formal_languages`: data, every model, then `memlens formal` (the measures, the
    findings and the report, harness/audit/formal.py) through the measuring side the CLI hands over. run.json
    records the config, commit, versions and each model's seconds, as every run's does."""
    start = time.time()
    section = OmegaConf.to_container(cfg.formal, resolve=True)
    settings = FormalSettings.load(section)
    run_dir = Path(str(cfg.run_dir))
    print(f"[memlens] run {cfg.get('experiment_name')} in {run_dir}: paper 004's formal languages "
          f"{', '.join(settings.languages)}, seeds {settings.seeds}, {len(settings.jobs())} models", flush=True)
    at_start = git_commit()
    build_all(run_dir, settings)          # first: an unshipped grammar stops the run before anything is written
    write_run_record(cfg, run_dir, [], git_commit_at_start=at_start)
    trained = train_all(run_dir, settings, section, log=lambda line: print(line, flush=True))
    status = int(measurement.run_command("formal", cfg) or 0)
    seconds = time.time() - start
    write_run_record(cfg, run_dir, [], formal_models_trained=trained, wall_seconds=round(seconds, 1),
                     git_commit_at_start=at_start)
    print(f"[memlens] run {cfg.get('experiment_name')} finished in {int(seconds // 60)} min {seconds % 60:.0f} s; "
          f"report: {formal_report_dir(run_dir) / 'report.md'}", flush=True)
    return status
