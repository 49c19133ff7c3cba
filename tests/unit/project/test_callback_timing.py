"""benchmarks/callback_timing.py's reading of the example's timing line and its table, on values derived by hand."""

from __future__ import annotations

import pytest

from tests.scripts import load_script

timing = load_script("callback_timing")


def test_the_one_timing_line_is_read():
    console = "checkpoint-20: planted 3/8 memorized\ntrainer.train(): 6.3 s\ncontrol within k: 0/8\n"
    assert timing.train_seconds(console) == 6.3
    assert timing.train_seconds("trainer.train(): 12 s\n") == 12.0


@pytest.mark.parametrize("console", ["no timing here\n", "trainer.train(): 1.0 s\ntrainer.train(): 2.0 s\n",
                                     "  trainer.train(): 1.0 s (indented: not the example's line)\n"])
def test_no_line_or_two_lines_is_an_error(console):
    with pytest.raises(ValueError, match="trainer.train"):
        timing.train_seconds(console)


def test_means_and_the_share_added_beside_no_callback():
    summary = timing.summarize({"none": [3.0, 3.0], "synchronous": [6.0, 6.6], "background": [10.8]})
    assert summary["none"] == {"seconds": [3.0, 3.0], "n": 2, "mean": 3.0, "added": None}
    assert summary["synchronous"]["mean"] == 6.3 and summary["synchronous"]["added"] == 1.1     # 6.3 / 3 - 1
    assert summary["background"]["added"] == 2.6                                                 # 10.8 / 3 - 1


def test_without_the_baseline_nothing_is_added():
    assert timing.summarize({"background": [4.0, 5.0]})["background"] == {"seconds": [4.0, 5.0], "n": 2,
                                                                          "mean": 4.5, "added": None}


def test_the_table_has_a_row_per_mode_in_order():
    table = timing.markdown(timing.summarize({"none": [2.0, 4.0], "synchronous": [4.5]}))
    assert table.splitlines()[2:] == ["| none | 2.0, 4.0 (mean 3.0) | – |",
                                      "| synchronous | 4.5 (mean 4.5) | +50% |"]


def test_the_example_prints_the_line_that_is_read():
    """The script reads the example's own print (one run of the example is ~75 s on one thread, too long for the
    suite): that print is the one this test formats, and its output is read back."""
    printed = [line.strip() for line in timing.EXAMPLE.read_text().splitlines() if "trainer.train(): " in line]
    assert printed == ['print(f"trainer.train(): {time.perf_counter() - started:.1f} s")']
    elapsed = 7.04
    assert timing.train_seconds(f"trainer.train(): {elapsed:.1f} s\n") == 7.0
