"""Wilson intervals, McNemar's and Fisher's exact tests: hand-derived values and brute-force references."""

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.core.stats import (
    Z95,
    dose_trend_test,
    fisher_exact,
    jonckheere_trend_test,
    mcnemar_exact,
    rate_with_interval,
    wilson_interval,
)


def test_wilson_by_hand():
    # 0 of 10: [0, z^2 / (n + z^2)] = [0, 3.8415 / 13.8415]
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(Z95 ** 2 / (10 + Z95 ** 2))
    assert high == pytest.approx(0.27753, abs=1e-5)
    # 5 of 10: centre 0.5, half-width z * sqrt(0.025 + z^2 / 400) / (1 + z^2 / 10) = 0.26343
    low, high = wilson_interval(5, 10)
    assert [low, high] == [pytest.approx(0.23659, abs=1e-5), pytest.approx(0.76341, abs=1e-5)]
    # 10 of 10 mirrors 0 of 10
    assert wilson_interval(10, 10) == [pytest.approx(1 - 0.27753, abs=1e-5), 1.0]
    assert wilson_interval(0, 0) is None


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_is_the_root_set_of_the_score_test(kn):
    """The interval is {p : (k/n - p)^2 <= z^2 p (1-p) / n}: its ends are that quadratic's roots."""
    k, n = kn
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    for p in (low, high):
        if 0.0 < p < 1.0:
            assert (k / n - p) ** 2 == pytest.approx(Z95 ** 2 * p * (1 - p) / n, rel=1e-9, abs=1e-12)


def test_rate_with_interval_shape():
    assert rate_with_interval(0, 0) == {"k": 0, "n": 0, "rate": None, "ci95": None}
    assert rate_with_interval(1, 4)["rate"] == 0.25


def test_mcnemar_by_hand():
    # 10 examples memorized by A only, none by B only: p = 2 * (1/2)^10 = 2/1024
    a = {i: i < 10 for i in range(20)}
    b = {i: False for i in range(20)}
    out = mcnemar_exact(a, b)
    assert (out["n_pairs"], out["a_only"], out["b_only"]) == (20, 10, 0)
    assert out["p_value"] == 2 / 1024
    # 3 vs 1 discordant: p = 2 * (C(4,0) + C(4,1)) / 16 = 10/16
    a = {0: True, 1: True, 2: True, 3: False, 4: True}
    b = {0: False, 1: False, 2: False, 3: True, 4: True}
    assert mcnemar_exact(a, b)["p_value"] == 10 / 16
    # no discordant pair: nothing to tell apart
    assert mcnemar_exact({0: True}, {0: True})["p_value"] == 1.0


def test_fisher_by_hand():
    # 3/3 vs 0/3: the observed table and its mirror each have probability 1/C(6,3) = 1/20
    assert fisher_exact(3, 3, 0, 3)["p_value"] == pytest.approx(0.1)
    # identical proportions: p = 1
    assert fisher_exact(2, 4, 2, 4)["p_value"] == pytest.approx(1.0)


def _fisher_brute(k_a, n_a, k_b, n_b):
    """Enumerate every 0/1 assignment of the same number of successes over the n_a + n_b examples."""
    total = k_a + k_b
    counts = {}
    for ones in itertools.combinations(range(n_a + n_b), total):
        in_a = sum(1 for i in ones if i < n_a)
        counts[in_a] = counts.get(in_a, 0) + 1
    all_ = sum(counts.values())
    observed = Fraction(counts[k_a], all_)
    return float(sum(Fraction(c, all_) for c in counts.values() if Fraction(c, all_) <= observed))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n_a: st.integers(1, 7).flatmap(
    lambda n_b: st.tuples(st.integers(0, n_a), st.just(n_a), st.integers(0, n_b), st.just(n_b)))))
def test_fisher_equals_brute_force_enumeration(t):
    assert fisher_exact(*t)["p_value"] == pytest.approx(_fisher_brute(*t), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=14))
def test_mcnemar_equals_brute_force_sign_flips(pairs):
    """Under H0 each discordant pair's direction is a fair coin: enumerate every assignment."""
    a = {i: x for i, (x, _) in enumerate(pairs)}
    b = {i: y for i, (_, y) in enumerate(pairs)}
    disc = [x for x, y in pairs if x != y]
    a_only = sum(disc)
    n = len(disc)
    extreme = sum(1 for flips in itertools.product((0, 1), repeat=n)
                  if min(sum(flips), n - sum(flips)) <= min(a_only, n - a_only))
    assert mcnemar_exact(a, b)["p_value"] == pytest.approx(min(1.0, extreme / 2 ** n if n else 1.0))


