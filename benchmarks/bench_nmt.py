"""Wall time of `memlens nmt` per step (training, Algorithms 1-3, Sec. 6 fine-tuning) and the
translation work behind it, for benchmarks/README.md (section NMT).

    .venv/bin/python benchmarks/bench_nmt.py                                  # the quickstart, fresh run dir
    .venv/bin/python benchmarks/bench_nmt.py --experiment nmt_smoke
    .venv/bin/python benchmarks/bench_nmt.py --override nmt.train.epochs=10   # any config override

Prints one JSON object: load average before/after, per-step wall seconds (from summary.json), the
number of translations each algorithm asked for (a load-independent measure of the work) and the
headline numbers (memorized, findings).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from memlens.harness import cli
from memlens.harness.core.io import read_json, read_jsonl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiment", default="nmt_quickstart")
    ap.add_argument("--run-dir", default=None, help="default: a fresh temporary directory")
    ap.add_argument("--override", action="append", default=[])
    args = ap.parse_args()
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="bench_nmt_")
    load_before = os.getloadavg()
    start = time.perf_counter()
    code = cli.run(["nmt", f"experiment={args.experiment}", f"run_dir={run_dir}", *args.override])
    wall = time.perf_counter() - start
    out = os.path.join(run_dir, "nmt")
    summary = read_json(os.path.join(out, "summary.json"))
    alg1 = read_jsonl(os.path.join(out, "memorization.jsonl"))
    in_m1 = [r for r in alg1 if r["in_m1"]]
    print(json.dumps({
        "experiment": args.experiment, "exit_code": code, "run_dir": run_dir, "wall_s": round(wall, 1),
        "load_before": load_before, "load_after": os.getloadavg(), "steps_s": summary["timings"],
        "work": {"unique_pairs": len(alg1), "m1": len(in_m1),
                 # Algorithm 1 translates each source once, then prefixes of M1 up to floor(0.75 n).
                 "alg1_prefix_translations_upper_bound": sum(int(0.75 * r["source_len"]) for r in in_m1),
                 "alg2_perturbed_sources": sum(summary["neighbourhood"][c]["perturbed"]
                                               for c in ("prefix", "suffix", "start")),
                 "alg3_translations": summary["memorized"] * len(summary["recovery"]["per_symbol"])},
        "memorized": summary["memorized"], "heldout": summary["heldout"], "findings": summary["findings"],
    }, indent=2))


if __name__ == "__main__":
    main()
