"""Report analyses on hand-built audit rows whose answers are derivable by hand."""

import json
import math

import pytest

import memlens
from memlens.harness.core.provenance import provenance
from memlens.harness.core.shipped import shipped_path
from memlens.harness.core.stats import reward_score_stats, roc_auc
from memlens.harness.report import analyses as A
from memlens.harness.text.fim import FAMILIES


def row(i, memorized, ned=0.0, control_ned=0.5, excluded=None, **extra):
    return {"id": i, "memorized": memorized, "ned": ned, "control_ned": control_ned, "excluded": excluded, **extra}


def test_checkpoint_step_orders_final_last():
    names = ["final", "checkpoint-20", "checkpoint-3"]
    assert sorted(names, key=A.checkpoint_step) == ["checkpoint-3", "checkpoint-20", "final"]
    with pytest.raises(ValueError, match="checkpoint-<step>"):
        A.checkpoint_step("best")


def test_persistence_counts_missing_and_excluded_targets_as_not_memorized():
    # source memorized a, b, c, d (e is excluded, f not memorized): 4 in the denominator.
    source = [row("a", True), row("b", True), row("c", True), row("d", True),
              row("e", True, excluded="short_target"), row("f", False)]
    # target: a still memorized, b not, c excluded (so not memorized), d missing.
    target = [row("a", True, ned=0.05), row("b", False, ned=0.4), row("c", False, ned=0.0, excluded="short_target")]
    p = A.persistence(source, target)
    assert (p.n_source_memorized, p.n_still_memorized) == (4, 1)
    assert p.share == pytest.approx(0.25)
    assert sorted(p.ned_after) == [0.0, 0.05, 0.4]


def test_persistence_with_nothing_memorized_is_none():
    assert A.persistence([row("a", False)], [row("a", True)]).share is None


def test_parse_sweep_point():
    assert A.parse_sweep_point("RLFT.4/beta=0.005,lr=3e-06") == ("RLFT.4", {"beta": 0.005, "lr": 3e-06})
    assert A.parse_sweep_point("FT.1") == ("FT.1", {})
    assert A.parse_sweep_point("X/algo=grpo") == ("X", {"algo": "grpo"})


def _entries():
    entries = []
    for beta, rate in ((0.5, 0.1), (0.005, 0.3), (0.1, 0.2)):
        for lr, bump in ((3e-06, 0.0), (3e-05, 0.25)):
            entries.append({"model": f"RLFT.4/beta={beta},lr={lr}", "checkpoint": "final", "dataset": "sd",
                            "rate": rate + bump})
            entries.append({"model": f"RLFT.4/beta={beta},lr={lr}", "checkpoint": "checkpoint-5",
                            "dataset": "sd", "rate": 0.0})
    return entries


def test_sweep_series_sorted_by_value_with_other_key_fixed():
    s = A.sweep_series(_entries(), "RLFT.4", "sd", "beta", fixed={"lr": 3e-06})
    assert s == [(0.005, 0.3, None), (0.1, 0.2, None), (0.5, 0.1, None)]
    s = A.sweep_series(_entries(), "RLFT.4", "sd", "lr", fixed={"beta": 0.005})
    assert [x for x, _, _ in s] == [3e-06, 3e-05]
    assert [y for _, y, _ in s] == pytest.approx([0.3, 0.55])


def test_final_entries_prefers_final_over_steps():
    finals = A.final_entries(_entries())
    assert len(finals) == 6 and all(e["checkpoint"] == "final" for e in finals)


def test_auc_by_hand():
    # positives 3, 2; negatives 1, 2: pairs (3,1) win, (3,2) win, (2,1) win, (2,2) tie -> (3 + 0.5) / 4
    assert roc_auc([3, 2, 1, 2], [1, 1, 0, 0]) == pytest.approx(3.5 / 4)
    assert roc_auc([1], [1]) is None


def test_reward_score_stats():
    s = reward_score_stats([{"label": 1, "score": 2.0}, {"label": 1, "score": 4.0}, {"label": 0, "score": 0.0}])
    assert s["by_label"]["1"]["mean"] == 3.0 and s["by_label"]["1"]["std"] == 1.0
    assert s["auc"] == 1.0


def test_load_audit_rows_and_summary_entries(tmp_path):
    audit = tmp_path / "audit"
    for model, ckpt, rows in (("FT.1", "final", [row("a", True), row("b", False)]),
                              ("RLFT.1/beta=0.1", "checkpoint-2", [row("a", False)]),
                              ("RLFT.1/beta=0.1", "final", [row("a", True, pii_regurgitated=True)])):
        d = audit / model / ckpt
        d.mkdir(parents=True)
        (d / "sd_base.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (audit / "cache").mkdir()
    (audit / "cache" / "abc.jsonl").write_text('{"id": "a"}\n')
    grouped = A.load_audit_rows(audit)
    assert set(grouped) == {("FT.1", "final", "sd_base"), ("RLFT.1/beta=0.1", "checkpoint-2", "sd_base"),
                            ("RLFT.1/beta=0.1", "final", "sd_base")}
    entries = A.summary_entries(grouped)
    ft = next(e for e in entries if e["model"] == "FT.1")
    assert (ft["n_total"], ft["n_memorized"], ft["rate"]) == (2, 1, 0.5)
    rl = A.over_training(entries, "RLFT.1/beta=0.1", "sd_base")
    assert [e["checkpoint"] for e in rl] == ["checkpoint-2", "final"]
    assert rl[1]["pii_regurgitation_rate"] == 1.0 and math.isclose(rl[1]["rate"], 1.0)
    assert rl[1]["ci95"][0] == pytest.approx(0.2065, abs=1e-4) and rl[1]["ci95"][1] == 1.0   # Wilson, 1 of 1
    assert "pii_regurgitation_rate" not in ft      # no PII paths on these rows: no PII figures


def test_rlhf_vs_ipo_uses_final_checkpoints():
    entries = [{"model": "FT.3", "checkpoint": "final", "dataset": "sd_base", "rate": 0.2, "n_scored": 10, "ci95": None},
               {"model": "IPO", "checkpoint": "checkpoint-1", "dataset": "sd_base", "rate": 0.0, "n_scored": 10, "ci95": None},
               {"model": "IPO", "checkpoint": "final", "dataset": "sd_base", "rate": 0.3, "n_scored": 10, "ci95": None}]
    out = A.rlhf_vs_ipo(entries, {"FT": ["FT.3"], "IPO": ["IPO"]}, ["sd_base"])
    assert [(r["group"], r["rate"]) for r in out] == [("FT", 0.2), ("IPO", 0.3)]


def test_every_record_names_the_package_and_its_version():
    record = provenance(seed=3)
    assert record["package"] == {"name": "memlens", "version": memlens.__version__}
    assert record["packages"]["memlens"] == memlens.__version__
    assert A.code_version(record) == f"memlens {memlens.__version__}"
    assert A.code_version({"packages": {"torch": "2.13.0"}}) is None


def test_the_shipped_base_records_todays_names():
    """The shipped base was built before provenance named its package; its record names memlens among its packages
    and its FIM family as FAMILIES keys it, so no run needs a mapping from an older name."""
    record = json.loads(shipped_path("assets/base_tiny/provenance.json").read_text(encoding="utf-8"))
    assert A.code_version(record) == "memlens 0.1.0"
    assert record["settings"]["model"]["fim_family"] in FAMILIES