def test_sign_test_by_hand():
    from memlens.harness.core.stats import sign_test

    # 6 of 6 up: p = 2 * (1/2)^6; zeros are dropped; 2 up 1 down: 2 * P(X <= 1 | n=3) = 2 * 4/8, capped at 1.
    assert sign_test([0.5] * 6 + [0.0]) == {"test": "sign_exact", "up": 6, "down": 0, "p_value": 2 / 64}
    assert sign_test([1, 2, -1, 0])["p_value"] == 1.0
    assert sign_test([])["p_value"] == 1.0


def test_paired_reward_change_by_hand():
    from memlens.recipes.stages.rl_eval import paired_change

    # diffs 1, 1, 3: mean 5/3, sd sqrt(4/3), SE sqrt(4/9) = 2/3; initial 0, 1, 2 has sd 1.
    out = paired_change([0.0, 1.0, 2.0], [1.0, 2.0, 5.0])
    assert out["change"] == pytest.approx(5 / 3) and out["change_in_sd"] == pytest.approx(5 / 3)
    assert out["change_ci95"] == pytest.approx([5 / 3 - 1.96 * 2 / 3, 5 / 3 + 1.96 * 2 / 3])
    assert (out["up"], out["down"], out["n_prompts"]) == (3, 0, 3)
    assert out["mean_initial"] == 1.0 and out["mean_final"] == pytest.approx(8 / 3)


def test_clopper_pearson_by_known_values_and_against_its_definition():
    """Exact intervals of the textbook cases (0/10: [0, 0.3085]; 5/10: [0.1871, 0.8129]; 1/100: [0.000253, 0.0545])
    and, for every k of n = 20, the bounds are where the binomial tails equal 2.5 % (checked with exact fractions)."""
    from fractions import Fraction
    from math import comb

    from memlens.harness.core.stats import clopper_pearson

    assert clopper_pearson(0, 10) == pytest.approx([0.0, 0.30850], abs=1e-5)
    assert clopper_pearson(5, 10) == pytest.approx([0.18709, 0.81291], abs=1e-5)
    assert clopper_pearson(1, 100) == pytest.approx([0.000253, 0.054459], abs=1e-6)
    assert clopper_pearson(10, 10)[1] == 1.0
    n = 20

    def upper_tail(k, p):          # P[X >= k]
        p = Fraction(p)
        return float(sum(comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1)))

    for k in range(1, n):
        low, high = clopper_pearson(k, n)
        assert upper_tail(k, low) == pytest.approx(0.025, abs=1e-9)
        assert 1 - upper_tail(k + 1, high) == pytest.approx(0.025, abs=1e-9)


def test_a_tpr_at_an_fpr_exists_only_with_enough_non_members():
    from memlens.harness.core.stats import bootstrap_mia_metrics, fpr_measurable, min_nonmembers

    assert min_nonmembers(0.001) == 1000 and min_nonmembers(0.01) == 100
    assert fpr_measurable(1000, 0.001) and not fpr_measurable(999, 0.001) and fpr_measurable(100, 0.01)
    m = bootstrap_mia_metrics([1.0, 2.0, 3.0], [0.0] * 100, n_boot=20)
    assert m["tpr_at_fpr<1%"]["measurable"] and not m["tpr_at_fpr<0.1%"]["measurable"]
    # perfect separation: the bootstrap interval is the point 1, the exact one is not
    assert m["tpr_at_fpr<1%"]["ci95"] == [1.0, 1.0]
    assert m["tpr_at_fpr<1%"]["clopper_pearson95"][0] == pytest.approx(0.2924, abs=1e-4)   # 3/3: 0.025 ** (1/3)


@pytest.mark.parametrize("seed", range(5))
def test_the_paired_auc_gain_is_the_difference_of_the_two_aucs_and_its_bootstrap_is_paired(seed):
    import random

    from memlens.harness.core.stats import paired_auc_difference, roc_auc

    rng = random.Random(seed)
    members = [rng.gauss(1, 1) for _ in range(12)]
    nonmembers = [rng.gauss(0, 1) for _ in range(15)]
    other_m = [x + rng.gauss(0, 0.5) for x in members]
    other_n = [x + rng.gauss(0, 0.5) for x in nonmembers]
    labels = [1] * 12 + [0] * 15
    got = paired_auc_difference(members, nonmembers, other_m, other_n, n_boot=300, seed=seed)
    assert got["value"] == pytest.approx(roc_auc(members + nonmembers, labels) - roc_auc(other_m + other_n, labels))
    assert got["ci95"][0] <= got["value"] <= got["ci95"][1]
    same = paired_auc_difference(members, nonmembers, members, nonmembers, n_boot=50)
    assert same["value"] == 0 and same["ci95"] == [0.0, 0.0] and same["p_at_most_0"] == 1.0


