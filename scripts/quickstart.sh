#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the main job on the embedded default, on CPU:
#   the NMT path       memlens nmt experiment=nmt_quickstart (Finding Memo algorithms 1-3), first, so that
#                      the code report's findings table includes N1-N3
#   the code pipeline  memlens run experiment=quickstart   (data -> PT -> FT -> RM -> RLFT -> IPO -> audit -> report)
# Rerunning continues where a killed run stopped; finished stages are skipped.
# The CPU kernels (memlens pins them: MEMLENS_CPU_KERNELS, harness/core/kernels.py) and the thread count (pinned here) decide
# the last bits of its numbers: docs/methods.md, "What reproduces where".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"   # the reference machine's cores; the loss audit's last digits follow it
.venv/bin/memlens nmt experiment=nmt_quickstart
.venv/bin/memlens run experiment=quickstart "$@"
echo "[quickstart] report: runs/quickstart/report/report.html. For the commands of README.md, in a new shell: source .venv/bin/activate"
