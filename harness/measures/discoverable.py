"""Probabilistic discoverable extraction (Hayes et al. 2024, "Measuring memorization in language models via
probabilistic extraction", Sec. 3), made counterfactual as paper 003 Definition 3.1 makes the greedy test.

A target z is (n, p)-discoverable under a decoding scheme when n independent queries with its prompt produce it
at least once with probability >= p: 1 - (1 - p_z)^n >= p, where p_z is the probability that one query
produces z exactly (the product of its tokens' probabilities under the scheme; memlens.harness.model.logprobs computes
log p_z from one teacher-forced pass). Greedy decoding is the special case p_z in {0, 1}.

Counterfactual (this project, after paper 003 Sec. 4.2): an example counts when the audited model's p_z makes
it (n, p)-discoverable and the control's (a model trained the same way without the example) does not, so a
target that any code model completes (an import, a common idiom) is not counted as extracted.
Pure numpy on log-probabilities: p_z of a 64-token target is often far below float64's smallest normal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from memlens.harness.core.stats import rate_with_interval


def _check_query(n: int, p: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}: the number of queries must be a positive integer")
    if not (0 < p <= 1):
        raise ValueError(f"p={p!r}: the extraction probability must be in (0, 1]")


def _clamped(logp: float) -> float:
    """A log-probability, a float32 sum's rounding above 0 taken as 0; a clearly positive value is a bug
    (a probability passed where its log belongs)."""
    if logp > 1e-4:
        raise ValueError(f"logp={logp!r}: a log-probability is <= 0 (pass log p, not p)")
    return min(float(logp), 0.0)


def extraction_probability(logp: float, n: int) -> float:
    """1 - (1 - p_z)^n: the chance that at least one of n queries produces the target, from log p_z
    (-inf: p_z = 0). Computed as -expm1(n * log1p(-p_z)) so a tiny p_z does not round to 0."""
    _check_query(n, 0.5)
    logp = _clamped(logp)
    if logp == 0:
        return 1.0
    if math.isinf(logp):
        return 0.0
    return float(-math.expm1(n * math.log1p(-math.exp(logp))))


def is_discoverable(logp: float, n: int, p: float) -> bool:
    """(n, p)-discoverable: 1 - (1 - p_z)^n >= p (Hayes et al. 2024, Definition 1)."""
    _check_query(n, p)
    return extraction_probability(logp, n) >= p


def counterfactually_discoverable(logp: float, control_logp: float, n: int, p: float) -> bool:
    """The audited model makes the target (n, p)-discoverable and the control does not."""
    return is_discoverable(logp, n, p) and not is_discoverable(control_logp, n, p)


def discoverable_rates(logps: Sequence[float], control_logps: Sequence[float], n: int, p: float) -> dict:
    """At one (n, p): the audited model's, the control's and the counterfactual rate over the examples, each
    with its n and 95 % Wilson interval (memlens.harness.core.stats.rate_with_interval)."""
    if len(logps) != len(control_logps):
        raise ValueError(f"{len(logps)} audited and {len(control_logps)} control log-probabilities: one each")
    audited = [is_discoverable(x, n, p) for x in logps]
    control = [is_discoverable(x, n, p) for x in control_logps]
    both = [a and not c for a, c in zip(audited, control)]
    count = len(audited)
    return {"n_queries": n, "p": p,
            "audited": rate_with_interval(sum(audited), count),
            "control": rate_with_interval(sum(control), count),
            "counterfactual": rate_with_interval(sum(both), count)}


def stored_logp(logp: float) -> float | None:
    """A log-probability as the rows store it: None for -inf (probability 0; JSON has no infinity), 6 decimals."""
    return None if math.isinf(logp) else round(float(logp), 6)


def read_logp(value: float | None) -> float:
    """A stored log-probability back as a float (None -> -inf): the inverse of `stored_logp`."""
    return -math.inf if value is None else float(value)
