"""Utility metrics by hand."""

import pytest

from memlens.harness.measures.utility import first_line, infill_exact_match, sample_rows


def test_first_line_keeps_indentation_drops_trailing_space():
    assert first_line("    return x  \n    y = 2\n") == "    return x"
    assert first_line("") == ""


def test_infill_exact_match_by_hand():
    targets = ["    return a + b\n", "    x = 1\n", "    y = 2\n", "print(z)\n"]
    completions = ["    return a + b\n    # more", "    x = 2\n", "y = 2\n", "print(z)"]
    # hit, miss (value), miss (indentation), hit (no newline needed)
    assert infill_exact_match(completions, targets) == 0.5
    assert infill_exact_match([], []) is None
    with pytest.raises(ValueError, match="2 completions for 1 targets"):
        infill_exact_match(["a", "b"], ["a"])


def test_sample_rows_is_seeded_and_ordered():
    rows = [{"id": i} for i in range(50)]
    a, b = sample_rows(rows, 10, seed=3), sample_rows(rows, 10, seed=3)
    assert a == b and len(a) == 10 and [r["id"] for r in a] == sorted(r["id"] for r in a)
    assert sample_rows(rows, None, 0) == rows and sample_rows(rows, 99, 0) == rows
