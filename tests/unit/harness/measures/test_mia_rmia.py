"""RMIA (Zarifzadeh, Liu and Shokri, ICML 2024), offline, with the control as the one OUT reference model and the
held-out texts as the population: by hand, against a brute-force double loop, its leave-one-out rule, its reduction to
the reference attack at a = 1, and against the authors' own `run_rmia` (ml_privacy_meter e384af8, MIT, transcribed
verbatim in tests/authors_code/rmia_privacy_meter.py).

A text's per-token values are given with a constant log-prob, so its mean log-likelihood is that log-prob and
Pr(x | θ) = exp(mean LL) is the probability written in each case.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memlens.harness.measures import mia
from tests.authors_code import rmia_privacy_meter as authors

LL = st.floats(-8.0, 0.0)


def _values(p: float, n: int = 3) -> dict:
    """Per-token values of an n-token text whose every token has probability p (mean LL = ln p)."""
    return {"logp": [math.log(p)] * n}


def _population(texts: dict) -> mia.Population:
    """{id: (Pr(z | θ), Pr(z | control))} as a Population."""
    return mia.Population.of({i: _values(pm) for i, (pm, _) in texts.items()},
                             {i: _values(pr) for i, (_, pr) in texts.items()})


# Pr(x | θ), Pr(x | control) of one text and three population texts. With a = 0.3, Pr(.) = 0.65 Pr(.|control) + 0.35:
#   x : 0.5 / (0.65 * 0.2 + 0.35) = 0.5 / 0.48 = 1.0417
#   z1: 0.4 / (0.65 * 0.6 + 0.35) = 0.4 / 0.74 = 0.5405     LR(x, z1) = 1.927
#   z2: 0.9 / (0.65 * 0.2 + 0.35) = 0.9 / 0.48 = 1.875      LR(x, z2) = 0.556
#   z3: 0.3 / (0.65 * 1.0 + 0.35) = 0.3 / 1.00 = 0.3        LR(x, z3) = 3.472
X = (0.5, 0.2)
Z = {"z1": (0.4, 0.6), "z2": (0.9, 0.2), "z3": (0.3, 1.0)}


def test_rmia_by_hand():
    population = _population(Z)
    score = lambda gamma: mia.rmia_score(_values(X[0]), _values(X[1]), population, "x", gamma=gamma)  # noqa: E731
    assert mia.rmia_ratio(math.log(0.5), math.log(0.2)) == pytest.approx(0.5 / 0.48)
    assert score(mia.RMIA_GAMMA) == pytest.approx(2 / 3)      # beats z1 and z3 (LR > 1)
    assert score(2.0) == pytest.approx(1 / 3)                 # only z3's LR exceeds 2 (the paper code's gamma)
    assert score(4.0) == 0.0


def test_the_defaults_are_the_authors():
    # get_out_ref_signals(offline_a=0.3) and run_rmia's `ratios > 1.0`: fixed before any run, never tuned.
    assert (mia.RMIA_OFFLINE_A, mia.RMIA_GAMMA) == (0.3, 1.0)
    assert mia.offline_probability(0.2) == pytest.approx(0.48)
    assert mia.offline_probability(0.2, a=1.0) == pytest.approx(0.2)      # a = 1: the OUT model's probability
    assert mia.offline_probability(0.2, a=0.0) == pytest.approx(0.6)      # a = 0: halfway to 1
    with pytest.raises(ValueError, match="offline a"):
        mia.offline_probability(0.2, a=1.5)


def test_the_scored_text_is_never_its_own_population():
    # x is also a held-out text (a non-member), so the population holds it under its own id: left out, it scores 2/3
    # as above; counted, it would score 2/4 (LR(x, x) = 1 is not > 1).
    population = _population({**Z, "x": X})
    assert mia.rmia_score(_values(X[0]), _values(X[1]), population, "x") == pytest.approx(2 / 3)
    assert mia.rmia_score(_values(X[0]), _values(X[1]), population, "member-7") == pytest.approx(2 / 4)
    assert population.without("x").ids == ("z1", "z2", "z3") and len(population.without("x").model_ll) == 3
    with pytest.raises(ValueError, match="no population text besides 'x'"):
        mia.rmia_score(_values(X[0]), _values(X[1]), _population({"x": X}), "x")


def test_the_registered_attack_reads_the_control_and_the_population():
    attack = mia.ATTACKS["rmia"]
    assert attack.needs == frozenset({mia.CONTROL, mia.POPULATION}) and not attack.read_by_findings
    inputs = mia.AttackInputs(values=_values(X[0]), text="t", control=_values(X[1]),
                              population=_population({**Z, "x": X}), text_id="x")
    assert attack.scores(inputs) == pytest.approx(2 / 3)
    assert attack.scores(mia.AttackInputs(values=_values(X[0]), text="t", control=_values(X[1]))) is None


def _brute_force(x: tuple[float, float], population: dict, text_id, a: float, gamma: float, rtol: float
                 ) -> tuple[float, float]:
    """The share of population texts z (text_id left out) with LR(x, z) > gamma, by a plain loop over z, counted with
    gamma raised and lowered by rtol: (lower, upper) bounds for a score computed in another order of operations."""
    def ratio(ll_model, ll_ref):
        return math.exp(ll_model) / ((1 + a) / 2 * math.exp(ll_ref) + (1 - a) / 2)

    lrs = [ratio(*x) / ratio(*z) for i, z in population.items() if i != text_id]
    return (sum(lr > gamma * (1 + rtol) for lr in lrs) / len(lrs), sum(lr > gamma * (1 - rtol) for lr in lrs) / len(lrs))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_rmia_of_every_text_is_the_double_loop(data):
    """Members and non-members, the non-members the population (each left out of its own): every score is the brute
    force's share of z with LR(x, z) > γ."""
    nonmembers = data.draw(st.lists(st.tuples(LL, LL), min_size=2, max_size=12))
    members = data.draw(st.lists(st.tuples(LL, LL), min_size=1, max_size=6))
    a = data.draw(st.floats(0.0, 1.0))
    gamma = data.draw(st.sampled_from([mia.RMIA_GAMMA, 0.5, 2.0, 3.7]))
    texts = {f"n{i}": t for i, t in enumerate(nonmembers)} | {f"m{i}": t for i, t in enumerate(members)}
    population = {i: t for i, t in texts.items() if i.startswith("n")}
    pop = mia.Population.of({i: {"logp": [m]} for i, (m, _) in population.items()},
                            {i: {"logp": [r]} for i, (_, r) in population.items()})
    for i, (m, r) in texts.items():
        ours = mia.rmia_score({"logp": [m]}, {"logp": [r]}, pop, i, a=a, gamma=gamma)
        low, high = _brute_force((m, r), population, i, a, gamma, rtol=1e-12)
        assert low <= ours <= high, (i, ours, low, high)


