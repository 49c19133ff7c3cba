# ruff: noqa: UP045  (the authors' Optional[int] annotations kept verbatim)
# Reference transcription of RMIA's offline scoring, from the authors' repository.
#
#   source repo : https://github.com/privacytrustlab/ml_privacy_meter
#   source file : modules/mia/attacks/rmia.py (functions get_out_ref_signals, run_rmia; verbatim,
#                 tune_offline_a left out: it tunes `offline_a` on a second target model)
#   commit      : e384af8fd9319b8eeb1303aa82474df1441e3c59 (2025-04-26, "Update README.md")
#   license     : MIT (Copyright (c) 2020 Data Privacy and Trustworthy Machine Learning Research Lab;
#                 permission notice below)
#   paper       : Zarifzadeh, Liu and Shokri, "Low-Cost High-Power Membership Inference Attacks",
#                 ICML 2024
#
# Their language-model signal (get_signals.py `get_softmax`, PreTrainedModel branch) is
# exp(masked mean of the true tokens' log-probs): the callers pass that as *_signals.
#
# Permission is hereby granted, free of charge, to any person obtaining a copy of this software
# and associated documentation files (the "Software"), to deal in the Software without
# restriction, including without limitation the rights to use, copy, modify, merge, publish,
# distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
# Software is furnished to do so, subject to the following conditions: The above copyright notice
# and this permission notice shall be included in all copies or substantial portions of the
# Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED,
# INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE
# AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
# DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
# OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
from typing import Optional  # changed: `Any` (used only by tune_offline_a) dropped; sklearn import dropped

import numpy as np


def get_out_ref_signals(
    ref_signals: np.ndarray,
    ref_memberships: np.ndarray,
    num_reference_models: Optional[int] = None,
    offline_a: float = 0.3,
) -> np.ndarray:
    """
    Get average prediction probability of samples over offline reference models (excluding the target model).

    Args:
        ref_signals (np.ndarray): Softmax value of all samples in all reference model.  Shape: (num_samples * num_models)
        ref_memberships (np.ndarray): Membership matrix for all reference models (if a sample is used for training a model).  Shape: (num_samples * num_models)
        num_reference_models (Optional[int]): Number of reference models used for the attack. Defaults to half reference models if None.
        offline_a (float): Coefficient offline_a is used to approximate p(x) using P_out in the offline setting.

    Returns:
        np.ndarray: Average softmax value for each sample over OUT reference models.
    """
    non_members = ~ref_memberships
    out_signals = ref_signals * non_members
    # Sort the signals such that only the non-zero signals (out signals) for each sample are kept
    if num_reference_models is None:
        num_reference_models = ref_signals.shape[1]
    if num_reference_models > 1:
        out_signals = -np.sort(-out_signals, axis=1)[:, :num_reference_models]
    else:
        # Derive according to ((1+a)P_out + (1-a))/2 = P(x) = (P_out + P_in)/2
        if offline_a != 0:
            out_signals += ((ref_signals + offline_a - 1) / offline_a) * ref_memberships
        else:
            out_signals += ((ref_signals - 0.7) / 0.3) * ref_memberships
    return out_signals


def run_rmia(
    target_signals: np.ndarray,
    ref_signals: np.ndarray,
    ref_memberships: np.ndarray,
    z_target_signals: np.ndarray,
    z_ref_signals: np.ndarray,
    offline_a: float,
    num_reference_models: Optional[int] = None,
) -> np.ndarray:
    """
    Attack a target model using the RMIA attack with the help of offline reference models.

    Args:
        target_signals (np.ndarray): Softmax value of all samples in the target model.
        ref_signals (np.ndarray): Softmax value of all samples in the reference models.
        ref_memberships (np.ndarray): Membership matrix for all reference models.
        z_target_signals (np.ndarray): Softmax value of population samples in the target model.
        z_ref_signals (np.ndarray): Softmax value of population samples in all reference models.
        offline_a (float): Coefficient offline_a is used to approximate p(x) using P_out in the offline setting.
        num_reference_models (Optional[int]): Number of reference models used for the attack. Defaults to half reference models if None.

    Returns:
        np.ndarray: MIA score for all samples (a larger score indicates higher chance of being member).
    """
    assert len(ref_signals.shape) > 1, "ref_signals must be a 2D array"
    if num_reference_models is None:
        num_reference_models = max(ref_signals.shape[1] // 2, 1)
    out_signals = get_out_ref_signals(
        ref_signals, ref_memberships, num_reference_models, offline_a
    )
    mean_out_x = np.mean(out_signals, axis=1)
    mean_x = (1 + offline_a) / 2 * mean_out_x + (1 - offline_a) / 2
    prob_ratio_x = target_signals.ravel() / mean_x

    population_memberships = np.zeros_like(z_ref_signals).astype(
        bool
    )  # All population data are OUT for all models
    z_out_signals = get_out_ref_signals(
        z_ref_signals, population_memberships, num_reference_models, offline_a
    )
    mean_out_z = np.mean(z_out_signals, axis=1)
    mean_z = (1 + offline_a) / 2 * mean_out_z + (1 - offline_a) / 2
    prob_ratio_z = z_target_signals.ravel() / mean_z

    ratios = prob_ratio_x[:, np.newaxis] / prob_ratio_z
    counts = np.average(ratios > 1.0, axis=1)

    return counts
