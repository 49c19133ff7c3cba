"""The one-run ε lower bound (harness.measures.epsilon, Steinke, Nasr & Jagielski 2023): hand-computed cases,
binomial tails against exact fractions, monotonicity, guesses and their ties, and random scores (a model that
learnt nothing about membership) giving a bound near 0."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.measures.epsilon import (
    BISECTION_TOL,
    audit_epsilon,
    epsilon_lower_bound,
    guess,
    guess_counts,
    log_binomial_tail,
    p_value,
)


def _all_right_bound(r: int, confidence: float = 0.95) -> float:
    """δ = 0, every guess right: P[Binomial(r, q) >= r] = q^r < 1 - c  <=>  ε < ln(a / (1 - a)), a = (1 - c)^(1/r)."""
    a = (1 - confidence) ** (1 / r)
    return math.log(a / (1 - a))


def test_hundred_right_guesses_give_3_49_at_delta_0():
    assert _all_right_bound(100) == pytest.approx(3.4929654, abs=1e-6)
    bound = epsilon_lower_bound(m=100, r=100, v=100, delta=0.0)
    assert _all_right_bound(100) - BISECTION_TOL <= bound <= _all_right_bound(100)   # rounded down, never up
    # the number of canaries only enters through the δ term
    assert epsilon_lower_bound(m=10_000, r=100, v=100, delta=0.0) == bound
    for r in (1, 7, 40, 1000):      # r = 1: ln(0.05 / 0.95) < 0, so nothing is rejected and the bound is 0
        assert epsilon_lower_bound(m=r, r=r, v=r) == pytest.approx(max(0, _all_right_bound(r)), abs=2 * BISECTION_TOL)


def test_no_guess_no_right_guess_or_a_coin_toss_give_0():
    assert epsilon_lower_bound(m=50, r=0, v=0) == 0.0
    assert epsilon_lower_bound(m=50, r=20, v=0) == 0.0
    assert epsilon_lower_bound(m=200, r=100, v=50) == 0.0       # 50 % right: ε = 0 is not rejected
    assert epsilon_lower_bound(m=3, r=3, v=3) == 0.0             # 1/8 > 0.05: three right guesses prove nothing


def _exact_tail(r: int, v: int, q: Fraction) -> Fraction:
    return sum((math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(v, r + 1)), Fraction(0))


@pytest.mark.parametrize("r", [1, 2, 5, 12, 30])
@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(3, 5), Fraction(9, 10), Fraction(1, 7)])
def test_binomial_tail_matches_exact_fractions(r, q):
    for v in range(0, r + 2):
        exact = _exact_tail(r, v, q)
        got = math.exp(log_binomial_tail(r, v, math.log(q), math.log(1 - q)))
        assert got == pytest.approx(float(exact), rel=1e-11, abs=0 if exact else 1e-300), (r, v)


def test_tiny_tails_stay_exact_in_log_space():
    # P[Binomial(2000, 1/2) >= 2000] = 2^-2000 underflows a float; its log does not
    assert log_binomial_tail(2000, 2000, math.log(0.5), math.log(0.5)) == pytest.approx(-2000 * math.log(2), rel=1e-12)
    assert log_binomial_tail(10, 11, 0.0, -math.inf) == -math.inf
    assert log_binomial_tail(10, 10, 0.0, -math.inf) == 0.0                  # q = 1: all right for sure


def _exact_p_value(m: int, r: int, v: int, q: Fraction, delta: Fraction) -> Fraction:
    """Steinke et al.'s p_value_DP_audit with exact arithmetic."""
    def pmf(k):
        return math.comb(r, k) * q**k * (1 - q) ** (r - k)
    beta = _exact_tail(r, v, q)
    alpha, acc = Fraction(0), Fraction(0)
    for i in range(1, v + 1):
        acc += pmf(v - i)
        alpha = max(alpha, acc / i)
    return min(Fraction(1), beta + alpha * delta * 2 * m)


