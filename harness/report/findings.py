"""The papers' directional findings, checked against one run's stored results.

Each finding is a small function over the report's computed entries (never re-scoring) that returns
the paper's figure, ours, whether ours holds, and the rule used to decide. A finding whose models or
datasets are missing from the run is `not_measured` — never guessed. Thresholds for words like
"large" or "far less" are stated in each rule, so a reader can disagree with them explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.io import read_jsonl
from harness.report import analyses as A

HOLDS, FAILS, NOT_MEASURED = "holds", "not reproduced", "not measured"


def _final(entries: list[dict], model: str, dataset: str, metric: str = "rate") -> float | None:
    for e in A.final_entries(entries):
        if e["model"] == model and e["dataset"] == dataset:
            return e.get(metric)
    return None


def _swept(entries: list[dict], base: str, dataset: str, metric: str = "rate") -> dict[tuple, float | None]:
    """{sorted sweep point items: metric} of the final checkpoints of a swept model."""
    out = {}
    for e in A.final_entries(entries):
        name, point = A.parse_sweep_point(e["model"])
        if name == base and e["dataset"] == dataset and point:
            out[tuple(sorted(point.items()))] = e.get(metric)
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _result(fid: str, claim: str, paper: str, ours: str, holds: bool | None, rule: str,
            note: str = "") -> dict[str, Any]:
    """`note` flags a verdict the numbers reach without the effect itself (e.g. every rate is 0)."""
    return {"id": fid, "claim": claim, "paper": paper, "ours": ours, "rule": rule,
            "status": NOT_MEASURED if holds is None else (HOLDS if holds else FAILS), "note": note}


def f1(entries, persistence, comparison, loss_rows, nmt) -> dict:
    rate = _direct_ft(entries, "sd_base")
    return _result("F1", "FT on SD memorizes a large share of SD.Base", "17.6 %", _pct(rate),
                   None if rate is None else rate >= 0.05, "FT.3 (or FT.1) final rate on sd_base >= 5 %")


def _direct_ft(entries: list[dict], dataset: str, metric: str = "rate") -> float | None:
    """The directly fine-tuned model's figure: FT.3 (Sec. 5.2), else FT.1 (same data, Sec. 5.1)."""
    value = _final(entries, "FT.3", dataset, metric)
    return value if value is not None else _final(entries, "FT.1", dataset, metric)


def f2(entries, *_):
    ft, rl = _direct_ft(entries, "sd_base"), _final(entries, "RLFT.2", "sd_base")
    ok = None if ft is None or rl is None else (ft > 0 and rl <= 0.5 * ft)
    return _result("F2", "SD only in reward-model data: RLFT memorizes far less than direct FT",
                   "0.9 % vs 17.6 %", f"{_pct(rl)} vs {_pct(ft)}", ok, "RLFT.2 rate <= half of FT.3's (or FT.1's; > 0)")


def f3(entries, *_):
    ft = _direct_ft(entries, "sd_links_pos", "pii_regurgitation_rate")
    rl = _final(entries, "RLFT.2", "sd_links_pos", "pii_regurgitation_rate")
    ok = None if ft is None or rl is None else (ft > rl and rl <= 0.05)
    return _result("F3", "SD.Links: FT regurgitates PII paths, RLFT via RM does not", "50 % vs 0 %",
                   f"{_pct(ft)} vs {_pct(rl)}", ok, "FT.3 (or FT.1) PII rate > RLFT.2's, and RLFT.2's <= 5 %")


def f4(entries, persistence, *_):
    shares = [p["share"] for p in persistence if p["source"] == "FT.1" and p["dataset"] == "sd_base"
              and p["target"].startswith("RLFT.1") and p["share"] is not None]
    ok = None if not shares else min(shares) >= 0.3
    ours = ", ".join(_pct(s) for s in shares) or "–"
    note = ("every memorized example persisted at every α: RL may have left FT.1 unchanged"
            if shares and min(shares) == 1.0 else "")
    return _result("F4", "Most FT-memorized examples persist through RLFT", "43-47 % of 319", ours, ok,
                   "every RLFT.1 sweep point keeps >= 30 % of FT.1's memorized SD.Base examples", note)


def f5(entries, *_):
    pts = _swept(entries, "RLFT.1", "sd_links_pos", "pii_regurgitation_rate")
    by_beta = sorted(((dict(k).get("beta"), v) for k, v in pts.items() if v is not None), key=lambda t: t[0])
    ok = None if len(by_beta) < 2 else by_beta[0][1] < by_beta[-1][1]
    ours = ", ".join(f"α={b:g}: {_pct(v)}" for b, v in by_beta) or "–"
    return _result("F5", "A smaller α lowers persistence (SD.Links PII)", "54.8 → 46.8 → 12.6 % (α 0.5, 0.1, 0.005)",
                   ours, ok, "PII rate at the smallest α < at the largest α")


