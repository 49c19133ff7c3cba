"""A report holds only its own run: no config reads another run from a default path (the NMT summary that gives the
findings table N1-N3 was read from runs/nmt_quickstart relative to the working directory by every report, so a
callback run's report beside a quickstart showed N3 from a run it never made). Only the quickstart family names its
NMT run, explicitly; MEMLENS_NMT_SUMMARY names one for any command."""

from __future__ import annotations

import pytest

from memlens.harness.cli import compose

QUICKSTART_NMT = "runs/nmt_quickstart/nmt/summary.json"


@pytest.mark.parametrize("overrides, expected", [
    ([], None),                                             # a bare `memlens report run_dir=...` (a callback run)
    (["experiment=smoke"], None),
    (["experiment=own_canaries"], None),                    # your canaries: the quickstart's pipeline, not its NMT run
    (["experiment=own_preference"], None),
    (["experiment=quickstart"], QUICKSTART_NMT),            # scripts/quickstart.sh runs that NMT run first
    (["experiment=findings"], QUICKSTART_NMT),
])
def test_only_the_quickstart_family_names_an_nmt_run(monkeypatch, overrides, expected):
    monkeypatch.delenv("MEMLENS_NMT_SUMMARY", raising=False)
    assert compose(overrides).report.nmt_summary == expected


def test_the_variable_names_one_for_any_command(monkeypatch):
    monkeypatch.setenv("MEMLENS_NMT_SUMMARY", "runs/nmt_quickstart_seed1/nmt/summary.json")
    assert compose([]).report.nmt_summary == "runs/nmt_quickstart_seed1/nmt/summary.json"
    assert compose(["experiment=quickstart"]).report.nmt_summary == "runs/nmt_quickstart_seed1/nmt/summary.json"


def test_the_findings_a_run_did_not_measure_are_one_line_with_what_measures_each():
    from memlens.harness.report.findings.registry import FINDINGS, Finding, not_measured_line
    from memlens.harness.report.findings.verdict import FindingResult

    def judged_as(fid: str, status: str) -> FindingResult:
        return FindingResult(fid, "a claim", "a paper", "a rule", [], status)

    judged = [judged_as(i, s) for i, s in (("F1", "holds"), ("F4", "not measured"), ("F5", "not measured"),
                                           ("N1", "not measured"), ("M1", "inconclusive"), ("E1", "not measured"))]
    assert not_measured_line(judged) == ("F4, F5 (experiment=findings); N1 (memlens nmt experiment=nmt_quickstart + "
                                         "report.nmt_summary); E1 (audit.measures=[...,mia,epsilon] with "
                                         "data.sd.membership=coins)")
    assert not_measured_line([judged_as("F1", "holds")]) == ""
    # a finding registered from elsewhere says what measures it itself
    with FINDINGS.registered("X1", Finding("X1", "a test", "a plugin's claim", lambda run: {}, "experiment=mine")):
        assert not_measured_line([judged_as("X1", "not measured")]) == "X1 (experiment=mine)"


def test_an_objective_registered_from_its_own_module_is_grouped_and_classed_when_read():
    from memlens.harness.core.objectives import OBJECTIVES, Objective
    from memlens.harness.report.findings.objectives import reference_based, reference_free
    from memlens.harness.report.render import group_order

    mine = Objective("MyPO", "dpo", reference=False, nll=False, beta=0.1, loss_type=("sigmoid",))
    with OBJECTIVES.registered("mypo", mine):
        assert "mypo" in reference_free() and "mypo" not in reference_based()
        assert group_order()[-1] == "MYPO"
    assert "mypo" not in reference_free() and "MYPO" not in group_order()
