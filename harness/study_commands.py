"""`memlens nmt` and `memlens formal`: the two studies whose command trains and measures in one.

`nmt` runs Finding Memo's path (harness/audit/nmt.py on the models recipes/nmt/nmt_pipeline.py trains), its stability
rerun in a child process held to another CPU kernel level (torch, MKL and oneDNN pick kernels once per process:
harness/core/kernels.py), and its report; `formal` renders paper 004's formal-language study from its trained
models. Like harness/cli.py, this module sits above every layer (it imports the recipes); the CLI imports it only
when one of its commands runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from memlens.harness.audit.formal import analyse as analyse_formal
from memlens.harness.audit.nmt import check_stability, run_nmt
from memlens.harness.cli import stay_offline
from memlens.harness.core.console import ExpectedRecords, quiet_libraries
from memlens.harness.core.errors import UserError
from memlens.harness.core.formal_study import FormalSettings
from memlens.harness.core.kernels import level_environment
from memlens.harness.model.load import filter_transformers_records
from memlens.harness.report.formal_report import report_formal
from memlens.harness.report.nmt_report import write_nmt_report
from memlens.recipes.nmt.nmt_pipeline import NmtTrainer


def nmt_command(cfg) -> int:
    """`memlens nmt`: the Finding Memo audit (memlens.harness.audit.nmt) of the models memlens.recipes.nmt.nmt_pipeline trains,
    then its report (memlens.harness.report.nmt_report)."""
    run_nmt(cfg, NmtTrainer())
    check_stability(cfg, nmt_in_child_process)
    write_nmt_report(Path(str(cfg.run_dir)) / "nmt")
    return 0


def formal_command(cfg) -> int:
    """`memlens formal`: paper 004's formal-language study's measures (memlens.harness.audit.formal.analyse) over its
    trained models, then its findings and report from what that stored (memlens.harness.report.formal_report)."""
    if cfg.get("formal") is None:
        raise UserError("memlens formal needs a formal-language experiment: experiment=formal_languages "
                        "(or formal_toy)")
    analyse_formal(cfg.run_dir, FormalSettings.load(OmegaConf.to_container(cfg.formal, resolve=True)))
    return report_formal(cfg)


def nmt_in_child_process(cfg, kernels: str) -> dict:
    """Steps 1-5 of `memlens nmt` on a resolved config, in a child process whose torch computes with
    every library held to kernel level `kernels` (torch, MKL and oneDNN pick their kernels once per process,
    harness/core/kernels.py); its summary.json."""
    run_dir = Path(str(cfg.run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir / "config.yaml"
    config.write_text(OmegaConf.to_yaml(cfg), encoding="utf-8")
    code = "import sys; from memlens.harness.study_commands import nmt_from_config; nmt_from_config(sys.argv[1])"
    env = level_environment(kernels, dict(os.environ))
    if subprocess.run([sys.executable, "-c", code, str(config)], env=env).returncode:
        raise UserError(f"the NMT stability rerun in {run_dir} failed (its output is above); rerun the same "
                        f"command to continue, or set nmt.stability_kernels=null to skip it")
    return json.loads((run_dir / "nmt" / "summary.json").read_text(encoding="utf-8"))


def nmt_from_config(path: str) -> None:
    """The child of nmt_in_child_process: steps 1-5 on the config it wrote."""
    stay_offline()
    quiet_libraries()
    filter_transformers_records(ExpectedRecords())
    run_nmt(OmegaConf.load(path), NmtTrainer())
