"""What RL-prompt membership (`audit.measures=[...,prompt_mia]`, harness/audit/prompt_mia.py) costs, and how many samples
per prompt give a stable AUC, on a run that trained an RL stage.

    .venv/bin/python benchmarks/bench_prompt_mia.py --run /tmp/qs --experiment quickstart --model RLFT.2
    .venv/bin/python benchmarks/bench_prompt_mia.py --run /tmp/smoke --experiment smoke --model 'RLFT.1/beta=0.1'

1. Cost: the measure itself (its default settings, the model's final checkpoint), run cold (fresh audit dir and cache:
   the initial model's and the policy's samples drawn) and warm (everything cached), in seconds, and per 1,000
   prompt samplings (prompts x models).
2. Stability: the policy's prompts sampled once at m = --m-max (16); Min-kNN (k = m / 2) from disjoint groups of m of
   those samples, for m = 2, 4, 8, 16: each group's AUC, so the spread across groups says how much an AUC at that m
   moves with the draw. Prints the machine's load before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memlens.harness.audit.prompt_mia import (  # noqa: E402
    PromptMiaSettings,
    audit_run_prompt_mia,
    load_prompts,
    rl_models,
)
from memlens.harness.cli import compose  # noqa: E402
from memlens.harness.core.layout import PROMPT_HELDOUT  # noqa: E402
from memlens.harness.measures.mia import attack_metrics  # noqa: E402
from memlens.harness.measures.prompt_mia import min_knn_distance  # noqa: E402
from memlens.harness.model.load import model_sentinels  # noqa: E402
from memlens.harness.model.sampling import cached_samples  # noqa: E402
from memlens.synthetic_data.build import build_datasets  # noqa: E402


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--run", required=True)
    p.add_argument("--experiment", default="quickstart")
    p.add_argument("--model", default="RLFT.2")
    p.add_argument("--m-max", type=int, default=16)
    p.add_argument("--overrides", nargs="*", default=[])
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_prompt_mia_"))
    plan = f"audit_plan=[{{models:['{args.model}'],control:FT.2,datasets:[sd_base],checkpoints:final}}]"
    cfg = compose([f"experiment={args.experiment}", f"run_dir={args.run}", "device=cpu", plan,
                   "audit.measures=[prompt_mia]", f"audit.out_dir={work / 'audit'}",
                   f"audit.cache_dir={work / 'audit' / 'cache'}", "audit.progress=false", *args.overrides])
    build_datasets(cfg, names=sorted(set(PROMPT_HELDOUT.values()) - {"pd_3_val"}) if args.experiment != "smoke"
                   else ["pd_3_val"], log=lambda *_: None)
    settings = PromptMiaSettings.from_config(cfg.audit)
    print(f"load before: {load()}")
    (m,) = rl_models(cfg)
    data, _ = load_prompts(m, settings.prompts, 0)
    n_prompts = sum(len(v) for v in data.values())
    t0 = time.perf_counter()
    audit_run_prompt_mia(cfg, settings, log=lambda *_: None)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    audit_run_prompt_mia(cfg, settings, log=lambda *_: None)
    warm = time.perf_counter() - t0
    print(f"prompt_mia on {args.model} (final): {n_prompts} prompts x 2 models, m={settings.samples}, "
          f"{settings.max_new_tokens} tokens: cold {cold:.1f} s, warm {warm:.1f} s; "
          f"{1000 * cold / (2 * n_prompts):.1f} s per 1,000 prompt samplings (cold, blind baseline included)")

    rows = [r for v in data.values() for r in v]
    sentinels = model_sentinels(m.model_dir, None)
    t0 = time.perf_counter()
    samples, _ = cached_samples(m.model_dir, rows, sentinels, work / "m_max", samples=args.m_max,
                                temperature=settings.temperature, max_new_tokens=settings.max_new_tokens, seed=0)
    print(f"m={args.m_max}: {time.perf_counter() - t0:.1f} s for {len(rows)} prompts")
    for dataset in m.prompts:
        members, held = data[f"{dataset}:members"], data[f"{dataset}:nonmembers"]
        for size in (2, 4, 8, 16):
            if size > args.m_max:
                continue
            aucs = []
            for g in range(args.m_max // size):
                def score(r, g=g, size=size):
                    return -min_knn_distance(samples[r["id"]][g * size:(g + 1) * size], max(1, size // 2))
                metrics = attack_metrics([score(r) for r in members], [score(r) for r in held], n_boot=200, seed=0)
                aucs.append(metrics["auc"]["value"])
            spread = f"sd {statistics.stdev(aucs):.3f}" if len(aucs) > 1 else "one group"
            print(f"  {dataset} ({len(members)} / {len(held)}): m={size:2d}, k={max(1, size // 2)}: AUC "
                  f"{statistics.fmean(aucs):.3f} over {len(aucs)} disjoint group(s) "
                  f"[{min(aucs):.3f}, {max(aucs):.3f}], {spread}")
    print(f"load after: {load()}")
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
