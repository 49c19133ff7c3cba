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
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    _check_counts(m, r, v)
    log_level = math.log(1 - confidence)

    def rejected(eps: float) -> bool:
        return log_p_value(m, r, v, eps, delta) < log_level

    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):       # the p-value grows with ε (q does), so the rejected ε form an interval [0, ε*)
        lo, hi = hi, 2 * hi
        if hi > EPS_CEILING:
            raise RuntimeError(f"epsilon bisection ran past {EPS_CEILING} (m={m}, r={r}, v={v}, delta={delta})")
    while hi - lo > BISECTION_TOL:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
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


def audit_epsilon(ids: Sequence[str], scores: Sequence[float], members: Sequence[int],
                  candidates: Sequence[tuple[int, int]], delta: float, confidence: float = CONFIDENCE) -> dict:
    """The ε lower bound of one set of canary scores: every candidate (k+, k-) at the Bonferroni level, the
    largest reported (the first candidate on a tie). Returns m, k+, k-, r, v, the bound, and each candidate's."""
    if not candidates:
        raise ValueError("need at least one candidate (k+, k-)")
    level = (1 - confidence) / len(candidates)
    m = len(ids)
    rows = []
    for k_plus, k_minus in candidates:
        g = guess(ids, scores, members, k_plus, k_minus)
        bound = epsilon_lower_bound(m, g.r, g.v, delta, 1 - level) if g.r else 0.0
        rows.append({"k_plus": g.k_plus, "k_minus": g.k_minus, "r": g.r, "v": g.v, "epsilon_lower_bound": bound})
    best = max(range(len(rows)), key=lambda i: (rows[i]["epsilon_lower_bound"], -i))
    return {"m": m, "n_members": int(sum(members)), **rows[best], "delta": delta, "confidence": confidence,
            "level_per_candidate": level, "rule": selection_rule(len(candidates), confidence),
            "tie_rule": TIE_RULE, "candidates": rows}
