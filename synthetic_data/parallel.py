"""A parallel corpus whose memorization behaviour is known by construction (Finding Memo, paper 002).

Most pairs translate English into a toy verb-final "Germanic" language by rule: a fixed dictionary,
SOV reordering (the verb moves to the end of its clause), noun plurals, adjective and verb agreement.
A model that learns the rule translates these pairs by generalization; a prefix of such a source
translates to a *different* output (the verb and everything after the cut are missing), so Algorithm 1
does not flag them.

A share of the pairs is noisy in the way of web-crawled boilerplate (paper 002 Sec. 3, Table 2, "Why
study in Peru? Spanish Courses -> Warum in Peru studieren?"): the source is a sentence followed by a
title-like phrase (at least a third of the sentence's length), and the reference translates the
sentence only. Regular pairs of the very same
shape translate the title too, so the only way to reproduce a noisy reference from its full source is
to have memorized that pair - and then its prefix (the sentence) reproduces the reference with a
prefix ratio <= 0.75. Every unique pair is repeated 1-5 times (paper Table 1 buckets); each bucket holds
the same share of noisy pairs, so any rise of memorization with repetitions comes from the model, not
from the bucket composition.

A share of regular pairs starts with an isolated symbol ("!", "*", "-") that is copied to the target,
so the model can learn to translate it in isolation, as Algorithm 3 needs (paper Sec. 5).

Rows: `id, source, reference, repetition, kind (regular|noisy), rule_translation, pair_id`; every
repetition is its own row (the training data), `pair_id` names the unique pair.
`load_parallel(path)` reads a user's TSV (source<TAB>reference) or JSONL (`source`, `reference`)
corpus into the same row shape, with errors that name the file and line.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256, iter_jsonl, read_json

GENERATOR_VERSION = "parallel-2"

# English lemma -> toy-language stem. Nouns: (singular, plural) in English.
NOUNS = {
    "dog": "hund", "cat": "kats", "house": "haus", "car": "wagn", "tree": "baum", "child": "kint",
    "teacher": "lerar", "farmer": "bauer", "student": "studor", "city": "stadt", "river": "flus",
    "garden": "gartn", "book": "buk", "letter": "brif", "friend": "frund", "bird": "fogel",
    "horse": "pferd", "doctor": "doktor", "king": "konig", "queen": "konigin", "boat": "bot",
    "apple": "apfel", "table": "tisch", "window": "fenstr", "door": "tur", "road": "strass",
    "village": "dorf", "painter": "malr", "baker": "backr", "fish": "fisk", "flower": "blum",
    "mountain": "berg", "school": "skul", "bridge": "bruck", "song": "lid", "cake": "kuchn",
    "shop": "ladn", "course": "kurs", "office": "buro", "market": "markt",
}
PLURAL_EN = {"child": "children", "fish": "fish", "city": "cities", "library": "libraries"}
# English verb (base form) -> toy stem; 3rd person singular -"t", plural -"en".
VERBS = {
    "see": "sih", "like": "mag", "find": "find", "buy": "kauf", "read": "les", "build": "bau",
    "paint": "mal", "help": "hilf", "visit": "besuch", "follow": "folg", "carry": "trag",
    "wash": "wask", "sell": "verkauf", "write": "schrib", "open": "offn", "clean": "putz",
    "draw": "zeichn", "hear": "hor", "love": "lib", "watch": "betracht",
}
THIRD_SG_EN = {"carry": "carries", "wash": "washes", "watch": "watches"}
ADJECTIVES = {
    "big": "gros", "small": "klein", "old": "alt", "young": "jung", "red": "rot", "green": "grun",
    "happy": "froh", "quiet": "still", "fast": "snel", "new": "nu", "dark": "dunkl", "warm": "warm",
    "spanish": "spanisch", "short": "kurz", "cheap": "billig", "free": "frei",
}
PREPOSITIONS = {"in": "im", "near": "bei", "behind": "hintr", "under": "untr", "with": "mit",
                "from": "von", "on": "auf", "for": "fur"}
DETERMINERS = {"the": "de", "a": "en", "every": "jed", "this": "dis"}
SYMBOLS = ("!", "*", "-")
PUNCT = (".", "?", "!")


def noun_en(lemma: str, plural: bool) -> str:
    if not plural:
        return lemma
    return PLURAL_EN.get(lemma, lemma + "s")


def noun_de(lemma: str, plural: bool) -> str:
    return NOUNS[lemma] + ("en" if plural else "")


def verb_en(lemma: str, plural_subject: bool) -> str:
    return lemma if plural_subject else THIRD_SG_EN.get(lemma, lemma + "s")


def verb_de(lemma: str, plural_subject: bool) -> str:
    return VERBS[lemma] + ("en" if plural_subject else "t")


def adjective_de(lemma: str, plural: bool) -> str:
    return ADJECTIVES[lemma] + ("en" if plural else "e")


@dataclass
class NounPhrase:
    det: str
    adj: str | None
    noun: str
    plural: bool

    def en(self) -> list[str]:
        det = "the" if self.plural and self.det in ("a", "every") else self.det
        det = "these" if self.plural and det == "this" else det
        return [det] + ([self.adj] if self.adj else []) + [noun_en(self.noun, self.plural)]

    def de(self) -> list[str]:
        det = "de" if self.plural and self.det in ("a", "every") else DETERMINERS[self.det]
        det = det + ("e" if self.plural and self.det == "this" else "")
        return [det] + ([adjective_de(self.adj, self.plural)] if self.adj else []) + \
            [noun_de(self.noun, self.plural)]


@dataclass
class Sentence:
    """subject verb object [preposition noun-phrase] punctuation; the toy language is verb-final."""

    subject: NounPhrase
    verb: str
    obj: NounPhrase
    pp: tuple[str, NounPhrase] | None
    punct: str

    def en(self) -> list[str]:
        words = self.subject.en() + [verb_en(self.verb, self.subject.plural)] + self.obj.en()
        if self.pp:
            words += [self.pp[0]] + self.pp[1].en()
        return words + [self.punct]

    def de(self) -> list[str]:
        # SOV: the finite verb goes to the end of the clause, after object and prepositional phrase.
        words = self.subject.de() + self.obj.de()
        if self.pp:
            words += [PREPOSITIONS[self.pp[0]]] + self.pp[1].de()
        return words + [verb_de(self.verb, self.subject.plural), self.punct]


@dataclass
class Title:
    """A title-like phrase without a verb ("spanish courses"), like Wiki Titles or crawl boilerplate.

    One or more adjective-noun items; see `title_items` for how many.
    """

    items: list[tuple[str, str, bool]]   # (adjective, noun, plural)

    def en(self) -> list[str]:
        return [w for adj, noun, plural in self.items for w in (adj, noun_en(noun, plural))]

    def de(self) -> list[str]:
        return [w for adj, noun, plural in self.items for w in (adjective_de(adj, plural), noun_de(noun, plural))]


def title_items(sentence_len: int) -> int:
    """Items (2 words each) so that the title is >= 1/3 of the sentence: the sentence alone is then
    <= 3/4 of the source, so a memorized noisy pair is caught by Algorithm 1 at p = 0.75 whatever its
    length (otherwise sentence length, not memorization, would decide what gets flagged)."""
    return max(1, math.ceil(sentence_len / 6))


@dataclass
class ParallelSettings:
    """Knobs of the synthetic corpus (recorded in the manifest)."""

    # unique pairs per repetition bucket 1..5 (paper Table 1 buckets); more pairs -> longer training
    pairs_per_bucket: list[int] = field(default_factory=lambda: [600, 120, 120, 120, 120])
    noisy_share: float = 0.15          # share of unique pairs per bucket whose reference drops the title
    titled_share: float = 0.15         # share of regular pairs that carry (and translate) a title
    symbol_share: float = 0.20         # share of regular pairs starting with an isolated symbol
    adjective_prob: float = 0.3        # more adjectives -> longer, more varied sentences
    pp_prob: float = 0.4               # more prepositional phrases -> longer sentences

    def __post_init__(self):
        if len(self.pairs_per_bucket) != 5 or any(int(n) < 0 for n in self.pairs_per_bucket):
            raise UserError("nmt.corpus.pairs_per_bucket: give 5 non-negative counts (repetitions 1..5)")
        for name in ("noisy_share", "titled_share", "symbol_share", "adjective_prob", "pp_prob"):
            value = float(getattr(self, name))
            if not 0.0 <= value <= 1.0:
                raise UserError(f"nmt.corpus.{name}={value}: must be between 0 and 1")
        self.pairs_per_bucket = [int(n) for n in self.pairs_per_bucket]


def _noun_phrase(rng: random.Random, settings: ParallelSettings) -> NounPhrase:
    adj = rng.choice(sorted(ADJECTIVES)) if rng.random() < settings.adjective_prob else None
    return NounPhrase(det=rng.choice(sorted(DETERMINERS)), adj=adj, noun=rng.choice(sorted(NOUNS)),
                      plural=rng.random() < 0.35)


def random_sentence(rng: random.Random, settings: ParallelSettings) -> Sentence:
    pp = None
    if rng.random() < settings.pp_prob:
        pp = (rng.choice(sorted(PREPOSITIONS)), _noun_phrase(rng, settings))
    return Sentence(subject=_noun_phrase(rng, settings), verb=rng.choice(sorted(VERBS)),
                    obj=_noun_phrase(rng, settings), pp=pp, punct=rng.choice(PUNCT))


def random_title(rng: random.Random, sentence_len: int) -> Title:
    return Title([(rng.choice(sorted(ADJECTIVES)), rng.choice(sorted(NOUNS)), rng.random() < 0.6)
                  for _ in range(title_items(sentence_len))])


def rule_translate_words(sentence: Sentence, title: Title | None, symbol: str | None) -> list[str]:
    words = ([symbol] if symbol else []) + sentence.de()
    return words + (title.de() if title else [])


def make_pair(rng: random.Random, settings: ParallelSettings, kind: str) -> dict:
    """One unique pair. kind: 'regular' (rule translation of everything) or 'noisy' (title dropped)."""
    sentence = random_sentence(rng, settings)
    titled = kind == "noisy" or rng.random() < settings.titled_share
    title = random_title(rng, len(sentence.en())) if titled else None
    symbol = rng.choice(SYMBOLS) if kind == "regular" and rng.random() < settings.symbol_share else None
    source = ([symbol] if symbol else []) + sentence.en() + (title.en() if title else [])
    rule = rule_translate_words(sentence, title, symbol)
    # Noisy (boilerplate-like) pair: the reference ignores the trailing title (paper Table 2).
    reference = rule if kind == "regular" else rule_translate_words(sentence, None, None)
    return {"source": " ".join(source), "reference": " ".join(reference),
            "rule_translation": " ".join(rule), "kind": kind}


def generate_pairs(settings: ParallelSettings, seed: int) -> list[dict]:
    """All training rows: each unique pair repeated `repetition` times, shuffled (seeded)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    uniques: list[dict] = []
    for repetition, count in enumerate(settings.pairs_per_bucket, start=1):
        n_noisy = round(count * settings.noisy_share)
        kinds = ["noisy"] * n_noisy + ["regular"] * (count - n_noisy)
        for kind in kinds:
            for _ in range(1000):  # a source appears in one pair only, so repetition counts are exact
                pair = make_pair(rng, settings, kind)
                if pair["source"] not in seen:
                    break
            else:
                raise UserError("nmt.corpus: could not draw enough distinct sources; lower pairs_per_bucket")
            seen.add(pair["source"])
            pair["repetition"] = repetition
            pair["pair_id"] = f"p{len(uniques):06d}"
            uniques.append(pair)
    rows = [dict(pair) for pair in uniques for _ in range(pair["repetition"])]
    rng.shuffle(rows)
    for i, row in enumerate(rows):
        row["id"] = f"par-{i:06d}"
    return rows


