"""`python benchmarks/quickstart_seeds.py --write docs/results.md` rebuilds the marked tables from run directories
(report/findings.json, run.json as `memaudit report` and `memaudit run` write them), keeps a table whose runs are
absent, and leaves the rest of the page untouched."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "quickstart_seeds.py"


def _module():
    spec = importlib.util.spec_from_file_location("quickstart_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _finding(fid, status, ours, p=None, reason=None):
    return {"id": fid, "claim": f"claim {fid}", "paper": "17.6 %", "ours": ours, "p_value": p, "status": status,
            "reason": reason, "note": None}


def _run(root: Path, name: str, seed: int, findings: list[dict], seconds: float) -> None:
    (root / name / "report").mkdir(parents=True)
    (root / name / "report" / "findings.json").write_text(json.dumps({"findings": findings}))
    (root / name / "run.json").write_text(json.dumps({"seed": seed, "wall_seconds": seconds}))


def test_write_rebuilds_marked_tables_and_keeps_those_without_runs(tmp_path):
    _run(tmp_path, "runs/q", 0, [_finding("F1", "holds", "64.3 % [49–77] (27/42)", 1.5e-8),
                                  _finding("N1", "inconclusive", "13.5 %", 0.88, "within noise")], 807)
    _run(tmp_path, "runs/q_seed1", 1, [_finding("F1", "not reproduced", "0.0 % [0–9] (0/41)", 1.0),
                                        _finding("N1", "holds", "15 %")], 782)
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n\nkept prose\n\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --one runs/q -->\nold table\n"
                   "<!-- END generated -->\n\nmiddle\n\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py runs/q runs/q_seed1 --ids F -->\n"
                   "old spread\n<!-- END generated -->\n\n"
                   "<!-- BEGIN generated: python benchmarks/quickstart_seeds.py --one runs/gone -->\nrecorded\n"
                   "<!-- END generated -->\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--write", str(doc), "--root", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    text = doc.read_text()
    assert "rebuilt: --one runs/q" in out and "kept as recorded: --one runs/gone" in out
    assert "old table" not in text and "old spread" not in text and "recorded\n" in text
    assert "kept prose" in text and "middle" in text
    assert "| F1 | claim F1 | 17.6 % | 64.3 % [49–77] (27/42) | 1.5e-08 | holds |  |" in text
    assert "| N1 | claim N1 | 17.6 % | 13.5 % | 0.88 | inconclusive | within noise |" in text
    spread = text.split("--ids F -->\n")[1].split("<!-- END")[0]
    assert "| F1 | 17.6 % | 64.3 % [49–77] (27/42) ✓ | 0.0 % [0–9] (0/41) ✗ | 1/2 |" in spread
    assert "N1" not in spread and "seed 0: 807 s, seed 1: 782 s" in spread
    # The same runs give the same page: rebuilding twice changes nothing.
    subprocess.run([sys.executable, str(SCRIPT), "--write", str(doc), "--root", str(tmp_path)], check=True,
                   capture_output=True)
    assert doc.read_text() == text


def test_results_md_marks_every_recorded_findings_table():
    """Each findings table of docs/results.md sits in a marked block the command can rebuild."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    blocks = _module().GENERATED.findall(text)
    assert len(blocks) == 6
    outside = _module().GENERATED.sub("", text)
    assert "| id | finding | paper | this run |" not in outside and "| id | paper | seed 0 |" not in outside
