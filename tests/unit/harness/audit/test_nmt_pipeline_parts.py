"""Pure parts of `memlens nmt`: unique pairs + repetitions, per-bucket neighbourhood, findings, report."""

from __future__ import annotations

import pytest

from memlens.harness.audit.nmt import NmtSettings, unique_pairs
from memlens.harness.core.errors import UserError
from memlens.harness.measures.nmt import finding_numbers, per_bucket_neighbourhood
from memlens.harness.report.nmt_report import render_report


def _rows(spec):
    return [{"id": f"r{i}", "source": s, "reference": r} for i, (s, r) in enumerate(spec)]


def test_unique_pairs_count_repetitions_of_source_reference_pairs():
    rows = _rows([("a b", "X"), ("a  b", "X"), ("a b", "Y"), ("c", "Z"), ("a b", "X")])
    pairs = unique_pairs(rows, NmtSettings(), seed=0)
    got = {(p["source"], p["reference"]): p["repetitions"] for p in pairs}
    # "a  b" normalizes to "a b": the pair (a b, X) occurs 3 times; (a b, Y) is a different pair.
    assert got == {("a b", "X"): 3, ("a b", "Y"): 1, ("c", "Z"): 1}


def test_unique_pairs_sample_per_bucket():
    rows = _rows([(f"s{i}", "R") for i in range(10)] + [("t", "T")] * 2)
    pairs = unique_pairs(rows, NmtSettings(max_pairs_per_bucket=3), seed=0)
    assert sum(p["repetitions"] == 1 for p in pairs) == 3 and sum(p["repetitions"] == 2 for p in pairs) == 1
    assert unique_pairs(rows, NmtSettings(max_pairs_per_bucket=3), seed=0) == pairs


def test_per_bucket_neighbourhood_shares():
    perturbations = [{"index": 0, "class": "prefix", "kept": True}, {"index": 0, "class": "prefix", "kept": False},
                     {"index": 1, "class": "suffix", "kept": True}, {"index": 1, "class": "start", "kept": False}]
    out = per_bucket_neighbourhood(perturbations, {0: 1, 1: 3})
    assert out[1] == {"prefix": 0.5, "suffix": None, "start": None}
    assert out[3] == {"prefix": None, "suffix": 1.0, "start": 0.0}
    assert out[2] == {"prefix": None, "suffix": None, "start": None}


def _buckets(pearson):
    return {"pearson": pearson, "buckets": [{"repetitions": r, "ratio_pct": float(r)} for r in range(1, 6)]}


def test_the_audit_stores_the_figures_n1_to_n3_are_judged_on_and_no_verdict():
    nb = {"prefix": {"share": 0.2}, "suffix": {"share": 0.6}, "start": {"share": 0.1}}
    f = finding_numbers(_buckets(0.8), nb, {"best_rate": 0.65, "best_symbol": "!"})
    assert f == {"N1_pearson": 0.8, "N1_ratio_pct_by_bucket": [1.0, 2.0, 3.0, 4.0, 5.0],
                 "N2_shares": {"prefix": 0.2, "suffix": 0.6, "start": 0.1}, "N3_best_symbol": "!", "N3_best_rate": 0.65}
    assert not any(isinstance(v, bool) for v in f.values()), "verdicts are the findings layer's (paper002.py)"
    assert finding_numbers(_buckets(None), nb, None)["N3_best_rate"] is None


def test_settings_validation_names_keys():
    with pytest.raises(UserError, match="nmt.prefix_ratio"):
        NmtSettings(prefix_ratio=1.5)
    with pytest.raises(UserError, match="nmt.recovery_symbols"):
        NmtSettings(recovery_symbols=[])
    with pytest.raises(UserError, match="nmt.approx_ned"):
        NmtSettings(approx_ned=2)


