"""Membership-inference attacks and metrics on inputs whose values are derivable on paper."""

import random
import zlib

import pytest

from memlens.harness.core.stats import bootstrap_mia_metrics, fpr_key, roc_auc, tpr_at_fpr
from memlens.harness.measures import mia

# Four target tokens: log p(x_t | x_<t), and mu / var of log p(z | x_<t) under the model (Min-K%++).
FOUR = {"logp": [-0.1, -2.0, -0.5, -1.0], "mu": [-0.5, -1.0, -1.0, -2.0], "var": [0.25, 1.0, 0.25, 4.0],
        "ids": [1, 2, 3, 4], "top1": [1, 0, 0, 0]}
CONTROL = {"logp": [-1.0, -1.0, -1.0, -1.0], "mu": [0.0] * 4, "var": [1.0] * 4}


def test_each_attack_by_hand_on_four_tokens():
    # mean NLL = (0.1 + 2.0 + 0.5 + 1.0) / 4 = 0.9
    assert mia.loss_score(FOUR) == pytest.approx(-0.9)
    # zlib.compress(b"abcd") is 12 bytes (2 header + 6 deflate + 4 Adler-32): -0.9 / 12
    assert len(zlib.compress(b"abcd")) == 12
    assert mia.zlib_score(FOUR, "abcd") == pytest.approx(-0.075)
    # Min-K% at k = 50 %: the two least likely tokens, -2.0 and -1.0
    assert mia.min_k_score(FOUR, k=0.5) == pytest.approx(-1.5)
    # k = 20 % of 4 tokens is 0.8: the one least likely token
    assert mia.min_k_score(FOUR, k=0.2) == pytest.approx(-2.0)
    # Min-K%++: z = (logp - mu) / sqrt(var) = [0.4/0.5, -1/1, 0.5/0.5, 1/2] = [0.8, -1, 1, 0.5]; lowest two mean
    assert mia.min_k_plus_plus_score(FOUR, k=0.5) == pytest.approx(-0.25)
    assert mia.min_k_plus_plus_score(FOUR, k=0.2) == pytest.approx(-1.0)
    # reference: control NLL 1.0 minus audited 0.9
    assert mia.reference_score(FOUR, CONTROL) == pytest.approx(0.1)
    scores = mia.attack_scores(mia.AttackInputs(FOUR, "abcd", control=CONTROL))
    assert set(scores) == set(mia.ATTACKS)
    assert scores["reference"] == pytest.approx(0.1)
    assert mia.attack_scores(mia.AttackInputs(FOUR, "abcd"))["reference"] is None


def test_a_zero_variance_position_does_not_divide_by_zero():
    values = {"logp": [0.0, -1.0], "mu": [0.0, -1.0], "var": [0.0, 0.0]}
    assert mia.min_k_plus_plus_score(values, k=1.0) == 0.0


def test_bad_per_token_values_are_refused():
    with pytest.raises(ValueError):
        mia.loss_score({"logp": []})
    with pytest.raises(ValueError):
        mia.min_k_plus_plus_score({"logp": [-1.0, -2.0], "mu": [0.0], "var": [1.0, 1.0]})
    with pytest.raises(ValueError):
        mia.min_k_score(FOUR, k=0)


def _brute_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (len(pos) * len(neg))


def _brute_tpr(scores, labels, fpr):
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    best = 0.0
    for t in sorted(set(scores)) + [float("inf")]:
        if sum(n >= t for n in neg) / len(neg) < fpr:
            best = max(best, sum(p >= t for p in pos) / len(pos))
    return best


def test_tpr_at_fpr_counts_only_thresholds_strictly_below_the_fpr():
    """100 non-members scored 0..99, members 99.5 and 98.5. Flagging 99.5 costs no false positive (TPR 1/2 at FPR 0);
    flagging 98.5 as well flags non-member 99: FPR exactly 1 %, which `FPR < 1 %` (mimir, LiRA) does not allow."""
    nonmembers = [float(i) for i in range(100)]
    scores, labels = [99.5, 98.5, *nonmembers], [1, 1] + [0] * 100
    assert tpr_at_fpr(scores, labels, 0.01) == 0.5
    assert tpr_at_fpr(scores, labels, 0.0101) == 1.0          # just above 1 %: the second member counts
    assert tpr_at_fpr(scores, labels, 0.001) == 0.5
    assert bootstrap_mia_metrics([99.5, 98.5], nonmembers, n_boot=10)[fpr_key(0.01)]["value"] == 0.5


