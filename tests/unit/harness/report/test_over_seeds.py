"""A finding's verdict over seeds (harness/report/findings/verdict.py `over_seeds`), on hand-built findings: decided
only where at least three seeds all give it and no kernel rerun changed it; the spread and the failed gates named."""

from __future__ import annotations

from memlens.harness.report.findings.verdict import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_MEASURED,
    FindingResult,
    over_seeds,
)


def finding(status: str, rates=(), gate: float | None = None, unstable: bool = False) -> FindingResult:
    evidence = [] if gate is None else [{"check": "RLFT.2 reward rise (initial sd)", "value": gate,
                                         "threshold": ">= 0.5", "ok": gate >= 0.5}]
    return FindingResult("F2", "a claim", "a paper", "a rule", ["RLFT.2"], status, evidence=evidence,
                         rates=[{"rate": r, "k": 0, "n": 42, "ci95": [0, 1]} for r in rates], unstable=unstable)


def test_three_seeds_that_all_hold_hold_and_the_spread_is_lowest_to_highest():
    got = over_seeds([finding(HOLDS, (0.643,)), finding(HOLDS, (0.548,)), finding(HOLDS, (0.60,))])
    assert got["status"] == HOLDS and (got["held"], got["measured"]) == (3, 3)
    assert got["spread"] == "54.8–64.3 %" and got["gates"] == "" and got["reason"] == ""


def test_all_not_reproduced_is_not_reproduced():
    assert over_seeds([finding(FAILS)] * 3)["status"] == FAILS


def test_two_seeds_are_not_enough_even_when_both_hold():
    got = over_seeds([finding(HOLDS), finding(HOLDS)])
    assert got["status"] == INCONCLUSIVE and "needs 3" in got["reason"]


def test_a_gate_passed_at_one_seed_only_is_inconclusive_and_names_each_seeds_gate_value():
    # seed 0's reward rose 0.81 of a spread (the finding held there); seeds 1 and 2 did not reach 0.5
    got = over_seeds([finding(HOLDS, (0.0, 0.643), gate=0.81), finding(INCONCLUSIVE, (0.0, 0.548), gate=0.38),
                      finding(INCONCLUSIVE, (0.0, 0.6), gate=0.2)])
    assert got["status"] == INCONCLUSIVE and got["held"] == 1
    assert got["spread"] == "0.0–0.0 % vs 54.8–64.3 %"
    assert got["gates"] == "RLFT.2 reward rise (initial sd) 0.81 / 0.38 / 0.2 (needs >= 0.5)"


def test_a_verdict_the_kernel_rerun_changed_in_one_seed_is_inconclusive():
    got = over_seeds([finding(HOLDS), finding(HOLDS), finding(INCONCLUSIVE, unstable=True)])
    assert got["status"] == INCONCLUSIVE and "unstable under the kernel rerun in 1 of 3" in got["reason"]


def test_a_seed_that_did_not_measure_it_leaves_it_undecided_and_none_is_not_measured():
    assert over_seeds([finding(HOLDS), finding(HOLDS), finding(NOT_MEASURED)])["status"] == INCONCLUSIVE
    assert over_seeds([finding(NOT_MEASURED), None, finding(NOT_MEASURED)])["status"] == NOT_MEASURED


def test_inconclusive_in_every_seed_says_so_and_mixed_verdicts_say_they_differ():
    assert over_seeds([finding(INCONCLUSIVE)] * 3)["reason"] == "inconclusive in every run"
    assert over_seeds([finding(HOLDS), finding(FAILS), finding(HOLDS)])["reason"] == "the verdict differs between runs"
