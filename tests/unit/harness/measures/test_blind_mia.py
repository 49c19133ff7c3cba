"""The blind baseline (Das et al. 2024 Sec. 3, bag of words; harness/measures/blind_mia.py): at chance on a split drawn
by coins from one distribution, near 1 on a split that differs in a word, deterministic for a seed, read by the same
AUC / TPR helpers (and n/m rule) as the attacks, and its AUC the one scikit-learn's own roc_auc_score computes."""

from __future__ import annotations

import random

import pytest

from memlens.harness.core.stats import fpr_key, roc_auc
from memlens.harness.measures.blind_mia import blind_baseline, blind_scores, distinguishable_without_model

WORDS = [f"name{i}" for i in range(50)]


def _texts(rng: random.Random, n: int, length: int = 20) -> list[str]:
    """n texts of one distribution: `length` words drawn uniformly from 50."""
    return [" ".join(rng.choice(WORDS) for _ in range(length)) for _ in range(n)]


def _coin_split(seed: int, n: int = 200) -> tuple[list[str], list[str]]:
    """Texts of one distribution, each a member or not by its own fair coin (as memlens.inject splits canaries)."""
    rng = random.Random(seed)
    members, nonmembers = [], []
    for text in _texts(rng, n):
        (members if rng.random() < 0.5 else nonmembers).append(text)
    return members, nonmembers


def test_a_coin_split_of_one_distribution_is_at_chance():
    """No word tells the sides apart, so the classifier has nothing to learn: its out-of-fold AUC's interval holds 0.5
    (one fixed draw), and over 4 independent draws the AUCs centre on 0.5 (their mean within 3 of its standard
    errors, ~0.07 / sqrt(4): a biased baseline, e.g. one that saw its test fold, would sit well above)."""
    members, nonmembers = _coin_split(7, n=120)
    found = blind_baseline(members, nonmembers, n_boot=400, seed=0)["metrics"]
    assert found["auc"]["ci95"][0] < 0.5 < found["auc"]["ci95"][1], found["auc"]
    assert not distinguishable_without_model(found)
    aucs = []
    for draw in range(4):
        members, nonmembers = _coin_split(100 + draw, n=80)
        scores = blind_scores(members + nonmembers, [1] * len(members) + [0] * len(nonmembers), seed=draw)
        aucs.append(roc_auc(scores, [1] * len(members) + [0] * len(nonmembers)))
    mean = sum(aucs) / len(aucs)
    assert abs(mean - 0.5) < 3 * 0.07 / len(aucs) ** 0.5, aucs


def test_a_split_that_differs_in_a_word_is_told_apart_without_the_model():
    """Every member has a word no non-member has ("memberonly"): one split on its count separates the sides in
    every training fold (and is among the 30 most frequent words, their feature count), so each held-out text is scored
    by it: AUC 1 (every member above every non-member), its
    interval above 0.5, and the audit's warning fires (distinguishable_without_model)."""
    rng = random.Random(3)
    members = [t + " memberonly" for t in _texts(rng, 60)]
    nonmembers = _texts(rng, 60)
    found = blind_baseline(members, nonmembers, n_boot=400, seed=0)["metrics"]
    assert found["auc"]["value"] == 1.0 and found["auc"]["ci95"][0] > 0.5
    assert distinguishable_without_model(found)
    # 60 non-members: a TPR at FPR < 1 % does not exist there (needs >= 100); the helper says so, as for an attack
    assert found[fpr_key(0.01)]["measurable"] is False and found[fpr_key(0.001)]["measurable"] is False


def test_its_auc_is_scikit_learns_on_the_same_scores():
    """The AUC is the project's (memlens.harness.core.stats), checked against scikit-learn's own roc_auc_score, an
    independent implementation, on the blind scores of a partly shifted split (half the members carry the word)."""
    from sklearn.metrics import roc_auc_score

    rng = random.Random(5)
    # three times in half the members: frequent enough to be among their 30 features (max_features keeps the most
    # frequent words of the training texts)
    members = [t + (" memberonly" * 3 if i % 2 else "") for i, t in enumerate(_texts(rng, 40))]
    nonmembers = _texts(rng, 40)
    found = blind_baseline(members, nonmembers, n_boot=200, seed=1)
    ours, theirs = found["metrics"]["auc"]["value"], roc_auc_score([1] * 40 + [0] * 40, [*found["scores"][0],
                                                                                          *found["scores"][1]])
    assert ours == pytest.approx(theirs, abs=1e-12) and 0.6 < ours < 1.0


def test_deterministic_for_a_seed():
    """The same texts and seed give the same scores and interval, bit for bit; the folds and every model of the stack follow the seed."""
    members, nonmembers = _coin_split(11, n=30)
    first = blind_baseline(members, nonmembers, n_boot=200, seed=4)
    again = blind_baseline(members, nonmembers, n_boot=200, seed=4)
    other = blind_baseline(members, nonmembers, n_boot=200, seed=5)
    assert first == again
    assert first["scores"] != other["scores"]


def test_too_few_texts_for_a_fold_split_give_none_and_wordless_texts_the_prior():
    """k-fold needs two texts of each side (one to train on while the other is scored). Texts with no word of 2+
    characters (a FIM target such as "x)") give the forest no feature: each is scored the member share of the folds
    it was not in (here 2 of 4 in each of the 3 folds: 0.5), never an error."""
    assert blind_baseline(["ab cd"], ["ef gh", "ij kl"], n_boot=10, seed=0) is None
    assert blind_scores(["a b", "c d", "e f", "g h", "i j", "k l"], [1, 0, 1, 0, 1, 0], seed=0) == [0.5] * 6
    with pytest.raises(ValueError, match="labels"):
        blind_scores(["a b", "c d"], [1, 2], seed=0)


def test_a_set_too_small_for_the_stacks_own_folds_still_gets_scores():
    """Their stack fits its combiner on 5 folds of its own; with 3 texts a side the outer split has 3 folds whose
    training parts hold 2 of each side: the stack then uses 2 folds (a 4-text call once failed here), and a side of 1
    in training gives the fold's member share."""
    members, nonmembers = ["a1 w1 w2", "a2 w3 w1", "a3 w2 w2"], ["b1 w1 w3", "b2 w2 w1", "b3 w3 w3"]
    found = blind_baseline(members, nonmembers, n_boot=50, seed=0)
    assert found is not None and len(found["scores"][0]) == len(found["scores"][1]) == 3
    assert blind_scores(["x w1", "y w2", "z w1", "v w2"], [1, 1, 0, 0], seed=0) == [0.5] * 4
