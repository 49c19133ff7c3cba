"""The one-run ε lower bounds (memlens.harness.measures.epsilon): Steinke, Nasr & Jagielski 2023 and Xiang et al. 2025
(order statistics for (ε, δ)-DP and μ-GDP): hand-computed cases, binomial tails against exact fractions, the
published output of Xiang et al.'s reference code, Monte Carlo simulations of their ideal auditor, monotonicity,
the theorems' ordering (μ-GDP <= (ε, δ) order statistics <= Steinke in p-value), guesses and their ties, and
random scores (a model that learnt nothing about membership) giving bounds near 0. The cross-check against
opake-auditing is test_epsilon_opake.py (skipped unless it is installed) and benchmarks/crosscheck_epsilon_opake.py."""

from __future__ import annotations

import json
import math
import random
import shutil
from fractions import Fraction
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.measures.epsilon import (
    BISECTION_TOL,
    METHODS,
    audit_epsilon,
    epsilon_lower_bound,
    epsilon_lower_bound_order_statistics,
    gdp_epsilon,
    gdp_log_delta,
    guess,
    guess_counts,
    log_binomial_cdf,
    log_binomial_tail,
    log_ndtr,
    log_p_value,
    log_p_value_gdp,
    log_p_value_order_statistics,
    mu_lower_bound_gdp,
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
    positive, largest, xiang_positive, xiang_largest = 0, 0.0, {}, {}
    for seed in range(200):
        rng = random.Random(seed)
        members = [rng.getrandbits(1) for _ in range(200)]
        scores = [rng.gauss(0, 1) for _ in range(200)]
        ids = [f"c{i:03d}" for i in range(200)]
        bound = audit_epsilon(ids, scores, members, guess_counts(200, candidates_shares), delta=1e-5)
        positive += bound["epsilon_lower_bound"] > 0
        largest = max(largest, bound["epsilon_lower_bound"])
        for name, b in bound["bounds"].items():      # each of Xiang et al.'s bounds is a 95 % statement too
            value = b.get("mu_lower_bound", b["epsilon_lower_bound"])
            xiang_positive[name] = xiang_positive.get(name, 0) + (value > 0)
            xiang_largest[name] = max(xiang_largest.get(name, 0.0), b["epsilon_lower_bound"])
    assert positive <= 20, positive          # expected <= 10 of 200 (5 %); 20 is P < 0.002 under Binomial(200, .05)
    assert largest < 1.0, largest
    assert max(xiang_positive.values()) <= 20, xiang_positive
    assert xiang_largest["steinke2023"] == largest and xiang_largest["xiang2025_order_statistics"] < 1.0
    assert xiang_largest["xiang2025_gdp"] < 4.0, xiang_largest     # the ε of μ-GDP at δ = 1e-5 grows ~4x as fast


# --- Xiang et al. 2025: order statistics of the released guesses ---------------------------------------------------

ALPHA = 0.05


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@pytest.mark.parametrize("x,reference", [(-40, -804.60844201375378817), (-30.5, -469.46273732291211439),
                                         (-29.9, -451.32291245852863447), (-10, -53.231285150512470578),
                                         (-1, -1.8410216450092635058), (0, -0.69314718055994530942),
                                         (3, -0.0013508099647481937988), (6, -9.8658764552437573169e-10),
                                         (9, -1.1285884059538406478e-19)])
def test_log_ndtr_matches_40_digit_values_in_both_tails(x, reference):
    # references: mpmath log(ncdf(x)) at 40 digits; the asymptotic series takes over below -30
    assert log_ndtr(x) == pytest.approx(reference, rel=1e-13, abs=1e-300)
    if x > -5:                                        # NormalDist.cdf is 0.5 (1 + erf): no lower tail
        assert math.exp(log_ndtr(x)) == pytest.approx(NormalDist().cdf(x), rel=1e-12)


def test_binomial_cdf_matches_exact_fractions():
    for r, u, q in ((12, 3, Fraction(1, 7)), (30, 29, Fraction(9, 10)), (30, 0, Fraction(1, 2)), (5, 5, Fraction(1, 3))):
        exact = 1 - _exact_tail(r, u + 1, q)
        got = math.exp(float(log_binomial_cdf(r, u, math.log(q), math.log(1 - q))[0]))
        assert got == pytest.approx(float(exact), rel=1e-11)
    assert log_binomial_cdf(10, 3, [0.0, -math.inf], [-math.inf, 0.0]).tolist() == [-math.inf, 0.0]   # p = 1, 0


def test_order_statistics_at_delta_0_is_steinke_and_all_right_has_a_closed_form():
    """Against pure DP every draw has |L| = ε, so releasing the most confident gains nothing: the p-value is
    Steinke et al.'s δ = 0 binomial. At δ > 0 with r = m (nothing filtered) Binomial(m, δ) draws are never wrong,
    so the errors are Binomial(m, (1 - δ) / (1 + e^ε)): all right has P = (1 - (1 - δ) p)^m, and the bound solves
    it at 0.05: p = (1 - 0.05^(1/m)) / (1 - δ), ε = ln((1 - p) / p)."""
    for m, r, u in ((40, 20, 0), (100, 100, 3), (300, 120, 17), (7, 7, 7)):
        for eps in (0.0, 0.7, 3.0):
            assert log_p_value_order_statistics(m, r, u, eps) == pytest.approx(log_p_value(m, r, r - u, eps), abs=1e-12)
        assert epsilon_lower_bound_order_statistics(m, r, r - u) == epsilon_lower_bound(m, r, r - u)
    for m, delta in ((50, 0.01), (200, 1e-3), (1000, 1e-5)):
        p = (1 - ALPHA ** (1 / m)) / (1 - delta)
        hand = math.log((1 - p) / p)
        assert epsilon_lower_bound_order_statistics(m, m, m, delta) == pytest.approx(hand, abs=2 * BISECTION_TOL)
        for eps, u in ((1.0, 12), (2.5, 0)):                 # the thinning identity, any u
            thinned = float(log_binomial_cdf(m, u, math.log((1 - delta) * _sigmoid(-eps)),
                                             math.log1p(-(1 - delta) * _sigmoid(-eps)))[0])
            assert log_p_value_order_statistics(m, m, u, eps, delta) == pytest.approx(thinned, rel=1e-9)


def test_gdp_all_right_with_nothing_filtered_has_a_closed_form():
    """r = m: each guess is wrong with the Bayes error Φ(-μ/2) of N(0,1) vs N(μ,1), independently, so all m right
    has P = (1 - Φ(-μ/2))^m and the bound is μ = -2 Φ⁻¹(1 - 0.05^(1/m))."""
    for m in (20, 40, 100, 1000):
        hand = -2 * NormalDist().inv_cdf(1 - ALPHA ** (1 / m))
        assert mu_lower_bound_gdp(m, m, m) == pytest.approx(hand, abs=2 * BISECTION_TOL)
    assert math.exp(log_p_value_gdp(50, 50, 0, 2.0)) == pytest.approx(NormalDist().cdf(1.0) ** 50, rel=1e-12)
    assert log_p_value_gdp(50, 30, 30, 2.0) == 0.0 and log_p_value_gdp(50, 0, 0, 2.0) == 0.0
    # μ = 0 is N(0,1) against itself: every guess a coin flip, filtered or not
    assert log_p_value_gdp(60, 20, 5, 0.0) == pytest.approx(math.log(1 - _exact_tail(20, 6, Fraction(1, 2))), rel=1e-7)


def test_the_epsilon_of_mu_gdp():
    """δ(ε) = Φ(μ/2 - ε/μ) - e^ε Φ(-μ/2 - ε/μ) (Dong, Roth & Su 2022 Cor. 2.13); at ε = 0 it is the total
    variation 2Φ(μ/2) - 1. The ε of μ = 0.5, 1, 2 at δ = 1e-5 as Xiang et al.'s reference code prints them."""
    for mu in (0.3, 1.0, 4.0):
        assert math.exp(gdp_log_delta(0.0, mu)) == pytest.approx(2 * NormalDist().cdf(mu / 2) - 1, rel=1e-12)
    for mu, eps in ((0.5, 1.9931), (1.0, 4.3772), (2.0, 9.9973)):
        got = gdp_epsilon(mu, 1e-5)
        assert got == pytest.approx(eps, abs=6e-5)
        assert math.exp(gdp_log_delta(got, mu)) == pytest.approx(1e-5, rel=1e-6)
    assert gdp_epsilon(0.0, 1e-5) == 0.0 and gdp_epsilon(0.1, 0.5) == 0.0         # δ above the total variation
    with pytest.raises(ValueError, match="delta"):
        gdp_epsilon(1.0, 0.0)


# Xiang et al.'s reference code (github.com/zihangxiang/tight-privacy-audit-in-one-run at 6359b19), its exact tail
# P[T <= u] as printed in examples/validate_all_output.txt (6 decimals), and its ε lower bounds at δ = 1e-5, 95 %,
# for the Gaussian family as printed in compare/RESULTS.txt (4 decimals)
PUBLISHED_TAILS = [("gdp", 0.8, 2000, 500, 80, 0.011912), ("gdp", 0.8, 2000, 2000, 620, 0.000566),
                   ("gdp", 0.8, 4000, 1000, 180, 0.053213), ("gdp", 1.5, 2000, 500, 21, 0.155461),
                   ("gdp", 1.5, 2000, 2000, 407, 0.006767), ("gdp", 1.5, 4000, 1000, 53, 0.520724),
                   ((1, 1e-3), None, 2000, 500, 107, 0.003232), ((1, 1e-3), None, 2000, 2000, 483, 0.003048),
                   ((1, 1e-3), None, 4000, 1000, 241, 0.028870), ((2, 1e-2), None, 2000, 500, 45, 0.046397),
                   ((2, 1e-2), None, 2000, 2000, 212, 0.049904), ((2, 1e-2), None, 4000, 1000, 114, 0.507682)]


@pytest.mark.parametrize("null,mu,m,r,u,published", PUBLISHED_TAILS)
def test_tails_match_the_reference_code_of_xiang_et_al(null, mu, m, r, u, published):
    if null == "gdp":
        got = log_p_value_gdp(m, r, u, mu)
    else:
        got = log_p_value_order_statistics(m, r, u, *null)
    assert math.exp(got) == pytest.approx(published, abs=5.1e-7)


@pytest.mark.parametrize("m,r,u,published", [(1000, 100, 10, 3.1645), (1000, 1000, 309, 3.6700),
                                             (1000, 100, 1, 5.9018), (1000, 500, 20, 8.9216),
                                             (10000, 2500, 364, 4.1371), (1000, 100, 26, 1.1926)])
def test_gdp_epsilon_bounds_match_the_reference_code_of_xiang_et_al(m, r, u, published):
    assert gdp_epsilon(mu_lower_bound_gdp(m, r, r - u), 1e-5) == pytest.approx(published, abs=6e-5)


def _simulate(m: int, r: int, reps: int, seed: int, pair: str) -> np.ndarray:
    """Xiang et al.'s ideal auditor, drawn: m fair coins, each through the null's pair, the r draws with the largest
    |log likelihood ratio| released and guessed by its sign. Returns the errors of each repetition."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, size=(reps, m))
    if pair == "gdp":                          # N(0, 1) vs N(1, 1): L = z - 1/2
        loss = rng.standard_normal((reps, m)) + bits - 0.5
        wrong = (loss > 0) != (bits == 1)
    else:                                      # (ε, δ) = (1, 0.02): |L| = inf (never wrong) w.p. δ, else ε
        atom = rng.random((reps, m)) < 0.02
        loss = np.where(atom, np.inf, 1.0)
        wrong = ~atom & (rng.random((reps, m)) < _sigmoid(-1.0))
    keep = np.argsort(-np.abs(loss) + rng.random((reps, m)) * 1e-9, axis=1)[:, :r]   # ties at random
    return np.take_along_axis(wrong, keep, axis=1).sum(axis=1)


@pytest.mark.parametrize("pair", ["gdp", "eps_delta"])
def test_tails_match_a_simulation_of_the_ideal_auditor(pair):
    m, r, reps = 60, 15, 40_000
    errors = _simulate(m, r, reps, seed=3, pair=pair)
    for u in (1, 2, 3, 4):
        exact = math.exp(log_p_value_gdp(m, r, u, 1.0) if pair == "gdp"
                         else log_p_value_order_statistics(m, r, u, 1.0, 0.02))
        seen = float(np.mean(errors <= u))
        assert abs(seen - exact) < 4.5 * math.sqrt(exact * (1 - exact) / reps) + 1e-4, (u, seen, exact)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(r=st.integers(1, 80), data=st.data())
def test_the_xiang_bounds_are_monotone_and_ordered_as_the_theorems_say(r, data):
    """More right guesses never lower a bound, δ and confidence never raise one; and, in p-value, the ideal auditor
    under μ-GDP (which is (ε, δ_μ(ε))-DP) is never more surprising than under (ε, δ_μ(ε))-DP, which Steinke et al.'s
    theorem covers too: p_GDP(μ) <= p_os(ε, δ_μ(ε)) <= p_Steinke(ε, δ_μ(ε)), and so order statistics >= Steinke."""
    v = data.draw(st.integers(0, r))
    m = data.draw(st.integers(r, 3 * r))
    delta = data.draw(st.sampled_from([1e-6, 1e-4, 1e-2]))
    eps = epsilon_lower_bound_order_statistics(m, r, v, delta)
    mu = mu_lower_bound_gdp(m, r, v)
    if v < r:
        assert epsilon_lower_bound_order_statistics(m, r, v + 1, delta) >= eps
        assert mu_lower_bound_gdp(m, r, v + 1) >= mu
    assert epsilon_lower_bound_order_statistics(m, r, v, 2 * delta) <= eps
    assert epsilon_lower_bound_order_statistics(m, r, v, delta, confidence=0.99) <= eps
    assert mu_lower_bound_gdp(m, r, v, confidence=0.99) <= mu
    assert eps >= epsilon_lower_bound(m, r, v, delta) - BISECTION_TOL
    assert gdp_epsilon(mu, 1e-3) <= gdp_epsilon(mu, 1e-6) <= gdp_epsilon(mu + 0.1, 1e-6)
    test_mu, test_eps = data.draw(st.floats(0.05, 4.0)), data.draw(st.floats(0.0, 6.0))
    d = math.exp(gdp_log_delta(test_eps, test_mu))
    u = r - v
    os_ = log_p_value_order_statistics(m, r, u, test_eps, d)
    # (p-values: the μ-GDP one is floored at its quadrature's omitted mass, ~1e-24, an upper bound)
    assert math.exp(log_p_value_gdp(m, r, u, test_mu)) <= math.exp(os_) * (1 + 1e-6) + 1e-20
    assert os_ <= log_p_value(m, r, v, test_eps, d) + 1e-9


# --- the audit measure (harness/audit/epsilon.py) on hand-written MIA rows ---------------------------------------

def _mia_world(root, membership: str = "coins") -> dict:
    """What the mia measure leaves for FT.1 (two checkpoints) on sd_base, and the two datasets' manifests: 40
    canaries by fair coins; at checkpoint-10 the loss score is noise, at the final model members score 1 above."""
    from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256

    rng = random.Random(1)
    coins = [rng.getrandbits(1) for _ in range(40)]
    ids = [f"sd-{i:05d}" for i in range(40)]
    data = {}
    for name, bit in (("sd_base", 1), ("sd_base_heldout", 0)):
        rows = [{"id": i, "prefix": "p", "target": f"t{i}", "suffix": "s"} for i, c in zip(ids, coins) if c == bit]
        path = root / "data" / name / "rows.jsonl"
        atomic_write_jsonl(path, rows)
        atomic_write_json(path.parent / "manifest.json", {"sha256": file_sha256(path), "membership": membership})
        data[name] = path
    audit = root / "audit"
    for checkpoint, gap in (("checkpoint-10", 0.0), ("final", 1.0)):
        rows = [{"id": i, "member": c, "score": {"target": {"loss": -1.0 + gap * c + 0.1 * rng.random(),
                                                            "reference": None}}}
                for i, c in zip(ids, coins)]
        atomic_write_jsonl(audit / "mia" / "FT.1" / checkpoint / "sd_base.jsonl", rows)
    atomic_write_json(audit / "mia" / "FT.1" / "summary.json", {
        "model": "FT.1", "checkpoints": ["checkpoint-10", "final"],
        "results": {c: {"sd_base": {"members_file": str(data["sd_base"]), "nonmembers_file": str(data["sd_base_heldout"])}}
                    for c in ("checkpoint-10", "final")},
        "provenance": {"datasets": {"sd_base:members": file_sha256(data["sd_base"]),
                                    "sd_base:nonmembers": file_sha256(data["sd_base_heldout"])}}})
    return {"audit": audit, "coins": coins}


def _cfg(root, **audit):
    from omegaconf import OmegaConf

    return OmegaConf.create({"run_dir": str(root), "audit": {"out_dir": str(root / "audit"),
                                                            "measures": ["mia", "epsilon"], "mia_spans": ["target"],
                                                            "epsilon_delta": 0.0, **audit}})


def test_the_measure_bounds_each_checkpoint_writes_its_summary_and_reports_a_table(tmp_path):
    from memlens.harness.audit.epsilon import audit_epsilon_models, report_rows
    from memlens.harness.core.io import read_json

    world = _mia_world(tmp_path)
    said = []
    audit_epsilon_models(_cfg(tmp_path, epsilon_guesses=[[0.25, 0.25]]), ["FT.1"], log=said.append)
    path = world["audit"] / "epsilon" / "FT.1" / "summary.json"
    summary = read_json(path)
    final = summary["results"]["final"]["sd_base"]
    # members score 1 above everyone else: all 20 guesses right -> the hand formula at δ = 0
    assert (final["m"], final["k_plus"], final["k_minus"], final["r"], final["v"]) == (40, 10, 10, 20, 20)
    assert final["epsilon_lower_bound"] == pytest.approx(_all_right_bound(20), abs=2 * BISECTION_TOL)
    assert final["rule"].startswith("fixed guess counts") and final["delta"] == 0.0
    assert summary["results"]["checkpoint-10"]["sd_base"]["epsilon_lower_bound"] < 1.0     # noise: near 0
    assert summary["settings"]["attack"] == "loss" and any("fair coin" in a for a in summary["assumptions"])
    assert summary["provenance"]["measure"] == "epsilon_one_run" and set(summary["provenance"]["mia_rows"]) == {
        "checkpoint-10/sd_base", "final/sd_base"}
    assert "20/20 right guesses of m=40 -> ε >= 1.823 (δ=0, 95 %)" in said[-1]
    # Xiang et al. 2025 beside it, labelled: at δ = 0 the order-statistics bound is Steinke's; μ-GDP with all 20 of
    # the 20 released right (40 canaries): (1 - Φ(-μ/2))^20 averaged over the cut < 0.05; no ε at δ = 0
    bounds = final["bounds"]
    assert {k: b["label"] for k, b in bounds.items()} == {k: label for k, (label, _, _) in METHODS.items()} == {
        "steinke2023": "Steinke 2023", "xiang2025_order_statistics": "Xiang 2025 order statistics",
        "xiang2025_gdp": "Xiang 2025 μ-GDP"}
    assert bounds["steinke2023"]["epsilon_lower_bound"] == final["epsilon_lower_bound"]
    assert bounds["xiang2025_order_statistics"]["epsilon_lower_bound"] == pytest.approx(final["epsilon_lower_bound"],
                                                                                        abs=2 * BISECTION_TOL)
    assert bounds["xiang2025_gdp"]["mu_lower_bound"] == mu_lower_bound_gdp(40, 20, 20) > 1.0
    assert bounds["xiang2025_gdp"]["epsilon_lower_bound"] is None and bounds["xiang2025_gdp"]["r"] == 20
    assert "by Steinke 2023; ε >= 1.823 by Xiang 2025 order statistics; μ >= 1.301, no ε at δ=0" in said[-1]
    columns, rows = report_rows(world["audit"])
    assert columns == ["model", "checkpoint", "dataset", "m", "guesses r", "correct v", "ε lower bound (Steinke 2023)",
                       "ε lower bound (Xiang 2025 order statistics)", "μ lower bound (Xiang 2025 μ-GDP)",
                       "ε lower bound (Xiang 2025 μ-GDP)", "δ"]
    assert [r["checkpoint"] for r in rows] == ["checkpoint-10", "final"]
    assert rows[1] == {"model": "FT.1", "checkpoint": "final", "dataset": "sd_base", "m": 40, "guesses r": 20,
                       "correct v": 20, "ε lower bound (Steinke 2023)": 1.823,
                       "ε lower bound (Xiang 2025 order statistics)": 1.823, "μ lower bound (Xiang 2025 μ-GDP)": 1.301,
                       "ε lower bound (Xiang 2025 μ-GDP)": None, "δ": 0.0}
    # a summary written before the Xiang bounds existed (no `bounds`) reads back as the former table; beside a newer
    # one its Xiang cells are empty
    old = tmp_path / "old"
    (old / "mia" / "FT.3").mkdir(parents=True)
    (old / "mia" / "FT.3" / "summary.json").write_text("{}")
    (old / "epsilon" / "FT.3").mkdir(parents=True)
    bound = {"m": 86, "r": 8, "v": 8, "epsilon_lower_bound": 1.2345, "delta": 1e-05}
    (old / "epsilon" / "FT.3" / "summary.json").write_text(json.dumps(
        {"model": "FT.3", "checkpoints": ["final"], "results": {"final": {"sd_base": bound}}}))
    assert report_rows(old) == (["model", "checkpoint", "dataset", "m", "guesses r", "correct v", "ε lower bound", "δ"],
                                [{"model": "FT.3", "checkpoint": "final", "dataset": "sd_base", "m": 86, "guesses r": 8,
                                  "correct v": 8, "ε lower bound": 1.234, "δ": 1e-05}])
    shutil.copytree(world["audit"] / "epsilon" / "FT.1", old / "epsilon" / "FT.1")
    shutil.copytree(world["audit"] / "mia" / "FT.1", old / "mia" / "FT.1")
    columns, mixed = report_rows(old)
    assert columns[6] == "ε lower bound (Steinke 2023)" and len(mixed) == 3
    assert mixed[-1]["ε lower bound (Steinke 2023)"] == 1.234 and mixed[-1]["μ lower bound (Xiang 2025 μ-GDP)"] is None
    # a rerun (e.g. after a kill) writes the same results
    before = {k: v for k, v in summary.items() if k != "provenance"}
    audit_epsilon_models(_cfg(tmp_path, epsilon_guesses=[[0.25, 0.25]]), ["FT.1"], log=said.append)
    assert {k: v for k, v in read_json(path).items() if k != "provenance"} == before


def _dosed_rows(dose_of_nonmembers: bool = True) -> list[dict]:
    """40 canaries by fair coins, tier 4 for even ids and 1 for odd ones, dealt before the coins (a member carries it as
    `repeat`, a held-out canary as dose_if_member); only tier 4's members score 1 above everyone else."""
    rng = random.Random(1)
    coins = [rng.getrandbits(1) for _ in range(40)]
    rows = []
    for i, c in enumerate(coins):
        tier = 4 if i % 2 == 0 else 1
        score = -1.0 + (1.0 if c and tier == 4 else 0.0) + 0.1 * rng.random()
        row = {"id": f"sd-{i:05d}", "member": c, "score": {"target": {"loss": score}}}
        if c:
            row["repeat"] = tier
        elif dose_of_nonmembers:
            row["dose_if_member"] = tier
        rows.append(row)
    return rows


def test_each_dose_dealt_before_the_coins_gets_its_own_bound_and_report_row(tmp_path):
    from memlens.harness.audit.epsilon import (
        STEINKE_COLUMN,
        EpsilonSettings,
        bound_of_rows,
        bounds_by_dose,
        report_rows,
    )
    from memlens.harness.core.io import atomic_write_json

    rows = _dosed_rows()
    s = EpsilonSettings(delta=0.0, guesses=((0.25, 0.25),))
    by_dose = bounds_by_dose(rows, s, tmp_path / "rows.jsonl")
    assert set(by_dose) == {"1", "4"} and by_dose["1"]["m"] == by_dose["4"]["m"] == 20
    tier4 = [r for r in rows if int(r["id"][3:]) % 2 == 0]
    members4 = sum(r["member"] for r in tier4)
    assert 5 <= members4 <= 15          # 5 guesses each way: all members above all non-members in this tier
    # tier 4: the top 5 are members and the bottom 5 non-members -> 10 of 10 right -> the hand formula at δ = 0
    assert (by_dose["4"]["r"], by_dose["4"]["v"]) == (10, 10)
    assert by_dose["4"]["epsilon_lower_bound"] == pytest.approx(_all_right_bound(10), abs=2 * BISECTION_TOL)
    assert by_dose["1"]["epsilon_lower_bound"] < by_dose["4"]["epsilon_lower_bound"]     # noise in tier 1
    assert by_dose["1"] == bound_of_rows([r for r in rows if int(r["id"][3:]) % 2 == 1], s, tmp_path)
    # tiers known for the members only (doses under split): the coins would choose what is counted -> none
    assert bounds_by_dose(_dosed_rows(dose_of_nonmembers=False), s, tmp_path) == {}
    assert bounds_by_dose([{**r, "repeat": 4} if r["member"] else {**r, "dose_if_member": 4} for r in rows],
                          s, tmp_path) == {}                                          # one tier: nothing to split
    # the report's table: a `dose` column, the dataset's row ("all") and a row per dose
    whole = bound_of_rows(rows, s, tmp_path)
    atomic_write_json(tmp_path / "mia" / "FT.3" / "summary.json", {})
    atomic_write_json(tmp_path / "epsilon" / "FT.3" / "summary.json", {
        "model": "FT.3", "checkpoints": ["final"], "results": {"final": {"sd_base": {**whole, "doses": by_dose}}}})
    columns, table = report_rows(tmp_path)
    assert columns[:5] == ["model", "checkpoint", "dataset", "dose", "m"] and columns[7] == STEINKE_COLUMN
    assert [(r["dose"], r["m"]) for r in table] == [("all", 40), ("1", 20), ("4", 20)]
    assert table[2][STEINKE_COLUMN] == round(by_dose["4"]["epsilon_lower_bound"], 3)
    # beside a summary without doses (and one written before the Xiang bounds): its row says "all", cells empty
    atomic_write_json(tmp_path / "mia" / "IPO" / "summary.json", {})
    atomic_write_json(tmp_path / "epsilon" / "IPO" / "summary.json", {
        "model": "IPO", "checkpoints": ["final"],
        "results": {"final": {"sd_base": {"m": 40, "r": 4, "v": 2, "epsilon_lower_bound": 0.0, "delta": 0.0}}}})
    columns, table = report_rows(tmp_path)
    assert [(r["model"], r["dose"]) for r in table] == [("FT.3", "all"), ("FT.3", "1"), ("FT.3", "4"), ("IPO", "all")]
    assert table[-1][STEINKE_COLUMN] == 0.0 and table[-1]["μ lower bound (Xiang 2025 μ-GDP)"] is None


def test_the_measure_refuses_split_membership_stale_rows_and_bad_settings(tmp_path):
    from memlens.harness.audit.command import requested_measures
    from memlens.harness.audit.epsilon import audit_epsilon_models
    from memlens.harness.core.errors import UserError

    _mia_world(tmp_path, membership="split")
    said = []
    with pytest.raises(UserError, match=r"every planned dataset was refused .* data\.sd\.membership=coins"):
        audit_epsilon_models(_cfg(tmp_path), ["FT.1"], log=said.append)
    assert "refuses sd_base: sd_base: membership split" in said[-1] and "data.sd.membership=coins" in said[-1]
    _mia_world(tmp_path / "stale")
    manifest = tmp_path / "stale" / "data" / "sd_base" / "manifest.json"       # rebuilt after mia scored it
    manifest.write_text(manifest.read_text().replace('"sha256": "', '"sha256": "0'))
    with pytest.raises(UserError):
        audit_epsilon_models(_cfg(tmp_path / "stale"), ["FT.1"], log=said.append)
    assert "rebuilt after the MIA audit scored it" in said[-1]
    cases = [({"measures": ["ned", "epsilon"]}, r"audit\.measures=\['ned', 'epsilon'\]: epsilon reads .* add mia"),
             ({"epsilon_attack": "best"}, r"audit\.epsilon_attack='best': use one registered MIA attack"),
             ({"epsilon_attack": "rmia"}, r"audit\.epsilon_attack='rmia': its score reads canaries the membership"),
             ({"epsilon_attack": "recall"}, r"audit\.epsilon_attack='recall': its score reads canaries the membership"),
             ({"epsilon_attack": "con_recall"}, r"audit\.epsilon_attack='con_recall': its score reads canaries"),
             ({"epsilon_span": "program"}, r"audit\.epsilon_span='program': use a span the MIA audit scores"),
             ({"epsilon_delta": 2}, r"audit\.epsilon_delta=2: must be a number in \[0, 1\)"),
             ({"epsilon_confidence": 1.0}, r"audit\.epsilon_confidence=1\.0: must be a number in \(0, 1\)"),
             ({"epsilon_guesses": [[0.7, 0.7]]}, r"audit\.epsilon_guesses=.*sum at most 1"),
             ({"epsilon_guesses": []}, r"audit\.epsilon_guesses=.*non-empty list")]
    for audit, message in cases:
        with pytest.raises(UserError, match=message):
            audit_epsilon_models(_cfg(tmp_path, **audit), ["FT.1"], log=said.append)
    _mia_world(tmp_path / "coins")
    with pytest.raises(UserError, match="needs a control"):
        audit_epsilon_models(_cfg(tmp_path / "coins", epsilon_attack="reference"), ["FT.1"], log=said.append)
    # registered after mia, so `memlens audit` runs it after the scores it reads
    assert requested_measures(_cfg(tmp_path, measures=["epsilon", "mia"])) == ["mia", "epsilon"]
