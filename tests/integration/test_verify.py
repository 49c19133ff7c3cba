"""`memlens verify run_dir=...` on copies of the shared smoke run (never the fixture itself): the untouched copy
verifies (exit 0, every part listed); a flipped byte in a checkpoint's weights, an edited audit row and an edited
audit/summary.json each exit 1 naming the file, the field and both values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlens.harness.core.io import read_json
from tests.integration.run_helpers import copy_run, memlens


@pytest.fixture
def run_copy(smoke, tmp_path) -> Path:
    return copy_run(smoke[0], tmp_path / "run")


def _verify(run_dir: Path):
    return memlens("verify", f"run_dir={run_dir}")


def test_an_untouched_run_verifies_every_part(run_copy):
    done = _verify(run_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    parts = {line.split()[2]: int(line.split()[3]) for line in done.stdout.splitlines() if line.startswith("[verify] ok")}
    assert set(parts) == {"datasets", "provenance", "models", "rows", "audit", "report"}, done.stdout
    assert all(n > 0 for n in parts.values()), parts
    assert "every recorded hash and result matches" in done.stdout


def test_a_flipped_byte_in_a_checkpoints_weights_names_its_fingerprint(run_copy):
    weights = run_copy / "models" / "FT.1" / "checkpoint-4" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01                                  # a weight's last byte: the header still parses
    weights.write_bytes(bytes(data))
    done = _verify(run_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "DIFFERENT" in x)
    recorded = read_json(run_copy / "audit" / "FT.1" / "checkpoint-4" / "sd_base.meta.json")["model_fingerprint"]
    assert "(models)" in line and "audit/FT.1/checkpoint-4/" in line and "field model_fingerprint" in line, line
    assert f"recorded '{recorded}'" in line and str(weights.parent) in line, line


def test_an_edited_audit_row_names_the_rows_file_the_row_and_the_field(run_copy):
    rows_file = run_copy / "audit" / "FT.1" / "final" / "sd_base.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines()]
    edited = next(r for r in rows if r["excluded"] is None)          # a scored row: its verdict counts
    edited["memorized"] = not edited["memorized"]
    rows_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    done = _verify(run_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "DIFFERENT" in x)
    assert f"(rows): {rows_file}: field row id={edited['id']} memorized" in line, line
    assert f"recorded {json.dumps(edited['memorized'])}, recomputed (k=0.1) {json.dumps(not edited['memorized'])}" \
        in line, line


def test_an_edited_summary_names_the_field_and_both_values(run_copy):
    path = run_copy / "audit" / "summary.json"
    summary = read_json(path)
    entry = summary["results"]["FT.1"]["final"]["sd_base"]
    true_count = entry["n_memorized"]
    entry["n_memorized"] = true_count + 1
    path.write_text(json.dumps(summary, indent=2, sort_keys=True), encoding="utf-8")
    done = _verify(run_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "DIFFERENT" in x)
    assert line.endswith(f"(audit): {path}: field FT.1.final.sd_base.n_memorized: recorded {true_count + 1}, "
                         f"recomputed {true_count}"), line


def test_an_edited_finding_is_found_by_rendering_the_report_again(run_copy):
    path = run_copy / "report" / "findings.json"
    findings = read_json(path)
    first = findings["findings"][0]
    first["status"] = "holds" if first["status"] != "holds" else "refuted"
    path.write_text(json.dumps(findings, indent=2, sort_keys=True), encoding="utf-8")
    done = _verify(run_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "DIFFERENT" in x)
    assert f"(report): {path}: field findings[0].status: recorded '{first['status']}'" in line, line
