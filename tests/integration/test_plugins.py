"""The extensions docs/architecture.md describes, added the way it says: one plugin file, examples/lab_plugin.py, named
with `plugins=[<file>]`, registering a training stage, a preference objective, a verifiable reward, a
membership-inference attack, an audit measure and a finding. Fresh `memlens` processes (nothing imported by the test
reaches them) train a preference stage with the objective, the plugin's stage after it and an RL stage against the
reward, run the attack and the measure in the audit, and judge the finding in a rendered `memlens report`. The page's
own code blocks (a stage, an attack, a finding) are run as written, read from the page when the test runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

from memlens.harness.core.io import read_json, read_jsonl
from tests.doc_commands import python_blocks
from tests.integration.run_helpers import OFFLINE, REPO, copy_run, memlens

PLUGIN = REPO / "examples" / "lab_plugin.py"
ARCHITECTURE = REPO / "docs" / "architecture.md"


ONLY_IPO = ["stages.FT=null", "stages.RM=null", "stages.RLFT=null", "stages.IPO.objective=hinge_po",
            "+stages.AVG={recipe:average,init:IPO,checkpoints:2}",
            "+stages.RLVR={recipe:rl,init:PT,prompts:[pd_3],reward:{kind:function,function:balanced_brackets},"
            "max_steps:1,num_generations:2,prompts_per_step:2,max_completion_length:8,save_steps:1,context_chars:400,"
            "eval_prompts:0}",
            "audit_plan=[{models:[IPO,AVG],control:PT,datasets:[sd_base]}]", "audit.measures=[ned,mia,row_count]",
            "audit.mia_spans=[target]", "audit.mia_bootstrap=50"]


def test_a_plugin_file_adds_a_stage_an_objective_a_reward_an_attack_a_measure_and_a_finding_to_fresh_commands(smoke, tmp_path):
    run_dir = copy_run(smoke[0], tmp_path / "run", ["data", "models/PT"])
    common = ["experiment=smoke", f"run_dir={run_dir}", "device=cpu", f"plugins=[{PLUGIN}]", *ONLY_IPO]

    trained = memlens("run", *common, "after_training=[]")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    provenance = read_json(run_dir / "models" / "IPO" / "provenance.json")
    assert provenance["hyperparameters"]["objective"] == "hinge_po"        # the stage trained the plugin's objective
    # The plugin's stage ran after the stage it starts from, and holds the mean of IPO's checkpoints and final model.
    averaged = read_json(run_dir / "models" / "AVG" / "provenance.json")
    ipo = run_dir / "models" / "IPO"
    assert averaged["stage"] == "average" and averaged["settings"]["init"] == "IPO"
    assert averaged["averaged"] == [str(ipo / "checkpoint-1"), str(ipo / "checkpoint-2"), str(ipo)]
    states = [load_file(str(ipo / sub / "model.safetensors")) for sub in ("checkpoint-1", "checkpoint-2", "")]
    mean = load_file(str(run_dir / "models" / "AVG" / "model.safetensors"))
    assert mean.keys() == states[0].keys() and any(not torch.equal(states[0][k], states[2][k]) for k in mean)
    for key, value in mean.items():
        torch.testing.assert_close(value, sum(s[key].double() for s in states).float() / 3, rtol=0, atol=1e-6)
    # The plugin's verifiable reward scored the RL stage's completions.
    rlvr = read_json(run_dir / "models" / "RLVR" / "provenance.json")
    assert rlvr["stage"] == "rl" and rlvr["reward_function"] == "balanced_brackets" and rlvr["reward_model"] is None
    rewards = [e["reward"] for e in read_jsonl(run_dir / "models" / "RLVR" / "train_log.jsonl") if "reward" in e]
    assert rewards and all(0.0 <= r <= 1.0 for r in rewards), rewards

    audited = memlens("audit", *common)
    assert audited.returncode == 0, audited.stdout[-3000:] + audited.stderr[-3000:]
    mia = read_json(run_dir / "audit" / "mia" / "IPO" / "summary.json")
    assert mia["attacks"][-1] == "target_length"                           # after the built-ins, in the audit
    assert (run_dir / "audit" / "AVG" / "final" / "sd_base.jsonl").is_file()   # the plugin stage's model, audited
    assert read_json(run_dir / "audit" / "row_count.json") == {
        "sd_base": sum(1 for _ in (run_dir / "data" / "sd_base" / "rows.jsonl").open())}

    report = memlens("report", *common)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    html = (run_dir / "report" / "report.html").read_text()
    assert "<td class='short'>IPO</td><td class='short'>hinge_po</td>" in html   # the preference stages' table
    assert "target length" in html                     # the attack's label, in the MIA table
    assert "Rows per dataset (audit.measures: row_count)" in html
    findings = {f["id"]: f for f in json.loads((run_dir / "report" / "findings.json").read_text())["findings"]}
    assert findings["X1"]["status"] == "holds" and findings["X1"]["stages"] == ["IPO"]

    # Without the plugin, the objective is unknown again: a fresh process, and the error names the key and the choices.
    refused = memlens("check", "experiment=smoke", f"run_dir={run_dir}", "stages.IPO.objective=hinge_po")
    assert refused.returncode == 2 and "stages.IPO.objective='hinge_po': use one of ipo" in refused.stderr


def test_a_missing_or_broken_plugin_is_refused_naming_the_key(tmp_path):
    missing = memlens("check", f"plugins=[{tmp_path / 'nowhere.py'}]")
    assert missing.returncode == 2 and "plugins[0]=" in missing.stderr and "no such file" in missing.stderr
    unknown = memlens("check", "plugins=[no_such_memlens_plugin]")
    assert unknown.returncode == 2 and "no module of that name on the Python path" in unknown.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('half-written plugin')\n")
    failed = memlens("check", f"plugins=[{broken}]")
    assert failed.returncode == 2 and "importing it raised RuntimeError: half-written plugin" in failed.stderr


# Uses the page's blocks, loaded as one plugin file, in a fresh interpreter (their registrations stay there): the stage
# is planned and run on the shipped base, the attack scores one text, the finding judges a run with and without rows.
USE_THE_PAGES_PLUGIN = """
import json, sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from memlens.harness.core.registry import load_plugins
from memlens.harness.measures.mia import ATTACKS, AttackInputs
from memlens.harness.report.findings.registry import FINDINGS
from memlens.recipes.orchestration.stage_plan import settings_fields
from memlens.recipes.stages.contract import StageContext
from memlens.recipes.stages.registry import recipe_module

