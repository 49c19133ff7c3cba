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
