"""The training side of `memlens nmt` (Finding Memo, paper 002): the parallel corpus, the embedded Marian
model and the Sec. 6 fine-tuning on the recovered corpus F. The Finding Memo audit itself (algorithms 1-3,
caches, summary) is harness/audit/nmt.py; the CLI hands it an `NmtTrainer`, so neither side imports the
other's layer.

    memlens nmt experiment=nmt_quickstart
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

from memlens.harness.core.config import check_dataclass_values
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256, read_jsonl
from memlens.harness.core.layout import data_dir
from memlens.recipes.nmt.seq2seq import Seq2SeqSettings, train_seq2seq
from memlens.recipes.stages.contract import StageContext
from memlens.synthetic_data.parallel import ParallelSettings, build_parallel, heldout_pairs, import_parallel

MODEL_NAME = "NMT"            # <run_dir>/models/NMT (and NMT.finetuned for Sec. 6)
DATASET = "parallel"          # <run_dir>/data/parallel


def _strict(cls, values: dict, key: str):
    """`cls(**values)` after refusing unknown keys and non-boolean flags (memlens.harness.core.config)."""
    check_dataclass_values(cls, values, key)
    return cls(**values)


class NmtTrainer:
    """Data and models for the NMT audit. `s` is the audit's parsed `nmt` section (memlens.harness.audit.nmt)."""

    @staticmethod
    def prepare_data(run_dir: Path, s, seed: int) -> tuple[Path, list[dict]]:
        """The synthetic corpus (synthetic_data/parallel.py) or the user's TSV/JSONL (`nmt.data`)."""
        out = data_dir(run_dir, DATASET)
        if s.data:
            import_parallel(s.data, out)
        else:
            build_parallel(out, _strict(ParallelSettings, s.corpus, "nmt.corpus"), seed=seed)
        return out, read_jsonl(out / "rows.jsonl", required=("source", "reference"))

    @staticmethod
    def train_settings(s) -> dict:
        return asdict(_strict(Seq2SeqSettings, s.train, "nmt.train"))

    @staticmethod
    def base_model(cfg, s, rows: list[dict], device: str, log) -> Path:
        """`nmt.model_dir` (or a seq2seq `model.pretrained`) as given, else the embedded Marian trained on `rows`."""
        model_path = s.model_dir or _seq2seq_pretrained(cfg)
        if model_path:
            model_dir = Path(model_path)
            if not model_dir.is_dir():
                raise UserError(f"nmt.model_dir={model_dir}: not a directory; point it at a Marian/T5/BART "
                                "checkpoint directory or leave it null to train the embedded default")
            return model_dir
        ctx = StageContext(run_dir=Path(cfg.run_dir), name=MODEL_NAME, seed=int(cfg.seed), device=device)
        return train_seq2seq(ctx, rows, _strict(Seq2SeqSettings, s.train, "nmt.train"), dataset=DATASET, log=log)

    @staticmethod
    def heldout_pairs(s, seed: int, exclude: set[str]) -> list[dict]:
        """Unseen rule-translated pairs of the synthetic corpus (model quality beside memorization)."""
        return heldout_pairs(s.heldout_size, seed, exclude, _strict(ParallelSettings, s.corpus, "nmt.corpus"))

    @staticmethod
    def finetune(cfg, s, model_dir: Path, recovered: list[dict], train_rows: list[dict], ft, device: str,
                 log) -> Path:
        """Paper 002 Sec. 6: fine-tune `model_dir` on F (recovered outputs) + a random training sample."""
        ctx = StageContext(run_dir=Path(cfg.run_dir), name=MODEL_NAME, seed=int(cfg.seed), device=device)
        return run_finetune(ctx, model_dir, recovered, train_rows, ft,
                            _strict(Seq2SeqSettings, s.train, "nmt.train"), int(cfg.seed), log)


# ----------------------------------------------------------------------------- fine-tuning (Sec. 6)
def run_finetune(ctx_base: StageContext, model_dir: Path, recovered: list[dict], train_rows: list[dict],
                 ft, train_settings: Seq2SeqSettings, seed: int, log) -> Path:
    """Train `<NAME>.finetuned` from `model_dir` on F and `ft.sample_size` random training pairs (`ft`: the
    audit's FinetuneSettings); the set it trains on is written as its own dataset, for provenance."""
    rng = random.Random(seed)
    sample = rng.sample(train_rows, min(ft.sample_size, len(train_rows)))
    rows = [{"source": r["source"], "reference": r["recovered_output"]} for r in recovered] + \
        [{"source": r["source"], "reference": r["reference"]} for r in sample]
    rng.shuffle(rows)
    ft_settings = Seq2SeqSettings(**{**asdict(train_settings), "epochs": ft.epochs, "max_steps": -1,
                                     "learning_rate": ft.learning_rate, "warmup_steps": 0})
    ctx = StageContext(run_dir=ctx_base.run_dir, name=f"{MODEL_NAME}.finetuned", seed=seed, device=ctx_base.device)
    # The fine-tuning set is derived data; record it beside the model for provenance.
    ft_data = data_dir(ctx.run_dir, "parallel_finetune_F")
    atomic_write_jsonl(ft_data / "rows.jsonl", rows)
    atomic_write_json(ft_data / "manifest.json", {"name": ft_data.name, "count": len(rows),
                                                  "sha256": file_sha256(ft_data / "rows.jsonl"), "seed": seed,
                                                  "generator_version": "finetune-F-1", "settings": asdict(ft)})
    return train_seq2seq(ctx, rows, ft_settings, dataset=ft_data.name, init_dir=model_dir, log=log)


def _seq2seq_pretrained(cfg) -> str | None:
    """`model.pretrained=<dir>` also selects the translation model when that directory holds an
    encoder-decoder checkpoint (so `memlens nmt ... model.pretrained=/ckpt/opus-mt-en-de` works);
    `nmt.model_dir` takes precedence."""
    pretrained = (cfg.get("model") or {}).get("pretrained")
    config = Path(str(pretrained)) / "config.json" if pretrained else None
    if config is not None and config.is_file():
        try:
            if json.loads(config.read_text(encoding="utf-8")).get("is_encoder_decoder"):
                return str(pretrained)
        except json.JSONDecodeError:
            raise UserError(f"model.pretrained={pretrained}: config.json is not valid JSON") from None
    return None
