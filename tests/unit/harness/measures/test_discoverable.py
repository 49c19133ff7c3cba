"""Probabilistic discoverable extraction (Hayes et al. 2024): the (n, p) rule by hand and against the direct
formula, the counterfactual rates, the per-token probability of each decoding scheme on hand-made logits
(transformers' order: temperature, then top-k keeping ties), and the audit settings' errors."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from memlens.harness.audit.discoverable import settings_from_audit
from memlens.harness.core.errors import UserError
from memlens.harness.measures.discoverable import (
    counterfactually_discoverable,
    discoverable_rates,
    extraction_probability,
    is_discoverable,
)
from memlens.harness.model.logprobs import SamplingScheme, scheme_token_logprobs

LOG_HALF = math.log(0.5)


def test_the_n_p_rule_by_hand():
    # p_z = 1/2: one query 1/2, two 3/4, three 7/8.
    assert extraction_probability(LOG_HALF, 1) == pytest.approx(0.5)
    assert extraction_probability(LOG_HALF, 3) == pytest.approx(0.875)
    assert is_discoverable(LOG_HALF, 3, 0.8) and not is_discoverable(LOG_HALF, 2, 0.8)
    # Greedy's p_z is 0 or 1; a log-probability a float32 sum rounded just above 0 counts as 1.
    assert extraction_probability(0.0, 1) == 1.0 and extraction_probability(3e-7, 1) == 1.0
    assert extraction_probability(-math.inf, 10**6) == 0.0
    # A tiny p_z does not round to 0: n * p_z to first order.
    assert extraction_probability(-50.0, 10_000) == pytest.approx(10_000 * math.exp(-50), rel=1e-6)
    with pytest.raises(ValueError, match="pass log p, not p"):
        extraction_probability(0.5, 1)
    with pytest.raises(ValueError, match="positive integer"):
        is_discoverable(LOG_HALF, 0, 0.5)


@settings(max_examples=200, deadline=None)
@given(st.fractions(min_value=Fraction(1, 1000), max_value=Fraction(999, 1000)), st.integers(1, 60))
def test_extraction_probability_is_the_exact_formula(p_z, n):
    exact = 1 - (1 - p_z) ** n                      # exact rational arithmetic
    assert extraction_probability(math.log(p_z), n) == pytest.approx(float(exact), rel=1e-9, abs=1e-12)


def test_counterfactual_rates_by_hand():
    audited = [0.0, LOG_HALF, -math.inf]
    control = [-math.inf, 0.0, -math.inf]
    assert counterfactually_discoverable(0.0, -math.inf, 1, 0.5)
    assert not counterfactually_discoverable(LOG_HALF, 0.0, 1, 0.5)      # the control extracts it too
    rates = discoverable_rates(audited, control, 1, 0.5)
    assert rates["audited"]["k"] == 2 and rates["control"]["k"] == 1 and rates["counterfactual"]["k"] == 1
    assert rates["counterfactual"]["n"] == 3 and rates["counterfactual"]["rate"] == pytest.approx(1 / 3)
    low, high = rates["counterfactual"]["ci95"]
    assert low < 1 / 3 < high
    # More queries: the second example clears p = 0.9 for the audited model at n = 4 (1 - 1/16).
    assert discoverable_rates(audited, control, 4, 0.9)["audited"]["k"] == 2
    assert discoverable_rates(audited, control, 3, 0.9)["audited"]["k"] == 1


def test_scheme_probabilities_on_hand_made_logits():
    import torch

    logits = torch.tensor([[2.0, 1.0, 1.0, 0.0], [0.0, 3.0, 0.0, 0.0]])
    logp = torch.log_softmax(logits, dim=-1)
    target = torch.tensor([0, 2])
    greedy = scheme_token_logprobs(logp, target, SamplingScheme("greedy", 0))
    assert greedy[0] == 0 and greedy[1] == -math.inf
    # T = 1, top-2: the tie at the 2nd largest logit keeps three tokens (transformers' TopKLogitsWarper).
    top2 = scheme_token_logprobs(logp, torch.tensor([1, 2]), SamplingScheme("k2", 1.0, 2)).exp()
    e = math.e
    assert top2[0].item() == pytest.approx(e / (e * e + 2 * e), rel=1e-6)
    assert top2[1].item() == pytest.approx(1 / (e ** 3 + 3), rel=1e-6)     # row 2: all three 0s tie, all kept
    # Row 2 at top-1 keeps only token 1: any other target has probability 0.
    assert scheme_token_logprobs(logp, torch.tensor([0, 2]), SamplingScheme("k1", 1.0, 1))[1] == -math.inf
    # T = 0.5 without top-k: softmax(2 * logits).
    t_half = scheme_token_logprobs(logp, target, SamplingScheme("t", 0.5)).exp()
    assert t_half[0].item() == pytest.approx(e ** 4 / (e ** 4 + 2 * e ** 2 + 1), rel=1e-6)
    assert t_half[1].item() == pytest.approx(1 / (e ** 6 + 3), rel=1e-6)


def test_bad_settings_name_the_key():
    def cfg(**over):
        base = {"discoverable_schemes": [{"name": "greedy", "temperature": 0}], "discoverable_queries": [1, 10],
                "discoverable_p": [0.5]}
        return OmegaConf.create({**base, **over})

    s = settings_from_audit(cfg())
    assert s.schemes[0].greedy and s.queries == (1, 10) and s.probabilities == (0.5,)
    cases = [
        ({"discoverable_schemes": []}, r"audit\.discoverable_schemes=\[\]: give a list"),
        ({"discoverable_schemes": [{"name": "a", "temperature": -1}]}, r"discoverable_schemes\[0\]: .*>= 0"),
        ({"discoverable_schemes": [{"name": "a", "top_k": 0}]}, r"discoverable_schemes\[0\]: .*top_k=0"),
        ({"discoverable_schemes": [{"name": "a", "topk": 5}]}, r"discoverable_schemes\[0\]: unknown key"),
        ({"discoverable_schemes": [{"name": "a"}, {"name": "a"}]}, r"names \['a', 'a'\] repeat"),
        ({"discoverable_queries": [0]}, r"audit\.discoverable_queries=\[0\]: each number of queries must be >= 1"),
        ({"discoverable_queries": [1.5]}, r"audit\.discoverable_queries=\[1\.5\]: give a non-empty list"),
        ({"discoverable_p": [0]}, r"audit\.discoverable_p=\[0\.0\]: each probability must be in \(0, 1\]"),
    ]
    for over, message in cases:
        with pytest.raises(UserError, match=message):
            settings_from_audit(cfg(**over))


def test_a_retired_model_leaves_no_discoverable_result_behind(tmp_path):
    """Retraining a model moves its discoverable rows to stale/ and takes out of the summary every entry computed
    from its weights: as the audited model and as another model's control."""
    from memlens.harness.audit.retire import retire_model_results
    from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, read_json

    audit = tmp_path / "audit"
    entry = lambda control: {"n_scored": 1, "control": control}  # noqa: E731
    atomic_write_json(audit / "discoverable" / "summary.json", {"rule": "r", "results": {
        "FT.3": {"final": {"sd_base": entry("FT.2")}},
        "RLFT.2": {"final": {"sd_base": entry("FT.3"), "sd_links_pos": entry("FT.2")}},
        "IPO": {"final": {"sd_base": entry("FT.3")}}}})
    atomic_write_jsonl(audit / "discoverable" / "FT.3" / "final" / "sd_base.jsonl", [{"id": 1}])
    moved = retire_model_results(audit, tmp_path / "models" / "FT.3", "FT.3", tmp_path / "stale", log=lambda _: None)
    assert moved == [audit / "discoverable" / "FT.3"]
    assert (tmp_path / "stale" / "discoverable" / "FT.3" / "final" / "sd_base.jsonl").is_file()
    left = read_json(audit / "discoverable" / "summary.json")
    assert left["results"] == {"RLFT.2": {"final": {"sd_links_pos": entry("FT.2")}}} and left["rule"] == "r"
