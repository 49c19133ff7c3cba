"""`trainer.train()`'s wall time in the shipped callback example (examples/audit_trl_sft.py) with no callback,
synchronous scoring and background scoring: benchmarks/README.md's "Scoring in the background" table. The modes run
interleaved (none, synchronous, background, then again), so a drift of the machine's speed spreads over all three,
each in a fresh output folder; the result holds every run's seconds, each mode's mean, what scoring adds to training
and the machine.

    python benchmarks/callback_timing.py                              # 3 runs of each mode
    python3 benchmarks/callback_timing.py --repeats 5                 # on a GPU machine (no .venv there)
    python benchmarks/callback_timing.py --repeats 1 --modes none     # the plumbing, one run

The example trains and scores on CUDA when torch sees a GPU, else on the CPU; the result is named after that device
(benchmarks/results/callback_timing_<device>.json unless --result says otherwise) and written again after every run,
so a run cut short keeps the ones that finished. Take it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memlens.harness.core.io import atomic_write_json  # noqa: E402

EXAMPLE = REPO / "examples" / "audit_trl_sft.py"
MODES = {"none": ["--no-audit"], "synchronous": [], "background": ["--background"]}
TRAIN_LINE = re.compile(r"^trainer\.train\(\): ([0-9]+(?:\.[0-9]+)?) s$", re.MULTILINE)
RUN_LIMIT_S = 900        # one example run; ~20-45 s on 2 CPU cores (benchmarks/README.md), ~75 s on one thread


def train_seconds(console: str) -> float:
    """The seconds the example printed for `trainer.train()` (its one timing line)."""
    found = TRAIN_LINE.findall(console)
    if len(found) != 1:
        raise ValueError(f"expected one 'trainer.train(): N s' line in the example's output, found {len(found)}")
    return float(found[0])


def summarize(seconds: dict[str, list[float]]) -> dict[str, dict]:
    """Each mode's runs, mean and, beside the no-callback mean, the share scoring adds to training."""
    means = {mode: sum(runs) / len(runs) for mode, runs in seconds.items()}
    baseline = means.get("none")
    return {mode: {"seconds": runs, "n": len(runs), "mean": round(means[mode], 2),
                   "added": None if baseline is None or mode == "none" else round(means[mode] / baseline - 1, 3)}
            for mode, runs in seconds.items()}


def markdown(summary: dict[str, dict]) -> str:
    lines = ["| scoring | `trainer.train()` s | added to training |", "|---|---|---|"]
    for mode, row in summary.items():
        runs = ", ".join(f"{s:.1f}" for s in row["seconds"])
        added = "–" if row["added"] is None else f"{row['added']:+.0%}"
        lines.append(f"| {mode} | {runs} (mean {row['mean']:.1f}) | {added} |")
    return "\n".join(lines)


def run_example(mode: str, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)                 # a fresh folder: no checkpoint or audit row reused
    done = subprocess.run([sys.executable, str(EXAMPLE), str(out), *MODES[mode]], cwd=REPO, capture_output=True,
                          text=True, timeout=RUN_LIMIT_S)
    if done.returncode != 0:
        raise SystemExit(f"callback_timing: the example in mode {mode!r} exited {done.returncode} ({out}):\n"
                         f"{(done.stdout + done.stderr)[-2000:]}")
    return train_seconds(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each mode (default 3)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--work", type=Path, default=Path("runs/callback_timing"), help="the example's output folders")
    parser.add_argument("--result", type=Path, default=None,
                        help="result JSON (default benchmarks/results/callback_timing_<device>.json)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    import torch

    from memlens.harness.core.provenance import provenance

    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = args.work.resolve()                  # the example runs from the repository's root, this script anywhere
    result = (args.result or REPO / "benchmarks" / "results" / f"callback_timing_{device}.json").resolve()
    record = {"device": device, "device_name": torch.cuda.get_device_name(0) if device == "cuda" else None,
              "provenance": provenance(seed=0, datasets={})}
    seconds: dict[str, list[float]] = {mode: [] for mode in args.modes}
    started = time.time()
    for repeat in range(args.repeats):
        for mode in args.modes:
            seconds[mode].append(run_example(mode, work / f"{mode}-{repeat}"))
            print(f"[callback_timing] {mode} #{repeat + 1}: trainer.train() {seconds[mode][-1]:.1f} s", flush=True)
            done = {m: runs for m, runs in seconds.items() if runs}
            atomic_write_json(result, {**record, "modes": summarize(done), "repeats_asked": args.repeats,
                                       "wall_seconds": round(time.time() - started, 1)})
    print(markdown(summarize(seconds)))
    print(json.dumps({"result": str(result)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