def _signal(ll: float) -> np.ndarray:
    """Their per-text signal of one text, exp(mean LL) as a 1-element array, through the same exp as ours (math.exp
    and numpy's can differ in the last bit, which flips a tie LR = 1 exactly)."""
    return mia.text_probability([ll])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_rmia_is_the_authors_run_rmia(data):
    """The authors' run_rmia with one OUT reference model (the control, a member of nothing: memberships all False) on
    their language-model signal exp(mean LL); the leave-one-out is done by handing them the population without x."""
    population = data.draw(st.lists(st.tuples(LL, LL), min_size=2, max_size=12))
    scored = data.draw(st.lists(st.tuples(LL, LL), min_size=1, max_size=6))
    pop = mia.Population.of({i: {"logp": [m]} for i, (m, _) in enumerate(population)},
                            {i: {"logp": [r]} for i, (_, r) in enumerate(population)})
    z_model = mia.text_probability([m for m, _ in population])
    z_ref = mia.text_probability([r for _, r in population])[:, None]
    for m, r in scored:
        theirs = authors.run_rmia(_signal(m), _signal(r)[:, None], np.zeros((1, 1), dtype=bool), z_model, z_ref,
                                  mia.RMIA_OFFLINE_A)
        assert mia.rmia_score({"logp": [m]}, {"logp": [r]}, pop, "not in it") == theirs[0]
    # Leaving one out: theirs on the population without text 0, ours told that text 0 is the scored one.
    m, r = population[0]
    theirs = authors.run_rmia(_signal(m), _signal(r)[:, None], np.zeros((1, 1), dtype=bool), z_model[1:], z_ref[1:],
                              mia.RMIA_OFFLINE_A)
    assert mia.rmia_score({"logp": [m]}, {"logp": [r]}, pop, 0) == theirs[0]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_with_a_equal_one_rmia_ranks_texts_as_the_reference_attack(data):
    """At a = 1, Pr(x) = Pr(x | control), so Pr(x | θ) / Pr(x) = exp(LL_θ(x) − LL_control(x)) = exp(ref(x)), ref the
    reference attack's score (NLL_control − NLL_θ). LR(x, z) > γ ⇔ ref(z) < ref(x) − ln γ, so against one population
    RMIA's score is the share of z with ref(z) < ref(x) − ln γ: a non-decreasing step function of ref(x). Hence
    ref(x1) < ref(x2) ⇒ RMIA(x1) ≤ RMIA(x2) for any γ; and where the population is the scored texts themselves (each
    left out of its own) with γ = 1, RMIA(x_i) = #{j ≠ i: ref_j < ref_i} / (n − 1), the rank of ref: the same order."""
    texts = data.draw(st.lists(st.tuples(LL, LL), min_size=2, max_size=12))
    others = data.draw(st.lists(st.tuples(LL, LL), min_size=1, max_size=8))
    gamma = data.draw(st.sampled_from([1.0, 2.0]))
    values = {i: ({"logp": [m]}, {"logp": [r]}) for i, (m, r) in enumerate(texts)}
    ref = {i: mia.reference_score(v, c) for i, (v, c) in values.items()}
    pop = mia.Population.of({f"z{j}": {"logp": [m]} for j, (m, _) in enumerate(others)},
                            {f"z{j}": {"logp": [r]} for j, (_, r) in enumerate(others)})
    rmia = {i: mia.rmia_score(v, c, pop, i, a=1.0, gamma=gamma) for i, (v, c) in values.items()}
    for i in values:
        for j in values:
            if ref[i] < ref[j] - 1e-9:
                assert rmia[i] <= rmia[j]
    itself = mia.Population.of({i: v for i, (v, _) in values.items()}, {i: c for i, (_, c) in values.items()})
    ranked = {i: mia.rmia_score(v, c, itself, i, a=1.0, gamma=1.0) for i, (v, c) in values.items()}
    distinct = sorted(ref.values())
    if all(b - a > 1e-9 for a, b in zip(distinct, distinct[1:])):      # ties aside, the order is the reference's
        assert sorted(values, key=ranked.get) == sorted(values, key=ref.get)


