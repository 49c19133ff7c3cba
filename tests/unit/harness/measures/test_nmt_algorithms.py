"""Finding Memo algorithms 1-3 and the Table 1 buckets against lookup-table translators.

Every expected value is derivable by hand from the tables below (paper 002 Table 2 and Figure 1 are
used verbatim where they fit); property tests compare Algorithm 1 and Pearson with brute force.
"""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.core.errors import UserError
from memlens.harness.measures.nmt import (
    extractive_memorization,
    frequency_substitutes,
    neighbourhood_effect,
    pair_repetitions,
    pearson,
    perturbation_positions,
    recover_non_memorized,
    repetition_buckets,
    same_output,
    split_units,
    type_token_ratio,
)
from memlens.harness.text.distance import normalized_edit_distance


class TableTranslator:
    """Greedy 'model' given as a lookup table; unknown inputs get a distinct fallback translation.

    Records each call so tests can check that prefixes are batched across examples.
    """

    def __init__(self, table: dict[str, str]):
        self.table = table
        self.calls: list[list[str]] = []

    def __call__(self, sources: list[str]) -> list[str]:
        self.calls.append(list(sources))
        return [self.table.get(s, f"<<{s}>>") for s in sources]


# Paper 002 Table 2: a WMT20 training pair memorized with prefix ratio 4/6 = 0.67.
PERU_SRC = "Why study in Peru? Spanish Courses"
PERU_REF = "Warum in Peru studieren?"
PERU_TABLE = {
    PERU_SRC: PERU_REF,
    "Why study in Peru?": PERU_REF,            # the 4-word prefix already gives the reference
    "Why study in Peru? Spanish": PERU_REF,
    "Why": "Warum",
    "Why study": "Warum studieren",
    "Why study in": "Warum studieren in",
    # Table 2 neighbours: suffix perturbations keep the memorized output, prefix ones change it.
    "Why study in Peru? University Courses": PERU_REF,
    "Why study in Peru? Short Courses": PERU_REF,
    "Why study in Peru? Summer Courses": PERU_REF,
    "You study in Peru? Spanish Courses": "Sie studieren in Peru? Spanischkurse",
    "Advanced study in Peru? Spanish Courses": "Weiterbildung in Peru? Spanischkurse",
}


def test_table2_example_is_memorized_with_prefix_ratio_two_thirds():
    translate = TableTranslator(PERU_TABLE)
    [row] = extractive_memorization(translate, [PERU_SRC], [PERU_REF])
    assert row["index"] == 0
    assert row["prefix_len"] == 4 and row["source_len"] == 6
    assert row["prefix_ratio"] == pytest.approx(0.67, abs=0.005)
    assert row["prefix"] == "Why study in Peru?"


def test_threshold_decides_membership():
    translate = TableTranslator(PERU_TABLE)
    assert extractive_memorization(translate, [PERU_SRC], [PERU_REF], prefix_ratio=0.6) == []
    assert len(extractive_memorization(translate, [PERU_SRC], [PERU_REF], prefix_ratio=4 / 6)) == 1


def test_algorithm1_on_a_mixed_set_with_hand_checked_prefix_lengths():
    table = {
        # 0: memorized, l=2 of n=4 (0.5)
        "a b c d": "X", "a": "x1", "a b": "X",
        # 1: full translation matches, but only the 4-of-5 prefix does (0.8 > 0.75): not memorized
        "p q r s t": "Y", "p": "y1", "p q": "y2", "p q r": "y3", "p q r s": "Y",
        # 2: translation differs from the reference: not in M1 even though a prefix gives the reference
        "m n o p": "Z-model", "m": "Z",
        # 3: memorized, l=3 of n=4 (0.75, the boundary is inclusive)
        "u v w z": "W", "u": "w1", "u v": "w2", "u v w": "W",
    }
    translate = TableTranslator(table)
    details: list = []
    rows = extractive_memorization(translate, list(table_sources := ["a b c d", "p q r s t", "m n o p", "u v w z"]),
                                   ["X", "Y", "Z", "W"], details=details)
    assert [(r["index"], r["prefix_len"], r["source_len"]) for r in rows] == [(0, 2, 4), (3, 3, 4)]
    assert [d["in_m1"] for d in details] == [True, True, False, True]
    assert [d["prefix_len"] for d in details] == [2, None, None, 3]
    # Batched across examples: one call for the full sources, then one per prefix length round, and
    # no prefix longer than floor(0.75 * n) is ever translated ("p q r s" is 4 > floor(3.75)).
    assert translate.calls[0] == table_sources
    assert len(translate.calls) == 1 + 3
    assert translate.calls[1] == ["a", "p", "u"]
    assert "p q r s" not in {s for call in translate.calls for s in call}


