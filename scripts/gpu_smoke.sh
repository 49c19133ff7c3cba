#!/usr/bin/env bash
# GPU smoke of the public-model presets (benchmarks/gpu_smoke.py): each family's tiny fixture of its real
# architecture and tokenizer conventions through every stage and the audit on CUDA in bf16, and greedy
# completions compared between CPU and CUDA in fp32. Result: benchmarks/results/gpu_smoke_cuda.json.
#   bash scripts/gpu_smoke.sh                                # every family
#   bash scripts/gpu_smoke.sh --families codegemma           # one
# Needs a CUDA build of torch in .venv (scripts/setup.sh installs the CPU build this project's CI uses).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
.venv/bin/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
exec .venv/bin/python benchmarks/gpu_smoke.py --device cuda "$@"