@pytest.mark.parametrize("m,r,v", [(10, 10, 9), (40, 12, 10), (60, 25, 20), (100, 30, 16), (8, 5, 0)])
@pytest.mark.parametrize("delta", [Fraction(0), Fraction(1, 1000), Fraction(1, 100)])
def test_p_value_matches_the_papers_formula_in_exact_arithmetic(m, r, v, delta):
    eps = math.log(3 / 2)                                    # q = e^ε / (1 + e^ε) = 3/5
    exact = _exact_p_value(m, r, v, Fraction(3, 5), delta)
    assert p_value(m, r, v, eps, float(delta)) == pytest.approx(float(exact), rel=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(r=st.integers(1, 300), data=st.data())
def test_bound_grows_with_right_guesses_and_shrinks_with_delta_and_confidence(r, data):
    v = data.draw(st.integers(0, r))
    m = data.draw(st.integers(r, 3 * r))
    base = epsilon_lower_bound(m, r, v)
    if v < r:
        assert epsilon_lower_bound(m, r, v + 1) >= base
    assert epsilon_lower_bound(m, r, v, delta=1e-3) <= base
    assert epsilon_lower_bound(m, r, v, confidence=0.99) <= base
    eps = data.draw(st.floats(0, 8))
    assert p_value(m, r, v, eps) <= p_value(m, r, v, eps + 0.5) * (1 + 1e-12)    # the p-value grows with ε


def test_delta_lowers_the_bound_and_more_canaries_lower_it_further():
    pure = epsilon_lower_bound(1000, 200, 190)
    assert 0 < epsilon_lower_bound(1000, 200, 190, delta=1e-5) < pure
    assert epsilon_lower_bound(100_000, 200, 190, delta=1e-5) < epsilon_lower_bound(1000, 200, 190, delta=1e-5)


def test_guesses_take_the_top_and_bottom_of_one_ranking_with_ties_broken_by_id():
    ids = ["e", "d", "c", "b", "a", "f"]
    scores = [0.9, 0.5, 0.5, 0.5, 0.1, 0.5]
    members = [1, 0, 1, 0, 0, 1]
    # ranking: e(0.9), b, c, d, f (0.5, by id), a(0.1): IN = e, b; OUT = f, a
    g = guess(ids, scores, members, 2, 2)
    assert (g.k_plus, g.k_minus, g.r) == (2, 2, 4)
    assert g.v == 1 + 0 + 0 + 1                     # e member (right), b non-member (wrong); f member (wrong), a (right)
    assert guess(ids, scores, members, 0, 0).v == 0
    assert guess(ids, scores, members, 6, 0).v == sum(members)
    assert guess(ids, scores, members, 0, 6).v == len(members) - sum(members)
    with pytest.raises(ValueError, match="k\\+ \\+ k- <= m"):
        guess(ids, scores, members, 4, 3)
    with pytest.raises(ValueError, match="finite"):
        guess(ids, [float("nan")] * 6, members, 1, 1)


def test_guess_counts_are_shares_of_the_canaries():
    assert guess_counts(41, [[0.1, 0.1], [0.5, 0.5], [0.25, 0]]) == [(4, 4), (20, 20), (10, 0)]
    assert guess_counts(10, [[0.3, 0.7]]) == [(3, 7)]
    with pytest.raises(ValueError, match="at most 1"):
        guess_counts(10, [[0.6, 0.6]])


def test_a_perfect_attack_and_the_bonferroni_rule():
    rng = random.Random(0)
    members = [rng.getrandbits(1) for _ in range(200)]
    ids = [f"c{i:03d}" for i in range(200)]
    scores = [float(b) + rng.random() * 0.1 for b in members]           # members always score higher
    one = audit_epsilon(ids, scores, members, [(20, 20)], delta=0.0)
    assert (one["r"], one["v"], one["m"]) == (40, 40, 200) and one["rule"].startswith("fixed guess counts")
    assert one["epsilon_lower_bound"] == pytest.approx(_all_right_bound(40), abs=2 * BISECTION_TOL)
    four = audit_epsilon(ids, scores, members, [(5, 5), (10, 10), (20, 20), (40, 40)], delta=0.0)
    assert four["level_per_candidate"] == pytest.approx(0.05 / 4) and "Bonferroni" in four["rule"]
    assert (four["k_plus"], four["k_minus"]) == (40, 40)                 # the most right guesses win
    assert four["epsilon_lower_bound"] == pytest.approx(_all_right_bound(80, 1 - 0.05 / 4), abs=2 * BISECTION_TOL)
    assert len(four["candidates"]) == 4


def test_random_scores_give_a_bound_near_zero_and_rarely_above_it():
    """Scores independent of the coins (a model that never saw the canaries): the bound is a valid 95 % statement,
    so it is above 0 on at most ~5 % of draws, and never large."""
    candidates_shares = [[0.05, 0.05], [0.1, 0.1], [0.25, 0.25], [0.5, 0.5]]
    positive, largest = 0, 0.0
    for seed in range(200):
        rng = random.Random(seed)
        members = [rng.getrandbits(1) for _ in range(200)]
        scores = [rng.gauss(0, 1) for _ in range(200)]
        ids = [f"c{i:03d}" for i in range(200)]
        bound = audit_epsilon(ids, scores, members, guess_counts(200, candidates_shares), delta=1e-5)
        positive += bound["epsilon_lower_bound"] > 0
        largest = max(largest, bound["epsilon_lower_bound"])
    assert positive <= 20, positive          # expected <= 10 of 200 (5 %); 20 is P < 0.002 under Binomial(200, .05)
    assert largest < 1.0, largest
