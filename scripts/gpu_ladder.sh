#!/usr/bin/env bash
# Paper 003's contrasts at ~60 M parameters on a GPU (benchmarks/gpu_ladder.py): pre-trains a base ~15x the shipped
# one, trains the quickstart chain from it at the 175-program settings, audits every checkpoint and writes the
# findings, in one run of at most ~9 minutes; rerun with the same --out to continue where it stopped.
#   bash scripts/gpu_ladder.sh                              # outputs in runs/gpu_ladder
#   bash scripts/gpu_ladder.sh --out /scratch/ladder
#   PYTHON=python3 bash scripts/gpu_ladder.sh               # an interpreter with memlens and a CUDA torch installed
#                                                           # (a machine without network: benchmarks/README.md)
# Without PYTHON it uses .venv (scripts/setup.sh makes it; it installs the CPU build of torch this project's CI uses).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  bash scripts/setup.sh
  PYTHON=.venv/bin/python
fi
export TOKENIZERS_PARALLELISM=false
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
args=("$@")
[[ " $* " == *" --out "* ]] || args+=(--out runs/gpu_ladder)
exec "$PYTHON" benchmarks/gpu_ladder.py "${args[@]}"