load_plugins([sys.argv[1]])
base, run_dir = Path("assets/base_tiny").resolve(), Path(sys.argv[2])
assert {"init", "model", "lr"} <= settings_fields("copy", "COPY")
module = recipe_module("copy", "COPY")
ctx = StageContext(run_dir, "COPY")
module.run_stage(module.load_settings({"init": str(base)}, "COPY"), ctx)
record = json.loads((ctx.out_dir / "provenance.json").read_text())
assert record["stage"] == "copy" and record["datasets"] == {} and record["init_model"] == str(base), record
assert (ctx.out_dir / "model.safetensors").read_bytes() == (base / "model.safetensors").read_bytes()

inputs = AttackInputs(values={"logp": np.array([-1.0, -2.0])}, text="t", control={"logp": np.array([-3.0])})
assert ATTACKS["my_attack"].score(inputs) == 1.5

check = FINDINGS["Y1"].check
assert check(SimpleNamespace(rows=lambda model, dataset: None)).status == "not measured"
held = check(SimpleNamespace(rows=lambda model, dataset: [{}, {}]))
assert held.status == "holds" and held.ours == "2 rows", held
assert list(FINDINGS)[-1] == "Y1"                    # after the built-ins
"""


def test_the_architecture_pages_plugin_examples_run_as_written(tmp_path):
    blocks = python_blocks(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(blocks) == 3, "a stage, an MIA attack and a finding; a new block gets its use here"
    plugin = tmp_path / "from_the_architecture_page.py"
    plugin.write_text("\n\n".join(blocks))
    done = subprocess.run([sys.executable, "-c", USE_THE_PAGES_PLUGIN, str(plugin), str(tmp_path / "run")], cwd=REPO,
                          env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