def test_whitespace_is_normalized_before_comparison():
    translate = TableTranslator({"a  b c   d": "  X   y ", "a": "X y"})
    rows = extractive_memorization(translate, ["a  b c   d"], ["X y"])
    assert [(r["prefix_len"], r["source_len"]) for r in rows] == [(1, 4)]


def test_char_unit_for_cjk_sources():
    # Sec. 6: CJKT prefix lengths are counted in characters. 7 characters, the 4-character prefix suffices.
    src, ref = "我爱北京天安门", "I love Beijing"
    table = {src: ref, "我": "I", "我爱": "I love", "我爱北": "I love north", "我爱北京": ref}
    rows = extractive_memorization(TableTranslator(table), [src], [ref], unit="char")
    assert [(r["prefix_len"], r["source_len"], r["prefix"]) for r in rows] == [(4, 7, "我爱北京")]
    # Counted in whitespace words the source is one unit: no prefix shorter than the source exists.
    assert extractive_memorization(TableTranslator(table), [src], [ref], unit="word") == []


def test_approximate_variant_accepts_near_matches_only_when_enabled():
    near = "Warum in Peru studieren!"           # one substitution from the reference
    ned = normalized_edit_distance(near, PERU_REF)
    assert ned == pytest.approx(1 / 24)
    table = {PERU_SRC: PERU_REF, "Why study in Peru?": near, "Why study in Peru? Spanish": PERU_REF}
    exact = extractive_memorization(TableTranslator(table), [PERU_SRC], [PERU_REF])
    assert exact == []                       # exactly, only the 5-word prefix works: 5/6 = 0.83 > 0.75
    approx = extractive_memorization(TableTranslator(table), [PERU_SRC], [PERU_REF], approx_ned=0.05)
    assert [r["prefix_len"] for r in approx] == [4]
    assert extractive_memorization(TableTranslator(table), [PERU_SRC], [PERU_REF], approx_ned=0.01) == []
    assert same_output(near, PERU_REF, approx_ned=ned) and not same_output(near, PERU_REF)


def test_bad_arguments_raise_user_errors():
    with pytest.raises(UserError, match="unit"):
        extractive_memorization(TableTranslator({}), ["a"], ["b"], unit="syllable")
    with pytest.raises(UserError, match="prefix_ratio"):
        extractive_memorization(TableTranslator({}), ["a"], ["b"], prefix_ratio=0)
    with pytest.raises(UserError, match="references"):
        extractive_memorization(TableTranslator({}), ["a", "b"], ["b"])


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_algorithm1_matches_brute_force(data):
    """Against the literal algorithm: translate every prefix 1..n of every M1 source one at a time."""
    words = st.sampled_from(["a", "b", "c"])
    sources = data.draw(st.lists(st.lists(words, min_size=1, max_size=6).map(" ".join), min_size=1,
                                 max_size=6, unique=True))
    outputs = st.sampled_from(["R0", "R1", "R2"])
    all_prefixes = sorted({" ".join(s.split()[:k]) for s in sources for k in range(1, len(s.split()) + 1)})
    table = {p: data.draw(outputs) for p in all_prefixes}
    references = [data.draw(outputs) for _ in sources]
    p = data.draw(st.sampled_from([0.25, 0.5, 0.75, 1.0]))

    expected = []
    for i, (src, ref) in enumerate(zip(sources, references)):
        units = src.split()
        if table[src] != ref:
            continue
        smallest = min(k for k in range(1, len(units) + 1) if table[" ".join(units[:k])] == ref)
        if smallest / len(units) <= p:
            expected.append((i, smallest))
    got = extractive_memorization(TableTranslator(table), sources, references, prefix_ratio=p)
    assert [(r["index"], r["prefix_len"]) for r in got] == expected


# ----------------------------------------------------------------------------- Algorithm 2
def test_perturbation_positions_follow_algorithm2():
    assert perturbation_positions(4, 6) == {"prefix": [1, 2, 3], "suffix": [5, 6], "start": [1]}
    assert perturbation_positions(1, 3) == {"prefix": [], "suffix": [2, 3], "start": [1]}


PERU_SUBS = {1: ["You", "Advanced"], 2: ["go"], 3: ["to"], 5: ["University", "Short", "Summer"], 6: ["Courses"]}


def peru_substitutes(units, position):
    return PERU_SUBS.get(position, [])


