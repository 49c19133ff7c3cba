"""Per-stage wall and CPU time of an experiment, and the tiny model's pre-training throughput.

    .venv/bin/python benchmarks/bench_stages.py --experiment smoke                # every stage, toy size
    .venv/bin/python benchmarks/bench_stages.py --experiment findings             # the full chain (~35 min)
    .venv/bin/python benchmarks/bench_stages.py --pretrain-tokens 200000          # PT of model=tiny only

Runs the real CLI (`memlens run` / `memlens train`) in a fresh run directory and reads the stage
records the pipeline writes to <run_dir>/run.json (wall seconds and CPU seconds of every stage; CPU
seconds stay comparable when other jobs share the machine). Prints a Markdown table for
benchmarks/README.md together with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def memlens(*args: str) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    subprocess.run([sys.executable, "-m", "memlens", *args], cwd=REPO, env=env, check=True)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def bench_experiment(experiment: str, run_dir: Path) -> None:
    load_before = load()
    start = time.time()
    memlens("run", f"experiment={experiment}", f"run_dir={run_dir}", "device=cpu", "after_training=[]")
    total = time.time() - start
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    print(f"\nexperiment={experiment}: {total:.0f} s wall in total (data + stages + start-up); "
          f"load average {load_before} -> {load()}\n")
    print("| stage | recipe | wall s | CPU s |\n|---|---|---:|---:|")
    for s in stages:
        print(f"| {s['model']} | {s['recipe']} | {s['seconds']:.1f} | {s.get('cpu_seconds', float('nan')):.1f} |")
    print(f"| **sum** | | {sum(s['seconds'] for s in stages):.1f} | "
          f"{sum(s.get('cpu_seconds', 0) for s in stages):.1f} |")


def bench_pretrain(tokens: int, run_dir: Path) -> None:
    load_before = load()
    memlens("train", "stage=PT", "experiment=quickstart", f"run_dir={run_dir}", "device=cpu",
             f"stages.PT.max_tokens={tokens}")
    state = json.loads((run_dir / "models" / "PT" / "trainer_state.json").read_text())
    runtime = next(h["train_runtime"] for h in reversed(state["log_history"]) if "train_runtime" in h)
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    print(f"\nmodel=tiny PT: {tokens} tokens in {runtime:.1f} s of training = {tokens / runtime:,.0f} tokens/s; "
          f"loss {losses[0]:.2f} -> {losses[-1]:.2f}; load average {load_before} -> {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", help="run every stage of this experiment")
    parser.add_argument("--pretrain-tokens", type=int, help="pre-train model=tiny on this many tokens")
    parser.add_argument("--run-dir", type=Path, help="default: a fresh temporary directory")
    args = parser.parse_args()
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="memlens-bench-")) / "run"
    if args.experiment:
        bench_experiment(args.experiment, run_dir)
    if args.pretrain_tokens:
        bench_pretrain(args.pretrain_tokens, run_dir if not args.experiment else run_dir.with_name("pt"))
    if not (args.experiment or args.pretrain_tokens):
        parser.error("give --experiment and/or --pretrain-tokens")


if __name__ == "__main__":
    main()
