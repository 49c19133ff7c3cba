"""Paper 004's three memorization measures on hand-built loss arrays, plus Lemma 1 as a property."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memlens.harness.measures.losses import LOSS_MEASURES, memorization_measures

# Three epochs, four strings (columns). Values chosen so every score is derivable by hand.
#   s0: recollection only — loss falls below tau=0.2 but never below the control's loss.
#   s1: counterfactual but not contextual — below the same-epoch control at e1, never below min control 0.8.
#   s2: memorized by all three.
#   s3: memorized at e1, forgotten at e2 (raw Eq. 1/2 = -0.2 there -> clipped to 0).
TRAIN = np.array([[0.5, 2.0, 1.5, 1.0],
                  [0.15, 0.9, 0.4, 0.5],
                  [0.1, 0.8, 0.1, 1.2]])
CONTROL = np.array([[0.5, 2.0, 2.0, 1.0],
                    [0.15, 1.0, 1.0, 1.0],
                    [0.1, 0.8, 0.5, 1.0]])


def test_onsets_by_hand():
    m = memorization_measures(TRAIN, CONTROL, tau=0.2)
    assert m["recollection"]["onset"].tolist() == [1, -1, 2, -1]
    assert m["counterfactual"]["onset"].tolist() == [-1, 1, 0, 1]
    assert m["contextual"]["onset"].tolist() == [-1, -1, 1, 1]
    assert m["optimal_contextual_loss"].tolist() == [0.1, 0.8, 0.5, 1.0]


def test_scores_by_hand():
    m = memorization_measures(TRAIN, CONTROL, tau=0.2)
    np.testing.assert_allclose(m["recollection"]["score"],
                               [[0, 0, 0, 0], [1, 0, 0, 0], [1, 0, 1, 0]])
    # Eq. 1: (control_e - train_e) / control_e from the onset on.
    np.testing.assert_allclose(m["counterfactual"]["score"],
                               [[0, 0, 0.25, 0], [0, 0.1, 0.6, 0.5], [0, 0, 0.8, 0]])
    # Eq. 2: (min_e control - train_e) / min_e control from the onset on.
    np.testing.assert_allclose(m["contextual"]["score"],
                               [[0, 0, 0, 0], [0, 0, 0.2, 0.5], [0, 0, 0.8, 0]])


def test_dataset_level_by_hand():
    m = memorization_measures(TRAIN, CONTROL, tau=0.2)
    np.testing.assert_allclose(m["recollection"]["frac"], [0, 0.25, 0.5])
    np.testing.assert_allclose(m["recollection"]["weighted"], [0, 0.25, 0.5])
    np.testing.assert_allclose(m["counterfactual"]["frac"], [0.25, 0.75, 0.25])
    np.testing.assert_allclose(m["counterfactual"]["weighted"], [0.25 / 4, 1.2 / 4, 0.8 / 4])
    np.testing.assert_allclose(m["contextual"]["frac"], [0, 0.5, 0.25])
    np.testing.assert_allclose(m["contextual"]["weighted"], [0, 0.7 / 4, 0.8 / 4])


def test_tau_moves_recollection_only():
    lo, hi = memorization_measures(TRAIN, CONTROL, tau=0.12), memorization_measures(TRAIN, CONTROL, tau=1.0)
    assert lo["recollection"]["onset"].tolist() == [2, -1, 2, -1]
    assert hi["recollection"]["onset"].tolist() == [0, 1, 1, 1]
    for name in ("counterfactual", "contextual"):
        np.testing.assert_array_equal(lo[name]["score"], hi[name]["score"])


@pytest.mark.parametrize("train, control, match", [
    (np.ones(3), np.ones(3), "2-D"),
    (np.ones((2, 3)), np.ones((3, 2)), "shape"),
    (np.ones((0, 3)), np.ones((0, 3)), "at least one epoch"),
    (np.array([[1.0, np.nan]]), np.ones((1, 2)), "non-finite .* string 1"),
    (np.ones((1, 2)), np.array([[1.0, np.inf]]), "non-finite"),
    (np.ones((2, 2)), np.array([[1.0, 1.0], [0.0, 1.0]]), "control_loss must be > 0"),
    (np.array([[1.0, -0.1]]), np.ones((1, 2)), "train_loss must be >= 0"),
])
def test_bad_inputs_raise_clear_value_errors(train, control, match):
    with pytest.raises(ValueError, match=match):
        memorization_measures(train, control)


@pytest.mark.parametrize("tau", [0, -1, float("nan"), "0.2"])
def test_bad_tau(tau):
    with pytest.raises(ValueError, match="tau"):
        memorization_measures(TRAIN, CONTROL, tau=tau)


# ---------------------------------------------------------------- properties vs a brute-force reference

def _reference(train, control, tau):
    """The definitions of Sec. 3 written as plain loops, one string and one epoch at a time."""
    epochs, strings = train.shape
    out = {k: {"onset": [], "score": np.zeros((epochs, strings))} for k in LOSS_MEASURES}
    for s in range(strings):
        best_control = min(control[e][s] for e in range(epochs))
        conditions = {
            "recollection": [train[e][s] < tau for e in range(epochs)],
            "counterfactual": [train[e][s] < control[e][s] for e in range(epochs)],
            "contextual": [train[e][s] < best_control for e in range(epochs)],
        }
        for name, cond in conditions.items():
            onset = next((e for e in range(epochs) if cond[e]), -1)
            out[name]["onset"].append(onset)
            for e in range(epochs):
                if onset == -1 or e < onset:
                    continue
                if name == "recollection":
                    value = 1.0 if cond[e] else 0.0
                else:
                    threshold = control[e][s] if name == "counterfactual" else best_control
                    value = min(1.0, max(0.0, (threshold - train[e][s]) / threshold))
                out[name]["score"][e][s] = value
    return out


def _loss_arrays():
    shape = st.tuples(st.integers(1, 6), st.integers(1, 5))
    loss = st.floats(min_value=0.0, max_value=8.0, allow_nan=False)
    positive = st.floats(min_value=1e-3, max_value=8.0, allow_nan=False)
    return shape.flatmap(lambda sh: st.tuples(hnp.arrays(np.float64, sh, elements=loss),
                                               hnp.arrays(np.float64, sh, elements=positive)))


@settings(max_examples=300, deadline=None)
@given(_loss_arrays(), st.floats(min_value=0.01, max_value=4.0))
def test_matches_brute_force_reference(arrays, tau):
    train, control = arrays
    got, ref = memorization_measures(train, control, tau), _reference(train, control, tau)
    for name in LOSS_MEASURES:
        assert got[name]["onset"].tolist() == ref[name]["onset"]
        np.testing.assert_allclose(got[name]["score"], ref[name]["score"], atol=1e-12)
        np.testing.assert_allclose(got[name]["frac"], (ref[name]["score"] > 0).mean(axis=1))
        np.testing.assert_allclose(got[name]["weighted"], ref[name]["score"].mean(axis=1), atol=1e-12)


@settings(max_examples=500, deadline=None)
@given(_loss_arrays())
def test_lemma_1_on_every_string(arrays):
    """Contextual onset never precedes counterfactual onset; contextual score <= counterfactual score.

    Holds for any non-negative losses, without the paper's assumption train <= control (Appendix D).
    """
    train, control = arrays
    m = memorization_measures(train, control)
    cf, ctx = m["counterfactual"], m["contextual"]
    for s in range(train.shape[1]):
        if ctx["onset"][s] != -1:
            assert cf["onset"][s] != -1 and cf["onset"][s] <= ctx["onset"][s]
    assert np.all(ctx["score"] <= cf["score"] + 1e-12)
    for name in LOSS_MEASURES:
        assert np.all((m[name]["score"] >= 0) & (m[name]["score"] <= 1))


@settings(max_examples=200, deadline=None)
@given(_loss_arrays())
def test_score_positive_exactly_where_condition_holds_after_onset(arrays):
    """With clipping, 'from onset on' = 'at epochs where the onset condition holds' (module note 2)."""
    train, control = arrays
    m = memorization_measures(train, control)
    np.testing.assert_array_equal(m["counterfactual"]["score"] > 0, train < control)
    np.testing.assert_array_equal(m["contextual"]["score"] > 0, train < control.min(axis=0))


def test_reference_model_control_makes_cf_and_ctx_coincide():
    """A fixed reference model (Sec. 5 proxy) gives an epoch-constant control: Eq. 1 == Eq. 2."""
    train = np.array([[2.0, 1.0], [1.0, 0.2], [0.5, 0.1]])
    ref = np.tile([[1.5, 0.5]], (3, 1))
    m = memorization_measures(train, ref)
    np.testing.assert_array_equal(m["counterfactual"]["score"], m["contextual"]["score"])
    assert m["contextual"]["onset"].tolist() == [1, 1]
    assert math.isclose(m["contextual"]["score"][2, 0], (1.5 - 0.5) / 1.5)