def _mimir_tpr(scores, labels, fpr):
    """mimir's and LiRA's reading of a ROC curve, written from their code: every (FPR, TPR) point of a descending
    threshold sweep, then the TPR of the last point whose FPR is below `fpr`."""
    pos, neg = sum(labels), len(labels) - sum(labels)
    points = [(0.0, 0.0)] + [(sum(1 for s, y in zip(scores, labels) if s >= t and not y) / neg,
                               sum(1 for s, y in zip(scores, labels) if s >= t and y) / pos)
                              for t in sorted(set(scores), reverse=True)]
    return [tpr for f, tpr in points if f < fpr][-1]


@pytest.mark.parametrize("seed", range(12))
def test_auc_and_tpr_at_fpr_match_brute_force_with_ties(seed):
    rng = random.Random(seed)
    n = rng.randint(4, 300)
    labels = [rng.randint(0, 1) for _ in range(n)]
    labels[0], labels[1] = 0, 1
    scores = [float(rng.randint(0, rng.choice([3, 10, 1000]))) for _ in range(n)]   # many ties
    members = [s for s, y in zip(scores, labels) if y == 1]
    nonmembers = [s for s, y in zip(scores, labels) if y == 0]
    got = bootstrap_mia_metrics(members, nonmembers, n_boot=20, seed=1)
    assert got["auc"]["value"] == pytest.approx(_brute_auc(scores, labels))
    assert got["auc"]["value"] == pytest.approx(roc_auc(scores, labels))
    for fpr in (0.01, 0.001, 0.1, 0.5, 0.02, 0.25):
        assert tpr_at_fpr(scores, labels, fpr) == pytest.approx(_brute_tpr(scores, labels, fpr))
        assert tpr_at_fpr(scores, labels, fpr) == pytest.approx(_mimir_tpr(scores, labels, fpr))
    for fpr in (0.01, 0.001):
        assert got[fpr_key(fpr)]["value"] == pytest.approx(_brute_tpr(scores, labels, fpr))


def test_bootstrap_interval_is_seeded_states_n_and_holds_the_estimate():
    rng = random.Random(0)
    members = [rng.gauss(1.0, 1.0) for _ in range(80)]
    nonmembers = [rng.gauss(0.0, 1.0) for _ in range(120)]
    a = bootstrap_mia_metrics(members, nonmembers, n_boot=500, seed=3)
    assert a == bootstrap_mia_metrics(members, nonmembers, n_boot=500, seed=3)
    assert a["auc"]["ci95"] != bootstrap_mia_metrics(members, nonmembers, n_boot=500, seed=4)["auc"]["ci95"]
    assert a["bootstrap"]["n"] == 500 and a["n_members"] == 80 and a["n_nonmembers"] == 120
    low, high = a["auc"]["ci95"]
    assert low < a["auc"]["value"] < high and 0.6 < a["auc"]["value"] < 0.9
    assert a["auc"]["p_at_most"]["0.5"] < 0.05            # clearly above chance: the one-sided test rejects
    separated = bootstrap_mia_metrics([5.0, 6.0, 7.0], [1.0, 2.0], n_boot=50)
    assert separated["auc"] == {"value": 1.0, "ci95": [1.0, 1.0], "p_at_most": {"0.5": 0.0, "0.6": 0.0}}
    same = bootstrap_mia_metrics([1.0, 2.0, 3.0] * 10, [1.0, 2.0, 3.0] * 10, n_boot=200)
    assert same["auc"]["value"] == 0.5 and same["auc"]["p_at_most"]["0.5"] > 0.3
    assert separated[fpr_key(0.001)]["value"] == 1.0
    with pytest.raises(ValueError):
        bootstrap_mia_metrics([], [1.0])
