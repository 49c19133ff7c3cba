"""`memlens audit` end to end on a tiny Llama trained until it reproduces some FIM examples.

Real CLI (in-process through memlens.harness.cli, one real subprocess for the kill test), real files, real
models; the control is the untrained copy (paper 003 Definition 3.1 with a fixed control, App. B).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlens.harness.cli import main as cli_main
from memlens.harness.cli import run as cli_run
from memlens.harness.measures.memorization import summarize_rows
from tests.integration.conftest import audit_overrides
from tests.tiny import torch_threads

pytestmark = pytest.mark.slow
CHECKPOINTS = ["checkpoint-30", "checkpoint-90", "final"]
BATCH = "audit.batch_size=4"  # several batches per checkpoint: many points where a kill can land


def _rows(out_dir: Path, model: str, checkpoint: str, dataset: str = "canaries") -> list[dict]:
    path = out_dir / model / checkpoint / f"{dataset}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _audit(capsys, *overrides: str) -> str:
    with torch_threads(1):
        assert cli_run(["audit", *overrides]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def first_audit(audit_world, tmp_path_factory):
    """One uninterrupted audit of every checkpoint (shared cache dir for the later runs)."""
    root = tmp_path_factory.mktemp("audit_runs")
    out_dir, cache_dir = root / "full", root / "cache"
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf), torch_threads(1):
        assert cli_run(["audit", *audit_overrides(audit_world, out_dir, "audit.all_checkpoints=true",
                                                  f"audit.cache_dir={cache_dir}", BATCH)]) == 0
    return {"root": root, "out_dir": out_dir, "cache_dir": cache_dir, "log": buf.getvalue()}


def test_trained_examples_are_memorized_and_held_out_ones_are_not(audit_world, first_audit):
    out = first_audit["out_dir"]
    final = {r["id"]: r for r in _rows(out, "FT.1", "final")}
    assert set(final) == {ex["id"] for ex in audit_world["examples"]}
    memorized = {i for i, r in final.items() if r["memorized"]}
    assert len(memorized) >= 4, {i: (r["ned"], r["control_ned"]) for i, r in final.items()}
    assert memorized <= audit_world["trained_ids"]  # never an example the model did not train on
    for r in final.values():
        assert r["memorized"] == (r["excluded"] is None and r["ned"] <= 0.1 < r["control_ned"])
        assert {"dataset", "model", "checkpoint", "completion", "control_completion", "target"} <= set(r)
        assert (r["dataset"], r["model"], r["checkpoint"]) == ("canaries", "FT.1", "final")
    # Short target: excluded (Appendix B), keeps its completions, never memorized.
    assert final["short"]["excluded"] == "short_target" and final["short"]["memorized"] is False
    assert "completion" in final["short"]
    # Metadata carried through; PII regurgitation only on rows with a PII path.
    assert final["ex000"]["subset"] == "links" and final["ex001"]["subset"] == "base"
    assert "pii_regurgitated" in final["ex000"] and "pii_regurgitated" not in final["ex001"]
    # The barely trained checkpoint memorizes less than the final model.
    early = _rows(out, "FT.1", "checkpoint-30")
    assert sum(r["memorized"] for r in early) < len(memorized)


def test_summary_equals_the_stored_rows_and_carries_provenance(audit_world, first_audit):
    summary = json.loads((first_audit["out_dir"] / "summary.json").read_text())
    assert sorted(summary["results"]["FT.1"]) == sorted(CHECKPOINTS)
    for checkpoint in CHECKPOINTS:
        entry = summary["results"]["FT.1"][checkpoint]["canaries"]
        expected = summarize_rows(_rows(first_audit["out_dir"], "FT.1", checkpoint))
        assert {k: entry[k] for k in expected} == expected
        assert entry["n_total"] == len(audit_world["examples"]) and entry["n_excluded"] >= 1
        assert len(entry["model_fingerprint"]) == 64 and len(entry["control_fingerprint"]) == 64
    prov = summary["provenance"]
    assert prov["git_commit"] and prov["packages"]["torch"] and prov["seed"] == 0
    assert prov["datasets"]["canaries"] == entry["examples_sha256"]
    assert prov["audit"]["k"] == 0.1 and prov["audit"]["target_tokens"] == 64


def test_rerun_against_the_same_control_generates_nothing(audit_world, first_audit, capsys):
    log = first_audit["log"]
    # First run: the control is decoded once, at the first checkpoint, then served from the cache.
    assert "FT.1/checkpoint-30 canaries: 13 rows (13 new); control completions: 13 generated, 0 cached" in log
    assert "FT.1/final canaries: 13 rows (13 new); control completions: 0 generated, 13 cached" in log
    # A fresh output dir with the same cache: zero generation for the control and the model.
    out = _audit(capsys, *audit_overrides(audit_world, first_audit["root"] / "again",
                                          f"audit.cache_dir={first_audit['cache_dir']}", BATCH))
    assert "control completions: 0 generated, 13 cached; model completions: 0 generated, 13 cached" in out
    assert _rows(first_audit["root"] / "again", "FT.1", "final") == _rows(first_audit["out_dir"], "FT.1", "final")
    cache_files = sorted(p.name for p in first_audit["cache_dir"].iterdir())
    assert len([n for n in cache_files if n.endswith(".jsonl")]) == 4  # control + 3 checkpoints
    assert len([n for n in cache_files if n.endswith(".json")]) == 4   # what each fingerprint covers


def test_decoding_without_the_target_draft_gives_the_same_rows(audit_world, first_audit, capsys):
    """audit.draft=none (plain greedy) and the default target draft: the same completions, so the same
    rows (a separate cache, else the rerun would be served from the first run's completions)."""
    root = first_audit["root"]
    out = _audit(capsys, *audit_overrides(audit_world, root / "no_draft", "audit.all_checkpoints=true",
                                          f"audit.cache_dir={root / 'cache_no_draft'}", BATCH, "audit.draft=none"))
    assert "model completions: 13 generated, 0 cached" in out
    for checkpoint in CHECKPOINTS:
        assert _rows(root / "no_draft", "FT.1", checkpoint) == _rows(first_audit["out_dir"], "FT.1", checkpoint)


def test_control_against_itself_memorizes_nothing(audit_world, first_audit, capsys):
    out_dir = first_audit["root"] / "self"
    out = _audit(capsys, f"audit.model_dir={audit_world['control_dir']}",
                 f"audit.control_dir={audit_world['control_dir']}", f"audit.examples={audit_world['examples_path']}",
                 f"audit.out_dir={out_dir}", f"audit.cache_dir={first_audit['cache_dir']}", "audit.progress=false",
                 "device=cpu", BATCH, "audit.sanity_baseline=true")   # refused without it (test_run_integrity.py)
    assert "control completions: 0 generated" in out and "model completions: 0 generated" in out
    rows = _rows(out_dir, "CONTROL", "final")
    assert len(rows) == 13 and not any(r["memorized"] for r in rows)
    assert all(r["ned"] == r["control_ned"] for r in rows)


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "prefix": "p", "target": "t", "suffix": ""}', '{"id": "b", "prefix": "p"'],
     r"canaries\.jsonl:2: not valid JSON"),
    (['{"id": "a", "prefix": "p", "target": "t", "suffix": ""}', '', '{"id": "b", "prefix": "p"}'],
     r"canaries\.jsonl:3: missing field\(s\) target"),
    (['{"id": "a", "prefix": "p", "target": "t"}', '{"id": "b", "prefix": "p", "target": "t"}',
      '{"id": "a", "prefix": "q", "target": "u"}'],
     r"canaries\.jsonl:3: duplicate id 'a' \(first on line 1\)"),
    (['{"id": "a", "prefix": 3, "target": "t"}'], r"canaries\.jsonl:1: field prefix must be a string"),
])
def test_bad_examples_file_exits_2_naming_file_and_line(audit_world, tmp_path, capsys, lines, message):
    bad = tmp_path / "canaries.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    world = {**audit_world, "examples_path": bad}
    with pytest.raises(SystemExit) as e:
        cli_main(["audit", *audit_overrides(world, tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("memlens: error: ") and __import__("re").search(message, err), err
    assert not (tmp_path / "out").exists()  # nothing half-written


@pytest.mark.parametrize("override, message", [
    ("audit.k=1.5", r"audit\.k=1\.5: must be a number in \[0, 1\]"),
    ("audit.control_dir=/nonexistent/dir", r"audit\.control_dir=/nonexistent/dir: not found"),
    ("audit.model_dir={empty}", r"audit\.model_dir=.*no \*\.safetensors weights"),
    ("audit.examples=null", r"audit\.examples is not set"),
])
def test_bad_config_exits_2_naming_the_key(audit_world, tmp_path, capsys, override, message):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as e:
        cli_main(["audit", *audit_overrides(audit_world, tmp_path / "out"),
                  override.format(empty=tmp_path / "empty")])
    assert e.value.code == 2
    assert __import__("re").search(message, capsys.readouterr().err)


def test_a_bad_measure_setting_exits_2_before_the_model_is_scored(audit_world, tmp_path):
    """Issue #69: `audit.mia_bootstrap=0` (a setting of a measure this one-model audit does not even run) is refused
    by the real command when the audit is planned: exit 2 naming the key, no row, no audit file, no cache entry."""
    from tests.integration.run_helpers import memlens, refused

    out = tmp_path / "out"
    refused(memlens("audit", *audit_overrides(audit_world, out, "audit.mia_bootstrap=0")),
            r"audit\.mia_bootstrap=0: must be a positive integer")
    assert not out.exists()


def test_killed_audit_resumes_without_lost_or_duplicated_rows(audit_world, first_audit, tmp_path, capsys):
    """SIGKILL a real `python -m memlens audit` once rows exist, rerun, compare with the full run."""
    out_dir, cache_dir = tmp_path / "killed", tmp_path / "cache"  # fresh cache: the run must generate
    args = audit_overrides(audit_world, out_dir, "audit.all_checkpoints=true", f"audit.cache_dir={cache_dir}",
                           BATCH)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    first_rows = out_dir / "FT.1" / "checkpoint-30" / "canaries.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "memlens", "audit", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if first_rows.exists() and first_rows.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.01)
        assert proc.poll() is None, proc.stderr.read().decode()  # still running: the kill lands mid-audit
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not (out_dir / "summary.json").exists()
    n_before = first_rows.read_bytes().count(b"\n")
    assert 1 <= n_before < 13 or not (out_dir / "FT.1" / "final").exists()

    out = _audit(capsys, *args)  # the rerun continues where the killed run stopped
    assert "checkpoint-30 canaries: 13 rows" in out
    for checkpoint in CHECKPOINTS:
        resumed, full = _rows(out_dir, "FT.1", checkpoint), _rows(first_audit["out_dir"], "FT.1", checkpoint)
        assert len(resumed) == len({r["id"] for r in resumed}) == 13  # nothing lost, nothing duplicated
        key = lambda r: r["id"]  # noqa: E731
        assert sorted(resumed, key=key) == sorted(full, key=key)
    resumed_summary = json.loads((out_dir / "summary.json").read_text())["results"]
    full_summary = json.loads((first_audit["out_dir"] / "summary.json").read_text())["results"]
    assert resumed_summary == full_summary
