"""The formal-language study's data (paper 004 Sec. 3-4, App. E): for each language and seed, one file of every
string the study trains on or scores (harness/core/formal_study.py says where and which models read what).

- D: i.i.d. strings of L (`sample`), natural repetition kept: a low-entropy language repeats its likely strings.
  The size variants are prefixes of one sample stream (64 of the 256, 256 of the 1024): a larger D adds strings
  and keeps the smaller one's, so Fig. 6's comparison changes one thing.
- dedup: D's distinct strings, each once (Sec. 4, Fig. 5).
- sec3: D' plus s0, s1, s2 repeated `sec3_counts` times; they are strings of L drawn outside D and the test sample
  (Sec. 3: "the multiset D' is sampled from language L without including s_i"). One model holds all three (the
  paper trains one per s_i; docs/methods.md); the base model (trained on D') is their control.
- test: i.i.d. strings of L outside every training set of the seed (App. E evaluates on 1024 test strings).
- folds: each variant's distinct strings, shuffled by seed, dealt into `folds` disjoint folds; test strings are
  dealt the same way (the null of the counterfactual and contextual measures: strings no model trained on).

Each string carries its exact -log P_L(s) (synthetic_data/grammars.py), so the analysis can say how close a model's
test loss comes to the language's own entropy.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from memlens.harness.core.formal_study import (
    BASE,
    DEDUP,
    LANGUAGE_FILE,
    SEC3,
    SEC3_NAMES,
    STRINGS_FILE,
    FormalSettings,
    language_data_dir,
    variant_size,
)
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256, read_json
from memlens.synthetic_data.common import seeded_rng
from memlens.synthetic_data.grammars import Grammar, entropy_per_token, load_grammar, log_prob, predicted_tokens, sample

DATA_VERSION = 1
MAX_DRAWS_PER_STRING = 1000      # a language too small to yield distinct strings outside D stops with a message


def data_settings(settings: FormalSettings, language: str, seed: int) -> dict:
    """What decides a language's data files: rebuilt when any of it changes."""
    return {"version": DATA_VERSION, "language": language, "seed": int(seed),
            "variants": settings.variants(language), "train_size": settings.train_size,
            "sizes": sorted(int(n) for n in settings.sizes), "test_size": settings.test_size,
            "folds": settings.folds, "sec3_counts": list(settings.sec3_counts),
            "entropy_samples": settings.entropy_samples}


def build_language(run_dir: str | Path, settings: FormalSettings, language: str, seed: int) -> Path:
    """Write (or keep, when its settings match) <run_dir>/formal/data/<language>/seed<k>/; returns the folder."""
    out = language_data_dir(run_dir, language, seed)
    wanted = data_settings(settings, language, seed)
    meta_path = out / LANGUAGE_FILE
    if meta_path.is_file() and (out / STRINGS_FILE).is_file() and read_json(meta_path).get("settings") == wanted:
        return out
    grammar = load_grammar(language)
    rows = language_rows(grammar, settings, language, seed)
    atomic_write_jsonl(out / STRINGS_FILE, rows)
    meta = {"settings": wanted, "grammar": language, "terminals": list(grammar.terminals),
            "entropy": entropy_per_token(grammar, settings.entropy_samples, seed),
            "strings_sha256": file_sha256(out / STRINGS_FILE), "n_strings": len(rows)}
    atomic_write_json(meta_path, meta)         # written last: the folder is finished
    return out


def language_rows(grammar: Grammar, settings: FormalSettings, language: str, seed: int) -> list[dict]:
    """Every string of one language and seed with its counts per variant, folds, test and Sec. 3 flags."""
    variants = settings.variants(language)
    longest = max(variant_size(v, settings) for v in variants)
    rng = seeded_rng("formal", language, seed, "train")
    stream = [sample(grammar, rng) for _ in range(longest)]
    counts: dict[str, Counter] = {}
    for variant in variants:
        if variant in (BASE, DEDUP, SEC3):
            base = Counter(stream[:settings.train_size])
            counts[variant] = Counter(dict.fromkeys(base, 1)) if variant == DEDUP else base
        else:
            counts[variant] = Counter(stream[:variant_size(variant, settings)])
    taken = set(stream)
    test = Counter(_draw_outside(grammar, seeded_rng("formal", language, seed, "test"), taken,
                                 settings.test_size, distinct=False))
    sec3 = {}
    if SEC3 in variants:
        drawn = _draw_outside(grammar, seeded_rng("formal", language, seed, "sec3"), taken | set(test), 3,
                              distinct=True)
        sec3 = dict(zip(drawn, SEC3_NAMES))
        for s, count in zip(drawn, settings.sec3_counts):
            counts[SEC3][s] = int(count)
    order = list(dict.fromkeys([*stream, *test, *sec3]))
    folds = {v: _deal_folds(list(counts[v]), settings.folds, language, seed, v) for v in variants if v != SEC3}
    test_folds = {s: i % settings.folds for i, s in enumerate(dict.fromkeys(test))}
    rows = []
    for index, s in enumerate(order):
        rows.append({
            "id": f"{language}-{seed}-{index:05d}", "text": " ".join(s), "neglogp": -log_prob(grammar, s),
            "predicted_tokens": predicted_tokens(s),
            "count": {v: counts[v][s] for v in variants if counts[v][s]},
            "fold": {v: f[s] for v, f in folds.items() if s in f},
            "test": test.get(s, 0), "test_fold": test_folds.get(s), "sec3": sec3.get(s),
        })
    return rows


def _draw_outside(grammar: Grammar, rng, taken: set, n: int, distinct: bool) -> list[tuple[str, ...]]:
    """n strings of L outside `taken` (and, if `distinct`, different from each other)."""
    out: list[tuple[str, ...]] = []
    for _ in range(n * MAX_DRAWS_PER_STRING):
        if len(out) == n:
            return out
        s = sample(grammar, rng)
        if s not in taken and not (distinct and s in out):
            out.append(s)
    raise ValueError(f"{grammar.name}: fewer than {n} strings outside the training sets after "
                     f"{n * MAX_DRAWS_PER_STRING} draws; lower formal.train_size or formal.sizes")


def _deal_folds(strings: list, folds: int, language: str, seed: int, variant: str) -> dict:
    """Distinct strings shuffled by seed and dealt round-robin into disjoint folds (sizes differ by at most one)."""
    order = list(strings)
    seeded_rng("formal", language, seed, variant, "folds").shuffle(order)
    return {s: i % folds for i, s in enumerate(order)}


def build_all(run_dir: str | Path, settings: FormalSettings) -> list[Path]:
    """Every language and seed of the study; an unknown or unshipped grammar stops it before anything is written."""
    for language in settings.languages:
        load_grammar(language)
    return [build_language(run_dir, settings, lang, seed) for lang in settings.languages for seed in settings.seeds]
