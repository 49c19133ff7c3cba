#!/usr/bin/env bash
# The GPU issue's steps on a lent GPU machine without network, one prepared script per device call (a call runs at
# most 600 s; a session has about 15 minutes of device time, the machine's start included):
#   here, once, where pip works:    bash benchmarks/gpu_wheels.sh       # the pinned packages as wheels, into .whl/
#   call 1 (carry .whl):            bash scripts/gpu_session.sh ladder  # install, the machine, paper 003's ladder
#   call 2 at once, while warm:     bash scripts/gpu_session.sh extras  # the callback's cost, then the smoke
# `ladder` again continues the ladder where it stopped. Each step packs the records so far, never weights, into
# $OUT/gpu_<part>.tgz, so a call cut short still brings back what finished (the device tool returns $OUT's files;
# without OUT they go to runs/gpu_session/). The callback's cost comes before the smoke in `extras`: the smoke ran
# on an H200 before (benchmarks/README.md, "GPU smoke"), the callback's cost on a GPU never has.
#   PYTHON=...  the interpreter with the image's CUDA torch (default python3)
#   BUDGET=480  the ladder's wall-clock budget in seconds (scripts/gpu_ladder.sh --budget), leaving the install room
#   REPEATS=2   runs of each scoring mode in benchmarks/callback_timing.py
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PACKED=${OUT:-runs/gpu_session}
# Weights and the run's generated datasets (rebuilt from the seed) stay behind; what comes back is at most 16 MiB a file.
LEFT_OUT=(--exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' --exclude='*.pth' --exclude='*.ckpt'
          --exclude='*/data')
LIMIT_KIB=$((15 * 1024))

install() {
  if "$PY" -c "import importlib.metadata as m; m.version('memlens'); m.version('trl')" 2>/dev/null; then
    return
  fi
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "gpu_session: memlens is not installed for $PY and .whl/ holds no wheels: run 'bash benchmarks/gpu_wheels.sh'" \
         "where pip works and carry .whl to this machine" >&2
    exit 2
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e .
}

record_machine() {      # what the record names: the GPU, its host CPU, the stack, the tree (appended: a rerun's too)
  {
    echo "=== $(date -u)"
    if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1 || true; else echo "nvidia-smi: not found"; fi
    lscpu 2>&1 || true
    "$PY" -c "import torch, transformers, trl, datasets
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__,
      'trl', trl.__version__, 'datasets', datasets.__version__)" 2>&1 || true
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo 'unknown (no .git here: name the carried commit in the record)')"
  } >> "$1"
}

pack() {                # pack NAME PATH...: the records under PATHs, weights left out, into $PACKED/NAME.tgz
  local name=$1
  shift
  local present=()
  for p in "$@"; do [ -e "$p" ] && present+=("$p"); done
  mkdir -p "$PACKED"
  tar czf "$PACKED/$name.tgz.part" "${LEFT_OUT[@]}" "${present[@]}"
  if [ "$(du -k "$PACKED/$name.tgz.part" | cut -f1)" -gt "$LIMIT_KIB" ]; then      # too big to come back: no rows
    echo "[gpu_session] $name.tgz over $LIMIT_KIB KiB: packed again without the *.jsonl rows" >&2
    tar czf "$PACKED/$name.tgz.part" "${LEFT_OUT[@]}" --exclude='*.jsonl' "${present[@]}"
  fi
  mv "$PACKED/$name.tgz.part" "$PACKED/$name.tgz"
  echo "[gpu_session] packed ${present[*]} into $PACKED/$name.tgz ($(du -k "$PACKED/$name.tgz" | cut -f1) KiB)"
}

ladder() {
  install
  mkdir -p runs/gpu_ladder
  record_machine runs/gpu_ladder/machine.txt
  local status=0
  PYTHON="$PY" bash scripts/gpu_ladder.sh --out runs/gpu_ladder --budget "${BUDGET:-480}" 2>&1 \
    | tee -a runs/gpu_ladder/console.log || status=$?
  pack gpu_ladder runs/gpu_ladder
  return "$status"
}

extras() {              # results in runs/gpu_extras, work folders beside it (not packed)
  install
  mkdir -p runs/gpu_extras
  record_machine runs/gpu_extras/machine.txt
  local status=0
  "$PY" benchmarks/callback_timing.py --repeats "${REPEATS:-2}" --work runs/gpu_extras_work/callback_timing \
    --result runs/gpu_extras/callback_timing_cuda.json 2>&1 | tee -a runs/gpu_extras/console.log || status=$?
  pack gpu_extras runs/gpu_extras
  PYTHON="$PY" bash scripts/gpu_smoke.sh --work runs/gpu_extras_work/smoke --out runs/gpu_extras/gpu_smoke_cuda.json \
    2>&1 | tee -a runs/gpu_extras/console.log || status=$?
  pack gpu_extras runs/gpu_extras
  return "$status"
}

case "${1:-}" in
  ladder) ladder ;;
  extras) extras ;;
  *) echo "usage: bash scripts/gpu_session.sh ladder|extras (the header says which call runs which)" >&2; exit 2 ;;
esac
