"""Loss-based memorization: recollection, counterfactual and contextual measures (paper 004, Sec. 3).

`memorization_measures(train_loss, control_loss, tau)` — pure numpy on (epochs, strings) loss arrays — is
the one definition of the three measures in the project (docs/architecture.md: one metric, one place). The losses come
from the model layer (memlens.harness.model.logprobs through the scorer and its cache); harness/audit/losses.py
runs the measures over every checkpoint of a run. Canary exposure (Carlini et al. 2019) is
harness/measures/exposure.py.

Where the task text and paper 004 differ (we follow the task text):

1. Clipping. The paper states Eq. 1-2 are "in [0, 1]" and proves Lemma 1 under the assumption that the
   training loss is never above the counterfactual loss (Appendix D). Real runs break that assumption
   (the audited model can forget a string again after onset), so the raw Eq. 1/2 can go negative.
   The task says to clip to [0, 1]; we clip both Eq. 1 and Eq. 2. The upper clip never binds because
   we require losses >= 0 (cross-entropy), which also makes Lemma 1 hold without the paper's
   assumption (see `_validate`; tests/unit/harness/measures/test_losses.py checks it by property tests).
2. "From onset on". The paper: mem(s, e) = Eq. for e >= e_s, 0 before (Sec. 2, RQ2). We apply the
   formula for every e >= onset and clip, exactly so. Because the raw Eq. 1 (Eq. 2) is > 0 exactly
   when the onset condition holds at that epoch, clipped scores after onset are 0 at epochs where
   the string is (temporarily) not memorized; "from onset on" therefore does not keep a string
   "memorized forever" once it started — `frac` counts strings with score > 0 at that epoch, as the
   paper's mem_frac(D, e) = E_s[1(mem(s, e) > 0)] (Sec. 4) does.
3. Recollection score is the paper's per-epoch indicator 1(loss(M_e, s) < tau), not "1 from the
   onset on": a string whose loss rises above tau again scores 0 at that epoch.
4. The paper's E_{D ~ L} expectation over resampled datasets (Eq. 1-2, "expected" memorization) is
   one sample here: one audited run and one control run.
5. Reference-model proxy (Sec. 5): the paper compares recollection *accuracy* of M and M_ref; we
   use M_ref's *loss* as an epoch-constant control loss in Eq. 1-2 (so counterfactual == contextual),
   labelled `reference_upper_bound` in every output.
6. e* (Fig. 3, "test loss is the lowest") is the checkpoint with the lowest mean audited-model loss
   on an example set named as held-out by the caller (e.g. pd_eval).
"""

from __future__ import annotations

from typing import Any

import numpy as np

LOSS_MEASURES = ("recollection", "counterfactual", "contextual")


# ---------------------------------------------------------------------------------------------
# The three measures (paper 004 Sec. 3, Eq. 1-2; dataset level Sec. 4)
# ---------------------------------------------------------------------------------------------

def _as_loss_array(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (epochs, strings); got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one epoch and one string; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} has a non-finite value at (epoch {bad[0]}, string {bad[1]}); "
                         "drop that string or recompute its loss")
    return arr


def _validate(train_loss: Any, control_loss: Any, tau: float) -> tuple[np.ndarray, np.ndarray]:
    train = _as_loss_array("train_loss", train_loss)
    control = _as_loss_array("control_loss", control_loss)
    if train.shape != control.shape:
        raise ValueError(f"train_loss shape {train.shape} != control_loss shape {control.shape}; both are "
                         "(epochs, strings) at the same checkpoints for the same strings")
    if np.any(control <= 0):
        bad = np.argwhere(control <= 0)[0]
        raise ValueError(f"control_loss must be > 0 (it divides Eq. 1-2); got {control[tuple(bad)]} at "
                         f"(epoch {bad[0]}, string {bad[1]})")
    # Cross-entropy is >= 0. A negative training loss is a bug upstream, and it would break Lemma 1's
    # score inequality (t/min_c >= t/c_e needs t >= 0).
    if np.any(train < 0):
        bad = np.argwhere(train < 0)[0]
        raise ValueError(f"train_loss must be >= 0 (a cross-entropy); got {train[tuple(bad)]} at "
                         f"(epoch {bad[0]}, string {bad[1]})")
    if not (isinstance(tau, (int, float, np.floating)) and np.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be a positive finite loss threshold; got {tau!r}")
    return train, control


def first_true(mask: np.ndarray) -> np.ndarray:
    """Per column of an (epochs, strings) bool array: the first epoch index that is True, else -1."""
    any_true = mask.any(axis=0)
    return np.where(any_true, mask.argmax(axis=0), -1)


def _from_onset(onset: np.ndarray, epochs: int) -> np.ndarray:
    """(epochs, strings) mask: epoch index >= the string's onset (never for onset -1)."""
    e = np.arange(epochs)[:, None]
    return (onset[None, :] >= 0) & (e >= onset[None, :])


def _relative_gap_score(threshold: np.ndarray, train: np.ndarray, onset: np.ndarray) -> np.ndarray:
    """(threshold - train) / threshold from the onset on, 0 before; clipped to [0, 1] (task text)."""
    raw = (threshold - train) / threshold
    return np.clip(np.where(_from_onset(onset, train.shape[0]), raw, 0.0), 0.0, 1.0)


def _dataset_level(score: np.ndarray) -> dict[str, np.ndarray]:
    """Paper 004 Sec. 4: mem_frac(D, e) = E_s[1(mem > 0)], mem_weighted(D, e) = E_s[mem]."""
    return {"frac": (score > 0).mean(axis=1), "weighted": score.mean(axis=1)}


def memorization_measures(train_loss, control_loss, tau: float = 0.2) -> dict:
    """Recollection, counterfactual and contextual memorization of each string at each epoch.

    train_loss, control_loss: (epochs, strings) losses of each string under the audited run's
    checkpoint at each epoch and under the control run (same schedule, trained without the strings).

    Returns {measure: {"onset": (strings,) int, first memorized epoch or -1,
                       "score": (epochs, strings) float in [0, 1],
                       "frac": (epochs,) share of strings with score > 0,
                       "weighted": (epochs,) mean score}}
    for measure in recollection / counterfactual / contextual, plus "tau" and
    "optimal_contextual_loss" (strings,) = min over epochs of control_loss.
    """
    train, control = _validate(train_loss, control_loss, tau)

    # (a) Recollection (Sec. 3a): fixed threshold tau; score is the per-epoch indicator.
    rec_mask = train < tau
    rec_onset = first_true(rec_mask)
    rec_score = rec_mask.astype(np.float64)

    # (b) Counterfactual (Sec. 3b, Eq. 1): string-and-epoch threshold = control loss at the same epoch.
    cf_onset = first_true(train < control)
    cf_score = _relative_gap_score(control, train, cf_onset)

    # (c) Contextual (Sec. 3c, Eq. 2): string-only threshold = optimal contextual loss, the lowest
    # control loss over all epochs.
    optimal = control.min(axis=0)
    ctx_onset = first_true(train < optimal[None, :])
    ctx_score = _relative_gap_score(np.broadcast_to(optimal, train.shape), train, ctx_onset)

    out: dict[str, Any] = {"tau": float(tau), "optimal_contextual_loss": optimal}
    for name, onset, score in (("recollection", rec_onset, rec_score),
                               ("counterfactual", cf_onset, cf_score),
                               ("contextual", ctx_onset, ctx_score)):
        out[name] = {"onset": onset.astype(np.int64), "score": score, **_dataset_level(score)}
    return out
