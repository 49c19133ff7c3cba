"""`memlens audit experiment=...` over a whole run (audit_plan), then `memlens report`.

Built on the audit fixtures' real tiny models: FT.1 (trained on 8 canaries, with checkpoints) and an
untrained control FT.2, laid out as a run directory the recipes would have written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from memlens.harness.cli import run
from memlens.harness.core.io import file_sha256
from memlens.harness.measures.memorization import summarize_rows
from tests.integration.run_helpers import two_processes

PLAN = "audit_plan=[{models: [FT.1], control: FT.2, datasets: [canaries]}]"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.fixture(scope="module")
def run_dir(audit_world, tmp_path_factory):
    """A run directory: models/FT.1 (+ checkpoints), models/FT.2 (control), data/canaries."""
    root = tmp_path_factory.mktemp("run")
    for name, src in (("FT.1", audit_world["model_dir"]), ("FT.2", audit_world["control_dir"])):
        shutil.copytree(src, root / "models" / name)
        (root / "models" / name / "provenance.json").write_text(json.dumps(
            {"stage": "sft", "init_model": None, "settings": {"lr": 0.01}, "datasets": {}}))
    data = root / "data" / "canaries"
    data.mkdir(parents=True)
    shutil.copy(audit_world["examples_path"], data / "rows.jsonl")
    (data / "manifest.json").write_text(json.dumps({"count": len(audit_world["examples"]),
                                                    "sha256": file_sha256(data / "rows.jsonl")}))
    # Utility sets: the canaries' lines stand in for HumanEval infills and held-out code, so the
    # trained model must beat the untrained control on both.
    for name in ("humaneval_infill", "pd_eval"):
        shutil.copytree(data, root / "data" / name)
    return root


def _audit(run_dir: Path, *extra: str) -> int:
    return run(["audit", f"run_dir={run_dir}", PLAN, "audit.progress=false", "device=cpu", *extra])


def test_whole_run_audit_scores_every_checkpoint_and_reports(run_dir, audit_world, capsys):
    assert _audit(run_dir) == 0
    audit = run_dir / "audit"
    checkpoints = sorted(p.name for p in (audit / "FT.1").iterdir())
    assert checkpoints == ["checkpoint-30", "checkpoint-90", "final"]
    final = _rows(audit / "FT.1" / "final" / "canaries.jsonl")
    memorized = {r["id"] for r in final if r["memorized"]}
    assert memorized and memorized <= audit_world["trained_ids"]
    summary = json.loads((audit / "summary.json").read_text())
    assert summary["results"]["FT.1"]["final"]["canaries"]["n_memorized"] == len(memorized)
    assert summary["provenance"]["plan"] == [{"model": "FT.1", "control": "FT.2", "dataset": "canaries"}]
    utility = json.loads((audit / "utility.json").read_text())["results"]
    assert utility["FT.1"]["humaneval_infill_exact_match"] > utility["FT.2"]["humaneval_infill_exact_match"]
    assert utility["FT.1"]["pd_eval_loss"] < utility["FT.2"]["pd_eval_loss"]

    # The report renders from the stored rows only, and its numbers equal the rows.
    assert run(["report", f"run_dir={run_dir}"]) == 0
    report = json.loads((run_dir / "report" / "summary.json").read_text())
    for e in report["entries"]:
        rows = _rows(audit / e["model"] / e["checkpoint"] / f"{e['dataset']}.jsonl")
        expected = summarize_rows(rows)      # counts, rate, interval and the PII figures
        assert {"n_total", "n_scored", "rate", "ci95"} <= expected.keys()
        assert {k: e.get(k) for k in expected} == expected
    assert (run_dir / "report" / "report.html").stat().st_size > 10_000
    assert {u["model"] for u in report["utility"]} == {"FT.1", "FT.2"}


def _audit_log(run_dir: Path, *extra: str) -> str:
    """Audit, and return the lines the audit added to its log (the console has one line per model and dataset;
    the per-checkpoint cache counts are in <audit dir>/audit_log.txt)."""
    log = run_dir / "audit" / "audit_log.txt"
    seen = log.stat().st_size if log.is_file() else 0
    assert _audit(run_dir, *extra) == 0
    return log.read_bytes()[seen:].decode("utf-8")


def test_adding_a_checkpoint_generates_only_its_completions(run_dir, audit_world, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from memlens.harness.text.fim import FAMILIES, format_psm_training
    from tests.tiny import save, train_on_texts

    out = _audit_log(run_dir)            # everything stored: a rerun generates nothing
    assert "0 generated" in out and " 1 generated" not in out
    assert all("control completions: 0 generated" in line for line in out.splitlines() if "rows (" in line)
    console = capsys.readouterr().out
    assert "[audit] FT.1 on canaries vs FT.2: 2 checkpoint(s) + final; final " in console
    assert "rows (" not in console

    src = run_dir / "models" / "FT.1" / "checkpoint-30"
    model = AutoModelForCausalLM.from_pretrained(src)
    tok = AutoTokenizer.from_pretrained(src)
    texts = [format_psm_training(ex["prefix"], ex["target"], ex["suffix"], FAMILIES["memlens"])
             for ex in audit_world["examples"][:4]]
    train_on_texts(model, tok, texts, steps=3, lr=1e-2)
    save(model, tok, run_dir / "models" / "FT.1" / "checkpoint-60")

    lines = [line for line in _audit_log(run_dir).splitlines() if "rows (" in line]
    new = [line for line in lines if "checkpoint-60" in line]
    assert len(new) == 1 and f"model completions: {len(audit_world['examples'])} generated" in new[0]
    assert all("control completions: 0 generated" in line for line in lines)
    assert all("model completions: 0 generated" in line for line in lines if "checkpoint-60" not in line)


def test_two_processes_give_the_same_rows(run_dir, tmp_path):
    """accelerate launch with 2 CPU processes: examples sharded, rows merged, same as one process.

    launch/cpu_2proc.yaml: accelerate 1.15's `--cpu --num_processes 2` starts one process."""
    out = tmp_path / "audit2"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    cmd = [*two_processes(), "-m", "memlens", "audit", f"run_dir={run_dir}", PLAN, f"audit.out_dir={out}",
           "audit.progress=false", "device=cpu"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "process 2/2" in proc.stdout
    assert not (out / "shards" / "rank-0" / "audit").exists()
    for ckpt in ("checkpoint-30", "checkpoint-90", "final"):
        one = {r["id"]: r for r in _rows(run_dir / "audit" / "FT.1" / ckpt / "canaries.jsonl")}
        two = {r["id"]: r for r in _rows(out / "FT.1" / ckpt / "canaries.jsonl")}
        assert set(one) == set(two)
        for i in one:
            assert (one[i]["completion"], one[i]["memorized"], one[i]["excluded"]) == \
                   (two[i]["completion"], two[i]["memorized"], two[i]["excluded"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["processes"] == 2


def test_plan_errors_name_the_key(run_dir):
    from memlens.harness.core.errors import UserError

    with pytest.raises(UserError, match=r"audit_plan\[0\]\.control='FT\.9'"):
        run(["audit", f"run_dir={run_dir}", "audit_plan=[{models: [FT.1], control: FT.9, datasets: [canaries]}]"])
    with pytest.raises(UserError, match=r"audit_plan\[0\]\.datasets: 'nope' not built"):
        run(["audit", f"run_dir={run_dir}", "audit_plan=[{models: [FT.1], control: FT.2, datasets: [nope]}]"])
    with pytest.raises(UserError, match="no audit_plan"):
        run(["audit", f"run_dir={run_dir}"])
