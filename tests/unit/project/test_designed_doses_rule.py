"""benchmarks/designed_doses.py's rule (harness/report/findings/verdict.py), fixed before the runs of
experiment=doses_designed: per route, the designed secret is detected at a lower dose than SD's own line when the
smallest dose whose LOSS AUC interval (sd_base, target span, final) lies above 0.5 is lower; a route whose training
gate failed is inconclusive. Hand-made run folders."""

from __future__ import annotations

import json
from pathlib import Path

from tests.scripts import load_script


def _module():
    return load_script("designed_doses")


def _write(path: Path, record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def _run(root: Path, seed: int, lows: dict[str, tuple], rl_ok: bool = True, ft_losses=(3.0, 1.0)) -> Path:
    """A run folder: per route, the LOSS AUC interval's lower end at x1 / x4 / x16 (None: no AUC there)."""
    for model, per_dose in lows.items():
        tiers = {str(d): {"target": {"loss": {"auc": {"value": 0.7, "ci95": [low, 0.95]}, "n_members": 5}}}
                 for d, low in zip((1, 4, 16), per_dose) if low is not None}
        _write(root / "audit" / "mia" / model / "summary.json", {"results": {"final": {"sd_base": {"tiers": tiers}}}})
    _write(root / "run.json", {"seed": seed})
    _write(root / "models" / "FT.3" / "trainer_state.json", {"log_history": [{"loss": x} for x in ft_losses]})
    _write(root / "report" / "findings.json", {"findings": [
        {"id": "D2", "evidence": [{"check": "IPO: training preference accuracy", "ok": True}]},
        {"id": "D3", "evidence": [{"check": "FT.3: trend over doses (D1's test) p", "ok": False},
                                  {"check": "RLFT.2: reward rise on fixed prompts", "ok": rl_ok}]}]})
    return root


def test_each_route_is_judged_by_its_detection_doses_and_its_own_gate(tmp_path):
    m = _module()
    designed = _run(tmp_path / "d", 0, {"FT.3": (0.6, 0.7, 0.9), "RLFT.2": (0.6, 0.6, 0.6), "IPO": (0.1, 0.2, 0.3)},
                    rl_ok=False)
    sd = _run(tmp_path / "s", 0, {"FT.3": (0.3, 0.6, 0.9), "RLFT.2": (0.1, 0.1, 0.1), "IPO": (0.1, 0.2, 0.4)})
    out = m.table([designed], [sd])
    verdicts = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if "seed 0:" in line}
    assert "seed 0: holds (x1 < x4)" in verdicts["FT.3 (fine-tuning)"]
    # D3's FT.3 trend check is not a training gate; RLFT.2's own failed check is
    assert "seed 0: inconclusive (a run did not train)" in verdicts["RLFT.2 (RL via the reward model)"]
    assert "seed 0: inconclusive (neither detected at any dose)" in verdicts["IPO (preference pairs)"]
    assert "| FT.3 | unigram secret | 0 | 0.70 [0.60, 0.95] (5) / " in out and "| x1 | yes (loss 3 → 1) |" in out
    assert "failed: RLFT.2: reward rise on fixed prompts" in out


def test_the_sd_run_trains_too_and_seeds_must_pair(tmp_path):
    m = _module()
    designed = _run(tmp_path / "d", 1, {"FT.3": (0.6, 0.7, 0.9)})
    flat = _run(tmp_path / "s", 1, {"FT.3": (0.1, 0.1, 0.1)}, ft_losses=(2.0, 2.5))
    line = next(x for x in m.table([designed], [flat]).splitlines() if x.startswith("| FT.3 (fine-tuning)"))
    assert "seed 1: inconclusive (a run did not train)" in line
    other = _run(tmp_path / "o", 2, {"FT.3": (0.1, 0.1, 0.1)})
    try:
        m.table([designed], [other])
    except SystemExit as e:
        assert "same seed" in str(e)
    else:
        raise AssertionError("runs of different seeds were paired")


def test_the_shared_rule_by_hand():
    from memlens.harness.report.findings.verdict import detection_dose, detection_verdict

    assert detection_dose({1: [0.4, 1], 4: [0.51, 1], 16: [0.9, 1]}) == 4
    assert detection_dose({1: [0.5, 1], 4: None, 16: [0.5, 1]}) is None         # touching 0.5 is not above it
    early, late, never = {1: [0.6, 1]}, {16: [0.6, 1]}, {1: [0.2, 1]}
    assert detection_verdict(early, late) == ("holds", "x1 < x16")
    assert detection_verdict(late, never) == ("holds", "x16 < never")
    assert detection_verdict(early, early) == ("not reproduced", "x1 >= x1")
    assert detection_verdict(never, late) == ("not reproduced", "never >= x16")
    assert detection_verdict(never, never)[0] == "inconclusive"
    assert detection_verdict(early, late, (True, False), "why")[1] == "why"
    assert detection_verdict(None, late)[0] == "not measured"
