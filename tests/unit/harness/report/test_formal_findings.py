"""The formal-language findings L1-L7 (harness/report/formal_findings.py) on hand-built study results whose verdicts
follow from the rule by hand, and the two tests they add to harness/core/stats.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memlens.harness.core.formal_study import BASE, DEDUP, FormalSettings
from memlens.harness.core.stats import binomial_test_greater, permutation_test
from memlens.harness.report.findings.verdict import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from memlens.harness.report.formal_findings import FORMAL_FINDINGS, FormalResults, iqr, l1, l3, l4, l5, l6

SETTINGS = FormalSettings.load({"seeds": [0], "train_size": 64, "sizes": [64]})


def measure(k: int, n: int, onsets=None) -> dict:
    return {"k_at_e_star": k, "n": n, "onsets": onsets or [], "frac": [], "weighted": []}


def entry(language: str, variant: str, k_ctx: int, n: int, null_k: int, gap: float = 0.01, **extra) -> dict:
    both = {m: measure(k_ctx, n) for m in ("recollection", "counterfactual", "contextual")}
    null = {m: measure(null_k, n) for m in ("recollection", "counterfactual", "contextual")}
    return {"language": language, "seed": 0, "variant": variant, "learned_gap": gap, "measures": both, "null": null,
            "lemma1": {"onset_violations": 0, "score_violations": 0, "n": n, "premise_holds": n}, **extra}


def string(language: str, variant: str, onset_ctx, group=None, rec=0.0, ctx=0.0, cf=0.0) -> dict:
    return {"language": language, "seed": 0, "variant": variant, "group": group,
            "onset": {"recollection": None, "counterfactual": onset_ctx, "contextual": onset_ctx},
            "score_at_e_star": {"recollection": rec, "contextual": ctx, "counterfactual": cf}}


def test_every_finding_is_registered_in_table_order():
    assert list(FORMAL_FINDINGS) == [f"L{i}" for i in range(1, 8)]


def test_l1_counts_violations_and_holds_only_at_zero():
    good = FormalResults(SETTINGS, [entry("G1", BASE, 1, 10, 0)], [])
    assert l1(good).status == HOLDS
    bad = entry("G1", BASE, 1, 10, 0)
    bad["lemma1"]["onset_violations"] = 1
    row = l1(FormalResults(SETTINGS, [bad], []))
    assert row.status == FAILS and row.ours.startswith("1 violations in 10")
    assert l1(FormalResults(SETTINGS, [], [])).status == NOT_MEASURED


def test_l3_needs_both_languages_above_their_null_and_the_learning_gate():
    # 20/20 vs 0/20: Fisher's two-sided p = 2 / C(40, 20) ~ 1.5e-11 in each language
    both = [entry("G1", BASE, 20, 20, 0), entry("G2", BASE, 20, 20, 0)]
    row = l3(FormalResults(SETTINGS, both, []))
    assert row.status == HOLDS and row.p_value == pytest.approx(2 / math.comb(40, 20))
    one_at_null = [entry("G1", BASE, 20, 20, 0), entry("G2", BASE, 3, 20, 3)]
    assert l3(FormalResults(SETTINGS, one_at_null, [])).status in (FAILS, INCONCLUSIVE)
    unlearned = [entry("G1", BASE, 20, 20, 0, gap=0.5), entry("G2", BASE, 20, 20, 0)]
    row = l3(FormalResults(SETTINGS, unlearned, []))
    assert row.status == INCONCLUSIVE and "G1/base" in row.reason


def test_l4_compares_the_spread_of_onsets():
    narrow = [string("G1", BASE, 10 + (i % 2)) for i in range(30)]           # IQR 1
    broad = [string("G2", BASE, 2 + i) for i in range(30)]                    # IQR 14.5
    entries = [entry("G1", BASE, 1, 30, 0), entry("G2", BASE, 1, 30, 0)]
    row = l4(FormalResults(SETTINGS, entries, narrow + broad))
    assert row.status == HOLDS and row.p_value < 0.01
    swapped = [string("G1", BASE, 2 + i) for i in range(30)] + [string("G2", BASE, 10 + (i % 2)) for i in range(30)]
    assert l4(FormalResults(SETTINGS, entries, swapped)).status == FAILS


def test_l5_needs_recollection_to_differ_and_the_other_measures_not_to():
    top = [string("G2", BASE, 3, "top", rec=1, ctx=0.3, cf=0.3) for _ in range(12)]
    bottom = [string("G2", BASE, 3, "bottom", rec=0, ctx=0.3, cf=0.3) for _ in range(12)]
    results = FormalResults(SETTINGS, [entry("G2", BASE, 1, 24, 0)], top + bottom)
    assert l5(results).status == HOLDS             # 12/12 vs 0/12 recollection; 12/12 vs 12/12 otherwise
    bottom_ctx0 = [string("G2", BASE, 3, "bottom", rec=0, ctx=0.0, cf=0.3) for _ in range(12)]
    row = l5(FormalResults(SETTINGS, [entry("G2", BASE, 1, 24, 0)], top + bottom_ctx0))
    assert row.status == FAILS                     # contextual differs 12/12 vs 0/12


def test_l6_needs_a_later_median_onset_and_memorization_left_at_e_star():
    base = [string("G2", BASE, 3 + (i % 3)) for i in range(30)]
    later = [string("G2", DEDUP, 9 + (i % 3)) for i in range(30)]
    entries = [entry("G2", BASE, 10, 30, 0), entry("G2", DEDUP, 15, 30, 0)]
    assert l6(FormalResults(SETTINGS, entries, base + later)).status == HOLDS
    removed = [entry("G2", BASE, 10, 30, 0), entry("G2", DEDUP, 0, 30, 0)]
    assert l6(FormalResults(SETTINGS, removed, base + later)).status == FAILS


def test_binomial_test_greater_by_hand():
    assert binomial_test_greater(5, 5)["p_value"] == pytest.approx(1 / 32)
    assert binomial_test_greater(4, 5)["p_value"] == pytest.approx(6 / 32)
    assert binomial_test_greater(0, 0)["p_value"] == 1.0


def test_permutation_test_is_seeded_and_never_zero():
    a, b = np.arange(10.0), np.arange(10.0) + 100
    result = permutation_test(a, b, np.mean, 999, seed=3)
    assert result["p_value"] == pytest.approx(1 / 1000)          # no shuffle is as extreme as the split itself
    assert result == permutation_test(a, b, np.mean, 999, seed=3)
    same = permutation_test(a, a.copy(), np.mean, 199, seed=0)
    assert same["p_value"] == 1.0 and same["difference"] == 0.0
    assert iqr([1, 2, 3, 4, 5]) == 2.0


def test_permutation_test_agrees_with_the_exact_enumeration():
    # [0, 1, 2] vs [3, 4, 5]: of the C(6, 3) = 20 splits, only the observed one and its mirror reach |3|: p = 0.1
    result = permutation_test([0, 1, 2], [3, 4, 5], np.mean, 9999, seed=1)
    assert result["difference"] == -3.0
    assert abs(result["p_value"] - 0.1) < 0.01