def test_neighbourhood_effect_on_table2():
    [row] = extractive_memorization(TableTranslator(PERU_TABLE), [PERU_SRC], [PERU_REF])
    translate = TableTranslator(PERU_TABLE)
    result = neighbourhood_effect(translate, [row], peru_substitutes, k=5)
    # prefix positions 1..3: You, Advanced (changed), go, to (unknown -> changed): 0 of 4 kept.
    assert (result["prefix"]["kept"], result["prefix"]["perturbed"]) == (0, 4)
    # suffix positions 5, 6: University/Short/Summer keep the output; "Courses" equals the original
    # unit at position 6 and is skipped: 3 of 3 kept.
    assert (result["suffix"]["kept"], result["suffix"]["perturbed"]) == (3, 3)
    assert result["suffix"]["share"] == 1.0
    # start (position 1): You, Advanced: 0 of 2.
    assert (result["start"]["kept"], result["start"]["perturbed"]) == (0, 2)
    assert result["share"] == pytest.approx(3 / 9)
    assert len(translate.calls) == 1                     # all neighbours in one batched call
    assert len(translate.calls[0]) == 7                  # start duplicates prefix position 1: deduplicated


def test_neighbourhood_k_limits_substitutes_per_position():
    [row] = extractive_memorization(TableTranslator(PERU_TABLE), [PERU_SRC], [PERU_REF])
    result = neighbourhood_effect(TableTranslator(PERU_TABLE), [row], peru_substitutes, k=1)
    assert (result["prefix"]["perturbed"], result["suffix"]["perturbed"], result["start"]["perturbed"]) == (3, 1, 1)
    assert result["suffix"]["kept"] == 1 and result["start"]["kept"] == 0


def test_neighbourhood_with_no_perturbations_reports_none():
    row = {"index": 0, "source": "a", "reference": "X", "output": "X", "prefix_len": 1}
    result = neighbourhood_effect(TableTranslator({}), [row], lambda u, p: [], k=5)
    assert result["prefix"]["share"] is None and result["share"] is None


def test_frequency_substitutes_rank_by_bigram_then_unigram():
    corpus = ["the dog runs", "the cat runs", "the dog sleeps", "a bird sings"]
    subs = frequency_substitutes(corpus)
    # After "the": dog (2) then cat (1); then overall frequency: the(3), dog, runs(2), ... alphabetical ties.
    assert subs(["the", "dog", "runs"], 2)[:3] == ["dog", "cat", "the"]
    # Position 1 follows the sentence start: the (3), a (1).
    assert subs(["the", "dog", "runs"], 1)[:2] == ["the", "a"]


# ----------------------------------------------------------------------------- Algorithm 3
def test_recovery_symbol_on_figure1_and_hand_built_cases():
    memorized = [
        # Paper Figure 1: the memorized output drops "of Italy"; '!' recovers the full translation.
        {"index": 0, "source": "Victor Emmanuel II of Italy", "reference": "Viktor Emanuel II."},
        {"index": 1, "source": "s1", "reference": "M1"},
        {"index": 2, "source": "s2", "reference": "M2"},
    ]
    table = {
        "! Victor Emmanuel II of Italy": "! Viktor Emanuel II von Italien",
        "! s1": "!   M1",          # starts with '!' but is the memorized output again: not recovered
        "! s2": "N2",              # new output but the symbol is not kept: not recovered
        "* Victor Emmanuel II of Italy": "* Viktor Emanuel II.",
        "* s1": "* N1",
        "* s2": "* N2",
    }
    result = recover_non_memorized(TableTranslator(table), memorized, symbols=("!", "*"))
    bang, star = result["per_symbol"]["!"], result["per_symbol"]["*"]
    assert (bang["recovered"], bang["total"]) == (1, 3)
    assert bang["rows"][0]["recovered_output"] == "Viktor Emanuel II von Italien"
    assert (star["recovered"], star["rate"]) == (2, pytest.approx(2 / 3))
    assert result["best_symbol"] == "*" and result["best_rate"] == pytest.approx(2 / 3)
    assert result["any_symbol_rate"] == 1.0
    assert [(r["index"], r["recovered_output"]) for r in result["F"]] == [(1, "N1"), (2, "N2")]


def test_recovery_prefers_the_first_symbol_on_ties_and_rejects_empty_symbols():
    memorized = [{"index": 0, "source": "s", "reference": "M"}]
    result = recover_non_memorized(TableTranslator({"! s": "! N", "- s": "- N"}), memorized, symbols=("!", "-"))
    assert result["best_symbol"] == "!"
    with pytest.raises(UserError):
        recover_non_memorized(TableTranslator({}), memorized, symbols=())