def test_report_has_table1_and_table4_rows():
    per_bucket = {r: {"prefix": 0.1, "suffix": 0.5, "start": None} for r in range(1, 6)}
    summary = {
        "experiment_name": "x", "model_dir": "m", "dataset": "d", "unique_pairs": 10, "training_rows": 20,
        "settings": {"prefix_ratio": 0.75, "unit": "word", "approx_ned": None}, "heldout": None, "m1_size": 4,
        "memorized_by_kind": {}, "substitutes": "fallback",
        "buckets": {"buckets": [{"repetitions": r, "total": 2, "memorized": 1, "ratio_pct": 50.0} for r in range(1, 6)],
                    "all": {"repetitions": "1-5", "total": 10, "memorized": 5, "ratio_pct": 50.0}, "pearson": None},
        "neighbourhood": {"k": 5, "prefix": {"share": 0.1, "kept": 1, "perturbed": 10},
                          "suffix": {"share": 0.5, "kept": 5, "perturbed": 10},
                          "start": {"share": None, "kept": 0, "perturbed": 0}},
        "neighbourhood_per_bucket": per_bucket,
        "recovery": {"per_symbol": {"!": {"recovered": 3, "total": 5, "rate": 0.6}}, "best_symbol": "!",
                     "best_rate": 0.6, "any_symbol_rate": 0.6, "F_size": 3},
        "quality": {"Memorized outputs": {"count": 5, "ttr": 40.0, "rule_match_pct": 0.0}},
        "finetune": {"enabled": False},
        "finding_numbers": finding_numbers(_buckets(None), {"prefix": {"share": 0.1}, "suffix": {"share": 0.5},
                                                            "start": {"share": None}}, {"best_rate": 0.6, "best_symbol": "!"}),
        "examples": [{"source": "a b c d", "reference": "X", "prefix": "a b", "prefix_ratio": 0.5}],
        "provenance": {"git_commit": "abc", "seed": 0, "datasets": {}},
    }
    report = render_report(summary)
    assert "| 1 | 2 | 1 | 50.00 | 10.00 % | 50.00 % | – |" in report
    assert "| 1-5 | 10 | 5 | 50.00 | 10.00 % | 50.00 % | – |" in report
    assert "| `!` | 3/5 | 60.0 % |" in report
    assert "| Memorized outputs | 5 | 0.0 | 40.0 |" in report
    # the verdicts are paper002.py's rules: r unknown -> N1 False; start share unknown -> N2 False; 0.6 > 0.5 -> N3
    assert "- N1 memorization rises with repetitions: **False**" in report
    assert "start perturbations least: **False**" in report and "memorized sources: **True** (`!`: 60.0 %)" in report


@pytest.mark.parametrize("experiment", ["nmt_quickstart", "nmt_smoke"])
def test_experiment_configs_compose_and_validate(experiment):
    from memlens.harness.audit.nmt import FinetuneSettings, _strict, settings_from_cfg
    from memlens.harness.cli import compose
    from memlens.recipes.nmt.seq2seq import Seq2SeqSettings
    from memlens.synthetic_data.parallel import ParallelSettings

    cfg = compose([f"experiment={experiment}"])
    assert cfg.experiment_name == experiment
    s = settings_from_cfg(cfg)
    _strict(ParallelSettings, s.corpus, "nmt.corpus")
    _strict(Seq2SeqSettings, s.train, "nmt.train")
    _strict(FinetuneSettings, s.finetune, "nmt.finetune")


def test_unknown_nmt_keys_are_named():
    from memlens.harness.audit.nmt import settings_from_cfg
    from memlens.harness.cli import compose

    with pytest.raises(UserError, match="nmt: unknown key.*prefix_ratios"):
        settings_from_cfg(compose(["experiment=nmt_smoke", "+nmt.prefix_ratios=0.5"]))


def test_translation_cache_survives_a_restart_and_decodes_only_missing_sources(tmp_path):
    from memlens.harness.audit.nmt import TranslationCache

    calls: list[list[str]] = []

    def translate(sources):
        calls.append(list(sources))
        return [s.upper() for s in sources]

    path = tmp_path / "cache" / "t.jsonl"
    first = TranslationCache(translate, path, chunk=2)
    assert first(["a", "b", "a", "c"]) == ["A", "B", "A", "C"]
    assert calls == [["a", "b"], ["c"]]                      # distinct sources, in chunks of 2
    # A "killed" run left a torn last line: it is dropped and that source decoded again.
    with path.open("a", encoding="utf-8") as f:
        f.write('{"source": "d", "outp')
    second = TranslationCache(translate, path, chunk=2)
    assert second(["c", "d", "a"]) == ["C", "D", "A"]
    assert calls[-1] == ["d"]
    assert len(second.store.rows()) == 4                      # no duplicates


