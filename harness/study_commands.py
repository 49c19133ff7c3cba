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
import time
from pathlib import Path

from omegaconf import OmegaConf

from memlens.harness.audit.formal import analyse as analyse_formal
from memlens.harness.audit.nmt import (
    STABILITY_LOG,
    announce_stability,
    record_stability,
    rerun_fits_beside,
    run_nmt,
    settings_from_cfg,
    stability_plan,
)
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
    its stability rerun, then its report (memlens.harness.report.nmt_report). The rerun trains beside this run when
    both fit on the cores (one torch thread each, the default), else after it: the same two processes either way, so
    the same numbers."""
    plan = stability_plan(cfg)
    if plan is not None:
        announce_stability(plan)
    beside = plan is not None and rerun_fits_beside(cfg, usable_cores())
    rerun = None
    if beside:
        console = Path(str(plan.config.run_dir)) / STABILITY_LOG
        print(f"[nmt] stability: the rerun trains beside this run ({settings_from_cfg(cfg).torch_threads} torch "
              f"thread(s) each); its console: {console}")
        rerun = NmtRerun(plan.config, plan.level, console=console)
    try:
        run_nmt(cfg, NmtTrainer())
        if plan is not None:
            rerun = rerun or NmtRerun(plan.config, plan.level)
            record_stability(cfg, plan, rerun.wait())
    finally:
        if rerun is not None:
            rerun.stop()
    write_nmt_report(Path(str(cfg.run_dir)) / "nmt")
    return 0


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the system has one, e.g. a SLURM allocation)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def formal_command(cfg) -> int:
    """`memlens formal`: paper 004's formal-language study's measures (memlens.harness.audit.formal.analyse) over its
    trained models, then its findings and report from what that stored (memlens.harness.report.formal_report)."""
    if cfg.get("formal") is None:
        raise UserError("memlens formal needs a formal-language experiment: experiment=formal_languages "
                        "(or formal_toy)")
    analyse_formal(cfg.run_dir, FormalSettings.load(OmegaConf.to_container(cfg.formal, resolve=True)))
    return report_formal(cfg)


class NmtRerun:
    """Steps 1-5 of `memlens nmt` on a resolved config, in a child process whose torch computes with every library
    held to kernel level `kernels` (torch, MKL and oneDNN pick their kernels once per process, harness/core/kernels.py).
    Started at once; `console`: a file its output is appended to (it trains beside this run, whose lines it would
    interleave), else it prints here. The child ends with this process (core/processes.py end_with_parent: a killed
    `memlens nmt` leaves no trainer behind; the rerun of the command resumes both from their caches)."""

    CODE = ("import sys; from memlens.harness.core.processes import end_with_parent; end_with_parent(int(sys.argv[2])); "
            "from memlens.harness.study_commands import nmt_from_config; nmt_from_config(sys.argv[1])")

    def __init__(self, cfg, kernels: str, console: Path | None = None):
        self.run_dir = Path(str(cfg.run_dir))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = self.run_dir / "config.yaml"
        config.write_text(OmegaConf.to_yaml(cfg), encoding="utf-8")
        self.console = console
        env = level_environment(kernels, dict(os.environ))
        out = None
        if console:
            env["PYTHONUNBUFFERED"] = "1"        # its lines reach the file as printed, the last ones too if it is killed
            out = console.open("a", encoding="utf-8")   # a rerun's log follows the failed one's, which it may explain
            out.write(f"--- memlens nmt stability rerun, kernels {kernels}, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            out.flush()
        try:
            self.process = subprocess.Popen([sys.executable, "-c", self.CODE, str(config), str(os.getpid())],
                                            stdout=out, stderr=subprocess.STDOUT if out else None, env=env)
        finally:
            if out:
                out.close()

    def wait(self) -> dict:
        """Its summary.json, once it has finished; a clear error where it failed."""
        code = self.process.wait()
        if code:
            how = f"was killed by signal {-code}" if code < 0 else f"failed (exit {code})"
            shown = " (its output is above)"
            if self.console:
                lines = (self.console.read_text(encoding="utf-8", errors="replace").splitlines()
                         if self.console.is_file() else [])
                shown = f"; its last lines (all of them in {self.console}):\n" + "\n".join(lines[-20:]) + "\n"
            raise UserError(f"the NMT stability rerun in {self.run_dir} {how}{shown}; rerun the same command to "
                            f"continue, or set nmt.stability_kernels=null to skip it")
        return json.loads((self.run_dir / "nmt" / "summary.json").read_text(encoding="utf-8"))

    def stop(self) -> None:
        """Ends the child if it still runs (this run failed or was interrupted): its finished steps stay cached."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def nmt_from_config(path: str) -> None:
    """The child of NmtRerun: steps 1-5 on the config it wrote."""
    stay_offline()
    quiet_libraries()
    filter_transformers_records(ExpectedRecords())
    run_nmt(OmegaConf.load(path), NmtTrainer())
