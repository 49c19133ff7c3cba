"""Min-kNN distance (harness/measures/prompt_mia.py; Zhang et al. 2026) by hand on three completions, and against a
brute-force reference on random ones."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.measures import prompt_mia as pm


def test_nn_distances_and_min_knn_by_hand():
    # "aaaa" vs "aaab": 1 edit / 4 = 0.25; "aaaa" vs "bbbb": 4 / 4 = 1.0; "aaab" vs "bbbb": 3 / 4 = 0.75.
    c = ["aaaa", "aaab", "bbbb"]
    assert pm.nn_distances(c) == [0.25, 0.25, 0.75]
    assert pm.min_knn_distance(c, 1) == 0.25
    assert pm.min_knn_distance(c, 2) == 0.25
    assert pm.min_knn_distance(c, 3) == pytest.approx((0.25 + 0.25 + 0.75) / 3)
    assert pm.min_knn_distance(c, 10) == pm.min_knn_distance(c, 3)        # k capped at m


def test_identical_samples_score_highest_and_scores_by_hand():
    collapsed = pm.PromptSamples(("x = 1", "x = 1"), ("aaaa", "aaab", "bbbb"))
    # policy: both samples equal, NN distance 0; initial: k = 2 smallest of [0.25, 0.25, 0.75] = 0.25
    assert pm.prompt_scores(collapsed, 2) == {"min_knn": 0.0, "mean_nn": 0.0, "min_knn_vs_initial": 0.25}
    diverse = pm.PromptSamples(("aaaa", "aaab", "bbbb"), ("aaaa", "aaab", "bbbb"))
    scores = pm.prompt_scores(diverse, 2)
    assert scores["min_knn"] == -0.25 and scores["min_knn_vs_initial"] == 0.0
    assert scores["mean_nn"] == pytest.approx(-(0.25 + 0.25 + 0.75) / 3)
    assert pm.PRIMARY_PROMPT_ATTACK in pm.PROMPT_ATTACKS and pm.PROMPT_ATTACKS["min_knn_vs_initial"].initial


def test_empty_completions_and_too_few_samples():
    assert pm.nn_distances(["", ""]) == [0.0, 0.0]          # NED of two empty strings is 0 (harness/text/distance.py)
    assert pm.nn_distances(["", "ab"]) == [1.0, 1.0]
    with pytest.raises(ValueError, match="at least 2"):
        pm.nn_distances(["only"])
    with pytest.raises(ValueError, match="k=0"):
        pm.min_knn_distance(["a", "b"], 0)


def _levenshtein(a: str, b: str) -> int:
    """The textbook dynamic programme (the reference the rapidfuzz-based NED is checked against)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _brute_min_knn(c: list[str], k: int) -> float:
    ned = {(i, j): (_levenshtein(c[i], c[j]) / max(len(c[i]), len(c[j])) if max(len(c[i]), len(c[j])) else 0.0)
           for i, j in itertools.permutations(range(len(c)), 2)}
    nn = sorted(min(ned[i, j] for j in range(len(c)) if j != i) for i in range(len(c)))
    return sum(nn[:min(k, len(c))]) / min(k, len(c))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab x=\n", max_size=12), min_size=2, max_size=6), st.integers(1, 7))
def test_min_knn_matches_a_brute_force_reference(completions, k):
    assert pm.min_knn_distance(completions, k) == pytest.approx(_brute_min_knn(completions, k), abs=1e-12)


def test_diba_features_by_hand():
    s = pm.PromptSamples(("a", "b"), ("a", "b"), policy_rewards=(1.0, 3.0), initial_rewards=(0.5, 0.5),
                         drift=(0.2, -0.1, 0.5))
    assert pm.reward_gain_score(s, 1) == 1.5                  # mean 2.0 - mean 0.5
    assert pm.policy_drift_score(s, 1) == pytest.approx(0.2)  # (0.2 - 0.1 + 0.5) / 3
    assert set(pm.prompt_scores(s, 1)) == {"min_knn", "mean_nn", "min_knn_vs_initial", "reward_gain", "policy_drift"}
    assert set(pm.prompt_scores(pm.PromptSamples(("a", "b"), ("a", "b")), 1)) == {"min_knn", "mean_nn",
                                                                                  "min_knn_vs_initial"}
    assert pm.diba_combined([1.0, 1.0], [0.0, 2.0]) == [-1.0, 1.0]   # a constant feature adds 0
