"""Paper 004's formal-language study: its settings (`formal:` of conf/experiment/formal_languages.yaml), where its
files live, and which models it trains on which strings — defined once, read by the data builder
(synthetic_data/formal_data.py), the trainer (recipes/formal/language_models.py) and the analysis (harness/audit/formal.py).

```
<run_dir>/formal/
  data/<language>/seed<k>/strings.jsonl   every string the study scores: tokens, exact -log P_L(s), its count in
                                          each training set, its counterfactual fold, test / Sec. 3 flags
  data/<language>/seed<k>/language.json   the language's sampled entropy per token, the data's hash
  models/<language>/seed<k>/<variant>/<role>/losses.json
                                          every scored string's loss at every epoch (written last: the finished
                                          marker), then the final weights beside it
  analysis/summary.json, strings.jsonl    the three measures per string and epoch, e*, the findings' inputs
  report/report.md, findings.json, figures/
```

Variants (training sets of one language and seed): `base` (D, `train_size` strings sampled from L), `dedup` (D's
distinct strings, once each; Sec. 4), `size<n>` (the first n strings of the same sample stream; Sec. 4 RQ5) and
`sec3` (D' = D plus s0, s1, s2 repeated `sec3_counts` times; Sec. 3). Roles: `full` trains on the variant's
set, `fold<j>` on it without every copy of fold j's distinct strings: the counterfactual model D' = D minus s of
paper 004 Sec. 3b, for all strings at once (k disjoint folds; docs/methods.md says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError

FORMAL_DIR = "formal"
STRINGS_FILE = "strings.jsonl"
LANGUAGE_FILE = "language.json"
LOSSES_FILE = "losses.json"
BASE, DEDUP, SEC3 = "base", "dedup", "sec3"
FULL = "full"
SEC3_NAMES = ("s0", "s1", "s2")


@dataclass
class FormalModel:
    """The tiny family's Llama, sized for a nine-token alphabet (trained from scratch; docs/methods.md)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 176


