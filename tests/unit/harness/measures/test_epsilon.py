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
    columns, rows = report_rows(world["audit"])
    assert columns == ["model", "checkpoint", "dataset", "m", "guesses r", "correct v", "ε lower bound", "δ"]
    assert [r["checkpoint"] for r in rows] == ["checkpoint-10", "final"]
    assert rows[1] | {"ε lower bound": None} == {"model": "FT.1", "checkpoint": "final", "dataset": "sd_base", "m": 40,
                                                  "guesses r": 20, "correct v": 20, "ε lower bound": None, "δ": 0.0}
    # a rerun (e.g. after a kill) writes the same results
    before = {k: v for k, v in summary.items() if k != "provenance"}
    audit_epsilon_models(_cfg(tmp_path, epsilon_guesses=[[0.25, 0.25]]), ["FT.1"], log=said.append)
    assert {k: v for k, v in read_json(path).items() if k != "provenance"} == before


def test_the_measure_refuses_split_membership_stale_rows_and_bad_settings(tmp_path):
    from memlens.harness.audit.epsilon import audit_epsilon_models
    from memlens.harness.audit.plan import requested_measures
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