def test_kind_counts_and_noisy_share():
    from memlens.harness.measures.nmt import memorized_by_kind, noisy_share_by_bucket

    alg1 = [{"kind": "noisy", "memorized": True, "repetitions": 1}, {"kind": "regular", "memorized": False, "repetitions": 1},
            {"kind": "regular", "memorized": False, "repetitions": 1}, {"kind": "noisy", "memorized": False, "repetitions": 2}]
    assert memorized_by_kind(alg1) == {"noisy": {"total": 2, "memorized": 1}, "regular": {"total": 2, "memorized": 0}}
    assert noisy_share_by_bucket(alg1) == [pytest.approx(100 / 3), 100.0, None, None, None]
    assert memorized_by_kind([{"memorized": True, "repetitions": 1}]) == {}


# `memlens nmt`'s order of work (harness/study_commands.py nmt_command): the real run and rerun are
# tests/integration/test_nmt_pipeline.py's; here each part is replaced by a line in a log, to hold every path.
@pytest.fixture
def nmt_command_log(monkeypatch, tmp_path):
    from omegaconf import OmegaConf

    from memlens.harness import study_commands
    from memlens.harness.audit.nmt import StabilityPlan

    log: list = []

    class Rerun:
        def __init__(self, cfg, kernels, console=None):
            log.append(("rerun starts", "beside" if console else "after"))

        def wait(self):
            log.append("rerun waited")
            if state["rerun fails"]:
                raise UserError("the NMT stability rerun failed")
            return {}

        def stop(self):
            log.append("rerun stopped")

    def run(cfg, trainer):
        log.append("run")
        if state["run fails"]:
            raise KeyboardInterrupt

    state = {"cores": 2, "plan": True, "run fails": False, "rerun fails": False}
    plan = StabilityPlan(OmegaConf.create({"run_dir": str(tmp_path / "rerun")}), "default", "AVX2")
    monkeypatch.setattr(study_commands, "NmtRerun", Rerun)
    monkeypatch.setattr(study_commands, "run_nmt", run)
    monkeypatch.setattr(study_commands, "usable_cores", lambda: state["cores"])
    monkeypatch.setattr(study_commands, "stability_plan", lambda cfg: plan if state["plan"] else None)
    monkeypatch.setattr(study_commands, "record_stability", lambda cfg, plan, other: log.append("recorded"))
    monkeypatch.setattr(study_commands, "write_nmt_report", lambda out: log.append("report"))
    cfg = OmegaConf.create({"run_dir": str(tmp_path), "nmt": {"torch_threads": 1}})
    return lambda **given: (state.update(given), log.clear(), study_commands.nmt_command(cfg), log)[-1], log


def test_the_rerun_starts_before_the_run_where_both_fit_on_the_cores_else_after_it(nmt_command_log):
    command, _ = nmt_command_log
    assert command(cores=2) == [("rerun starts", "beside"), "run", "rerun waited", "recorded", "rerun stopped",
                                "report"]
    assert command(cores=1) == ["run", ("rerun starts", "after"), "rerun waited", "recorded", "rerun stopped",
                                "report"]
    assert command(plan=False) == ["run", "report"]


def test_a_failed_or_interrupted_run_stops_the_rerun_and_writes_no_report(nmt_command_log):
    command, log = nmt_command_log
    with pytest.raises(KeyboardInterrupt):
        command(cores=2, **{"run fails": True})
    assert log == [("rerun starts", "beside"), "run", "rerun stopped"]
    with pytest.raises(UserError, match="stability rerun failed"):
        command(cores=2, **{"run fails": False, "rerun fails": True})
    assert log == [("rerun starts", "beside"), "run", "rerun waited", "rerun stopped"]
