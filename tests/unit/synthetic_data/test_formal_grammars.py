"""Paper 004's grammars (synthetic_data/grammars.py) and the study's data (synthetic_data/formal_data.py): the shipped
rules as printed, log P_L(s) against hand derivations and a brute-force enumeration, the sampler against exact
probabilities, and the data's invariants (nested sizes, disjoint test strings and folds, Sec. 3's strings)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.formal_study import (
    BASE,
    DEDUP,
    SEC3,
    FormalSettings,
    language_data_dir,
    training_counts,
)
from memlens.harness.core.io import read_jsonl
from memlens.synthetic_data.formal_data import build_language
from memlens.synthetic_data.grammars import (
    SHIPPED_GRAMMARS,
    entropy_per_token,
    load_grammar,
    log_prob,
    parse_grammar,
    sample,
)


def first_choice_string(grammar) -> tuple[str, ...]:
    """The string every first-listed rule derives (by hand: no sampling)."""
    def expand(symbol):
        if symbol not in grammar.rules:
            return [symbol]
        return [t for child in grammar.rules[symbol][0][0] for t in expand(child)]
    return tuple(expand("S"))


def test_shipped_grammars_hold_the_printed_rule_counts():
    # Figure 7: S + A16 + 3 + 3 + 3 non-terminals, two rules each but S; Figure 8: G3's 38 rules as printed.
    for name in ("G1", "G2"):
        g = load_grammar(name)
        assert len(g.rules) == 11 and sum(len(r) for r in g.rules.values()) == 1 + 10 * 2
        assert g.terminals == tuple("123456789")
    g3 = load_grammar("G3")
    assert sum(len(r) for r in g3.rules.values()) == 38
    assert load_grammar("G7").terminals == tuple("abcdefghi")
    assert [p for _, p in load_grammar("G4").rules["B1"]] == pytest.approx([0.95, 0.025, 0.025])


def test_g1_strings_have_36_fair_choices_each():
    # G1 is unambiguous: 1 (A16) + 3 + 8 + 24 binary choices at 0.5, 72 tokens; so -log P = 36 ln 2 for every string
    g1 = load_grammar("G1")
    rng = random.Random(0)
    for _ in range(50):
        s = sample(g1, rng)
        assert len(s) == 72
        assert -log_prob(g1, s) == pytest.approx(36 * math.log(2), abs=1e-9)
    e = entropy_per_token(g1, 100, 0)
    assert e["nats_per_token"] == pytest.approx(36 * math.log(2) / 73)


def test_g2_most_likely_string_has_probability_095_to_the_36():
    g2 = load_grammar("G2")
    s = first_choice_string(g2)
    assert s[:9] == tuple("654987312")   # A16 -> A15 .., A15 -> A12 .., A12 -> A8 A9 A7: 654 987 312, by hand
    assert log_prob(g2, s) == pytest.approx(36 * math.log(0.95))
    # the sampler draws it at that rate (within 4 standard errors of 0.95^36 = 0.158)
    rng, n = random.Random(1), 4000
    hits = sum(sample(g2, rng) == s for _ in range(n))
    p = 0.95 ** 36
    assert abs(hits / n - p) < 4 * math.sqrt(p * (1 - p) / n)


TOY = """
S -> A B [0.5]
S -> B A [0.5]
A -> x [0.6]
A -> x x [0.4]
B -> x [0.3]
B -> y [0.7]
"""


def all_derivations(grammar, symbol="S"):
    """Every (string, probability) derivation of `symbol`, by brute-force expansion."""
    if symbol not in grammar.rules:
        return [((symbol,), 1.0)]
    out = []
    for rhs, p in grammar.rules[symbol]:
        partial = [((), p)]
        for child in rhs:
            partial = [(s + t, q * r) for s, q in partial for t, r in all_derivations(grammar, child)]
        out.extend(partial)
    return out


def test_inside_probability_sums_every_derivation_of_an_ambiguous_grammar():
    g = parse_grammar("toy", TOY, "toy")
    exact = Counter()
    for s, p in all_derivations(g):
        exact[s] += p
    assert sum(exact.values()) == pytest.approx(1.0)
    assert exact[("x", "x")] == pytest.approx(0.5 * 0.6 * 0.3 * 2)     # A B and B A both derive "x x"
    for s, p in exact.items():
        assert math.exp(log_prob(g, s)) == pytest.approx(p)
    assert log_prob(g, ("y", "y")) == float("-inf")


def test_g3_repeated_rules_add_their_probabilities():
    g3 = load_grammar("G3")
    rng = random.Random(2)
    shortest = min((sample(g3, rng) for _ in range(400)), key=len)
    # B4 -> B3 -> B2 -> B1 (2 of 3 for B3 and for B2: the printed rule twice), C, E4 -> E3 -> E2 -> E1 similarly
    assert len(shortest) == 3 + 1 + 4 + 1
    b1, e1 = 1 / 3, 1 / 3
    expected = 0.25 * (1 / 3) * (2 / 3) * (2 / 3) * b1 * (1 / 3) * (2 / 3) * (1 / 3) * e1
    assert math.exp(log_prob(g3, shortest)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("text, message", [
    ("S -> A\n", "is not a rule"),
    ("S -> a [0.5]\n", "sum to 0.5000"),
    ("S -> A [1]\nA -> S [1]\n", "is recursive"),
    ("A -> a [1]\n", "start symbol S"),
    ("S -> a [1.5]\n", r"not in \(0, 1\]"),
])
def test_bad_grammar_files_are_refused_with_the_line(text, message):
    with pytest.raises(UserError, match=message):
        parse_grammar("bad", text, "bad.txt")


def test_unshipped_and_unknown_grammars_say_why():
    with pytest.raises(UserError, match="G6.*not shipped.*does not invent"):
        load_grammar("G6")
    with pytest.raises(UserError, match="unknown grammar 'G9'"):
        load_grammar("G9")
    assert set(SHIPPED_GRAMMARS) == {"G1", "G2", "G3", "G4", "G5", "G7"}


# ---------------------------------------------------------------- the study's data
SMALL = {"seeds": [0], "train_size": 40, "sizes": [20, 40, 80], "test_size": 30, "folds": 3,
         "sec3_counts": [5, 3, 1], "entropy_samples": 50}


@pytest.fixture(scope="module")
def g2_rows(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("formal_data")
    settings = FormalSettings.load(SMALL)
    build_language(run_dir, settings, "G2", 0)
    return settings, read_jsonl(language_data_dir(run_dir, "G2", 0) / "strings.jsonl"), run_dir


def test_sizes_nest_and_test_strings_lie_outside_every_training_set(g2_rows):
    settings, rows, _ = g2_rows
    assert sum(r["count"].get("size20", 0) for r in rows) == 20
    assert sum(r["count"].get(BASE, 0) for r in rows) == 40
    assert sum(r["count"].get("size80", 0) for r in rows) == 80
    for r in rows:
        counts = r["count"]
        assert counts.get("size20", 0) <= counts.get(BASE, 0) <= counts.get("size80", 0)   # prefixes of one stream
        if r["test"]:
            assert not counts and r["sec3"] is None
    assert sum(r["test"] for r in rows) == 30
    assert all(r["count"].get(DEDUP, 0) == (1 if r["count"].get(BASE) else 0) for r in rows)


def test_sec3_strings_are_new_strings_with_decreasing_counts(g2_rows):
    _, rows, _ = g2_rows
    sec3 = sorted((r for r in rows if r["sec3"]), key=lambda r: r["sec3"])
    assert [r["sec3"] for r in sec3] == ["s0", "s1", "s2"]
    assert [r["count"] for r in sec3] == [{SEC3: 5}, {SEC3: 3}, {SEC3: 1}]
    base_total = sum(r["count"].get(BASE, 0) for r in rows)
    assert sum(r["count"].get(SEC3, 0) for r in rows) == base_total + 9     # D' plus the inserted copies


def test_fold_models_lose_every_copy_of_their_fold_and_nothing_else(g2_rows):
    settings, rows, _ = g2_rows
    full = training_counts(rows, BASE, "full")
    held = set()
    for j in range(settings.folds):
        fold = training_counts(rows, BASE, f"fold{j}")
        missing = set(full) - set(fold)
        assert missing and all(next(r for r in rows if r["id"] == s)["fold"][BASE] == j for s in missing)
        assert all(fold[s] == full[s] for s in fold)
        assert not held & missing
        held |= missing
    assert held == set(full)                 # the folds partition D's distinct strings


def test_data_is_a_function_of_the_seed(g2_rows, tmp_path):
    settings, rows, run_dir = g2_rows
    build_language(tmp_path, settings, "G2", 0)
    again = (language_data_dir(tmp_path, "G2", 0) / "strings.jsonl").read_bytes()
    assert again == (language_data_dir(run_dir, "G2", 0) / "strings.jsonl").read_bytes()
    other = FormalSettings.load({**SMALL, "seeds": [1]})
    build_language(tmp_path, other, "G2", 1)
    assert read_jsonl(language_data_dir(tmp_path, "G2", 1) / "strings.jsonl") != rows


@pytest.mark.parametrize("section, key", [
    ({"colour": 1}, "formal.colour"),
    ({"sec3_counts": [1, 4, 16]}, "formal.sec3_counts"),
    ({"sizes": [64, 512]}, "formal.sizes"),
    ({"low_entropy": "G4"}, "formal.low_entropy"),
    ({"folds": 1}, "formal.folds"),
    ({"model": {"width": 3}}, "formal.model.width"),
])
def test_bad_settings_name_the_key(section, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        FormalSettings.load(section)
