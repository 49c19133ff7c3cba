"""`memaudit nmt`: Finding Memo (paper 002) end to end - data -> seq2seq model -> algorithms 1-3 -> report.

    memaudit nmt experiment=nmt_quickstart                      # embedded default: synthetic corpus + Marian
    memaudit nmt experiment=nmt_quickstart nmt.model_dir=/ckpt/opus-mt-en-de nmt.data=train.tsv

Steps (each cached under <run_dir>/nmt/ with a fingerprint of model weights, data and settings, so a
killed run resumes at the first unfinished step and a finished one is not recomputed; inside a step,
every decoded chunk is kept in <run_dir>/nmt/cache/translations-*.jsonl, so a kill loses one chunk):
 1. data    synthetic corpus (synthetic_data/parallel.py) or the user's TSV/JSONL (`nmt.data`)
 2. model   train the embedded Marian (recipes/seq2seq.py) unless `nmt.model_dir` is given
 3. alg1    Algorithm 1 on the unique training pairs, grouped into repetition buckets (Table 1)
 4. alg2    Algorithm 2 on the memorized sources (Table 1, perturbation columns)
 5. alg3    Algorithm 3 with each recovery symbol (Sec. 5, Table 4)
 6. (optional) Sec. 6: fine-tune on the recovered corpus F mixed with a random training sample, re-measure
 7. summary.json (+ provenance) and report.md with a PNG of memorization by repetition bucket
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import nmt
from harness.config import check_dataclass_values
from harness.errors import UserError
from harness.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, file_sha256, read_json, read_jsonl
from harness.layout import data_dir
from harness.provenance import provenance
from recipes.common import StageContext, resolve_device
from recipes.seq2seq import Seq2SeqSettings, train_seq2seq
from synthetic_data.parallel import ParallelSettings, build_parallel, heldout_pairs, import_parallel

MODEL_NAME = "NMT"            # <run_dir>/models/NMT (and NMT.finetuned for Sec. 6)
DATASET = "parallel"          # <run_dir>/data/parallel
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


def settings_from_cfg(cfg) -> NmtSettings:
    from omegaconf import OmegaConf

    section = OmegaConf.to_container(cfg.get("nmt") or {}, resolve=True)
    return _strict(NmtSettings, section, "nmt")


def _strict(cls, values: dict, key: str):
    """`cls(**values)` after refusing unknown keys and non-boolean flags (harness.config)."""
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


def model_fingerprint(model_dir: Path) -> str:
    """sha256 over the weight files: the analysis is redone when (and only when) the model changes."""
    h = hashlib.sha256()
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise UserError(f"nmt.model_dir={model_dir}: no *.safetensors weights (only safetensors are loaded)")
    for f in files:
        h.update(f.name.encode() + file_sha256(f).encode())
    return h.hexdigest()


class TranslationCache:
    """Wraps `translate` with an append-only store of (source -> output) for one model + decoding setup.

    Every chunk of translations is appended (fsync'd) as soon as it is decoded, so a run killed in the
    middle of Algorithm 1 on a large corpus loses at most one chunk; the rerun decodes only what is
    missing. Later steps also reuse earlier translations (Alg. 3 re-reads Alg. 1's full sources).
    """

    def __init__(self, translate, path: Path, chunk: int = 512):
        from harness.io import RowStore

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
def prepare_data(run_dir: Path, s: NmtSettings, seed: int) -> tuple[Path, list[dict]]:
    out = data_dir(run_dir, DATASET)
    if s.data:
        import_parallel(s.data, out)
    else:
        build_parallel(out, _strict(ParallelSettings, s.corpus, "nmt.corpus"), seed=seed)
    return out, read_jsonl(out / "rows.jsonl", required=("source", "reference"))


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


def per_bucket_neighbourhood(perturbations: list[dict], repetitions: dict[int, int]) -> dict[int, dict]:
    """Table 1's perturbation columns: kept share per position class within each repetition bucket."""
    out: dict[int, dict] = {}
    for rep in range(1, 6):
        rows = [p for p in perturbations if repetitions[p["index"]] == rep]
        out[rep] = {}
        for cls in nmt.POSITION_CLASSES:
            sel = [p["kept"] for p in rows if p["class"] == cls]
            out[rep][cls] = sum(sel) / len(sel) if sel else None
    return out


def output_quality(outputs: list[str], rule: list[str | None]) -> dict:
    """Table 4 analogue: TTR (paper) and, where the rule translation is known, the share that equals it
    (our stand-in for COMET-QE: the synthetic corpus knows the correct translation)."""
    known = [(o, r) for o, r in zip(outputs, rule) if r]
    return {"count": len(outputs), "ttr": nmt.type_token_ratio(outputs),
            "rule_match_pct": 100.0 * sum(nmt.normalize_ws(o) == nmt.normalize_ws(r) for o, r in known) / len(known)
            if known else None}


def exact_match_pct(translate, pairs: list[dict]) -> float | None:
    if not pairs:
        return None
    outs = nmt.translate_unique(translate, [p["source"] for p in pairs])
    return 100.0 * sum(nmt.same_output(o, p["reference"]) for o, p in zip(outs, pairs)) / len(pairs)


def memorized_by_kind(alg1: list[dict]) -> dict:
    """{kind: {total, memorized}} for corpora that know each pair's kind (the synthetic one)."""
    kinds: dict[str, dict] = {}
    for r in alg1:
        if r.get("kind"):
            k = kinds.setdefault(r["kind"], {"total": 0, "memorized": 0})
            k["total"] += 1
            k["memorized"] += bool(r["memorized"])
    return kinds


def noisy_share_by_bucket(alg1: list[dict]) -> list[float | None]:
    """% of noisy pairs per repetition bucket 1..5: the most a model can memorize by construction."""
    shares = []
    for rep in range(1, 6):
        sel = [r for r in alg1 if r["repetitions"] == rep]
        shares.append(100.0 * sum(r.get("kind") == "noisy" for r in sel) / len(sel) if sel else None)
    return shares


def findings(buckets: dict, neighbourhood: dict, recovery: dict) -> dict:
    """N1-N3 as the quickstart issue checks them: booleans plus the numbers behind them (not forced)."""
    r = buckets["pearson"]
    pre, suf, start = (neighbourhood[c]["share"] for c in nmt.POSITION_CLASSES)
    n2_parts = None not in (pre, suf, start)
    best = recovery["best_rate"] if recovery else None
    return {
        "N1_memorization_rises_with_repetitions": bool(r is not None and r > 0),
        "N1_pearson": r,
        "N1_ratio_pct_by_bucket": [b["ratio_pct"] for b in buckets["buckets"]],
        "N2_suffix_kept_more_than_prefix": bool(n2_parts and suf > pre),
        "N2_start_kept_least": bool(n2_parts and start <= min(pre, suf)),
        "N2_suffix_gt_prefix_gt_start": bool(n2_parts and suf > pre and pre >= start),
        "N2_shares": {"prefix": pre, "suffix": suf, "start": start},
        "N3_recovery_for_most_memorized": bool(best is not None and best > 0.5),
        "N3_best_symbol": recovery["best_symbol"] if recovery else None,
        "N3_best_rate": best,
    }


# ----------------------------------------------------------------------------- report
def _fmt(x, digits: int = 2, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:.{digits}f}" + (" %" if pct else "")


def render_figure(path: Path, buckets: dict, per_bucket: dict, noisy_pct: list | None = None) -> None:
    """Left: Algorithm 1 ratio per repetition bucket (Table 1), with the share of noisy pairs per bucket
    when the corpus knows it (the most a model can memorize by construction). Right: Algorithm 2."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reps = [b["repetitions"] for b in buckets["buckets"]]
    ratios = [b["ratio_pct"] or 0.0 for b in buckets["buckets"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    bars = ax1.bar(reps, ratios, color="#4C72B0")
    top = max(ratios + [v or 0.0 for v in (noisy_pct or [])] + [1e-9])
    for bar, b in zip(bars, buckets["buckets"]):
        # Counts inside the bar top, so that they never collide with the noisy-share line above.
        inside = bar.get_height() > 0.15 * top
        ax1.annotate(f"{b['memorized']}/{b['total']}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                     ha="center", va="top" if inside else "bottom", fontsize=8,
                     color="white" if inside else "black", xytext=(0, -2 if inside else 2),
                     textcoords="offset points")
    ax1.set_ylim(0, top * 1.2)
    if noisy_pct and any(v is not None for v in noisy_pct):
        ax1.plot(reps, [v or 0.0 for v in noisy_pct], "k--", marker="_", label="noisy pairs in bucket (%)")
        ax1.legend(fontsize=8, loc="lower right")
    ax1.set_xlabel("repetitions of the pair in the training data")
    ax1.set_ylabel("memorized (%) - Algorithm 1")
    r = buckets["pearson"]
    ax1.set_title(f"Algorithm 1: memorized by repetitions (Pearson r = {_fmt(r)})", fontsize=10)
    ax1.set_xticks(reps)
    width = 0.27
    for j, (cls, color) in enumerate(zip(nmt.POSITION_CLASSES, ("#DD8452", "#55A868", "#C44E52"))):
        vals = [100 * (per_bucket[rep][cls] or 0.0) for rep in reps]
        xs = [x + (j - 1) * width for x in reps]
        ax2.bar(xs, vals, width, label=f"perturb {cls}", color=color)
        for x, rep in zip(xs, reps):
            if per_bucket[rep][cls] is None:   # nothing perturbed (no memorized source in the bucket)
                ax2.annotate("n/a", (x, 1), ha="center", va="bottom", fontsize=6, rotation=90)
            elif per_bucket[rep][cls] == 0:    # a real zero, not a missing bar
                ax2.annotate("0", (x, 0.5), ha="center", va="bottom", fontsize=6)
    ax2.set_xlabel("repetitions of the pair in the training data")
    ax2.set_ylabel("perturbed sources keeping the memorized output (%)")
    ax2.set_title("Algorithm 2: neighbourhood effect", fontsize=10)
    ax2.set_xticks(reps)
    ax2.set_ylim(0, 105)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def render_report(summary: dict) -> str:
    b, nb, rec = summary["buckets"], summary["neighbourhood"], summary["recovery"]
    per_bucket = {int(k): v for k, v in summary["neighbourhood_per_bucket"].items()}
    lines = [f"# Finding Memo audit - {summary['experiment_name']}", "",
             f"Model: `{summary['model_dir']}` - data: `{summary['dataset']}` ({summary['unique_pairs']} unique "
             f"pairs analysed, {summary['training_rows']} training rows). Prefix ratio p = {summary['settings']['prefix_ratio']}, "
             f"unit = {summary['settings']['unit']}, matching = "
             f"{'exact' if summary['settings']['approx_ned'] is None else 'NED <= ' + str(summary['settings']['approx_ned'])}.",
             "", f"Model quality: exact match on {(summary['heldout'] or {}).get('pairs', 0)} held-out rule-translated "
             f"pairs: {_fmt((summary['heldout'] or {}).get('exact_match_pct'), 1, True)}. M1 (translation equals the "
             f"reference): {summary['m1_size']} of {summary['unique_pairs']}. Memorized by pair kind: "
             + (", ".join(f"{k} {v['memorized']}/{v['total']}" for k, v in sorted(summary['memorized_by_kind'].items()))
                or "unknown (user corpus)") + ".",
             "", "## Table 1 - extractive memorization (Algorithm 1) and neighbourhood effect (Algorithm 2, K = "
             f"{nb['k']})", "",
             "| Repetitions | Total Samples | Memorized | Ratio (%) | Perturb Prefix | Perturb Suffix | Perturb Start |",
             "|---|---|---|---|---|---|---|"]
    for row in b["buckets"]:
        pb = per_bucket[row["repetitions"]]
        lines.append(f"| {row['repetitions']} | {row['total']} | {row['memorized']} | {_fmt(row['ratio_pct'])} | "
                     + " | ".join(_fmt(None if pb[c] is None else 100 * pb[c], pct=True) for c in nmt.POSITION_CLASSES)
                     + " |")
    lines.append(f"| {b['all']['repetitions']} | {b['all']['total']} | {b['all']['memorized']} | "
                 f"{_fmt(b['all']['ratio_pct'])} | " + " | ".join(
                     _fmt(None if nb[c]['share'] is None else 100 * nb[c]['share'], pct=True)
                     for c in nmt.POSITION_CLASSES) + " |")
    lines += ["", f"Pearson r (repetitions vs memorization ratio): {_fmt(b['pearson'], 3)}. "
              f"Perturbation counts: " + ", ".join(f"{c} {nb[c]['kept']}/{nb[c]['perturbed']}"
                                                   for c in nmt.POSITION_CLASSES) + ".",
              f"Substitutes: {summary['substitutes']}.", "",
              "![memorization by repetition bucket](memorization_by_repetition.png)", "",
              "## Algorithm 3 - recovery symbols", "",
              "| Symbol | Recovered | Rate |", "|---|---|---|"]
    for sym, r in rec["per_symbol"].items():
        lines.append(f"| `{sym}` | {r['recovered']}/{r['total']} | {_fmt(None if r['rate'] is None else 100 * r['rate'], 1, True)} |")
    lines += ["", f"Best symbol: `{rec['best_symbol']}`; any symbol: "
              f"{_fmt(None if rec['any_symbol_rate'] is None else 100 * rec['any_symbol_rate'], 1, True)}. "
              f"Recovered corpus F: {rec['F_size']} pairs (`recovered_F.jsonl`).", "",
              "## Table 4 - quality of non-memorized outputs", "",
              "COMET-QE needs a hub model, so quality is the share of outputs equal to the rule translation "
              "(known for the synthetic corpus only) next to the paper's TTR.", "",
              "| Set | Count | Rule-translation match (%) | TTR (%) |", "|---|---|---|---|"]
    for name, q in summary["quality"].items():
        lines.append(f"| {name} | {q['count']} | {_fmt(q['rule_match_pct'], 1)} | {_fmt(q['ttr'], 1)} |")
    ft = summary.get("finetune")
    lines += ["", "## Sec. 6 - fine-tuning on F (Table 5)", ""]
    if ft and ft.get("skipped"):
        lines.append(f"Skipped: {ft['skipped']}.")
    elif ft and ft.get("enabled"):
        lines += ["| Measurement | Base | Fine-tuned |", "|---|---|---|",
                  f"| Held-out exact match (%) | {_fmt(ft['base']['heldout_exact_pct'], 1)} | {_fmt(ft['finetuned']['heldout_exact_pct'], 1)} |",
                  f"| Memorized sources: rule-translation match (%) | {_fmt(ft['base']['memorized_rule_match_pct'], 1)} | {_fmt(ft['finetuned']['memorized_rule_match_pct'], 1)} |",
                  f"| Still memorized (Algorithm 1) | {ft['base']['still_memorized']} | {ft['finetuned']['still_memorized']} |",
                  "", f"Fine-tuned on |F| = {ft['F_size']} recovered pairs + {ft['sample_size']} random training pairs."]
    else:
        lines.append("Not run (nmt.finetune.enabled=false).")
    f = summary["findings"]
    lines += ["", "## Findings", "",
              f"- N1 memorization rises with repetitions: **{f['N1_memorization_rises_with_repetitions']}** "
              f"(Pearson r = {_fmt(f['N1_pearson'], 3)})",
              f"- N2 suffix perturbations keep the memorized output more often than prefix ones: "
              f"**{f['N2_suffix_kept_more_than_prefix']}**; start perturbations least: **{f['N2_start_kept_least']}**",
              f"- N3 the recovery symbol gives new outputs for most memorized sources: "
              f"**{f['N3_recovery_for_most_memorized']}** (`{f['N3_best_symbol']}`: "
              f"{_fmt(None if f['N3_best_rate'] is None else 100 * f['N3_best_rate'], 1, True)})", "",
              "## Examples (memorized)", "", "| Source | Reference (memorized output) | Prefix | Ratio |", "|---|---|---|---|"]
    for ex in summary["examples"]:
        lines.append(f"| {ex['source']} | {ex['reference']} | {ex['prefix']} | {_fmt(ex['prefix_ratio'])} |")
    lines += ["", f"Provenance: git {summary['provenance'].get('git_commit')}, seed {summary['provenance'].get('seed')}, "
              f"datasets {summary['provenance'].get('datasets')}."]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- fine-tuning (Sec. 6)
def run_finetune(ctx_base: StageContext, model_dir: Path, recovered: list[dict], train_rows: list[dict],
                 ft: FinetuneSettings, train_settings: Seq2SeqSettings, seed: int, log) -> Path:
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


# ----------------------------------------------------------------------------- main
def run_nmt(cfg, log=print) -> dict:
    import torch

    s = settings_from_cfg(cfg)
    run_dir = Path(cfg.run_dir)
    seed = int(cfg.seed)
    device = resolve_device(str(cfg.device))
    out = run_dir / "nmt"
    previous_threads = torch.get_num_threads()
    if s.torch_threads > 0:
        # Tiny models gain little from intra-op threads and lose a lot when the cores are shared.
        torch.set_num_threads(s.torch_threads)
    try:
        return _run(cfg, s, run_dir, out, seed, device, log)
    finally:
        torch.set_num_threads(previous_threads)


def _run(cfg, s: NmtSettings, run_dir: Path, out: Path, seed: int, device: str, log) -> dict:
    from harness.generation import load_seq2seq

    timings: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name] = round(now - clock[0], 2)
        clock[0] = now

    data_dir, rows = prepare_data(run_dir, s, seed)
    manifest = read_json(data_dir / "manifest.json")
    log(f"[nmt] data: {len(rows)} training rows from {data_dir}")
    train_settings = _strict(Seq2SeqSettings, s.train, "nmt.train")
    ctx = StageContext(run_dir=run_dir, name=MODEL_NAME, seed=seed, device=device)
    model_path = s.model_dir or _seq2seq_pretrained(cfg)
    if model_path:
        model_dir = Path(model_path)
        if not model_dir.is_dir():
            raise UserError(f"nmt.model_dir={model_dir}: not a directory; point it at a Marian/T5/BART "
                            "checkpoint directory or leave it null to train the embedded default")
    else:
        model_dir = train_seq2seq(ctx, rows, train_settings, dataset=DATASET, log=log)
    model, tokenizer = load_seq2seq(model_dir, device)
    translate = nmt.hf_translator(model, tokenizer, max_new_tokens=s.max_new_tokens, batch_size=s.batch_size)

    analysis = {k: v for k, v in asdict(s).items() if k not in ("train", "finetune", "torch_threads", "batch_size")}
    cache = StepCache(out, {"version": PIPELINE_VERSION, "model": model_fingerprint(model_dir),
                            "dataset": manifest["sha256"], "settings": analysis})
    # Keyed by what decides an output (weights + greedy length cap), not by the analysis settings.
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
        f"{[b['ratio_pct'] for b in buckets['buckets']]}")

    alg2 = cache.load("algorithm2")
    if alg2 is None:
        log(f"[nmt] Algorithm 2 on {len(memorized)} memorized sources ({substitutes_note(s)[:40]})")
        substitutes = make_substitutes(s, rows, device)
        alg2 = cache.save("algorithm2", nmt.neighbourhood_effect(translate, memorized, substitutes,
                                                                 k=s.neighbourhood_k, approx_ned=s.approx_ned))
    lap("algorithm2_s")
    atomic_write_jsonl(out / "perturbations.jsonl", alg2["perturbations"])
    reps_by_index = {r["index"]: r["repetitions"] for r in alg1}
    per_bucket = per_bucket_neighbourhood(alg2["perturbations"], reps_by_index)

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
        "Memorized outputs": output_quality([m["output"] for m in memorized], [rule_by_index[m["index"]] for m in memorized]),
        "Non-memorized (Algorithm 3) outputs": output_quality(
            [f["recovered_output"] for f in alg3["F"]], [rule_by_index[f["index"]] for f in alg3["F"]]),
    }

    # Model quality on unseen rule-translated pairs (synthetic corpus only): memorization of noisy pairs
    # is only meaningful next to a model that has learned the regular translation.
    heldout = cache.load("heldout")
    if heldout is None and not s.data and s.heldout_size > 0:
        test = heldout_pairs(s.heldout_size, seed, {r["source"] for r in rows},
                             _strict(ParallelSettings, s.corpus, "nmt.corpus"))
        heldout = cache.save("heldout", {"pairs": len(test), "exact_match_pct": exact_match_pct(translate, test)})

    finetune = _maybe_finetune(ctx, s, model_dir, alg3, rows, memorized, train_settings, seed, device,
                               translate, cache, log)
    lap("finetune_s")
    neighbourhood = {k: v for k, v in alg2.items() if k != "perturbations"}
    # In the configured order (a cached step comes back with sorted keys).
    recovery = {"per_symbol": {sym: {k: v for k, v in alg3["per_symbol"][sym].items() if k != "rows"}
                               for sym in s.recovery_symbols},
                "best_symbol": alg3["best_symbol"], "best_rate": alg3["best_rate"],
                "any_symbol_rate": alg3["any_symbol_rate"], "F_size": len(alg3["F"])}
    kinds = memorized_by_kind(alg1)
    summary = {
        "experiment_name": cfg.experiment_name, "model_dir": str(model_dir), "dataset": str(data_dir),
        "training_rows": len(rows), "unique_pairs": len(alg1), "settings": analysis,
        "m1_size": sum(r["in_m1"] for r in alg1), "memorized": len(memorized),
        "memorized_by_kind": kinds, "heldout": heldout, "buckets": buckets, "neighbourhood": neighbourhood,
        "neighbourhood_per_bucket": per_bucket, "substitutes": substitutes_note(s), "recovery": recovery,
        "quality": quality, "finetune": finetune, "findings": findings(buckets, neighbourhood, recovery),
        "examples": [{k: m[k] for k in ("source", "reference", "prefix", "prefix_ratio")} for m in memorized[:8]],
        "timings": timings,  # wall seconds of this invocation (cached steps take ~0)
        "provenance": provenance(seed=seed, datasets={DATASET: manifest["sha256"]}, model_dir=str(model_dir),
                                 model_sha256=cache.base["model"], stage="nmt"),
    }
    render_figure(out / "memorization_by_repetition.png", buckets, per_bucket,
                  noisy_share_by_bucket(alg1) if kinds else None)
    atomic_write_text(out / "report.md", render_report(summary))
    atomic_write_json(out / "summary.json", summary)  # written last: a summary means a finished run
    log(f"[nmt] wrote {out / 'summary.json'} and {out / 'report.md'}")
    return summary


def _maybe_finetune(ctx, s, model_dir, alg3, rows, memorized, train_settings, seed, device, translate, cache, log):
    ft = _strict(FinetuneSettings, s.finetune, "nmt.finetune")
    if not ft.enabled:
        return {"enabled": False}
    cached = cache.load("finetune", asdict(ft) | {"train": asdict(train_settings)})
    if cached is not None:
        return cached
    if not alg3["F"]:
        return {"enabled": True, "skipped": "the recovered corpus F is empty"}
    from harness.generation import load_seq2seq

    heldout = heldout_pairs(s.heldout_size, seed, {r["source"] for r in rows},
                            _strict(ParallelSettings, s.corpus, "nmt.corpus")) if not s.data else []
    rule_by_source = {m["source"]: m.get("rule_translation") for m in memorized}

    def measure(tr) -> dict:
        outs = nmt.translate_unique(tr, [m["source"] for m in memorized])
        still = nmt.extractive_memorization(tr, [m["source"] for m in memorized], [m["reference"] for m in memorized],
                                            prefix_ratio=s.prefix_ratio, unit=s.unit, approx_ned=s.approx_ned)
        return {"heldout_exact_pct": exact_match_pct(tr, heldout),
                "memorized_rule_match_pct": output_quality(outs, [rule_by_source[m["source"]] for m in memorized])[
                    "rule_match_pct"],
                "still_memorized": len(still)}

    log(f"[nmt] Sec. 6: fine-tuning on |F| = {len(alg3['F'])} + {ft.sample_size} training pairs")
    ft_dir = run_finetune(ctx, model_dir, alg3["F"], rows, ft, train_settings, seed, log)
    ft_model, ft_tok = load_seq2seq(ft_dir, device)
    result = {"enabled": True, "F_size": len(alg3["F"]), "sample_size": ft.sample_size, "model_dir": str(ft_dir),
              "base": measure(translate),
              "finetuned": measure(nmt.hf_translator(ft_model, ft_tok, s.max_new_tokens, s.batch_size))}
    return cache.save("finetune", result, asdict(ft) | {"train": asdict(train_settings)})


def _seq2seq_pretrained(cfg) -> str | None:
    """`model.pretrained=<dir>` also selects the translation model when that directory holds an
    encoder-decoder checkpoint (so `memaudit nmt ... model.pretrained=/ckpt/opus-mt-en-de` works);
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


def main(cfg) -> int:
    run_nmt(cfg)
    return 0
