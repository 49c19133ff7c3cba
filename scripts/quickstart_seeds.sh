#!/usr/bin/env bash
# The README's findings table over seeds: the quickstart (NMT path and code pipeline) at seeds 0, 1 and 2, then the
# table rebuilt from their reports (benchmarks/quickstart_seeds.py --marks; the verdict over the seeds is
# harness/report/findings/verdict.py `over_seeds`). Each seed is one quickstart (its time: benchmarks/README.md, "Quickstart wall time"); finished runs are skipped.
#   bash scripts/quickstart_seeds.sh            # seeds 0-2, then README.md's and docs/results.md's seed tables
#   SEEDS="0 1 2 3" bash scripts/quickstart_seeds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"   # as scripts/quickstart.sh
for seed in ${SEEDS:-0 1 2}; do
  suffix=$([ "$seed" = 0 ] && echo "" || echo "_seed$seed")
  .venv/bin/memlens nmt experiment=nmt_quickstart seed="$seed" run_dir="runs/nmt_quickstart$suffix"
  # each seed's code report reads its own seed's NMT summary (N1-N3)
  MEMLENS_NMT_SUMMARY="runs/nmt_quickstart$suffix/nmt/summary.json" \
    .venv/bin/memlens run experiment=quickstart seed="$seed" run_dir="runs/quickstart$suffix"
done
.venv/bin/python benchmarks/quickstart_seeds.py --write README.md --only "--marks"
.venv/bin/python benchmarks/quickstart_seeds.py --write docs/results.md --only "--rl runs/quickstart runs/quickstart_seed1"