# --- the dose trend test (data.sd.doses; findings D1-D3) ------------------------------------------------------------
def test_the_dose_trend_test_on_cases_derived_by_hand():
    # 12 rows, 4 successes, all at the top dose: the only subset as extreme of C(12, 4) = 495
    top = dose_trend_test({1: (0, 4), 4: (0, 4), 16: (4, 4)})
    assert top["p_value"] == pytest.approx(1 / 495) and top["statistic"] == 8
    # one success among 8 rows in two tiers: it sits in the top tier with probability 4 / 8
    assert dose_trend_test({1: (0, 4), 16: (1, 4)})["p_value"] == pytest.approx(0.5)
    # all successes at the lowest dose: every subset is as extreme, p = 1
    assert dose_trend_test({1: (4, 4), 4: (0, 4), 16: (0, 4)})["p_value"] == pytest.approx(1.0)
    assert dose_trend_test({4: (3, 5)})["p_value"] == 1.0                      # one tier: nothing can rise
    assert dose_trend_test({1: (0, 5), 4: (0, 5)})["p_value"] == 1.0           # no success anywhere
    with pytest.raises(ValueError, match="0 <= k <= n"):
        dose_trend_test({1: (3, 2)})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 4)), min_size=2, max_size=3))
def test_the_dose_trend_test_equals_enumerating_every_subset(tiers):
    """Brute force: every K-subset of the rows equally likely; p = the share whose score sum reaches the observed."""
    counts = {4 ** i: (min(k, n), n) for i, (k, n) in enumerate(tiers)}
    scores = [rank for rank, (_, n) in enumerate(counts.values()) for _ in range(n)]
    total_k = sum(k for k, _ in counts.values())
    observed = sum(rank * k for rank, (k, _) in enumerate(counts.values()))
    subsets = list(itertools.combinations(range(len(scores)), total_k))
    if total_k in (0, len(scores)):
        expected = Fraction(1)
    else:
        expected = Fraction(sum(sum(scores[i] for i in c) >= observed for c in subsets), len(subsets))
    assert dose_trend_test(counts)["p_value"] == pytest.approx(float(expected))


# --- the Jonckheere-Terpstra trend test (finding D4: pair membership against dose) ---------------------------------
def test_the_jonckheere_test_on_cases_derived_by_hand():
    # {1: [1, 2], 4: [3, 4]}: J counts the 4 rising (low, high) pairs, the most there can be; of the C(4, 2) = 6 equally
    # likely labellings only the observed one reaches 4, so the exact p is 1/6 (the Monte Carlo p within its error)
    rising = jonckheere_trend_test({1: [1.0, 2.0], 4: [3.0, 4.0]})
    assert rising["statistic"] == 4 and rising["p_value"] == pytest.approx(1 / 6, abs=0.015)
    # falling: J = 0, every labelling reaches it: p = 1
    assert jonckheere_trend_test({1: [3.0, 4.0], 4: [1.0, 2.0]})["p_value"] == 1.0
    # ties count 1/2: {1: [1, 1], 4: [1, 1]} has J = 4 x 1/2 = 2, and so has every labelling
    tied = jonckheere_trend_test({1: [1.0, 1.0], 4: [1.0, 1.0]})
    assert tied["statistic"] == 2 and tied["p_value"] == 1.0
    assert jonckheere_trend_test({4: [1.0, 2.0], 16: []})["p_value"] == 1.0    # one dose with values: nothing rises


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), min_size=2, max_size=3))
def test_the_jonckheere_test_agrees_with_enumerating_every_labelling(groups):
    """Brute force: every distinct assignment of the dose labels to the values equally likely; the exact p is the
    share whose J reaches the observed one. The Monte Carlo p (9,999 permutations) lies within 4 standard errors."""
    by_dose = {4 ** i: [float(v) for v in g] for i, g in enumerate(groups)}
    values = [v for g in by_dose.values() for v in g]
    labels = [rank for rank, g in enumerate(by_dose.values()) for _ in g]

    def j(lab):
        return sum((1.0 if values[a] < values[b] else 0.5 if values[a] == values[b] else 0.0)
                   for a in range(len(values)) for b in range(len(values)) if lab[a] < lab[b])

    labellings = set(itertools.permutations(labels))
    observed = j(labels)
    exact = sum(j(lab) >= observed - 1e-9 for lab in labellings) / len(labellings)
    got = jonckheere_trend_test(by_dose)
    assert got["statistic"] == pytest.approx(observed)
    assert abs(got["p_value"] - exact) <= 4 * (exact * (1 - exact) / 9999) ** 0.5 + 2e-4
