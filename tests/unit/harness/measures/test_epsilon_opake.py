"""Cross-check of memlens.harness.measures.epsilon against opake-auditing 0.16.1 (Xiang et al. 2025's one-run audits),
where both define the same quantity. Skipped unless opake-auditing is importable: memlens does not depend on it (it
pulls torch and scipy), so the normal run skips this file; benchmarks/crosscheck_epsilon_opake.py runs the same checks
and more in a scratch venv, and its output is recorded in benchmarks/results/crosscheck_epsilon_opake.txt.

To run it: install opake-auditing==0.16.1 into an environment that has memlens's test dependencies, then
`pytest -n0 tests/unit/harness/measures/test_epsilon_opake.py`."""

from __future__ import annotations

import importlib.metadata
import math
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("opake.api.auditing.one_run", reason="opake-auditing is not installed (not a memlens dependency)")

from opake.api.auditing.one_run import _eps_delta, _gdp  # noqa: E402
from opake.api.auditing.one_run._eps_delta import EpsDeltaMethod  # noqa: E402
from opake.api.auditing.one_run._gdp import GdpMethod  # noqa: E402

from memlens.harness.measures import epsilon as E  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.metadata.version("opake-auditing") != "0.16.1",
                                reason="the definitions compared here are opake-auditing 0.16.1's")


def _stand_in(m: int, r: int, u: int):
    """An estimate whose guesses are (r, u) of m canaries: opake's methods read only n_in, n_out and _best_r_u."""
    return SimpleNamespace(n_in=m // 2, n_out=m - m // 2, _best_r_u=lambda threshold=None: (r, u))


@pytest.fixture
def tight(monkeypatch):
    """opake's bisection tolerances (1e-4 on ε, 1 % on μ) tightened, so that 1e-4 is a fair test."""
    monkeypatch.setattr(_eps_delta, "_TOL", 1e-9)
    monkeypatch.setattr(_gdp, "_TOL_MU", 1e-7)


@pytest.mark.parametrize("m,r,u", [(20, 20, 0), (60, 20, 2), (200, 200, 40), (1000, 100, 10), (500, 250, 0)])
def test_at_delta_0_the_order_statistics_bound_and_steinke_are_opakes(m, r, u, tight):
    theirs = EpsDeltaMethod(_stand_in(m, r, u)).epsilon_at(delta=0.0, significance=0.05)
    assert E.epsilon_lower_bound_order_statistics(m, r, r - u, 0.0) == pytest.approx(theirs, abs=1e-5)
    assert E.epsilon_lower_bound(m, r, r - u, 0.0) == pytest.approx(theirs, abs=1e-5)
    for eps in (0.3, 1.0, 2.5):
        assert math.exp(E.log_p_value_order_statistics(m, r, u, eps, 0.0)) == pytest.approx(
            _eps_delta._p_value(r, u, eps, 0.0), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 2.0, 4.0, 8.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-3, 0.1])
def test_the_epsilon_of_mu_gdp_is_opakes(mu, delta):
    assert E.gdp_epsilon(mu, delta) == pytest.approx(_gdp._gdp_to_eps_delta(mu, delta), abs=1e-8)


def test_where_opakes_mu_gdp_differs_its_chernoff_bound_is_below_the_truth_with_every_guess_right(tight):
    """The definitional difference, pinned: with r = m the errors are Binomial(m, Φ(-μ/2)) exactly, so all m right
    has probability (1 - Φ(-μ/2))^m; opake's independent-Bernoulli(v_k) product is smaller, so its μ̂ is above
    the largest μ that this probability rejects (ours), and the exact probability at its μ̂ exceeds 0.05."""
    for m in (40, 100):
        theirs = GdpMethod(_stand_in(m, m, 0))._mu_at(0.05, None)
        ours = E.mu_lower_bound_gdp(m, m, m)
        assert ours < theirs
        truth = np.exp(m * math.log1p(-math.exp(E.log_ndtr(-theirs / 2))))
        assert _gdp._p_value(m, m, 0, theirs) < 0.05 < truth
    # with errors the Chernoff bound is the looser one: opake's μ̂ is below ours
    assert GdpMethod(_stand_in(1000, 100, 10))._mu_at(0.05, None) < E.mu_lower_bound_gdp(1000, 100, 90)