def build_parallel(out_dir: str | Path, settings: ParallelSettings | None = None, seed: int = 0) -> Path:
    """Write rows.jsonl + manifest.json into out_dir (atomically); skip when built with the same settings."""
    settings = settings or ParallelSettings()
    out_dir = Path(out_dir)
    manifest_path = out_dir / "manifest.json"
    wanted = {"seed": seed, "generator_version": GENERATOR_VERSION, "settings": asdict(settings)}
    if manifest_path.is_file():
        manifest = read_json(manifest_path)
        if all(manifest.get(k) == v for k, v in wanted.items()) and (out_dir / "rows.jsonl").is_file() \
                and file_sha256(out_dir / "rows.jsonl") == manifest.get("sha256"):
            return out_dir
    rows = generate_pairs(settings, seed)
    atomic_write_jsonl(out_dir / "rows.jsonl", rows)
    manifest = {"name": out_dir.name, "count": len(rows), "sha256": file_sha256(out_dir / "rows.jsonl"),
                "unique_pairs": len({r["pair_id"] for r in rows}), **wanted}
    atomic_write_json(manifest_path, manifest)  # written last: a manifest means a finished dataset
    return out_dir


def load_parallel(path: str | Path) -> list[dict]:
    """Read a user's parallel corpus: TSV (`source<TAB>reference` per line) or JSONL (`source`, `reference`).

    Returns rows `id, source, reference` (JSONL rows keep their other fields). Errors name file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"nmt.data={path}: file not found; give a .tsv (source<TAB>reference) or "
                        ".jsonl (fields source, reference) parallel corpus")
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for i, row in enumerate(iter_jsonl(path, required=("source", "reference"))):
            if not isinstance(row["source"], str) or not isinstance(row["reference"], str):
                raise UserError(f"{path}:{i + 1}: fields source and reference must be strings")
            rows.append({**row, "id": str(row.get("id", f"row-{i:07d}"))})
        if not rows:
            raise UserError(f"{path}: no rows")
        return rows
    if path.suffix not in (".tsv", ".txt"):
        raise UserError(f"nmt.data={path}: unknown extension {path.suffix!r}; use .tsv or .jsonl")
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise UserError(f"{path}:{lineno}: expected 'source<TAB>reference' (2 non-empty "
                                f"tab-separated fields), got {len(parts)} field(s)")
            rows.append({"id": f"row-{len(rows):07d}", "source": parts[0], "reference": parts[1]})
    if not rows:
        raise UserError(f"{path}: no rows")
    return rows


def import_parallel(path: str | Path, out_dir: str | Path) -> Path:
    """Copy a user corpus into `<run_dir>/data/<name>/` with a manifest (sha256 of the source file)."""
    rows = load_parallel(path)
    out_dir = Path(out_dir)
    source_hash = file_sha256(path)
    manifest_path = out_dir / "manifest.json"
    if manifest_path.is_file() and read_json(manifest_path).get("source_sha256") == source_hash:
        return out_dir
    atomic_write_jsonl(out_dir / "rows.jsonl", rows)
    atomic_write_json(manifest_path, {
        "name": out_dir.name, "count": len(rows), "sha256": file_sha256(out_dir / "rows.jsonl"),
        "seed": None, "generator_version": f"import:{GENERATOR_VERSION}",
        "settings": {"path": str(Path(path).resolve())}, "source_sha256": source_hash})
    return out_dir


def heldout_pairs(n: int, seed: int, exclude_sources: set[str], settings: ParallelSettings | None = None) -> list[dict]:
    """`n` regular pairs whose sources are not in the training data: the test set for model quality
    (the analogue of the paper's WMT20 test set in Table 5). Seeded apart from the training corpus."""
    settings = settings or ParallelSettings()
    rng = random.Random(f"heldout-{seed}")
    out: list[dict] = []
    seen = set(exclude_sources)
    for _ in range(100 * max(n, 1)):
        if len(out) >= n:
            break
        pair = make_pair(rng, settings, "regular")
        if pair["source"] not in seen:
            seen.add(pair["source"])
            out.append({**pair, "id": f"heldout-{len(out):05d}"})
    return out
