"""The MIA audit's metrics of stored rows (harness/audit/mia.py `_metrics_of`), no model: degenerate attacks marked with
their fallback counts, each attack's paired gain over the blind baseline on the same texts, the best single-checkpoint
attack chosen among the attacks not degenerate, and the warning where the blind baseline separates the sets."""

from __future__ import annotations

import pytest

from memlens.harness.audit.mia import _blind_of, _metrics_of, warn_if_distinguishable
from memlens.harness.core.stats import bootstrap_mia_metrics


def _rows(blind: bool = True) -> list[dict]:
    """8 members (LOSS -0.01 i, i.e. near-zero losses; EZ-MIA 0.0 by its fallback) and 8 held out (LOSS -3 - 0.1 i;
    EZ-MIA 1 + i): LOSS separates them (AUC 1), EZ-MIA ranks them backwards (AUC 0). The blind baseline scored
    every text 0.5 (at chance: AUC 0.5)."""
    rows = []
    for i in range(8):
        rows.append({"id": f"m{i}", "member": 1, "score": {"target": {"loss": -0.01 * i, "ez_mia": 0.0}},
                     "fallback": {"target": {"ez_mia": "fewer than 2 error positions"}}})
        rows.append({"id": f"n{i}", "member": 0, "score": {"target": {"loss": -3.0 - 0.1 * i, "ez_mia": 1.0 + i}}})
    if blind:
        for r in rows:
            r["blind"] = {"target": 0.5}
    return rows


def test_the_audit_marks_ez_mias_fallback_and_compares_every_attack_with_the_blind_baseline():
    out = _metrics_of(_rows(), ["target"], n_boot=200, seed=0)["target"]
    ez, loss = out["ez_mia"], out["loss"]
    assert ez["fallback"] == {"members": 8, "nonmembers": 0} and "fallback" not in loss   # LOSS has no fallback
    assert ez["degenerate"][0] == "8 of 8 members and 0 of 8 non-members took the authors' fallback"
    assert ez["auc"]["value"] == 0.0 and loss["degenerate"] == [] and loss["auc"]["value"] == 1.0
    # paired with the blind baseline on the same 16 texts: AUC 1 - 0.5 and 0 - 0.5, every resample alike
    assert loss["vs_blind"]["value"] == pytest.approx(0.5) and loss["vs_blind"]["p_at_most_0"] == 0.0
    assert ez["vs_blind"]["value"] == pytest.approx(-0.5)
    without = _metrics_of(_rows(blind=False), ["target"], n_boot=200, seed=0)["target"]
    assert "vs_blind" not in without["loss"] and _blind_of(_rows(blind=False), "target") is None


def test_warning_when_the_blind_baseline_tells_the_sets_apart():
    """AUC 1 [1, 1] from the texts alone: one WARNING naming the dataset, span and fix; at chance: silent."""
    apart = {"n_members": 20, "n_nonmembers": 20,
             "spans": {"target": bootstrap_mia_metrics([1.0] * 20, [0.0] * 20, n_boot=100, seed=0)}}
    chance = {"n_members": 20, "n_nonmembers": 20,
              "spans": {"target": bootstrap_mia_metrics([0.0, 1.0] * 10, [0.0, 1.0] * 10, n_boot=100, seed=0)}}
    lines: list[str] = []
    warn_if_distinguishable({"mine": apart, "theirs": chance}, lines.append)
    assert len(lines) == 1
    assert lines[0].startswith("[audit] WARNING: mine (target span): the blind baseline (no model) tells its 20 "
                               "members from its 20 non-members with AUC 1.00 [1.00, 1.00]")
    assert "fair coin, as memlens.inject does" in lines[0]
