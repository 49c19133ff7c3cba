#!/usr/bin/env bash
# GPU smoke of the public-model presets (benchmarks/gpu_smoke.py): each family's tiny fixture of its real
# architecture and tokenizer conventions through every stage and the audit on CUDA in bf16, and greedy
# completions compared between CPU and CUDA in fp32. Result: benchmarks/results/gpu_smoke_cuda.json.
#   bash scripts/gpu_smoke.sh                                # every family
#   bash scripts/gpu_smoke.sh --families codegemma           # one
#   PYTHON=python3 bash scripts/gpu_smoke.sh                 # an interpreter with memlens and a CUDA torch installed
#                                                            # (a machine without network: benchmarks/gpu_wheels.sh)
# Without PYTHON it uses .venv (scripts/setup.sh makes it; it installs the CPU build of torch this project's CI uses).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  bash scripts/setup.sh
  PYTHON=.venv/bin/python
fi
export TOKENIZERS_PARALLELISM=false
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
exec "$PYTHON" benchmarks/gpu_smoke.py --device cuda "$@"