@dataclass
class FormalSettings:
    """`formal:` of an experiment; every key checked on load (the error names it and the fix)."""

    languages: list[str] = field(default_factory=lambda: ["G1", "G2"])   # Fig. 3's high- and low-entropy pair
    low_entropy: str = "G2"          # the language of Fig. 2, 4, 5, 6 (Sec. 3-4 use L2)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])          # "averaged over three experimental runs"
    train_size: int = 256            # |D| of the base variant
    sizes: list[int] = field(default_factory=lambda: [64, 256, 1024])   # Fig. 6 (App. E: 16, 64, 256, 1024)
    test_size: int = 256             # disjoint test strings (App. E evaluates on 1024)
    folds: int = 4                   # counterfactual models per variant
    dedup: bool = True               # Fig. 5
    sec3_counts: list[int] = field(default_factory=lambda: [16, 4, 1])   # freq(s0) > freq(s1) > freq(s2), Fig. 2
    tau: float = 0.2                 # recollection threshold (Fig. 2a)
    epochs: int = 30                 # App. E trains 50 epochs (fine-tuning 0.5B-13B models)
    batch_size: int = 8              # App. E
    lr: float = 1.0e-3               # from scratch; App. E fine-tunes at 5e-6..5e-5
    warmup_ratio: float = 0.05       # App. E: linear schedule, warm-up ratio 0.05
    entropy_samples: int = 4000      # strings sampled to estimate H(L) per token
    learned_gap: float = 0.1         # evidence gate: test loss at e* within this many nats/token of the test strings'
    workers: int = 2                 # models trained at once (one torch thread each)
    model: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model_settings = _model(self.model)
        _require(bool(self.languages) and len(set(self.languages)) == len(self.languages), "languages",
                 self.languages, "list distinct grammar names, e.g. [G1, G2]")
        _require(self.low_entropy in self.languages, "low_entropy", self.low_entropy,
                 f"name one of formal.languages {self.languages}")
        _require(bool(self.seeds) and len(set(self.seeds)) == len(self.seeds), "seeds", self.seeds,
                 "list distinct integers, e.g. [0, 1, 2]")
        for key in ("train_size", "test_size", "epochs", "batch_size", "entropy_samples", "workers"):
            _require(int(getattr(self, key)) >= 1, key, getattr(self, key), "use a positive integer")
        _require(self.folds >= 2, "folds", self.folds, "use >= 2 disjoint folds")
        _require(self.train_size in self.sizes, "sizes", self.sizes,
                 f"include train_size={self.train_size} (the base variant is one of the sizes)")
        _require(all(int(n) >= self.folds for n in self.sizes), "sizes", self.sizes,
                 f"every size needs at least folds={self.folds} strings")
        _require(len(self.sec3_counts) == 3 and all(int(c) >= 1 for c in self.sec3_counts)
                 and list(self.sec3_counts) == sorted(self.sec3_counts, reverse=True), "sec3_counts",
                 self.sec3_counts, "three positive counts in decreasing order, e.g. [16, 4, 1]")
        _require(0 < self.tau, "tau", self.tau, "use a positive loss threshold, e.g. 0.2")
        _require(self.lr > 0 and 0 <= self.warmup_ratio < 1, "lr", self.lr, "use lr > 0, warmup_ratio in [0, 1)")
        _require(self.learned_gap > 0, "learned_gap", self.learned_gap, "use a positive gap in nats per token")

    @classmethod
    def load(cls, section: dict[str, Any] | None) -> FormalSettings:
        section = dict(section or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise UserError(f"formal.{unknown[0]}: unknown key; use one of {', '.join(sorted(known))}")
        return cls(**section)

    # ------------------------------------------------------------------ what is trained
    def variants(self, language: str) -> list[str]:
        """The training sets of `language`: the base D for every language, the Sec. 3-4 designs on the low-entropy
        one."""
        if language != self.low_entropy:
            return [BASE]
        sizes = [size_variant(n) for n in sorted(self.sizes) if n != self.train_size]
        return [BASE, *([DEDUP] if self.dedup else []), *sizes, SEC3]

    def roles(self, variant: str) -> list[str]:
        """The models of a variant: the full one, and a counterfactual per fold (Sec. 3's control for `sec3` is
        the base variant's full model, trained on D')."""
        return [FULL] if variant == SEC3 else [FULL, *(f"fold{j}" for j in range(self.folds))]

    def jobs(self) -> list[tuple[str, int, str, str]]:
        """Every model of the study: (language, seed, variant, role)."""
        return [(lang, seed, variant, role) for lang in self.languages for seed in self.seeds
                for variant in self.variants(lang) for role in self.roles(variant)]

    def training_settings(self) -> dict[str, Any]:
        """What decides a model's weights beyond its data: a finished model with other settings is retrained."""
        return {"epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
                "warmup_ratio": self.warmup_ratio, "model": vars(self.model_settings)}


def size_variant(n: int) -> str:
    return f"size{int(n)}"


def variant_size(variant: str, settings: FormalSettings) -> int:
    """How many strings of the sample stream a variant's D holds (dedup and sec3 start from the base's)."""
    return int(variant[4:]) if variant.startswith("size") else settings.train_size


def fold_of(role: str) -> int | None:
    return int(role[4:]) if role.startswith("fold") else None


def training_counts(rows: list[dict], variant: str, role: str) -> dict[str, int]:
    """{string id: copies in the training set} of one model: the variant's counts, minus fold j's strings for
    role fold<j> (every copy of them: D' = D minus s)."""
    fold = fold_of(role)
    out = {}
    for row in rows:
        count = int(row["count"].get(variant, 0))
        if count and (fold is None or row["fold"].get(variant) != fold):
            out[row["id"]] = count
    return out


def _require(ok: bool, key: str, value: Any, fix: str) -> None:
    if not ok:
        raise UserError(f"formal.{key}={value!r}: {fix}")


def _model(section: dict[str, Any]) -> FormalModel:
    known = {f.name for f in fields(FormalModel)}
    unknown = sorted(set(section or {}) - known)
    if unknown:
        raise UserError(f"formal.model.{unknown[0]}: unknown key; use one of {', '.join(sorted(known))}")
    model = FormalModel(**dict(section or {}))
    for key in known:
        _require(int(getattr(model, key)) >= 1, f"model.{key}", getattr(model, key), "use a positive integer")
    _require(model.hidden_size % model.num_heads == 0, "model.hidden_size", model.hidden_size,
             f"must be divisible by num_heads={model.num_heads}")
    return model


# ---------------------------------------------------------------------- paths
def formal_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / FORMAL_DIR


def language_data_dir(run_dir: str | Path, language: str, seed: int) -> Path:
    return formal_dir(run_dir) / "data" / language / f"seed{int(seed)}"


def model_dir(run_dir: str | Path, language: str, seed: int, variant: str, role: str) -> Path:
    return formal_dir(run_dir) / "models" / language / f"seed{int(seed)}" / variant / role


def analysis_dir(run_dir: str | Path) -> Path:
    return formal_dir(run_dir) / "analysis"


def formal_report_dir(run_dir: str | Path) -> Path:
    return formal_dir(run_dir) / "report"
