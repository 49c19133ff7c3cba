"""The synthetic parallel corpus: rule translation by hand, known repetitions/noise, manifest, user corpora."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import file_sha256, read_json, read_jsonl
from memlens.synthetic_data.parallel import (
    NounPhrase,
    ParallelSettings,
    Sentence,
    Title,
    build_parallel,
    generate_pairs,
    heldout_pairs,
    import_parallel,
    load_parallel,
    rule_translate_words,
    title_items,
)


def test_rule_translation_is_verb_final_with_agreement():
    s = Sentence(subject=NounPhrase("the", "big", "dog", plural=True), verb="see",
                 obj=NounPhrase("a", None, "cat", plural=False), pp=("in", NounPhrase("the", None, "garden", False)),
                 punct=".")
    assert " ".join(s.en()) == "the big dogs see a cat in the garden ."
    assert " ".join(s.de()) == "de grosen hunden en kats im de gartn sihen ."
    singular = Sentence(NounPhrase("this", None, "child", False), "carry", NounPhrase("the", None, "book", True),
                        None, "?")
    assert " ".join(singular.en()) == "this child carries the books ?"
    assert " ".join(singular.de()) == "dis kint de buken tragt ?"
    title = Title([("spanish", "course", True)])
    assert " ".join(rule_translate_words(singular, title, "!")) == "! dis kint de buken tragt ? spanischen kursen"


SMALL = ParallelSettings(pairs_per_bucket=[20, 10, 10, 10, 10], noisy_share=0.2)


def test_title_is_at_least_a_third_of_the_sentence():
    assert [title_items(n) for n in (5, 6, 7, 12, 13)] == [1, 1, 2, 2, 3]


def test_buckets_repetitions_and_noise_are_as_constructed():
    rows = generate_pairs(SMALL, seed=3)
    by_pair = Counter(r["pair_id"] for r in rows)
    reps = {r["pair_id"]: r["repetition"] for r in rows}
    assert all(by_pair[p] == reps[p] for p in by_pair)                 # a pair occurs `repetition` times
    assert Counter(reps.values()) == {1: 20, 2: 10, 3: 10, 4: 10, 5: 10}
    assert len(rows) == 20 + 20 + 30 + 40 + 50
    uniques = {r["pair_id"]: r for r in rows}.values()
    noisy_per_bucket = Counter(r["repetition"] for r in uniques if r["kind"] == "noisy")
    assert noisy_per_bucket == {1: 4, 2: 2, 3: 2, 4: 2, 5: 2}           # the same share in every bucket
    for r in uniques:
        if r["kind"] == "noisy":
            # The reference drops the trailing title of the source (>= 1/3 of the sentence, 2 words per
            # item), so the sentence alone is at most 3/4 of the source.
            n_ref, n_src = len(r["reference"].split()), len(r["source"].split())
            assert r["rule_translation"].startswith(r["reference"] + " ")
            assert (n_src - n_ref) % 2 == 0 and n_src - n_ref >= n_ref / 3 and n_ref / n_src <= 0.75
        else:
            assert r["reference"] == r["rule_translation"]
    assert len({r["source"] for r in uniques}) == len(uniques)          # no source in two pairs
    assert generate_pairs(SMALL, seed=3) == rows and generate_pairs(SMALL, seed=4) != rows


def test_build_writes_rows_and_manifest_and_skips_when_unchanged(tmp_path):
    out = build_parallel(tmp_path / "parallel", SMALL, seed=1)
    manifest = read_json(out / "manifest.json")
    assert manifest["count"] == len(read_jsonl(out / "rows.jsonl")) == 160
    assert manifest["sha256"] == file_sha256(out / "rows.jsonl")
    assert manifest["seed"] == 1 and manifest["generator_version"] and manifest["settings"]["noisy_share"] == 0.2
    mtime = (out / "rows.jsonl").stat().st_mtime_ns
    build_parallel(tmp_path / "parallel", SMALL, seed=1)
    assert (out / "rows.jsonl").stat().st_mtime_ns == mtime


def test_heldout_pairs_avoid_training_sources():
    rows = generate_pairs(SMALL, seed=0)
    test = heldout_pairs(30, seed=0, exclude_sources={r["source"] for r in rows})
    assert len(test) == 30 and not {t["source"] for t in test} & {r["source"] for r in rows}
    assert all(t["reference"] == t["rule_translation"] for t in test)


def test_settings_validation_names_the_key():
    with pytest.raises(UserError, match="noisy_share"):
        ParallelSettings(noisy_share=1.5)
    with pytest.raises(UserError, match="pairs_per_bucket"):
        ParallelSettings(pairs_per_bucket=[1, 2])


def test_user_corpora_tsv_and_jsonl(tmp_path):
    tsv = tmp_path / "c.tsv"
    tsv.write_text("Why study in Peru?\tWarum in Peru studieren?\n\nHello\tHallo\n", encoding="utf-8")
    rows = load_parallel(tsv)
    assert [(r["source"], r["reference"]) for r in rows] == [("Why study in Peru?", "Warum in Peru studieren?"),
                                                             ("Hello", "Hallo")]
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"source": "a", "reference": "b", "id": 7}) + "\n", encoding="utf-8")
    assert load_parallel(jl)[0]["id"] == "7"
    out = import_parallel(tsv, tmp_path / "data" / "parallel")
    assert read_json(out / "manifest.json")["count"] == 2


def test_user_corpus_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("ok\tfine\nno tab here\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.tsv:2: expected 'source<TAB>reference'"):
        load_parallel(bad)
    badjl = tmp_path / "bad.jsonl"
    badjl.write_text('{"source": "a"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.jsonl:1: missing field\(s\) reference"):
        load_parallel(badjl)
    with pytest.raises(UserError, match="file not found"):
        load_parallel(tmp_path / "nope.tsv")
    with pytest.raises(UserError, match="unknown extension"):
        (tmp_path / "c.csv").write_text("a,b\n")
        load_parallel(tmp_path / "c.csv")
