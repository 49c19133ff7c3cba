#!/usr/bin/env bash
# GPU launch recipes for the paper's experiments with a public FIM code model (not exercised in CI: the
# machine that runs the tests has no GPU; the same code path runs on CPU in
# tests/integration/test_pipeline_smoke.py with 2 processes).
#
#   scripts/launch_gpu.sh <experiment> <model preset> [num_gpus] [extra overrides...]
#   scripts/launch_gpu.sh ft_persistence qwen2.5_coder_1.5b 8
#   scripts/launch_gpu.sh rm_injection starcoder2_3b 8 stages.FT.3.deepspeed=$PWD/launch/ds_zero3.json
#
# What happens:
# 1. The weights must already be on disk: `huggingface-cli download <hub id>` once (nothing in memlens
#    downloads), or model.pretrained=/path/to/local/dir. Loading is safetensors-only, trust_remote_code=False.
# 2. Data is built once in a single process (`memlens data`): building it from 8 ranks would race.
# 3. `accelerate launch` starts one process per GPU (DDP, bf16). Stage PT imports the public model into
#    runs/<experiment>/models/PT; FT trains LoRA adapters (model.lora.*, merged at save); RM/RLFT/IPO run
#    with the TRL trainers of recipes/stages/reward.py, rl.py and preference.py (IPO and the other preference
#    objectives; RLFT's algorithm: ppo is our own recipes/stages/ppo.py, not TRL's).
# 4. DeepSpeed: add `stages.<NAME>.deepspeed=$PWD/launch/ds_zero2.json` (or ds_zero3.json for full
#    fine-tuning of 2-3 B models with model.lora.enabled=false) — the JSON goes to the Trainer config.
#    Requires `pip install -e .[deepspeed]`.
# 5. Audit then report follow in the main process (after_training in the experiment).
set -euo pipefail
cd "$(dirname "$0")/.."

experiment=${1:?usage: scripts/launch_gpu.sh <experiment> <model preset> [num_gpus] [overrides...]}
preset=${2:?give a conf/model preset, e.g. qwen2.5_coder_1.5b}
gpus=${3:-$(nvidia-smi -L 2>/dev/null | wc -l)}
shift $(( $# >= 3 ? 3 : $# ))

export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/memlens data "experiment=$experiment" "model=$preset" "$@"
.venv/bin/accelerate launch --config_file launch/multi_gpu.yaml --num_processes "$gpus" \
    -m memlens run "experiment=$experiment" "model=$preset" device=cuda "$@"
