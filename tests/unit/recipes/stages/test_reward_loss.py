"""The pointwise reward loss (BCE with the score as logit) and the AUC of reward scores, by hand."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from memlens.harness.core.stats import roc_auc
from memlens.recipes.stages.reward import pointwise_reward_loss


def test_pointwise_loss_hand_values():
    # score 0 -> p = 1/2 for either label: loss ln 2.
    assert float(pointwise_reward_loss(torch.tensor([0.0]), torch.tensor([1.0]))) == pytest.approx(math.log(2))
    # score ln 3 -> p(label 1) = 3/4: loss -ln(3/4) for label 1, -ln(1/4) for label 0; the batch mean of both.
    s = torch.tensor([math.log(3), math.log(3)])
    expected = (-math.log(0.75) - math.log(0.25)) / 2
    assert float(pointwise_reward_loss(s, torch.tensor([1.0, 0.0]))) == pytest.approx(expected)
    # A confident correct score costs ~0, a confident wrong one ~|score|.
    assert float(pointwise_reward_loss(torch.tensor([20.0]), torch.tensor([1]))) < 1e-8
    assert float(pointwise_reward_loss(torch.tensor([-20.0]), torch.tensor([1]))) == pytest.approx(20.0, rel=1e-6)


def test_pointwise_loss_gradient_is_sigmoid_minus_label():
    s = torch.tensor([0.0, math.log(3)], requires_grad=True)
    pointwise_reward_loss(s, torch.tensor([1.0, 0.0])).backward()
    assert s.grad.tolist() == pytest.approx([(0.5 - 1) / 2, (0.75 - 0) / 2])


def test_auc_hand_values():
    assert roc_auc([0.1, 0.9], [0, 1]) == 1.0
    assert roc_auc([0.9, 0.1], [0, 1]) == 0.0
    assert roc_auc([0.5, 0.5], [0, 1]) == 0.5                  # a tie counts one half
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75  # the classic example: 3 of 4 pairs ordered
    assert roc_auc([1.0, 2.0], [1, 1]) is None                  # one class only: undefined


def brute_force_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@given(st.lists(st.tuples(st.integers(-5, 5), st.integers(0, 1)), min_size=2, max_size=40))
def test_auc_matches_pair_counting(pairs):
    scores = [float(s) for s, _ in pairs]
    labels = [y for _, y in pairs]
    if len(set(labels)) < 2:
        assert roc_auc(scores, labels) is None
    else:
        assert roc_auc(scores, labels) == pytest.approx(brute_force_auc(scores, labels))
