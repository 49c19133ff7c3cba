"""`memlens nmt`: the Finding Memo audit (paper 002) of a translation model - algorithms 1-3, Sec. 6, report.

    memlens nmt experiment=nmt_quickstart                      # embedded default: synthetic corpus + Marian
    memlens nmt experiment=nmt_quickstart nmt.model_dir=/ckpt/opus-mt-en-de nmt.data=train.tsv

Steps (each cached under <run_dir>/nmt/ with a fingerprint of model weights, data and settings, so a
killed run resumes at the first unfinished step and a finished one is not recomputed; inside a step,
every decoded chunk is kept in <run_dir>/nmt/cache/translations-*.jsonl, so a kill loses one chunk):
 1. data    synthetic corpus or the user's TSV/JSONL (`nmt.data`)            - the trainer's
 2. model   the embedded Marian, trained unless `nmt.model_dir` is given     - the trainer's
 3. alg1    Algorithm 1 on the unique training pairs, grouped into repetition buckets (Table 1)
 4. alg2    Algorithm 2 on the memorized sources (Table 1, perturbation columns)
 5. alg3    Algorithm 3 with each recovery symbol (Sec. 5, Table 4)
 6. (optional) Sec. 6: fine-tune on the recovered corpus F mixed with a random training sample (the
    trainer's), re-measure
 7. summary.json (+ provenance) and report.md with a PNG of memorization by repetition bucket
 8. (`nmt.stability_kernels`) steps 1-5 again in a child process computing with a second level of torch's CPU
    kernels, under <run_dir>/nmt/stability/<level>/, beside steps 1-7 where both fit on the cores: N1-N3 whose
    verdict differs are unstable (stability_plan, record_stability)
The data and the models come from a trainer (recipes/nmt/nmt_pipeline.py) that the CLI hands over: the audit
never imports the recipes, and the recipes never import the audit.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from memlens.harness.core.config import check_dataclass_values
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import RowStore, atomic_write_json, atomic_write_jsonl, read_json
from memlens.harness.core.provenance import provenance
from memlens.harness.measures import nmt
from memlens.harness.model.load import cpu_kernel_level, load_seq2seq, model_fingerprint, pick_device, torch_threads

DATASET = "parallel"          # <run_dir>/data/parallel
STABILITY_DIR = "stability"   # <run_dir>/nmt/stability/<kernel level>/: the run of step 8
STABILITY_LOG = "console.log"  # in that folder: the rerun's console when it trains beside this run
PIPELINE_VERSION = 2          # bump when a cached step's content changes: stale caches are recomputed


@dataclass
class FinetuneSettings:
    """Paper 002 Sec. 6: fine-tune on F + a random training sample, then re-measure."""

    enabled: bool = False
    sample_size: int = 300          # random training pairs mixed with F (paper: ~10K)
    epochs: float = 3.0             # paper: one epoch; more -> stronger correction on a tiny model
    learning_rate: float = 5e-4


@dataclass
class NmtSettings:
    """The `nmt` config section (see conf/experiment/nmt_quickstart.yaml for the knobs' directions)."""

    model_dir: str | None = None
    data: str | None = None
    corpus: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    finetune: dict = field(default_factory=dict)
    unit: str = "word"
    prefix_ratio: float = 0.75
    approx_ned: float | None = None
    neighbourhood_k: int = 5
    fill_mask_model: str | None = None
    recovery_symbols: list = field(default_factory=lambda: ["!"])
    max_pairs_per_bucket: int | None = None
    heldout_size: int = 200
    max_new_tokens: int = 64
    batch_size: int = 64
    torch_threads: int = 1
    stability_kernels: str | None = "auto"

    def __post_init__(self):
        if self.unit not in nmt.UNITS:
            raise UserError(f"nmt.unit={self.unit!r}: use word, or char for Chinese/Japanese/Korean/Thai sources")
        if not 0 < float(self.prefix_ratio) <= 1:
            raise UserError(f"nmt.prefix_ratio={self.prefix_ratio}: must be in (0, 1] (paper: 0.75)")
        if self.approx_ned is not None and not 0 <= float(self.approx_ned) < 1:
            raise UserError(f"nmt.approx_ned={self.approx_ned}: null (exact match) or a NED in [0, 1)")
        if int(self.neighbourhood_k) < 1:
            raise UserError(f"nmt.neighbourhood_k={self.neighbourhood_k}: must be >= 1 (paper: 5)")
        if not self.recovery_symbols or not all(isinstance(s, str) and s.strip() for s in self.recovery_symbols):
            raise UserError("nmt.recovery_symbols: give a list of non-empty symbols, e.g. ['!', '*']")
        if self.max_pairs_per_bucket is not None and int(self.max_pairs_per_bucket) < 1:
            raise UserError("nmt.max_pairs_per_bucket: null (all pairs) or a positive integer")
        self.recovery_symbols = [str(s) for s in self.recovery_symbols]
        if self.stability_kernels not in STABILITY_KERNELS:
            raise UserError(f"nmt.stability_kernels={self.stability_kernels!r}: one of "
                            f"{', '.join(str(k) for k in STABILITY_KERNELS)} (null: no stability rerun)")


# Step 8's kernel level: `auto` is AVX2 unless this run computed with AVX2, then the portable kernels.
STABILITY_KERNELS = ("auto", "default", "avx2", "avx512", None)


def settings_from_cfg(cfg) -> NmtSettings:
    section = OmegaConf.to_container(cfg.get("nmt") or {}, resolve=True)
    return _strict(NmtSettings, section, "nmt")


def _strict(cls, values: dict, key: str):
    """`cls(**values)` after refusing unknown keys and non-boolean flags (memlens.harness.core.config)."""
    check_dataclass_values(cls, values, key)
    return cls(**values)


# ----------------------------------------------------------------------------- step cache
class StepCache:
    """<run_dir>/nmt/<step>.json written atomically with a fingerprint; a rerun reuses matching steps."""

    def __init__(self, out_dir: Path, base: dict):
        self.out_dir = out_dir
        self.base = base

    def fingerprint(self, step: str, extra: Any = None) -> str:
        blob = json.dumps({"step": step, **self.base, "extra": extra}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def load(self, step: str, extra: Any = None):
        path = self.out_dir / f"{step}.json"
        if path.is_file():
            record = read_json(path)
            if record.get("fingerprint") == self.fingerprint(step, extra):
                return record["result"]
        return None

    def save(self, step: str, result: Any, extra: Any = None) -> Any:
        atomic_write_json(self.out_dir / f"{step}.json", {"fingerprint": self.fingerprint(step, extra),
                                                          "result": result})
        return result


class TranslationCache:
    """Wraps `translate` with an append-only store of (source -> output) for one model + decoding setup.

    Every chunk of translations is appended (fsync'd) as soon as it is decoded, so a run killed in the
    middle of Algorithm 1 on a large corpus loses at most one chunk; the rerun decodes only what is
    missing. Later steps also reuse earlier translations (Alg. 3 re-reads Alg. 1's full sources).
    """

    def __init__(self, translate, path: Path, chunk: int = 512):
        self.translate = translate
        self.chunk = chunk
        self.store = RowStore(path, key="source")
        self.table = {r["source"]: r["output"] for r in self.store.rows()}

    def __call__(self, sources: list[str]) -> list[str]:
        missing = [x for x in dict.fromkeys(sources) if x not in self.table]
        for i in range(0, len(missing), self.chunk):
            part = missing[i:i + self.chunk]
            outputs = self.translate(part)
            self.store.append({"source": x, "output": o} for x, o in zip(part, outputs))
            self.table.update(zip(part, outputs))
        return [self.table[x] for x in sources]


# ----------------------------------------------------------------------------- steps
def unique_pairs(rows: list[dict], s: NmtSettings, seed: int) -> list[dict]:
    """Unique (source, reference) pairs with their repetition counts in the training data (Table 1).

    With `max_pairs_per_bucket`, a seeded random sample per bucket is analysed (the paper samples 100K
    pairs in buckets 1 and 2).
    """
    counts = nmt.pair_repetitions([(r["source"], r["reference"]) for r in rows])
    first: dict[tuple[str, str], dict] = {}
    for r in rows:
        first.setdefault((nmt.normalize_ws(r["source"]), nmt.normalize_ws(r["reference"])), r)
    pairs = [{"pair": i, "source": r["source"], "reference": r["reference"], "repetitions": counts[key],
              "kind": r.get("kind"), "rule_translation": r.get("rule_translation")}
             for i, (key, r) in enumerate(sorted(first.items()))]
    if s.max_pairs_per_bucket:
        rng = random.Random(seed)
        by_bucket: dict[int, list[dict]] = {}
        for p in pairs:
            by_bucket.setdefault(min(p["repetitions"], 6), []).append(p)
        pairs = sorted((p for group in by_bucket.values()
                        for p in (rng.sample(group, s.max_pairs_per_bucket)
                                  if len(group) > s.max_pairs_per_bucket else group)), key=lambda p: p["pair"])
    return pairs


def run_algorithm1(translate, pairs: list[dict], s: NmtSettings) -> list[dict]:
    details: list[dict] = []
    memorized = nmt.extractive_memorization(translate, [p["source"] for p in pairs], [p["reference"] for p in pairs],
                                            prefix_ratio=s.prefix_ratio, unit=s.unit, approx_ned=s.approx_ned,
                                            details=details)
    by_index = {m["index"]: m for m in memorized}
    rows = []
    for i, (p, d) in enumerate(zip(pairs, details)):
        m = by_index.get(i)
        rows.append({**p, "index": i, "output": d["output"], "in_m1": d["in_m1"], "memorized": m is not None,
                     "prefix_len": d["prefix_len"], "source_len": len(nmt.split_units(p["source"], s.unit)),
                     "prefix_ratio": m["prefix_ratio"] if m else None, "prefix": m["prefix"] if m else None,
                     "unit": s.unit})
    return rows


def substitutes_note(s: NmtSettings) -> str:
    """Where Algorithm 2's substitutes come from, as the summary and report state it."""
    if s.fill_mask_model:
        return f"fill-mask model {s.fill_mask_model}"
    return ("corpus-frequency fallback (no fill-mask model configured: nmt.fill_mask_model is null); substitutes "
            "are the units that most often follow the previous unit in the training sources")


def make_substitutes(s: NmtSettings, rows: list[dict], device: str):
    if s.fill_mask_model:
        return nmt.fill_mask_substitutes(s.fill_mask_model, top_k=max(10, 2 * s.neighbourhood_k), device=device,
                                         unit=s.unit)
    return nmt.frequency_substitutes([r["source"] for r in rows], unit=s.unit)


def exact_match_pct(translate, pairs: list[dict]) -> float | None:
    if not pairs:
        return None
    outs = nmt.translate_unique(translate, [p["source"] for p in pairs])
    return 100.0 * sum(nmt.same_output(o, p["reference"]) for o, p in zip(outs, pairs)) / len(pairs)


# ----------------------------------------------------------------------------- main
def run_nmt(cfg, trainer, log=print) -> dict:
    """Every step of the Finding Memo audit; `trainer` (memlens.recipes.nmt.nmt_pipeline.NmtTrainer, handed over by the
    CLI) builds the data and trains the translation models this audit measures."""
    s = settings_from_cfg(cfg)
    run_dir = Path(cfg.run_dir)
    seed = int(cfg.seed)
    device = pick_device(str(cfg.device))
    out = run_dir / "nmt"
    # Tiny models gain little from intra-op threads and lose a lot when the cores are shared.
    with torch_threads(s.torch_threads if s.torch_threads > 0 else None):
        return _run(cfg, trainer, s, run_dir, out, seed, device, log)


def _run(cfg, trainer, s: NmtSettings, run_dir: Path, out: Path, seed: int, device: str, log) -> dict:
    timings: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name] = round(now - clock[0], 2)
        clock[0] = now

    data_dir, rows = trainer.prepare_data(run_dir, s, seed)
    manifest = read_json(data_dir / "manifest.json")
    log(f"[nmt] data: {len(rows)} training rows from {data_dir}")
    model_dir = trainer.base_model(cfg, s, rows, device, log)
    model, tokenizer = load_seq2seq(model_dir, device)
    translate = nmt.hf_translator(model, tokenizer, max_new_tokens=s.max_new_tokens, batch_size=s.batch_size)

    analysis = {k: v for k, v in asdict(s).items()
                if k not in ("train", "finetune", "torch_threads", "batch_size", "stability_kernels")}
    cache = StepCache(out, {"version": PIPELINE_VERSION, "model": model_fingerprint(model_dir),  # weights + tokenizer
                            "dataset": manifest["sha256"], "settings": analysis})
    # Keyed by what decides an output (weights, tokenizer, greedy length cap), not by the analysis settings.
    decode_key = hashlib.sha256(f"{cache.base['model']}|greedy|{s.max_new_tokens}".encode()).hexdigest()
    translate = TranslationCache(translate, out / "cache" / f"translations-{decode_key[:16]}.jsonl")

    pairs = unique_pairs(rows, s, seed)
    lap("data_and_model_s")
    alg1 = cache.load("algorithm1")
    if alg1 is None:
        log(f"[nmt] Algorithm 1 on {len(pairs)} unique pairs")
        alg1 = cache.save("algorithm1", run_algorithm1(translate, pairs, s))
    lap("algorithm1_s")
    atomic_write_jsonl(out / "memorization.jsonl", alg1)
    memorized = [r for r in alg1 if r["memorized"]]
    buckets = nmt.repetition_buckets([r["repetitions"] for r in alg1], [r["memorized"] for r in alg1])
    log(f"[nmt] {len(memorized)} memorized of {len(alg1)}; ratio by bucket "
        + " → ".join("–" if b["ratio_pct"] is None else f"{b['ratio_pct']:.1f} %" for b in buckets["buckets"]))

    alg2 = cache.load("algorithm2")
    if alg2 is None:
        log(f"[nmt] Algorithm 2 on {len(memorized)} memorized sources ({substitutes_note(s)[:40]})")
        substitutes = make_substitutes(s, rows, device)
        alg2 = cache.save("algorithm2", nmt.neighbourhood_effect(translate, memorized, substitutes,
                                                                 k=s.neighbourhood_k, approx_ned=s.approx_ned))
    lap("algorithm2_s")
    atomic_write_jsonl(out / "perturbations.jsonl", alg2["perturbations"])
    reps_by_index = {r["index"]: r["repetitions"] for r in alg1}
    per_bucket = nmt.per_bucket_neighbourhood(alg2["perturbations"], reps_by_index)

    alg3 = cache.load("algorithm3")
    if alg3 is None:
        log(f"[nmt] Algorithm 3 with symbols {s.recovery_symbols}")
        alg3 = cache.save("algorithm3", nmt.recover_non_memorized(translate, memorized, s.recovery_symbols,
                                                                  approx_ned=s.approx_ned))
    lap("algorithm3_s")
    atomic_write_jsonl(out / "recovery.jsonl", [r for sym in alg3["per_symbol"].values() for r in sym["rows"]])
    atomic_write_jsonl(out / "recovered_F.jsonl", alg3["F"])

    rule_by_index = {r["index"]: r.get("rule_translation") for r in alg1}
    quality = {
        "Memorized outputs": nmt.output_quality([m["output"] for m in memorized],
                                                [rule_by_index[m["index"]] for m in memorized]),
        "Non-memorized (Algorithm 3) outputs": nmt.output_quality(
            [f["recovered_output"] for f in alg3["F"]], [rule_by_index[f["index"]] for f in alg3["F"]]),
    }

    # Model quality on unseen rule-translated pairs (synthetic corpus only): memorization of noisy pairs
    # is only meaningful next to a model that has learned the regular translation.
    heldout = cache.load("heldout")
    if heldout is None and not s.data and s.heldout_size > 0:
        test = trainer.heldout_pairs(s, seed, {r["source"] for r in rows})
        heldout = cache.save("heldout", {"pairs": len(test), "exact_match_pct": exact_match_pct(translate, test)})

    finetune = _maybe_finetune(cfg, trainer, s, model_dir, alg3, rows, memorized, seed, device, translate, cache,
                               log)
    lap("finetune_s")
    neighbourhood = {k: v for k, v in alg2.items() if k != "perturbations"}
    # In the configured order (a cached step comes back with sorted keys).
    recovery = {"per_symbol": {sym: {k: v for k, v in alg3["per_symbol"][sym].items() if k != "rows"}
                               for sym in s.recovery_symbols},
                "best_symbol": alg3["best_symbol"], "best_rate": alg3["best_rate"],
                "any_symbol_rate": alg3["any_symbol_rate"], "F_size": len(alg3["F"])}
    kinds = nmt.memorized_by_kind(alg1)
    summary = {
        "experiment_name": cfg.experiment_name, "model_dir": str(model_dir), "dataset": str(data_dir),
        "training_rows": len(rows), "unique_pairs": len(alg1), "settings": analysis,
        "m1_size": sum(r["in_m1"] for r in alg1), "memorized": len(memorized),
        "memorized_by_kind": kinds, "heldout": heldout, "buckets": buckets, "neighbourhood": neighbourhood,
        "neighbourhood_per_bucket": per_bucket, "substitutes": substitutes_note(s), "recovery": recovery,
        "quality": quality, "finetune": finetune, "finding_numbers": nmt.finding_numbers(buckets, neighbourhood, recovery),
        "examples": [{k: m[k] for k in ("source", "reference", "prefix", "prefix_ratio")} for m in memorized[:8]],
        "timings": timings,  # wall seconds of this invocation (cached steps take ~0)
        "provenance": provenance(seed=seed, datasets={DATASET: manifest["sha256"]}, model_dir=str(model_dir),
                                 model_sha256=cache.base["model"], stage="nmt"),
    }
    atomic_write_json(out / "summary.json", summary)  # written last: a summary means a finished audit
    log(f"[nmt] wrote {out / 'summary.json'}")
    return summary


def _maybe_finetune(cfg, trainer, s, model_dir, alg3, rows, memorized, seed, device, translate, cache, log):
    ft = _strict(FinetuneSettings, s.finetune, "nmt.finetune")
    if not ft.enabled:
        return {"enabled": False}
    train_settings = trainer.train_settings(s)
    cached = cache.load("finetune", asdict(ft) | {"train": train_settings})
    if cached is not None:
        return cached
    if not alg3["F"]:
        return {"enabled": True, "skipped": "the recovered corpus F is empty"}
    heldout = trainer.heldout_pairs(s, seed, {r["source"] for r in rows}) if not s.data else []
    rule_by_source = {m["source"]: m.get("rule_translation") for m in memorized}

    def measure(tr) -> dict:
        outs = nmt.translate_unique(tr, [m["source"] for m in memorized])
        still = nmt.extractive_memorization(tr, [m["source"] for m in memorized], [m["reference"] for m in memorized],
                                            prefix_ratio=s.prefix_ratio, unit=s.unit, approx_ned=s.approx_ned)
        return {"heldout_exact_pct": exact_match_pct(tr, heldout),
                "memorized_rule_match_pct": nmt.output_quality(outs, [rule_by_source[m["source"]] for m in memorized])[
                    "rule_match_pct"],
                "still_memorized": len(still)}

    log(f"[nmt] Sec. 6: fine-tuning on |F| = {len(alg3['F'])} + {ft.sample_size} training pairs")
    ft_dir = trainer.finetune(cfg, s, model_dir, alg3["F"], rows, ft, device, log)
    ft_model, ft_tok = load_seq2seq(ft_dir, device)
    result = {"enabled": True, "F_size": len(alg3["F"]), "sample_size": ft.sample_size, "model_dir": str(ft_dir),
              "base": measure(translate),
              "finetuned": measure(nmt.hf_translator(ft_model, ft_tok, s.max_new_tokens, s.batch_size))}
    return cache.save("finetune", result, asdict(ft) | {"train": train_settings})


def main(cfg, trainer) -> int:
    run_nmt(cfg, trainer)
    return 0


# ----------------------------------------------------------------------------- step 8: stability
def second_kernel_level(setting: str, current: str) -> str:
    """The kernel level of the stability rerun (ATEN_CPU_CAPABILITY): `auto` is AVX2, or the portable kernels
    when this run computed with AVX2."""
    if setting != "auto":
        return setting
    return "default" if current.lower() == "avx2" else "avx2"


def stability_config(cfg, level: str):
    """The config of the rerun: the same experiment under <run_dir>/nmt/stability/<level>/, without the
    Sec. 6 fine-tuning (N1-N3 do not read it) and without a stability rerun of its own."""
    from omegaconf import open_dict  # lazy: only step 8 needs it

    rerun = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    with open_dict(rerun):
        rerun.run_dir = str(Path(cfg.run_dir) / "nmt" / STABILITY_DIR / level)
        rerun.nmt.stability_kernels = None
        rerun.nmt.finetune = {**OmegaConf.to_container(rerun.nmt.get("finetune") or {}), "enabled": False}
    return rerun


@dataclass(frozen=True)
class StabilityPlan:
    """Step 8 as decided before anything trains: the rerun's config, its kernel level and this run's."""

    config: Any
    level: str
    current: str


def stability_plan(cfg) -> StabilityPlan | None:
    """The stability rerun this run needs (None: `nmt.stability_kernels` is null). Known before step 1, so the rerun
    can train beside this run: it shares no file with it (its own run_dir) and only its kernel level differs."""
    s = settings_from_cfg(cfg)
    if s.stability_kernels is None:
        return None
    current = cpu_kernel_level()
    level = second_kernel_level(s.stability_kernels, current)
    return StabilityPlan(stability_config(cfg, level), level, current)


def rerun_fits_beside(cfg, cores: int) -> bool:
    """Whether the rerun can train at the same time as this run without the two sharing a core: both compute with
    `nmt.torch_threads` threads (0: torch's default, every core, so never)."""
    threads = settings_from_cfg(cfg).torch_threads
    return 0 < threads and 2 * threads <= cores


def announce_stability(plan: StabilityPlan, log=print) -> None:
    """Step 8 (issue: N3's verdict flipped with torch's CPU kernels), named before it starts."""
    log(f"[nmt] stability: Algorithms 1-3 again with the model retrained, torch kernels {plan.level} "
        f"(this run: {plan.current})")


def record_stability(cfg, plan: StabilityPlan, other: dict, log=print) -> dict:
    """The rerun's summary `other` beside this run's: into this run's summary.json under `stability`, where the
    report compares each N1-N3 verdict (harness/report/findings/paper002.py: a verdict that differs is
    `inconclusive (unstable)`)."""
    current = plan.current
    second = ((other.get("provenance") or {}).get("compute") or {}).get("torch") or {}
    stability = {"kernels": current, "second_kernels": second.get("cpu_capability"),
                 "informative": second.get("cpu_capability") != current,
                 "memorized": other["memorized"], "unique_pairs": other["unique_pairs"],
                 "finding_numbers": other["finding_numbers"], "buckets": other["buckets"],
                 "run_dir": str(plan.config.run_dir)}
    out = Path(cfg.run_dir) / "nmt"
    summary = read_json(out / "summary.json")
    summary["stability"] = stability
    atomic_write_json(out / "summary.json", summary)
    log(f"[nmt] stability: {other['memorized']} memorized under {stability['second_kernels']} "
        f"(this run: {summary['memorized']} under {current})")
    return stability
