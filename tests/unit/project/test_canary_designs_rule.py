"""benchmarks/canary_designs.py's rule, fixed before its runs: a designed canary is detected at a lower dose than SD's
own target line when the smallest dose whose LOSS AUC interval lies above 0.5 is lower; hand-made results."""

from __future__ import annotations

from tests.scripts import load_script


def _module():
    return load_script("canary_designs")


def _result(lows: tuple[float | None, float | None, float | None], loss=(3.0, 1.0)) -> dict:
    """A run whose dose x1 / x4 / x16 AUC intervals start at `lows` (None: no AUC at that dose)."""
    doses = {str(d): {"ci95": None if low is None else [low, 1.0]} for d, low in zip((1, 4, 16), lows)}
    return {"doses": doses, "loss_first": loss[0], "loss_last": loss[1]}


def test_detection_dose_is_the_smallest_dose_whose_interval_clears_one_half():
    m = _module()
    assert m.detection_dose(_result((0.4, 0.51, 0.9))) == 4
    assert m.detection_dose(_result((0.5, 0.5, 0.5))) is None          # an interval touching 0.5 is not above it
    assert m.detection_dose(_result((None, 0.2, 0.6))) == 16


def test_the_verdict_for_each_case_of_the_rule():
    m = _module()
    early, late, never = _result((0.6, 0.7, 0.9)), _result((0.3, 0.4, 0.7)), _result((0.1, 0.2, 0.3))
    assert m.detection_verdict(early, late) == ("holds", "x1 < x16")
    assert m.detection_verdict(late, never) == ("holds", "x16 < never")
    assert m.detection_verdict(late, early)[0] == "not reproduced"
    assert m.detection_verdict(early, early)[0] == "not reproduced"      # the same dose is not a lower one
    assert m.detection_verdict(never, early)[0] == "not reproduced"
    assert m.detection_verdict(never, never) == ("inconclusive", "neither detected at any dose")
    assert m.detection_verdict(early, _result((0.1, 0.1, 0.1), loss=(2.0, 2.5)))[0] == "inconclusive"
    assert m.detection_verdict(early, None)[0] == "not measured"


def test_the_designs_the_rule_judges_are_fixed_with_the_settings_of_those_that_read_a_model():
    m = _module()
    assert m.DESIGNED == ("unigram", "new_token", "rare", "sampled") and m.SAMPLED_TEMPERATURE == 1.0
    assert m.SECRET_TOKENS == 10 and m.ATTACK == "loss" and m.SPAN == "target"
