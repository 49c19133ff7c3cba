"""Rank-based exposure arithmetic (Carlini et al. 2019) on given loss vectors, candidate list, substitution."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.core.errors import UserError
from memlens.harness.measures.exposure import (
    PII_PATHS_FILE,
    exposure_from_losses,
    exposure_from_rank,
    exposure_rows,
    exposure_summary,
    exposures,
    load_candidates,
    rank_of_true,
    substituted_targets,
)


def test_rank_and_exposure_by_hand():
    losses = [3.0, 1.0, 2.0, 5.0]             # true candidate = index 2 -> one lower loss -> rank 2
    assert exposure_from_losses(losses, 2) == (2, math.log2(4) - math.log2(2))
    assert exposure_from_losses(losses, 1) == (1, 2.0)   # strictly lowest: maximal exposure log2(4)
    assert exposure_from_losses(losses, 3) == (4, 0.0)   # highest loss: exposure 0


def test_ties_count_against_the_true_candidate():
    assert rank_of_true(1.0, [1.0, 1.0, 1.0, 2.0]) == 3
    assert exposure_from_losses([7.0] * 100, 42) == (100, 0.0)   # a model that cannot tell paths apart


def test_exposure_bounds_and_errors():
    assert exposure_from_rank(1, 100) == pytest.approx(math.log2(100))
    with pytest.raises(ValueError):
        exposure_from_rank(0, 100)
    with pytest.raises(ValueError):
        exposure_from_rank(101, 100)
    with pytest.raises(ValueError, match="finite"):
        rank_of_true(1.0, [1.0, float("nan")])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 50, allow_nan=False), min_size=2, max_size=120), st.data())
def test_rank_matches_sorting_reference(losses, data):
    true = data.draw(st.integers(0, len(losses) - 1))
    rank, exp = exposure_from_losses(losses, true)
    # Reference: position of the true candidate in a sort that puts it after every equal loss.
    order = sorted(range(len(losses)), key=lambda i: (losses[i], i == true))
    assert rank == order.index(true) + 1
    assert 0 <= exp <= math.log2(len(losses)) + 1e-12


def test_shipped_candidate_list_has_100_distinct_paths():
    paths = load_candidates()
    assert len(paths) == 100 == len(set(paths)) and PII_PATHS_FILE.is_file()


def test_candidate_list_errors(tmp_path):
    dup = tmp_path / "dup.txt"
    dup.write_text("/a\n/b\n/a\n")
    with pytest.raises(UserError, match="duplicate"):
        load_candidates(dup)
    with pytest.raises(UserError, match="not found"):
        load_candidates(tmp_path / "missing.txt")


def test_substitution_and_positives():
    target = "with open('/home/x/secret', 'r') as f:"
    assert substituted_targets(target, "/home/x/secret", ["/a", "/b"]) == [
        "with open('/a', 'r') as f:", "with open('/b', 'r') as f:"]
    with pytest.raises(UserError, match="does not occur"):
        substituted_targets(target, "/nowhere", ["/a"], "r7")
    rows = [{"id": "p", "pii_path": "/a", "label": 1}, {"id": "n", "pii_path": "/a", "label": 0},
            {"id": "base"}, {"id": "unlabelled", "pii_path": "/b"}]
    assert [r["id"] for r in exposure_rows(rows)] == ["p", "unlabelled"]


def test_exposures_and_summary():
    cands = ["/a", "/b", "/c", "/d"]
    rows = [{"id": "r0", "pii_path": "/a"}, {"id": "r1", "pii_path": "/c"}]
    losses = np.array([[1.0, 2.0, 3.0, 4.0],     # /a lowest -> rank 1, exposure 2
                       [1.0, 2.0, 3.0, 4.0]])    # /c third  -> rank 3, exposure 2 - log2(3)
    got = exposures(losses, rows, cands)
    assert [g["rank"] for g in got] == [1, 3]
    s = exposure_summary([g["exposure"] for g in got], len(cands))
    assert s["count"] == 2 and s["share_max"] == 0.5 and s["max_exposure"] == 2.0
    assert s["mean"] == pytest.approx((2 + 2 - math.log2(3)) / 2)
    assert s["median"] == pytest.approx(s["mean"])
    assert exposure_summary([], 100)["count"] == 0