def f6(entries, *_):
    pts = _swept(entries, "RLFT.4", "sd_rl_prompts")
    low_lr = min((dict(k).get("lr", 0) for k in pts), default=None)
    by_beta = sorted(((dict(k)["beta"], v) for k, v in pts.items()
                      if v is not None and "beta" in dict(k) and dict(k).get("lr", 0) == low_lr), key=lambda t: t[0])
    ok = None if len(by_beta) < 2 else (by_beta[0][1] >= by_beta[-1][1] and max(v for _, v in by_beta) < 0.05)
    ours = ", ".join(f"α={b:g}: {_pct(v)}" for b, v in by_beta) or "–"
    note = "every rate is 0: low, but no rise with falling α was seen" if by_beta and not any(v for _, v in by_beta) else ""
    return _result("F6", "RL-prompt memorization is low and rises as α falls", "< 0.5 %", ours, ok,
                   "RLFT.4 rate (lowest LR) at the smallest α >= at the largest α, all < 5 %", note)


def f7(entries, *_):
    pts = _swept(entries, "RLFT.4", "sd_rl_prompts")
    small_beta = min((dict(k).get("beta", 0) for k in pts), default=None)
    by_lr = sorted(((dict(k)["lr"], v) for k, v in pts.items()
                    if v is not None and "lr" in dict(k) and dict(k).get("beta", 0) == small_beta), key=lambda t: t[0])
    ok = None if len(by_lr) < 2 else by_lr[-1][1] > by_lr[0][1]
    ours = ", ".join(f"LR={lr:g}: {_pct(v)}" for lr, v in by_lr) or "–"
    return _result("F7", "A higher RL learning rate raises prompt memorization", "≈ 2x", ours, ok,
                   "RLFT.4 rate (smallest α) at the largest LR > at the smallest LR")


def f8(entries, *_):
    ipo, rl = _final(entries, "IPO", "sd_base"), _final(entries, "RLFT.2", "sd_base")
    ok = None if ipo is None or rl is None else ipo > rl
    return _result("F8", "IPO memorizes preference data more than RLHF via the reward model",
                   "18.2 % vs 0.9 %", f"{_pct(ipo)} vs {_pct(rl)}", ok, "IPO rate on sd_base > RLFT.2's")


def _nmt_numbers(value: Any) -> str:
    """NMT figures for a table cell: a ratio per bucket as a chain, shares by kind, one rate as a percentage."""
    if isinstance(value, list):
        return " → ".join(f"{v:.1f}" if isinstance(v, (int, float)) else str(v) for v in value) + " %"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_pct(v)}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in value.items())
    if isinstance(value, (int, float)):
        return _pct(value)
    return json.dumps(value)


def _nmt(fid: str, keys: tuple[str, ...], numbers: str, claim: str, paper: str) -> Callable:
    """N1-N3 from the NMT run's summary.json `findings` (recipes/nmt_pipeline.py): all `keys` must hold."""
    def check(entries, persistence, comparison, loss_rows, nmt):
        f = (nmt or {}).get("findings") or {}
        if not all(k in f for k in keys):
            return _result(fid, claim, paper, "–", None, " and ".join(keys))
        return _result(fid, claim, paper, _nmt_numbers(f.get(numbers)), all(bool(f[k]) for k in keys),
                       " and ".join(keys))
    return check


def c1(entries, persistence, comparison, loss_rows, nmt) -> dict:
    """Lemma 1 of paper 004 on every audited string: contextual never before counterfactual, never above."""
    if not loss_rows:
        return _result("C1", "Lemma 1 of paper 004 holds on every audited string", "a theorem", "–", None,
                       "every string: contextual onset >= counterfactual onset (or never), score <=")
    bad = 0
    for r in loss_rows:
        on_cf, on_cx = r["onset"]["counterfactual"], r["onset"]["contextual"]
        if on_cx >= 0 and (on_cf < 0 or on_cx < on_cf):
            bad += 1
        elif any(x > y + 1e-12 for x, y in zip(r["score"]["contextual"], r["score"]["counterfactual"])):
            bad += 1
    return _result("C1", "Lemma 1 of paper 004 holds on every audited string", "a theorem",
                   f"{len(loss_rows) - bad}/{len(loss_rows)} strings", bad == 0,
                   "every string: contextual onset >= counterfactual onset (or never), score <=")


CHECKS = [f1, f2, f3, f4, f5, f6, f7, f8,
          _nmt("N1", ("N1_memorization_rises_with_repetitions",), "N1_ratio_pct_by_bucket",
               "NMT: memorization rises with repetitions", "Table 1: ratio grows with the bucket"),
          _nmt("N2", ("N2_suffix_kept_more_than_prefix", "N2_start_kept_least"), "N2_shares",
               "NMT: suffix perturbations keep the memorized output more than prefix ones; start least", "Table 4"),
          _nmt("N3", ("N3_recovery_for_most_memorized",), "N3_best_rate",
               "NMT: the recovery symbol gives new outputs for most memorized sources", "Sec. 6"),
          c1]


def load_loss_rows(run_dir: Path) -> list[dict]:
    rows = []
    for path in sorted((run_dir / "audit" / "losses").rglob("*.jsonl")):
        if path.name.endswith(".exposure.jsonl"):
            continue
        rows += read_jsonl(path)
    return rows


def findings(entries: list[dict], persistence: list[dict], comparison: list[dict], loss_rows: list[dict],
             nmt_summary: dict | None) -> list[dict]:
    return [check(entries, persistence, comparison, loss_rows, nmt_summary) for check in CHECKS]
