"""The smoke experiment three ways, each in a fresh run directory, one after the other, timed by wall clock:

    python benchmarks/bench_launcher.py [--out DIR]

sequential (`memlens run`, one process), `launcher.kind=local launcher.parallel=2` (8 jobs, 1 thread each) and,
where a one-node SLURM cluster can be started here (root, slurm-wlm and munge: tests/slurm_cluster.py),
`launcher.kind=slurm` with one CPU per job. Prints a markdown table with the load average before each path, and
checks that every path trained the same weights, byte for byte. Take it on an idle machine (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.slurm_cluster import missing, one_node_slurm  # noqa: E402  (the repo on sys.path first)

COMMON = ["run", "experiment=smoke", "device=cpu", "report.figures=false"]
PATHS = {"sequential (one process, 2 torch threads)": [],
         "`launcher.kind=local launcher.parallel=2` (1 thread per job)": ["launcher.kind=local", "launcher.parallel=2"],
         "`launcher.kind=slurm` one-node cluster, `cpus_per_task=1`": ["launcher.kind=slurm",
                                                                       "launcher.slurm.cpus_per_task=1"]}


def weights(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((run_dir / "models").rglob("*.safetensors"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where the run directories go (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_launcher_"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    rows, reference = [], None
    for i, (label, extra) in enumerate(PATHS.items()):
        slurm = "launcher.kind=slurm" in extra
        if slurm and (why := missing()):
            rows.append(f"| {label} | not run: {why} | | |")
            continue
        with (one_node_slurm(out / "cluster") if slurm else contextlib.nullcontext(env)) as run_env:
            load = os.getloadavg()[0]
            start = time.time()
            proc = subprocess.run([sys.executable, "-m", "memlens", *COMMON, f"run_dir={out / f'run{i}'}", *extra],
                                  cwd=REPO, env={**env, **run_env}, capture_output=True, text=True)
            seconds = time.time() - start
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            return 1
        got = weights(out / f"run{i}")
        reference = reference or got
        same = "yes" if got == reference else "**no**"
        rows.append(f"| {label} | {int(seconds // 60)} min {seconds % 60:.0f} s | {load:.2f} | {same} |")
    print("| path | wall | load (1 min) before | same weights as sequential |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
