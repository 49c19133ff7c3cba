#!/usr/bin/env bash
# Rebuilds the shipped base model assets/base_tiny (conf/model/tiny_base.yaml) from scratch:
#   experiment=base pre-trains the tiny Llama on the standard library's base pool (PT, 6 M tokens;
#   about 50 min on 2 CPU cores), then recipes.stages.ship_base stores it in bf16 with its provenance.
# Rerunning continues a killed pre-training from its last checkpoint. Extra arguments go to the PT run,
# e.g. `stages.PT.max_tokens=12000000`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/memlens train stage=PT experiment=base run_dir=runs/base "$@"
.venv/bin/python -m memlens.recipes.stages.ship_base runs/base assets/base_tiny
