"""`audit.measures=[mia,epsilon]` end to end on a model that never saw the canaries: the shipped base
(assets/base_tiny, pre-trained on public code only) scores a coins-built sd_base against its held-out zeros; the
MIA audit writes the scores, the epsilon measure bounds them near 0 (the report's table is
checked on hand-written rows in tests/unit/harness/measures/test_epsilon.py). The positive side
(every guess right gives the hand-computed bound) is tests/unit/harness/measures/test_epsilon.py's, on hand-written MIA rows."""

from __future__ import annotations

import os
import subprocess
import sys

from omegaconf import OmegaConf

from memlens.harness.audit.command import main as audit_main
from memlens.harness.cli import compose
from memlens.harness.core.io import read_json, read_jsonl
from memlens.recipes.stages.models import PROJECT_ROOT
from memlens.synthetic_data.build import build_datasets

BASE = PROJECT_ROOT / "assets" / "base_tiny"


def test_a_model_that_never_saw_the_canaries_gives_a_bound_near_zero(tmp_path):
    import torch

    torch.set_num_threads(1)
    run_dir = tmp_path / "run"
    build_datasets(compose([f"run_dir={run_dir}", "data.sd.size=60", "data.sd.line_counts=[10,20]",
                            "data.sd.membership=coins", "data.sd.doses=[1,4]"]), names=["sd_base", "sd_base_heldout"],
                   log=lambda *_: None)
    (run_dir / "models").mkdir()
    os.symlink(BASE, run_dir / "models" / "BASE")        # a finished model of the run: it has provenance.json
    cfg = OmegaConf.create({
        "run_dir": str(run_dir), "seed": 0,
        "audit": {"out_dir": str(run_dir / "audit"), "cache_dir": str(run_dir / "audit" / "cache"),
                  "measures": ["mia", "epsilon"], "mia_spans": ["target"], "mia_bootstrap": 20, "batch_size": 16,
                  "device": "cpu", "fim_family": None},
        "audit_plan": [{"models": ["BASE"], "control": str(BASE), "datasets": ["sd_base"], "checkpoints": "final"}],
        "report": {"out_dir": str(run_dir / "report"), "figures": False}})
    assert audit_main(cfg) == 0
    summary = read_json(run_dir / "audit" / "epsilon" / "BASE" / "summary.json")
    bound = summary["results"]["final"]["sd_base"]
    coins = read_json(run_dir / "data" / "sd_base" / "manifest.json")["coins"]
    assert bound["m"] == coins["ones"] + coins["zeros"] and bound["n_members"] == coins["ones"]
    assert bound["r"] > 0 and bound["epsilon_lower_bound"] < 0.5, bound
    assert summary["refused"] == {} and summary["settings"]["attack"] == "loss" and bound["delta"] == 1e-5
    # doses dealt before the coins (data.sd.doses): the MIA rows carry each canary's tier, members' as `repeat` and
    # held-out ones' as dose_if_member, and each dose gets its own bound over its canaries, near 0 too
    rows = read_jsonl(run_dir / "audit" / "mia" / "BASE" / "final" / "sd_base.jsonl")
    assert {(r["member"], "repeat" in r, "dose_if_member" in r) for r in rows} == {(1, True, False), (0, False, True)}
    assert set(bound["doses"]) == {"1", "4"} and sum(d["m"] for d in bound["doses"].values()) == bound["m"]
    assert all(d["epsilon_lower_bound"] < 1.0 for d in bound["doses"].values()), bound["doses"]

    # The report as `memlens run` renders it (in the process that ran the audit) and as `memlens report` renders it
    # in a fresh process, which imports no audit module: the same sections, the epsilon table among them, and the
    # same summary.json (the audit measures' registry loads its built-ins on its first read).
    from memlens.harness.cli import load_command

    assert load_command("report")(cfg) == 0
    in_run = (run_dir / "report" / "report.md").read_text(), read_json(run_dir / "report" / "summary.json")
    OmegaConf.save(cfg, tmp_path / "config.yaml")
    fresh = ("import sys; from omegaconf import OmegaConf; from memlens.harness.cli import load_command; "
             "assert 'memlens.harness.audit.extraction' not in sys.modules; "
             "sys.exit(load_command('report')(OmegaConf.load(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", fresh, str(tmp_path / "config.yaml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    alone = (run_dir / "report" / "report.md").read_text(), read_json(run_dir / "report" / "summary.json")
    headings = [line for line in alone[0].splitlines() if line.startswith("#")]
    assert any("audit.measures: epsilon" in h for h in headings), headings
    assert headings == [line for line in in_run[0].splitlines() if line.startswith("#")]
    # (the report's own provenance says when and in which process it was rendered: the rest is the same)
    assert {**alone[1], "provenance": None} == {**in_run[1], "provenance": None} and "epsilon" in alone[1]["measures"]
