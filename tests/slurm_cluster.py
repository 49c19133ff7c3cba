"""A one-node SLURM cluster from Debian's slurm-wlm (and munge) for the launcher's tests: its own munged, slurmctld
and slurmd, with a slurm.conf, state and logs in a temporary folder, on free ports, started and stopped by process id.
It needs root (slurmd starts jobs as their user) and the packages: `.ci/run` installs them as root
(`apt-get install slurm-wlm munge`); elsewhere the tests that need it skip saying so."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue")
MUNGE_KEY = Path("/etc/munge/munge.key")     # written by the munge package's install


def missing() -> str | None:
    """Why this machine cannot run the cluster (None: it can)."""
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"no {', '.join(absent)}: apt-get install slurm-wlm munge (.ci/run does, as root)"
    if os.geteuid() != 0:
        return "a one-node SLURM cluster needs root (slurmd starts jobs as their user)"
    if not MUNGE_KEY.is_file():
        return f"no {MUNGE_KEY}: reinstall munge"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(folder: Path, cpus: int) -> Path:
    host = socket.gethostname()
    lines = [f"ClusterName=memlens{os.getpid()}", f"SlurmctldHost={host}(127.0.0.1)",
             "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
             # cred_expire: a job step's credential lifetime, and so how long SLURM holds a requeued job before it
             # starts again (its BeginTime): 15 s instead of 120 lets the preemption test see its job come back
             f"AuthInfo=socket={folder / 'munge.socket'},cred_expire=15",
             f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
             f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
             f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
             f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
             "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
             "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
             "ReturnToService=2", "JobAcctGatherType=jobacct_gather/none",
             "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
             "SchedulerParameters=sched_interval=1", "MessageTimeout=30",
             f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1024 State=UNKNOWN",
             "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"]
    conf = folder / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


@contextlib.contextmanager
def one_node_slurm(folder: Path, cpus: int | None = None) -> Iterator[dict[str, str]]:
    """Start the cluster; yields the environment its clients need (SLURM_CONF); stops every daemon on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    key = folder / "munge.key"
    shutil.copyfile(MUNGE_KEY, key)
    os.chmod(key, 0o600)
    conf = write_config(folder, cpus or os.cpu_count() or 1)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["munged", f"--socket={folder / 'munge.socket'}", f"--key-file={key}",
                    f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
                    f"--seed-file={folder / 'munge.seed'}", "--force"], check=True, env=env)
    daemons = [subprocess.Popen([d, "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL,
                                stderr=open(folder / f"{d}.stderr", "w")) for d in ("slurmctld", "slurmd")]
    try:
        wait_idle(env, folder)
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True, timeout=30)
        for proc in reversed(daemons):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.kill(int((folder / "munged.pid").read_text()), signal.SIGTERM)


def wait_idle(env: dict[str, str], folder: Path, timeout_s: float = 60) -> None:
    """Until the node reports idle; else the daemons' logs in the error."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout.strip()
        if state == "idle":
            return
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(folder.glob("*.log"))
                     + sorted(folder.glob("*.stderr")))
    raise RuntimeError(f"the one-node SLURM cluster in {folder} did not become idle in {timeout_s:.0f} s\n{logs}")
