"""`python benchmarks/gpu_ladder.py --toy` on the CPU: the GPU ladder's every step at toy size (the throughput probe
and the plan chosen from it, the base pre-trained with the shipped tokenizer, the quickstart chain from it audited with
NED and MIA, the held-out losses of both bases), its layout, its findings with their gates, and a second invocation
that continues without choosing again or training again. The GPU run itself is recorded in docs/results.md when a
device is lent; CI never needs one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from memlens.harness.report.findings.verdict import FAILS, HOLDS, INCONCLUSIVE
from tests.integration.run_helpers import OFFLINE, REPO, run_python

pytestmark = pytest.mark.slow
CHAIN_MODELS = ("PT", "FT.2", "FT.3", "RM.3", "RLFT.2", "IPO")


def ladder(out: Path) -> subprocess.CompletedProcess:
    import os

    return run_python(REPO / "benchmarks" / "gpu_ladder.py", ["--toy", "--out", str(out)], {**os.environ, **OFFLINE},
                      REPO, 900)


def weights(out: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")}


def test_the_toy_ladder_runs_every_step_writes_its_outputs_and_continues_without_choosing_again(tmp_path):
    out = tmp_path / "ladder"
    first = ladder(out)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    plan = json.loads((out / "plan.json").read_text())
    # the plan: measured before anything trained, every count from it
    assert plan["toy"] and plan["device"] == "cpu" and plan["throughput"]["tokens_per_second"] > 0
    assert plan["counts"]["pt_tokens"] >= 16384 and 0 < plan["counts"]["chain_scale"] <= 1
    assert set(plan["chain_token_passes"]) == set(CHAIN_MODELS) - {"PT"}
    # the base: the ladder model with the shipped tokenizer, trained on the plan's budget
    base = out / "base" / "models" / "PT"
    config = json.loads((base / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"]) == (plan["model"]["hidden_size"],
                                                                    plan["model"]["num_layers"])
    assert (base / "tokenizer.json").read_bytes() == (REPO / "assets" / "base_tiny" / "tokenizer.json").read_bytes()
    assert json.loads((out / "base" / "models" / "PT" / "provenance.json").read_text())["settings"]["max_tokens"] \
        == plan["counts"]["pt_tokens"]
    # the chain from that base: every stage trained, PT imported from it
    for model in CHAIN_MODELS:
        assert (out / "run" / "models" / model / "provenance.json").is_file(), model
    assert json.loads((out / "run" / "models" / "PT" / "config.json").read_text())["hidden_size"] == config["hidden_size"]
    # its outputs: the report's findings and summary, the report, the timings, ladder.json
    assert json.loads((out / "findings.json").read_text()) == json.loads(
        (out / "run" / "report" / "findings.json").read_text())
    assert (out / "report" / "report.html").is_file() and (out / "summary.json").is_file()
    record = json.loads((out / "ladder.json").read_text())
    assert [f["id"] for f in record["findings"]] == ["F1", "F2", "F3", "F8"]
    for f in record["findings"]:
        assert f["status"] in (HOLDS, FAILS, INCONCLUSIVE) and f["rates"], f
        assert f["status"] != INCONCLUSIVE or f["reason"], f          # an inconclusive one names its failed gate
    assert any(e["check"].startswith("RLFT.2") for e in record["findings"][1]["evidence"])    # F2's reward gate
    assert record["heldout_loss"]["n"] > 0 and record["heldout_loss"]["ladder_base"] > 0
    assert record["heldout_loss"]["shipped_base"] > 0 and record["parameters"] == plan["throughput"]["parameters"]
    steps = json.loads((out / "timings.json").read_text())
    assert len(steps) == 1 and set(steps[0]["steps"]) == {"throughput", "chain_data", "base", "chain", "heldout_loss"}

    # a second invocation continues: the same plan (not chosen again), nothing trained again, the same findings
    plan_bytes, trained, findings = (out / "plan.json").read_bytes(), weights(out), (out / "findings.json").read_bytes()
    again = ladder(out)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "continuing: counts from" in again.stdout
    assert (out / "plan.json").read_bytes() == plan_bytes and weights(out) == trained
    assert (out / "findings.json").read_bytes() == findings
    steps = json.loads((out / "timings.json").read_text())
    assert len(steps) == 2 and steps[1]["steps"] == {}                # every step was done: none ran again
    assert again.stdout.count("done in an earlier invocation") == 3
    # a step that did not finish runs again, and `memlens run` continues it: here the chain's report, removed
    done = json.loads((out / "done.json").read_text())
    del done["chain"]
    (out / "done.json").write_text(json.dumps(done))
    import shutil

    shutil.rmtree(out / "run" / "report")
    third = ladder(out)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert weights(out) == trained and (out / "findings.json").read_bytes() == findings
    assert "chain" in json.loads((out / "timings.json").read_text())[2]["steps"]