def test_below_a_equal_one_rmia_is_not_the_reference_attack():
    # x1: Pr(.|θ) = Pr(.|control) = 0.9 (ref 0); x2: 0.2 against 0.1 (ref ln 2 > 0); z: 0.5 against 0.5. At a = 0.3:
    # r(x1) = 0.9 / 0.935 = 0.963, r(x2) = 0.2 / 0.415 = 0.482, r(z) = 0.5 / 0.675 = 0.741: x1 beats z, x2 does not,
    # though x2's reference score is the higher. At a = 1, r = exp(ref): x2 (2.0) beats z (1.0), x1 (1.0) does not.
    pop = _population({"z": (0.5, 0.5)})
    x1, x2 = (_values(0.9), _values(0.9)), (_values(0.2), _values(0.1))
    assert mia.reference_score(*x1) < mia.reference_score(*x2)
    assert (mia.rmia_score(*x1, pop, "x1"), mia.rmia_score(*x2, pop, "x2")) == (1.0, 0.0)
    assert (mia.rmia_score(*x1, pop, "x1", a=1.0), mia.rmia_score(*x2, pop, "x2", a=1.0)) == (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_against_the_evaluated_nonmembers_rmia_has_the_auc_of_its_ratio_up_to_two_ties(data):
    """The audit's population is its evaluated non-members (docs/methods.md, "RMIA"). With γ = 1, LR(x, z) > 1 ⇔
    r(x) > r(z), r = Pr(.|θ) / Pr(.): a member m scores #{z: r_z < r_m} / n, a non-member x, left out of its own
    population, #{z ≠ x: r_z < r_x} / (n − 1). For r_m > r_x with k non-members below x: m ≥ (k + 1) / n ≥ k / (n − 1)
    = x, equal only when x is the top non-member and m is above all; symmetrically at the bottom. So, the r distinct,
    AUC(RMIA) =
    AUC(r) − ½ #(members above every non-member) / (n_m n) + ½ #(members below every non-member) / (n_m n)."""
    from memlens.harness.core.stats import roc_auc

    members = data.draw(st.lists(st.tuples(LL, LL), min_size=1, max_size=10))
    held = data.draw(st.lists(st.tuples(LL, LL), min_size=2, max_size=10))
    texts = {f"m{i}": t for i, t in enumerate(members)} | {f"n{i}": t for i, t in enumerate(held)}
    pop = mia.Population.of({i: {"logp": [t[0]]} for i, t in texts.items() if i[0] == "n"},
                            {i: {"logp": [t[1]]} for i, t in texts.items() if i[0] == "n"})
    score = [mia.rmia_score({"logp": [m]}, {"logp": [r]}, pop, i) for i, (m, r) in texts.items()]
    ratio = [float(mia.rmia_ratio(m, r)) for m, r in texts.values()]
    assume(len(set(ratio)) == len(ratio))           # the derivation's r are distinct (a tie in r is a tie in both)
    labels = [1] * len(members) + [0] * len(held)
    r_members, r_held = ratio[:len(members)], ratio[len(members):]
    top, bottom = sum(r > max(r_held) for r in r_members), sum(r < min(r_held) for r in r_members)
    pairs = len(members) * len(held)
    expected = roc_auc(ratio, labels) - 0.5 * top / pairs + 0.5 * bottom / pairs
    assert roc_auc(score, labels) == pytest.approx(expected, abs=1e-12)


def test_under_perfect_separation_no_member_outscores_the_top_heldout_text():
    """Four members whose ratio r is above every one of n = 5 held-out texts (the population, each left out of its
    own): each member scores 5/5, the top held-out text 4/4, so AUC = 1 − 1/(2n) = 0.9 and no threshold admits a
    member without a false positive (TPR at FPR < 1/n = 0), while the ratios themselves separate perfectly."""
    from memlens.harness.core.stats import roc_auc, tpr_at_fpr

    held = {f"n{i}": (math.log(0.1 + 0.1 * i), math.log(0.5)) for i in range(5)}
    members = {f"m{i}": (math.log(0.8 + 0.05 * i), math.log(0.5)) for i in range(4)}
    pop = mia.Population.of({i: {"logp": [m]} for i, (m, _) in held.items()},
                            {i: {"logp": [r]} for i, (_, r) in held.items()})
    texts = {**members, **held}
    score = [mia.rmia_score({"logp": [m]}, {"logp": [r]}, pop, i) for i, (m, r) in texts.items()]
    labels = [1] * 4 + [0] * 5
    assert score == [1.0] * 4 + [0.0, 0.25, 0.5, 0.75, 1.0]
    assert roc_auc([m - r for m, r in texts.values()], labels) == 1.0
    assert roc_auc(score, labels) == pytest.approx(1 - 1 / (2 * 5))
    assert tpr_at_fpr(score, labels, 1 / 5) == 0.0
