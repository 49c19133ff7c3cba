"""PREMIA's pair scores (harness/measures/preference_mia.py) on log-probs whose margins and AUC are derivable on paper,
and against a brute-force reference built from the probabilities themselves."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.core.stats import roc_auc
from memlens.harness.measures import preference_mia as pm
from memlens.harness.measures.mia import attack_metrics

# One pair: the audited model's and the reference's per-token log-probs of the chosen and the rejected completion.
CHOSEN, REF_CHOSEN = {"logp": [-1.0, -2.0]}, {"logp": [-2.0, -2.0]}       # sums -3 and -4: r(x, y_w) = +1
REJECTED, REF_REJECTED = {"logp": [-3.0]}, {"logp": [-1.0]}              # sums -3 and -1: r(x, y_l) = -2


def test_each_pair_score_by_hand():
    p = pm.PairLogprobs.of(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED)
    assert (p.chosen, p.rejected, p.ref_chosen, p.ref_rejected) == (-3.0, -3.0, -4.0, -1.0)
    assert pm.chosen_log_ratio(p) == 1.0
    assert pm.rejected_log_ratio(p) == -2.0
    assert pm.premia_pair_score(p) == 3.0          # 1 - (-2): the DPO implicit-reward margin over β
    assert pm.premia_chosen_score(p) == 1.0
    assert pm.policy_margin_score(p) == 0.0        # -3 - (-3): the policy alone cannot tell the two apart
    assert pm.pair_scores(p) == {"premia_pair": 3.0, "premia_chosen": 1.0, "policy_margin": 0.0}


def test_the_pair_auc_by_hand():
    # members' margins 3 and 1, non-members' 2 and 0: of the four (member, non-member) pairs, 3>2, 3>0, 1>0 win and
    # 1<2 loses, so AUC = 3/4.
    pairs = [pm.PairLogprobs(c, r, rc, rr) for c, r, rc, rr in
             ((-1.0, -5.0, -2.0, -3.0), (-2.0, -2.0, -2.0, -1.0), (-1.0, -4.0, -2.0, -3.0), (-1.0, -1.0, -1.0, -1.0))]
    scores = [pm.premia_pair_score(p) for p in pairs]
    assert scores == [3.0, 1.0, 2.0, 0.0]
    metrics = attack_metrics(scores[:2], scores[2:], n_boot=50, seed=0)
    assert metrics["auc"]["value"] == 0.75
    assert (metrics["n_members"], metrics["n_nonmembers"]) == (2, 2)


def test_the_reference_must_score_the_same_tokens():
    with pytest.raises(ValueError, match="same tokens"):
        pm.PairLogprobs.of(CHOSEN, REJECTED, {"logp": [-1.0]}, REF_REJECTED)
    with pytest.raises(ValueError, match="non-empty"):
        pm.sequence_logprob({"logp": []})


def test_pair_text_holds_the_whole_tuple():
    row = {"prefix": "def f():\n", "chosen": "    return 1", "rejected": "    return 2", "suffix": "\n# end"}
    assert pm.pair_text(row) == "def f():\n\n    return 1\n    return 2\n\n# end"
    assert list(pm.PAIR_ATTACKS) == ["premia_pair", "premia_chosen", "policy_margin"]
    assert [a.reference for a in pm.PAIR_ATTACKS.values()] == [True, True, False]



def _brute_margin(pw, pref_w, pl, pref_l) -> float:
    """log of (Π p_w / Π p_ref,w) / (Π p_l / Π p_ref,l), from the probabilities as a product, the DPO margin's
    definition (Rafailov et al. 2023, Eq. 7, over β)."""
    ratio = (math.prod(pw) / math.prod(pref_w)) / (math.prod(pl) / math.prod(pref_l))
    return math.log(ratio)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_pair_margin_equals_the_brute_force_ratio(data):
    n_w, n_l = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    draw = lambda n: data.draw(st.lists(st.floats(1e-3, 1.0), min_size=n, max_size=n))  # noqa: E731
    pw, pref_w, pl, pref_l = draw(n_w), draw(n_w), draw(n_l), draw(n_l)
    logs = lambda ps: {"logp": [math.log(x) for x in ps]}  # noqa: E731
    p = pm.PairLogprobs.of(logs(pw), logs(pl), logs(pref_w), logs(pref_l))
    assert pm.premia_pair_score(p) == pytest.approx(_brute_margin(pw, pref_w, pl, pref_l), abs=1e-9)
    assert pm.premia_chosen_score(p) == pytest.approx(math.log(math.prod(pw) / math.prod(pref_w)), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=8), st.lists(st.integers(-5, 5), min_size=1, max_size=8))
def test_pair_auc_equals_the_brute_force_count(members, nonmembers):
    # AUC = P(member margin > non-member margin) + 1/2 P(tie), counted over every (member, non-member) pair
    wins = sum((m > n) + 0.5 * (m == n) for m in members for n in nonmembers)
    brute = wins / (len(members) * len(nonmembers))
    members_f, nonmembers_f = [float(m) for m in members], [float(n) for n in nonmembers]
    assert roc_auc(members_f + nonmembers_f, [1] * len(members) + [0] * len(nonmembers)) == pytest.approx(brute)
    assert attack_metrics(members_f, nonmembers_f, n_boot=5, seed=0)["auc"]["value"] == pytest.approx(brute)
