"""The exposure test's candidate losses: one teacher-forced pass per (row, candidate) against one prompt pass per
row whose KV cache every candidate shares (harness/model/logprobs.py `shared_prompt_target_nll`, the audit's path).

Workload: the SD.Links positives of a finished run (`<run>/data/sd_links_pos`) with the 100 candidate paths SD.Links
draws from, each candidate substituted into the row's target, summed target NLL under --model (default FT.1).
Prints seconds per path, the speed-up, the largest absolute difference and whether every row's candidate ranking
(which the exposure is computed from) is the same.

    .venv/bin/python benchmarks/bench_exposure.py --run runs/quickstart --threads 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished run directory")
    parser.add_argument("--model", default="FT.1", help="model under <run>/models/")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    import torch

    from memlens.harness.core.io import read_jsonl
    from memlens.harness.measures import exposure as exp
    from memlens.harness.model.scorer import CausalLMScorer
    from memlens.harness.text.fim import detect_sentinels

    torch.set_num_threads(args.threads)
    scorer = CausalLMScorer.load(args.run / "models" / args.model, "cpu", batch_size=args.batch_size)
    scorer.ensure_loaded()
    rows = exp.exposure_rows(read_jsonl(args.run / "data" / "sd_links_pos" / "rows.jsonl"))
    candidates = exp.load_candidates()
    sentinels = detect_sentinels(scorer.tokenizer)
    expanded = [{"prefix": r["prefix"], "target": t, "suffix": r["suffix"]}
                for r in rows for t in exp.substituted_targets(r["target"], r["pii_path"], candidates)]
    start = time.perf_counter()
    full = np.array(scorer.target_losses(expanded, sentinels, reduction="sum")).reshape(len(rows), len(candidates))
    t_full = time.perf_counter() - start
    start = time.perf_counter()
    shared = exp.candidate_losses(scorer, rows, candidates, sentinels)
    t_shared = time.perf_counter() - start
    same_ranks = all((np.argsort(a, kind="stable") == np.argsort(b, kind="stable")).all() for a, b in zip(shared, full))
    print(f"{args.model}: {len(rows)} rows x {len(candidates)} candidates; full passes {t_full:.2f} s, "
          f"shared prompt pass {t_shared:.2f} s ({t_full / t_shared:.1f}x); max |diff| "
          f"{np.abs(shared - full).max():.1e} nats; every row's candidate ranking the same: {same_ranks}")


if __name__ == "__main__":
    main()
