"""benchmarks/doses_epsilon.py's rule, fixed before the runs of experiment=doses_coins and doses_designed_coins: per
route, the designed canaries' one-run ε bound (Steinke 2023, sd_base, final, all coin-decided canaries) is larger than
SD's at the same count; inconclusive where a run has no bound, where a route's training gate failed or where both
bounds are 0. Hand-made run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_script

ROUTES = ("FT.3", "RLFT.2", "IPO")


def _module():
    return load_script("doses_epsilon")


def _write(path: Path, record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _bound(eps: float, m: int = 86) -> dict:
    return {"m": m, "r": 8, "v": 6, "epsilon_lower_bound": eps}


def _run(root: Path, seed: int, eps: dict[str, float], m: int = 86, rl_ok: bool = True) -> Path:
    """A run folder: per route, its ε bound over all canaries (and per dose x1 / x4 / x16, the same value / 2, 1, 2)."""
    for model, e in eps.items():
        doses = {str(d): _bound(e * f, m // 3) for d, f in ((1, 0.5), (4, 1.0), (16, 2.0))}
        _write(root / "audit" / "epsilon" / model / "summary.json",
               {"results": {"final": {"sd_base": {**_bound(e, m), "doses": doses}}}})
        tiers = {str(d): {"target": {"loss": {"auc": {"value": 0.6 + d / 100}, "tpr_at_fpr<1%": {"value": 0.1}},
                                     "zlib": {"auc": {"value": 0.65}, "tpr_at_fpr<1%": {"value": 0.2,
                                                                                          "measurable": False}},
                                     "min_k": {"auc": {"value": 0.99}, "tpr_at_fpr<1%": {"value": 0.9},
                                               "degenerate": ["every score tied"]}}}
                 for d in (1, 4, 16)}
        _write(root / "audit" / "mia" / model / "summary.json", {"results": {"final": {"sd_base": {"tiers": tiers}}}})
    _write(root / "run.json", {"seed": seed})
    _write(root / "models" / "FT.3" / "trainer_state.json", {"log_history": [{"loss": 3.0}, {"loss": 1.0}]})
    rates = {fid: [{"name": f"{model} x{d}", "k": d // 4, "n": 14, "ci95": [0.0, d / 20]} for d in (1, 4, 16)]
             for fid, model in (("D1", "FT.3"), ("D3", "RLFT.2"), ("D2", "IPO"))}
    _write(root / "report" / "findings.json", {"findings": [
        {"id": "D1", "rates": rates["D1"], "evidence": []},
        {"id": "D2", "rates": rates["D2"], "evidence": [{"check": "IPO: training preference accuracy", "ok": True}]},
        {"id": "D3", "rates": rates["D3"], "evidence": [{"check": "RLFT.2: reward rise on fixed prompts",
                                                         "ok": rl_ok}]}]})
    return root


def _verdicts(out: str) -> dict[str, str]:
    return {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if "seed 0:" in line}


def test_each_route_compares_the_bounds_over_all_canaries_behind_its_own_gate(tmp_path):
    m = _module()
    designed = _run(tmp_path / "d", 0, {"FT.3": 1.2, "RLFT.2": 0.9, "IPO": 0.0}, rl_ok=False)
    sd = _run(tmp_path / "s", 0, {"FT.3": 0.4, "RLFT.2": 0.1, "IPO": 0.0})
    verdicts = _verdicts(m.table([designed], [sd]))
    assert "seed 0: holds (ε ≥ 1.200 vs 0.400 (m = 86))" in verdicts["FT.3 (fine-tuning)"]
    assert "seed 0: inconclusive (a run's route failed its training gate)" in \
        verdicts["RLFT.2 (RL via the reward model)"]
    assert "seed 0: inconclusive (both bounds 0 (m = 86))" in verdicts["IPO (preference pairs)"]
    # SD's bound at least the designed one's: not reproduced
    flipped = _verdicts(m.table([_run(tmp_path / "d2", 0, {"FT.3": 0.3})], [_run(tmp_path / "s2", 0, {"FT.3": 0.3})]))
    assert "seed 0: not reproduced (ε ≥ 0.300 vs 0.300" in flipped["FT.3 (fine-tuning)"]


def test_the_table_shows_each_dose_and_the_seeds_and_counts_must_pair(tmp_path):
    m = _module()
    out = m.table([_run(tmp_path / "d", 0, {"FT.3": 1.2})], [_run(tmp_path / "s", 0, {"FT.3": 0.4})])
    # extraction k/n, LOSS AUC [TPR at 1 % FPR] and ε (m) by dose, and ε over all canaries (v/r of m)
    # (the best attack: the highest AUC of those not marked degenerate, min_k's 0.99 passed over; a TPR at an FPR the
    # non-members cannot resolve is marked n/m, and a line says what that means)
    assert "| FT.3 | unigram secret | 0 | 0/14 [0–5 %] / 1/14 [0–20 %] / 4/14 [0–80 %] | 0.61 [0.10] / 0.64 [0.10] / 0.76 [0.10] | " \
           "zlib 0.65 [n/m: 0.20] / zlib 0.65 [n/m: 0.20] / loss 0.76 [0.10] | 1.20 (6/8 of 86) | 0.60 (28) / 1.20 (28) / 2.40 (28) | yes (loss 3 → 1) |" in out
    assert "n/m: TPR at 1 % FPR is not measurable with fewer than 100 non-members" in out
    assert "| seed 0: holds (ε ≥ 1.200 vs 0.400 (m = 86)) | inconclusive (1 of 1 hold) |" in out   # one seed: no verdict
    with pytest.raises(SystemExit, match="pair runs of the same seed"):
        m.table([_run(tmp_path / "d1", 1, {"FT.3": 1.0})], [_run(tmp_path / "s0", 0, {"FT.3": 1.0})])
    with pytest.raises(SystemExit, match="bound 86 and 80 canaries"):
        m.table([_run(tmp_path / "dm", 0, {"FT.3": 1.0})], [_run(tmp_path / "sm", 0, {"FT.3": 1.0}, m=80)])
    with pytest.raises(SystemExit, match=r"unfinished: no run\.json; give a run directory whose `memlens run` finished"):
        m.table([tmp_path / "unfinished"], [tmp_path / "s"])
    with pytest.raises(SystemExit, match="each seed once"):
        m.table([tmp_path / "d", tmp_path / "d"], [tmp_path / "s", tmp_path / "s"])
    # no bound recorded for a route: inconclusive, as the rule says
    assert "seed 0: inconclusive (no ε bound recorded)" in _verdicts(out)["RLFT.2 (RL via the reward model)"]