# ----------------------------------------------------------------------------- Table 1 buckets
def test_repetition_buckets_and_pearson_on_a_hand_built_table():
    # bucket: (total, memorized) -> ratios 10, 20, 10, 40, 20 %; a pair repeated 6 times is left out.
    spec = {1: (10, 1), 2: (5, 1), 3: (10, 1), 4: (5, 2), 5: (5, 1), 6: (3, 3)}
    reps, flags = [], []
    for rep, (total, mem) in spec.items():
        reps += [rep] * total
        flags += [True] * mem + [False] * (total - mem)
    result = repetition_buckets(reps, flags)
    assert [(b["total"], b["memorized"], b["ratio_pct"]) for b in result["buckets"]] == [
        (10, 1, 10.0), (5, 1, 20.0), (10, 1, 10.0), (5, 2, 40.0), (5, 1, 20.0)]
    assert (result["all"]["total"], result["all"]["memorized"]) == (35, 6)
    # x - 3 = -2..2, y - 20 = -10, 0, -10, 20, 0: sxy = 40, sxx = 10, syy = 600 -> 40 / sqrt(6000).
    assert result["pearson"] == pytest.approx(40 / math.sqrt(6000))


def test_pair_repetitions_count_normalized_pairs():
    counts = pair_repetitions([("a b", "x"), ("a  b", "x "), ("a b", "y"), ("c", "z")])
    assert counts[("a b", "x")] == 2 and counts[("a b", "y")] == 1 and counts[("c", "z")] == 1


def test_pearson_degenerate_cases():
    assert pearson([1, 2, 3], [5, 5, 5]) is None
    assert pearson([1], [2]) is None
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=2, max_size=20))
def test_pearson_matches_statistics_correlation(points):
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    got = pearson(xs, ys)
    if len(set(xs)) == 1 or len(set(ys)) == 1:
        assert got is None
    else:
        assert got == pytest.approx(statistics.correlation(xs, ys), abs=1e-9)


def test_split_units_and_ttr():
    assert split_units("  a  b ", "word") == ["a", "b"]
    assert split_units("我爱", "char") == ["我", "爱"]
    assert type_token_ratio(["a b a", "b c"]) == pytest.approx(60.0)
    assert type_token_ratio([]) is None


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_neighbourhood_matches_brute_force(data):
    """Algorithm 2 against a literal loop: every position class, every substitute, one translation each."""
    vocab = ["a", "b", "c", "d"]
    n_rows = data.draw(st.integers(1, 3))
    memorized = []
    for i in range(n_rows):
        units = data.draw(st.lists(st.sampled_from(vocab), min_size=1, max_size=5))
        memorized.append({"index": i, "source": " ".join(units), "reference": "M",
                          "prefix_len": data.draw(st.integers(1, len(units)))})
    kept_words = set(data.draw(st.lists(st.sampled_from(vocab), max_size=4)))
    k = data.draw(st.integers(1, 3))

    def translate(sources):   # keeps the memorized output iff the first word is in kept_words
        return ["M" if s.split()[0] in kept_words else "other " + s for s in sources]

    def substitutes(units, position):
        return [w for w in vocab if w != units[position - 1]][::-1]

    got = neighbourhood_effect(translate, memorized, substitutes, k=k)
    for cls in ("prefix", "suffix", "start"):
        kept = total = 0
        for row in memorized:
            units = row["source"].split()
            n, L = len(units), row["prefix_len"]
            positions = {"prefix": range(1, L), "suffix": range(L + 1, n + 1), "start": [1]}[cls]
            for pos in positions:
                for sub in substitutes(units, pos)[:k]:
                    new = units[:pos - 1] + [sub] + units[pos:]
                    total += 1
                    kept += translate([" ".join(new)])[0] == "M"
        assert (got[cls]["kept"], got[cls]["perturbed"]) == (kept, total)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_recovery_matches_brute_force(data):
    outputs = st.sampled_from(["! M", "! N", "N", "!N", "* N", "M"])
    memorized = [{"index": i, "source": f"s{i}", "reference": "M"} for i in range(data.draw(st.integers(1, 5)))]
    table = {f"{sym} s{i}": data.draw(outputs) for sym in ("!", "*") for i in range(len(memorized))}
    got = recover_non_memorized(TableTranslator(table), memorized, symbols=("!", "*"))
    for sym in ("!", "*"):
        expected = 0
        for row in memorized:
            out = table[f"{sym} {row['source']}"]
            # starts with the symbol, and the stripped output is not the memorized one
            expected += out.startswith(sym) and out[len(sym):].strip() != "M"
        assert got["per_symbol"][sym]["recovered"] == expected
