"""The ε lower bound of one-run privacy auditing (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1)
Training Run", arXiv 2305.08846): pure arithmetic on membership scores, no model.

The setting (their Algorithm 1): m canaries, each put in the training data by an independent fair coin. After the
one training run, an auditor ranks the canaries by an attack score and guesses: the k+ highest scored are IN, the
k- lowest are OUT, the rest abstain. Out of r = k+ + k- guesses, v are right. Their Theorem 3.1 / Appendix code
(`p_value_DP_audit`): if the training algorithm were (ε, δ)-DP in each canary, then

    P[v or more right] <= beta + alpha * 2 m δ,   q = e^ε / (1 + e^ε),
    beta  = P[Binomial(r, q) >= v],
    alpha = max over i = 1..v of P[v > Binomial(r, q) >= v - i] / i,

so every ε whose p-value is below 1 - confidence is rejected, and the largest such ε (found by bisection, their
`get_eps_audit`) is a lower bound on the algorithm's ε at that confidence. With δ = 0 and every guess right the
bound is ln(a / (1 - a)), a = (1 - confidence)^(1/r): 100 right guesses give ε >= 3.49 at 95 %.

The binomial tails are computed here in log space (math.lgamma and log-sum-exp), so a tail of 1e-300 is still
exact to float precision, and scipy is not needed; tests/unit/harness/measures/test_epsilon.py checks them against exact fractions.

Guesses (`guess`): one ranking of the canaries by score, highest first, ties broken by id (ascending), so the
ranking never looks at the coins; IN = its first k+, OUT = its last k-. How many guesses to make is the auditor's
choice, and choosing it after seeing the scores is a multiple comparison: `audit_epsilon` takes a list of
candidate (k+, k-) fixed in advance and, when there are several, computes each bound at level
(1 - confidence) / (number of candidates) and reports the largest (Bonferroni, as jax_privacy's
`CanaryScoreAuditor.epsilon_one_run` does over all thresholds), a statement that holds at `confidence` for all
candidates at once. One candidate is a fixed choice: no correction.

Beside it, from the same guesses (`audit_epsilon` reports all three, labelled, `METHODS`): Xiang, Wang, Xiao,
Tian & Wang 2025, "Tight Privacy Audit in One Run" (arXiv 2509.08704), Theorem 2: the exact probability that
their ideal auditor, releasing its r most confident of m guesses, is wrong u = r - v times or fewer, for the
(ε, δ)-DP null (`epsilon_lower_bound_order_statistics`: Steinke's bound at δ = 0, tighter at δ > 0) and for the
μ-GDP null (`mu_lower_bound_gdp`, and `gdp_epsilon` for the ε it implies at δ > 0 if the privacy curve is
Gaussian). Normal tails in log space too (`log_ndtr`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95           # the paper's 95 % (p < 0.05)
BISECTION_TOL = 1e-6        # ε is reported to this precision, rounded down (the side that stays a lower bound)
EPS_CEILING = 1e3           # no count of guesses reaches this; a search that does is a bug
TIE_RULE = "one ranking by score, highest first, ties broken by id ascending; IN = its first k+, OUT = its last k-"


# --- binomial tails in log space ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=32)
def _log_choose(r: int) -> np.ndarray:
    """log C(r, k) for k = 0..r (read-only: cached and shared)."""
    lg = [math.lgamma(k + 1) for k in range(r + 1)]
    out = np.array([lg[r] - lg[k] - lg[r - k] for k in range(r + 1)], dtype=np.float64)
    out.flags.writeable = False
    return out


def log_binomial_pmf(r: int, log_q: float, log_1mq: float) -> np.ndarray:
    """log P[Binomial(r, q) = k] for k = 0..r, from log q and log(1 - q) (each may be -inf)."""
    k = np.arange(r + 1, dtype=np.float64)
    with np.errstate(invalid="ignore"):          # 0 * -inf: a term that is certain (q = 0 or 1, k at the end)
        a = np.where(k == 0, 0.0, k * log_q)
        b = np.where(k == r, 0.0, (r - k) * log_1mq)
    return _log_choose(r) + a + b


def _logsumexp(x: np.ndarray) -> float:
    if x.size == 0:
        return -math.inf
    top = float(np.max(x))
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.sum(np.exp(x - top))))


def log_binomial_tail(r: int, v: int, log_q: float, log_1mq: float) -> float:
    """log P[Binomial(r, q) >= v]."""
    if v <= 0:
        return 0.0
    if v > r:
        return -math.inf
    return min(0.0, _logsumexp(log_binomial_pmf(r, log_q, log_1mq)[v:]))


def _log_q(eps: float) -> tuple[float, float]:
    """(log q, log(1 - q)) of q = 1 / (1 + e^-ε), the accuracy of ε-DP randomized response, without overflow."""
    soft = math.log1p(math.exp(-eps))          # eps >= 0: exp(-eps) <= 1
    return -soft, -eps - soft


# --- the p-value and the bound ------------------------------------------------------------------------------

def _check_counts(m: int, r: int, v: int) -> None:
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m (correct <= guesses <= canaries); got m={m}, r={r}, v={v}")


def log_p_value(m: int, r: int, v: int, eps: float, delta: float = 0.0) -> float:
    """log of the probability of `v` or more right out of `r` guesses among `m` canaries under an (ε, δ)-DP
    null (Steinke et al. 2023 Theorem 3.1, their Appendix `p_value_DP_audit`), capped at log 1 = 0."""
    _check_counts(m, r, v)
    if eps < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need eps >= 0 and 0 <= delta <= 1; got eps={eps}, delta={delta}")
    if v == 0:
        return 0.0
    log_q, log_1mq = _log_q(eps)
    pmf = log_binomial_pmf(r, log_q, log_1mq)
    log_beta = min(0.0, _logsumexp(pmf[v:]))
    if delta == 0:
        return log_beta
    # P[v > B >= v - i] for i = 1..v: cumulative log-sums of pmf[v-1], pmf[v-2], ..., pmf[0]
    below = np.logaddexp.accumulate(pmf[v - 1::-1])
    log_alpha = float(np.max(below - np.log(np.arange(1, v + 1, dtype=np.float64))))
    return min(0.0, float(np.logaddexp(log_beta, log_alpha + math.log(2 * m * delta))))


def p_value(m: int, r: int, v: int, eps: float, delta: float = 0.0) -> float:
    return math.exp(log_p_value(m, r, v, eps, delta))


def epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, confidence: float = CONFIDENCE) -> float:
    """The largest ε whose (ε, δ)-DP null is rejected at `confidence` (p-value < 1 - confidence), by bisection
    (Steinke et al.'s `get_eps_audit`); 0 when even ε = 0 is not rejected. Rounded down to BISECTION_TOL."""
    log_level = _log_level(confidence)
    _check_counts(m, r, v)
    return _largest_rejected(lambda eps: log_p_value(m, r, v, eps, delta) < log_level,
                             f"epsilon (m={m}, r={r}, v={v}, delta={delta})")


def _log_level(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    return math.log(1 - confidence)


def _largest_rejected(rejected, what: str, tol: float = BISECTION_TOL) -> float:
    """The supremum of the privacy parameters (ε or μ) that `rejected` rejects, rounded down to `tol`: 0 when 0 is
    not rejected. The p-values grow with the parameter, so the rejected ones form an interval [0, x*): doubling
    from 1 brackets x*, bisection narrows it (Steinke et al.'s `get_eps_audit`)."""
    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2 * hi
        if hi > EPS_CEILING:
            raise RuntimeError(f"bisection ran past {EPS_CEILING}: {what}")
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    return lo


# --- Xiang et al. 2025: the order statistics of the released guesses -----------------------------------------------
#
# Xiang, Wang, Xiao, Tian & Wang 2025, "Tight Privacy Audit in One Run" (arXiv 2509.08704): an auditor
# that releases r of its n = m guesses (its most confident ones) and is wrong u times is dominated by the ideal
# auditor of the null's trade-off function f: n secret bits, each through the pair (P, Q) that realizes f, guessed
# by likelihood ratio L, the r draws of largest |L| released. Their Theorem 2, as their reference code
# (github.com/zihangxiang/tight-privacy-audit-in-one-run, onerun/tail.py `exact_tail`) evaluates it, an equality:
#
#     P[T <= u] = E_W[ BinCDF(u; r, gbar(W)) ],   W = the mixture quantile of the best draw NOT released,
#                                                   ~ Beta(n - r, r + 1);  W = 0 when r = n,
#
# gbar(w) the error rate 1 / (1 + e^|L|) averaged over the draws above quantile w. Below: f = the (ε, δ)-DP
# trade-off and f = G_μ (Gaussian DP), each in closed form, no discretized pair. (opake-auditing 0.16.1 instead
# bounds this tail by a Chernoff bound over independent Bernoulli(v_k), v_k the mean error at rank k, their Eq. 12
# and Theorem 3 as its docstrings cite them: docs/methods.md and benchmarks/crosscheck_epsilon_opake.py.)

def log_binomial_cdf(r: int, u: int, log_p, log_1mp) -> np.ndarray:
    """log P[Binomial(r, p) <= u] for each p of the arrays log p, log(1 - p) (same shape; entries may be -inf)."""
    log_p, log_1mp = np.atleast_1d(np.asarray(log_p, float)), np.atleast_1d(np.asarray(log_1mp, float))
    if u >= r:
        return np.zeros_like(log_p)
    k = np.arange(u + 1, dtype=np.float64)
    out = np.empty_like(log_p)
    step = max(1, 2_000_000 // (u + 1))      # rows at a time: a few MB whatever u
    for i in range(0, len(log_p), step):
        lp, l1 = log_p[i:i + step, None], log_1mp[i:i + step, None]
        with np.errstate(invalid="ignore"):  # 0 * -inf: p = 0 or 1 at the ends, a certain term
            terms = _log_choose(r)[: u + 1] + np.where(k == 0, 0.0, k * lp) + (r - k) * l1   # k <= u < r
        top = np.max(terms, axis=1, keepdims=True)
        safe = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            got = safe[:, 0] + np.log(np.sum(np.exp(terms - safe), axis=1))
        out[i:i + step] = np.where(np.isfinite(top[:, 0]), got, -math.inf)
    return np.minimum(out, 0.0)


def log_p_value_order_statistics(m: int, r: int, u: int, eps: float, delta: float = 0.0) -> float:
    """log P[u or fewer errors in r released guesses of m] under (ε, δ)-DP: Xiang et al. 2025 Theorem 2 for the
    pair that realizes f_{ε,δ} (mass δ at |L| = ∞, never wrong; 1 - δ at |L| = ε, wrong with probability
    1 / (1 + e^ε)). The draws at |L| = ∞ are released first, so with A ~ Binomial(m, δ) of them
        P[T <= u] = sum_a P[A = a] BinCDF(u; r - min(a, r), 1 / (1 + e^ε)),
    summed from the likeliest a until the others' whole mass is below e^-36 of the sum (they count as 1).
    At δ = 0 this is Steinke et al.'s δ = 0 p-value (`log_p_value` with v = r - u): filtering gains nothing
    against pure DP, every draw has the same |L|."""
    _check_counts(m, r, r - u)
    if eps < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need eps >= 0 and 0 <= delta <= 1; got eps={eps}, delta={delta}")
    log_ok, log_err = _log_q(eps)
    if delta == 0 or r == 0:
        return float(log_binomial_cdf(r, u, log_err, log_ok)[0])
    log_d, log_1md = math.log(delta), (math.log1p(-delta) if delta < 1 else -math.inf)
    log_pa = log_binomial_pmf(m, log_d, log_1md)[:r]
    order = np.argsort(-log_pa, kind="stable")         # the likeliest a first; a >= r (T = 0) is the tail term
    rest = np.logaddexp.accumulate(np.r_[log_pa[order], log_binomial_tail(m, r, log_d, log_1md)][::-1])[::-1]
    kept, i = -math.inf, 0
    while i < r and rest[i] >= kept - 36:                 # stop once all the rest, at BinCDF = 1, is < e^-36 of it
        a = int(order[i])
        kept = float(np.logaddexp(kept, log_pa[a] + log_binomial_cdf(r - a, u, log_err, log_ok)[0]))
        i += 1
    return min(0.0, float(np.logaddexp(kept, rest[i])))  # the rest counted at BinCDF = 1: an upper bound


def epsilon_lower_bound_order_statistics(m: int, r: int, v: int, delta: float = 0.0,
                                         confidence: float = CONFIDENCE) -> float:
    """The largest ε whose (ε, δ)-DP null `log_p_value_order_statistics` rejects at `confidence`: Xiang et al.
    2025's (ε, δ) audit (opake-auditing's `eps_delta().epsilon_at`), rounded down to BISECTION_TOL."""
    log_level = _log_level(confidence)
    _check_counts(m, r, v)
    return _largest_rejected(lambda eps: log_p_value_order_statistics(m, r, r - v, eps, delta) < log_level,
                             f"order-statistics epsilon (m={m}, r={r}, v={v}, delta={delta})")


# --- the normal distribution in log space (no scipy) ----------------------------------------------------------

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def log_ndtr(x: float) -> float:
    """log Φ(x), the standard normal CDF, to ~1e-14 relative in both tails (erfc, and below x = -30 the
    asymptotic series Φ(x) = φ(x) / |x| (1 - 1/x² + 3/x⁴ - ...))."""
    if x > 5:
        return math.log1p(-0.5 * math.erfc(x / math.sqrt(2)))
    if x > -30:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2)))
    y = 1 / (x * x)
    series = 1 - y * (1 - 3 * y * (1 - 5 * y * (1 - 7 * y * (1 - 9 * y))))
    return -0.5 * x * x - _LOG_SQRT_2PI - math.log(-x) + math.log(series)


