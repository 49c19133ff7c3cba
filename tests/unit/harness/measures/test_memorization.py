"""Definition 3.1 (k-approximate counterfactual memorization), exclusions (Sec. 4.2, Appendices B, D),
the rate, and PII-path regurgitation (Sec. 5.1/5.2)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.measures.memorization import counterfactually_memorized, pii_regurgitated, summarize_rows
from memlens.harness.text.distance import sliding_window_ned
from memlens.harness.text.exclusions import (
    PROMPT_TOO_LONG,
    SHORT_TARGET,
    TARGET_IN_PROMPT,
    exclusion_reason,
    exclusion_reasons,
)

# --- counterfactually_memorized ------------------------------------------------------------------------

@pytest.mark.parametrize("ned_model,ned_control,expected", [
    (0.0, 1.0, True),
    (0.1, 0.2, True),     # ned_model == k counts as reproduced ("<= k")
    (0.05, 0.1, False),   # ned_control == k: the control reproduces it too (not "> k")
    (0.1, 0.1, False),
    (0.11, 0.9, False),   # the audited model does not reproduce it
    (0.0, 0.0, False),    # both reproduce it: guessable, not memorized
])
def test_counterfactual_boundaries(ned_model, ned_control, expected):
    assert counterfactually_memorized(ned_model, ned_control) is expected


def test_counterfactual_custom_k():
    assert counterfactually_memorized(0.2, 0.3, k=0.2) is True
    assert counterfactually_memorized(0.2, 0.3, k=0.1) is False
    assert counterfactually_memorized(0.0, 0.3, k=0.3) is False


# --- exclusion_reason --------------------------------------------------------------------------------

def test_short_target_threshold():
    assert exclusion_reason("p", "some target", "s", 9) == SHORT_TARGET
    assert exclusion_reason("p", "some target", "s", 10) is None
    assert exclusion_reason("p", "some target", "s", 10, min_target_tokens=11) == SHORT_TARGET


def test_short_target_is_checked_first():
    # The target is in the prefix too, but the short-target reason wins.
    assert exclusion_reason("x = compute(a)", "compute(a)", "", 3) == SHORT_TARGET


def test_target_in_prefix_or_suffix():
    assert exclusion_reason("y = 1\nprint(total)\n", "print(total)", "", 12) == TARGET_IN_PROMPT
    assert exclusion_reason("", "print(total)", "\nprint(total)", 12) == TARGET_IN_PROMPT
    assert exclusion_reason("import os\n", "print(total)", "", 12) is None


def test_prompt_threshold_is_strict():
    # Equal lengths: one window. "abcd" vs "abxy": 2 substitutions -> 0.5, kept (Appendix D: 0.5 is
    # "not similar"); vs "abcy": 1 substitution -> 0.25, excluded.
    assert exclusion_reason("abxy", "abcd", "", 10) is None
    assert exclusion_reason("abcy", "abcd", "", 10) == TARGET_IN_PROMPT
    assert exclusion_reason("abxy", "abcd", "", 10, prompt_ned_threshold=0.51) == TARGET_IN_PROMPT


def test_prefix_and_suffix_are_slid_separately():
    # Appendix D slides the target over the prefix and over the suffix, not over their concatenation:
    # "xxab" and "cdyy" each share only "ab"/"cd" with "abcd" (>= 2 edits: NED >= 0.5), although
    # "xxab" + "cdyy" contains the target.
    assert sliding_window_ned("abcd", "xxab" + "cdyy") == 0.0
    assert exclusion_reason("xxab", "abcd", "cdyy", 10) is None


def test_empty_prompt_sides_are_skipped():
    assert exclusion_reason("", "abcd", "", 10) is None
    # an empty suffix is not "a string at NED 1.0"; the prefix alone decides
    assert exclusion_reason("abcd", "abcd", "", 10) == TARGET_IN_PROMPT


def test_exclusion_reasons_hand_batch():
    assert exclusion_reasons(["abcy", "xxab", "x = f(a)", ""], ["abcd", "abcd", "f(a)", "abcd"],
                             ["", "cdyy", "", ""], [10, 10, 2, 10]) == \
        [TARGET_IN_PROMPT, None, SHORT_TARGET, None]
    with pytest.raises(ValueError, match="differ in length"):
        exclusion_reasons(["a"], ["b"], [], [10])


ROW_TEXT = st.text(alphabet="ab(x)", max_size=15)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(ROW_TEXT, ROW_TEXT.filter(bool), ROW_TEXT, st.integers(0, 20)), max_size=10),
       st.floats(0.0, 1.0))
def test_exclusion_reasons_equals_row_by_row(rows, threshold):
    prefixes, targets, suffixes, counts = (list(col) for col in zip(*rows)) if rows else ([], [], [], [])
    expected = [exclusion_reason(p, t, s, n, prompt_ned_threshold=threshold) for p, t, s, n in rows]
    assert exclusion_reasons(prefixes, targets, suffixes, counts, prompt_ned_threshold=threshold) == expected


# --- summarize_rows ----------------------------------------------------------------------------------

def test_summarize_rows_by_hand():
    rows = [
        {"memorized": True, "excluded": None},
        {"memorized": False, "excluded": None},
        {"memorized": False, "excluded": None},
        {"memorized": True, "excluded": SHORT_TARGET},      # excluded rows never count as memorized
        {"memorized": False, "excluded": TARGET_IN_PROMPT},
    ]
    # ci95: Wilson for 1 of 3, centre (1/3 + z^2/6) / (1 + z^2/3), half-width z sqrt(2/27 + z^2/36) / (1 + z^2/3)
    assert summarize_rows(rows) == {"n_total": 5, "n_excluded": 2, "n_scored": 3, "n_memorized": 1,
                                    "rate": 1 / 3, "ci95": [pytest.approx(0.0615, abs=1e-4),
                                                            pytest.approx(0.7923, abs=1e-4)],
                                    "excluded_by_reason": {PROMPT_TOO_LONG: 0, SHORT_TARGET: 1, TARGET_IN_PROMPT: 1}}


def test_summarize_rows_nothing_scored():
    assert summarize_rows([]) == {"n_total": 0, "n_excluded": 0, "n_scored": 0, "n_memorized": 0,
                                  "rate": None, "ci95": None,
                                  "excluded_by_reason": {PROMPT_TOO_LONG: 0, SHORT_TARGET: 0, TARGET_IN_PROMPT: 0}}
    assert summarize_rows(iter([{"memorized": True, "excluded": SHORT_TARGET}]))["rate"] is None


# --- pii_regurgitated --------------------------------------------------------------------------------

def test_pii_regurgitated():
    path = "/home/alice_smith/keys/id_rsa"
    assert pii_regurgitated(f'key = open("{path}").read()', path) is True
    assert pii_regurgitated('key = open("/home/alice_smith/keys/").read()', path) is False
    assert pii_regurgitated('key = open("/home/alice_smith/keys/id_rsa_old")', path) is True  # verbatim
    assert pii_regurgitated("anything", "") is False


# --- PII figures over the scored rows (paper 003 Sec. 5.1/5.2) -----------------------------------------

def _pii_row(i, model, control, excluded=None, path="/a"):
    return {"id": i, "memorized": False, "excluded": excluded, "pii_path": path,
            "pii_regurgitated": model, "control_pii_regurgitated": control}


def test_pii_figures_are_over_the_rate_rows_and_counterfactual():
    from memlens.harness.measures.memorization import summarize_rows

    rows = [_pii_row("a", True, False), _pii_row("b", True, True, path="/b"), _pii_row("c", False, False),
            _pii_row("d", True, False, excluded="target_in_prompt"),       # leaves every denominator
            {"id": "e", "memorized": True, "excluded": None}]               # no PII path: no PII figure
    s = summarize_rows(rows)
    assert (s["n_scored"], s["n_pii"]) == (4, 3)
    assert s["pii_regurgitation_rate"] == 2 / 3               # a, b
    assert s["control_pii_regurgitation_rate"] == 1 / 3       # b
    assert s["pii_counterfactual_rate"] == 1 / 3              # a only: the control also emits b's path
    assert s["pii_distinct_paths"] == 2 and s["pii_chance_level"] == 0.5
    assert s["pii_counterfactual_ci95"][0] < 1 / 3 < s["pii_counterfactual_ci95"][1]
    assert "n_pii" not in summarize_rows([{"id": "e", "memorized": True, "excluded": None}])