def _log_ndtr_array(x: np.ndarray) -> np.ndarray:
    return np.array([log_ndtr(float(t)) for t in np.ravel(x)]).reshape(np.shape(x))


# --- Xiang et al. 2025 for μ-GDP: f = G_μ, the pair N(0, 1) vs N(μ, 1) ------------------------------------------
#
# In closed form, with t = |z - μ/2| >= 0 the distance of a draw from the midpoint (|L| = μ t, so "more confident"
# is "larger t"): t has density φ(t - μ/2) + φ(t + μ/2) under the mixture, the mass above t is
# S(t) = Φ(μ/2 - t) + Φ(-μ/2 - t), and the error mass above t is Φ(-μ/2 - t) (the error density
# (φ(t - μ/2) + φ(t + μ/2)) / (1 + e^{μ t}) is φ(t + μ/2)), so gbar = Φ(-μ/2 - t) / S(t) and the optimal
# single-guess error is gbar(0) = Φ(-μ/2).

GDP_NODES = 2001            # quadrature nodes over the cut's order statistic
GDP_SPAN = 60.0             # nats below its mode where the cut's density is cut off (mass beyond: ~e^-60)


def _gdp_tails(t: np.ndarray, mu: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log S(t), log H(t) = log(1 - S(t)), log error mass above t) for the G_μ pair, all without cancellation."""
    lo_err = _log_ndtr_array(-mu / 2 - t)                   # Φ(-μ/2 - t)
    lo_mid = _log_ndtr_array(mu / 2 - t)                    # Φ(μ/2 - t)
    log_s = np.logaddexp(lo_err, lo_mid)
    # H = Φ(μ/2 + t) - Φ(μ/2 - t): for t <= μ/2 as Φ(t - μ/2) - Φ(-t - μ/2) (upper tails, no cancellation)
    up = _log_ndtr_array(t - mu / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_h_near = up + np.log(-np.expm1(np.minimum(lo_err - up, 0.0)))
        log_h_far = np.log1p(-np.exp(log_s))
    return log_s, np.where(t <= mu / 2, log_h_near, log_h_far), lo_err


def _crossing(inside, a: float, b: float, steps: int = 80) -> float:
    """Bisection between a (inside) and b (outside) for the edge of `inside`; returns the outside end."""
    for _ in range(steps):
        mid = (a + b) / 2
        a, b = (mid, b) if inside(mid) else (a, mid)
    return b


def _gdp_log_s(t: float, mu: float) -> float:
    return float(np.logaddexp(log_ndtr(-mu / 2 - t), log_ndtr(mu / 2 - t)))


def _gdp_cut_range(m: int, r: int, mu: float) -> tuple[float, float, float]:
    """The t-interval holding the cut's density to GDP_SPAN nats below its mode, and log of a bound on the mass
    outside it. The upper-tail mass above the cut, s = S(t_cut), is Beta(r + 1, m - r): its log density
    r log s + (m - r - 1) log(1 - s) is unimodal, so the two ends are found by bisection in log s, then mapped to
    t through S (decreasing from S(0) = 1)."""
    k = m - r

    def above(ls: float) -> bool:
        return r * ls + ((k - 1) * math.log(-math.expm1(ls)) if k > 1 else 0.0) > floor

    mode = math.log(r / (m - 1)) if k > 1 else 0.0            # k = 1: the density peaks at s = 1
    floor = r * mode + ((k - 1) * math.log1p(-r / (m - 1)) if k > 1 else 0.0) - GDP_SPAN
    lo = mode - 1.0
    while above(lo):
        lo = 2 * lo - mode
    s_small, s_large = _crossing(above, mode, lo), (_crossing(above, mode, 0.0) if k > 1 else 0.0)

    def t_of(ls: float) -> float:                              # S^{-1}(e^ls)
        hi = mu / 2 + 1.0
        while _gdp_log_s(hi, mu) > ls:
            hi *= 2
        return _crossing(lambda t: _gdp_log_s(t, mu) > ls, 0.0, hi) if ls < 0 else 0.0

    log_norm = math.lgamma(m + 1) - math.lgamma(k) - math.lgamma(r + 1)     # 1 / B(r + 1, k)
    return t_of(s_large), t_of(s_small), floor + log_norm       # outside: density < e^that on length < 1


def log_p_value_gdp(m: int, r: int, u: int, mu: float) -> float:
    """log P[u or fewer errors in r released guesses of m] under μ-GDP: Xiang et al. 2025 Theorem 2 for
    f = G_μ (the Gaussian mechanism's trade-off). r = m: Binomial(m, Φ(-μ/2)). r < m: the cut t_c is the
    (m - r)-th smallest of m draws of t (CDF H, density h), the released r are i.i.d. above it, so
        P[T <= u] = ∫ f_c(t) BinCDF(u; r, Φ(-μ/2 - t) / S(t)) dt,
        f_c(t) = m! / ((m-r-1)! r!) H(t)^(m-r-1) S(t)^r h(t),
    by the trapezoid rule on GDP_NODES nodes (normalized by the same rule's ∫ f_c) where f_c is within
    GDP_SPAN nats of its mode, plus a bound on the mass outside (~1e-24 or less, counted at BinCDF = 1): an upper
    bound, as exact as the quadrature wherever p is above that."""
    _check_counts(m, r, r - u)
    if mu < 0 or not math.isfinite(mu):
        raise ValueError(f"need a finite mu >= 0; got {mu}")
    if u >= r:
        return 0.0
    if r == m:
        le = log_ndtr(-mu / 2)
        return float(log_binomial_cdf(r, u, le, math.log1p(-math.exp(le)))[0])
    k = m - r
    t_lo, t_hi, log_outside = _gdp_cut_range(m, r, mu)
    t = np.linspace(t_lo, t_hi, GDP_NODES)
    log_s, log_h, log_g = _gdp_tails(t, mu)
    log_dens = np.logaddexp(-0.5 * (t - mu / 2) ** 2, -0.5 * (t + mu / 2) ** 2) - _LOG_SQRT_2PI
    with np.errstate(invalid="ignore"):
        log_f = (math.lgamma(m + 1) - math.lgamma(k) - math.lgamma(r + 1) + np.where(k > 1, (k - 1) * log_h, 0.0)
                 + r * log_s + log_dens)
    log_f = np.where(np.isnan(log_f), -math.inf, log_f) + np.log(np.r_[0.5, np.ones(GDP_NODES - 2), 0.5])
    log_err = np.minimum(log_g - log_s, math.log(0.5))
    log_ok = np.log1p(-np.exp(log_err))
    log_cdf = log_binomial_cdf(r, u, log_err, log_ok)
    return min(0.0, float(np.logaddexp(_logsumexp(log_f + log_cdf) - _logsumexp(log_f), log_outside)))


def mu_lower_bound_gdp(m: int, r: int, v: int, confidence: float = CONFIDENCE) -> float:
    """The largest μ whose μ-GDP null `log_p_value_gdp` rejects at `confidence` (Xiang et al. 2025's μ-GDP
    audit; opake-auditing's `gdp()._mu_at`), rounded down to BISECTION_TOL. A statement about μ-GDP alone: the
    pipeline is not μ-GDP for any smaller μ."""
    log_level = _log_level(confidence)
    _check_counts(m, r, v)
    return _largest_rejected(lambda mu: log_p_value_gdp(m, r, r - v, mu) < log_level,
                             f"mu (m={m}, r={r}, v={v})")


def gdp_log_delta(eps: float, mu: float) -> float:
    """log δ(ε) of μ-GDP: δ(ε) = Φ(μ/2 - ε/μ) - e^ε Φ(-μ/2 - ε/μ) (Dong, Roth & Su 2022, "Gaussian
    Differential Privacy", Corollary 2.13; Xiang et al. 2025 convert μ to (ε, δ) with it)."""
    if mu <= 0:
        return -math.inf
    a = log_ndtr(mu / 2 - eps / mu)
    b = eps + log_ndtr(-mu / 2 - eps / mu)
    return a + math.log(-math.expm1(min(b - a, 0.0))) if b < a else -math.inf


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP gives δ: the smallest ε with δ(ε) <= δ, by bisection to 1e-10 and rounded down
    (a lower bound on μ gives a lower bound on this ε, which grows with μ). Needs δ > 0: at δ = 0, μ-GDP with
    μ > 0 has no finite ε."""
    if not 0 < delta <= 1:
        raise ValueError(f"the ε of μ-GDP needs 0 < delta <= 1; got {delta}")
    target = math.log(delta)
    if gdp_log_delta(0.0, mu) <= target:
        return 0.0
    lo, hi = 0.0, mu * mu + 4 * mu
    while gdp_log_delta(hi, mu) > target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-10:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gdp_log_delta(mid, mu) > target else (lo, mid)
    return lo


# --- guesses from scores --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Guesses:
    k_plus: int            # guessed IN (the highest scores)
    k_minus: int           # guessed OUT (the lowest scores)
    r: int                 # guesses made (k+ + k-); the other m - r abstain
    v: int                 # right guesses


def guess(ids: Sequence[str], scores: Sequence[float], members: Sequence[int], k_plus: int, k_minus: int
          ) -> Guesses:
    """Guess IN for the k+ highest scores and OUT for the k- lowest (TIE_RULE), count the right ones."""
    m = len(ids)
    if not (len(scores) == m == len(members)):
        raise ValueError(f"ids, scores and members differ in length ({m}, {len(scores)}, {len(members)})")
    if k_plus < 0 or k_minus < 0 or k_plus + k_minus > m:
        raise ValueError(f"need k+, k- >= 0 and k+ + k- <= m; got k+={k_plus}, k-={k_minus}, m={m}")
    if any(not math.isfinite(s) for s in scores):
        raise ValueError("every score must be a finite number (a NaN or inf cannot be ranked)")
    order = sorted(range(m), key=lambda i: (-scores[i], ids[i]))
    guessed_in, guessed_out = order[:k_plus], order[m - k_minus:]
    v = sum(members[i] == 1 for i in guessed_in) + sum(members[i] == 0 for i in guessed_out)
    return Guesses(k_plus, k_minus, k_plus + k_minus, v)


def guess_counts(m: int, shares: Sequence[Sequence[float]]) -> list[tuple[int, int]]:
    """(k+, k-) = (floor(share+ * m), floor(share- * m)) of each [share+, share-] candidate (shares of the m
    canaries, fixed before any score is seen, so the counts depend on m alone)."""
    out = []
    for pair in shares:
        plus, minus = (float(x) for x in pair)
        if not (0 <= plus <= 1 and 0 <= minus <= 1 and plus + minus <= 1):
            raise ValueError(f"guess shares {list(pair)}: each in [0, 1] and their sum at most 1")
        out.append((math.floor(plus * m + 1e-9), math.floor(minus * m + 1e-9)))
    return out


def selection_rule(n_candidates: int, confidence: float) -> str:
    """How the reported guess counts were chosen (recorded with every bound)."""
    if n_candidates == 1:
        return f"fixed guess counts (one candidate, set before the scores were seen); level {1 - confidence:.3g}"
    return (f"largest bound over {n_candidates} candidate guess counts set in advance, each at level "
            f"{1 - confidence:.3g}/{n_candidates} (Bonferroni): holds at {confidence:.3g} for all of them at once")


# The bounds every audit reports, each its own statement at the confidence (never the largest of them): key in
# `bounds` -> (label, the candidate row's key that is maximized over the candidates, source).
METHODS = {
    "steinke2023": ("Steinke 2023", "epsilon_lower_bound",
                    "Steinke, Nasr & Jagielski 2023, arXiv 2305.08846, Theorem 3.1"),
    "xiang2025_order_statistics": ("Xiang 2025 order statistics", "epsilon_order_statistics",
                                   "Xiang, Wang, Xiao, Tian & Wang 2025, arXiv 2509.08704, Theorem 2, f = f_{ε,δ}"),
    "xiang2025_gdp": ("Xiang 2025 μ-GDP", "mu_gdp",
                      "Xiang, Wang, Xiao, Tian & Wang 2025, arXiv 2509.08704, Theorem 2, f = G_μ; ε(δ) of μ-GDP by "
                      "Dong, Roth & Su 2022 Corollary 2.13"),
}


def candidate_bounds(m: int, g: Guesses, delta: float, confidence: float) -> dict:
    """Every method's bound of one candidate's guesses, each at `confidence`. The ε of μ-GDP is None at δ = 0
    (μ-GDP with μ > 0 has no finite pure-DP ε; 0 when μ = 0)."""
    if not g.r:
        return {"epsilon_lower_bound": 0.0, "epsilon_order_statistics": 0.0, "mu_gdp": 0.0,
                "epsilon_gdp": 0.0}
    mu = mu_lower_bound_gdp(m, g.r, g.v, confidence)
    return {"epsilon_lower_bound": epsilon_lower_bound(m, g.r, g.v, delta, confidence),
            "epsilon_order_statistics": epsilon_lower_bound_order_statistics(m, g.r, g.v, delta, confidence),
            "mu_gdp": mu, "epsilon_gdp": gdp_epsilon(mu, delta) if delta > 0 else (None if mu > 0 else 0.0)}


def best_of(rows: list[dict], key: str) -> int:
    """The candidate with the largest `key` (the first on a tie)."""
    return max(range(len(rows)), key=lambda i: (rows[i][key], -i))


def audit_epsilon(ids: Sequence[str], scores: Sequence[float], members: Sequence[int],
                  candidates: Sequence[tuple[int, int]], delta: float, confidence: float = CONFIDENCE) -> dict:
    """The ε lower bounds of one set of canary scores: every candidate (k+, k-) at the Bonferroni level, the
    largest of each method reported (the first candidate on a tie). Returns m, k+, k-, r, v and Steinke et al.'s
    bound (top level, as before), `bounds` (each method's best candidate and bound, labelled), and each
    candidate's."""
    if not candidates:
        raise ValueError("need at least one candidate (k+, k-)")
    level = (1 - confidence) / len(candidates)
    m = len(ids)
    rows = []
    for k_plus, k_minus in candidates:
        g = guess(ids, scores, members, k_plus, k_minus)
        rows.append({"k_plus": g.k_plus, "k_minus": g.k_minus, "r": g.r, "v": g.v,
                     **candidate_bounds(m, g, delta, 1 - level)})
    bounds = {}
    for name, (label, key, source) in METHODS.items():
        row = rows[best_of(rows, key)]
        bounds[name] = {"label": label, "source": source, **{k: row[k] for k in ("k_plus", "k_minus", "r", "v")}}
        if name == "xiang2025_gdp":
            bounds[name] |= {"mu_lower_bound": row["mu_gdp"], "epsilon_lower_bound": row["epsilon_gdp"]}
        else:
            bounds[name]["epsilon_lower_bound"] = row[key]
    best = rows[best_of(rows, "epsilon_lower_bound")]
    return {"m": m, "n_members": int(sum(members)),
            **{k: best[k] for k in ("k_plus", "k_minus", "r", "v", "epsilon_lower_bound")}, "delta": delta,
            "confidence": confidence, "level_per_candidate": level, "rule": selection_rule(len(candidates), confidence),
            "tie_rule": TIE_RULE, "bounds": bounds, "candidates": rows}
