#!/usr/bin/env bash
# The GPU issue's steps on a lent GPU machine without network, one prepared script per device call (a call runs at
# most 600 s; a session has about 15 minutes of device time, the machine's start included):
#   here, once, where pip works:  bash benchmarks/gpu_wheels.sh                      # the pinned wheels, into .whl/
#   call 1 (carry .whl):          COMMIT=<sha> bash scripts/gpu_session.sh ladder    # install, machine, the ladder
#   call 2 at once, while warm:   COMMIT=<sha> bash scripts/gpu_session.sh extras    # the callback's cost, the smoke
#   if a call was cut short:      bash scripts/gpu_session.sh pack                   # pack what is there
# `ladder` again continues the ladder where it stopped. Every step runs under a deadline inside the call and packs
# the records so far, never weights or generated rows, into $OUT/gpu_<part>.tgz (the device tool brings back $OUT's
# files; without OUT they go to runs/gpu_session/). `extras` gets what is left of the session: give its call that as
# timeout_s, CALL_LIMIT 30 s less, and REPEATS=1 where under ~4 minutes are left. The callback's cost comes before the
# smoke: the smoke ran on an H200 before (benchmarks/README.md, "GPU smoke"), the callback's cost never has.
#   PYTHON=...      the interpreter with the image's CUDA torch (default python3)
#   COMMIT=...      the commit of the carried tree (the device's copy has no .git), for machine.txt
#   CALL_LIMIT=570  seconds this call may take: the device call's timeout_s less 30; steps end 25 s before it
#   BUDGET=480      the ladder's planned wall-clock seconds (scripts/gpu_ladder.sh --budget), leaving install room
#   REPEATS=2       runs of each scoring mode in benchmarks/callback_timing.py
set -euo pipefail
SECONDS=0                # the call's clock (bash would take an inherited SECONDS)
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PACKED=${OUT:-runs/gpu_session}
CALL_LIMIT=${CALL_LIMIT:-570}
# Weights and the generated rows (rebuilt from the seed; each dataset's manifest.json, with its sha256, comes back)
# stay behind; the device tool returns at most 16 MiB a file.
LEFT_OUT=(--exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' --exclude='*.pth' --exclude='*.ckpt'
          --exclude='*/data/*/*.jsonl')
LIMIT_KIB=${GPU_PACK_LIMIT_KIB:-$((15 * 1024))}

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

require_cuda() {
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
}

record_machine() {      # what the record names: the GPU, its host CPU, the stack, the tree (appended: a rerun's too)
  {
    echo "=== $(date -u)"
    if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>&1 || true; else echo "nvidia-smi: not found"; fi
    lscpu 2>&1 || true
    "$PY" -c "import torch, transformers, trl, datasets
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__,
      'trl', trl.__version__, 'datasets', datasets.__version__)" 2>&1 || true
    echo "commit: ${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo 'unknown (no .git here: pass COMMIT=<sha>)')}"
  } >> "$1"
}

archive() {             # archive FILE PATH... [tar options]: tar's exit 1 (a file changed while read) is no failure
  local file=$1
  shift
  tar czf "$file" "$@" || [ $? -eq 1 ]
}

pack() {                # pack NAME PATH...: the records under PATHs into $PACKED/NAME.tgz, small enough to come back
  local name=$1
  shift
  local present=() part
  for p in "$@"; do [ -e "$p" ] && present+=("$p"); done
  [ ${#present[@]} -gt 0 ] || return 0
  mkdir -p "$PACKED"
  part="$PACKED/$name.tgz.part"
  archive "$part" "${LEFT_OUT[@]}" "${present[@]}"
  if [ "$(du -k "$part" | cut -f1)" -gt "$LIMIT_KIB" ]; then
    echo "[gpu_session] $name.tgz over $LIMIT_KIB KiB: packed again with its .json, .log and .txt files alone" >&2
    { find "${present[@]}" -type f \( -name '*.json' -o -name '*.log' -o -name '*.txt' \) -print0 || true; } \
      | archive "$part" --null -T -
  fi
  if [ "$(du -k "$part" | cut -f1)" -gt "$LIMIT_KIB" ]; then          # still too big: the last one that fits stays
    rm -f "$part"
    echo "[gpu_session] $name.tgz still over $LIMIT_KIB KiB: the previous archive is kept" >&2
    return 0
  fi
  mv "$part" "$PACKED/$name.tgz"
  echo "[gpu_session] packed ${present[*]} into $PACKED/$name.tgz ($(du -k "$PACKED/$name.tgz" | cut -f1) KiB)"
}

step() {                # step LOG COMMAND...: the command until the call's deadline, its output also to LOG
  local log=$1
  shift
  local left=$((CALL_LIMIT - SECONDS - 25))        # 10 s for a kill after SIGTERM is ignored, 15 s for packing
  if [ "$left" -le 0 ]; then
    echo "[gpu_session] no time left in this call for: $*" | tee -a "$log"
    return 124
  fi
  timeout -k 10 "$left" "$@" 2>&1 | tee -a "$log"
}

begin() {               # begin NAME: install, the machine recorded and packed before anything can fail on CUDA
  install
  mkdir -p "runs/$1"
  record_machine "runs/$1/machine.txt"
  pack "$1" "runs/$1"
  require_cuda
}

ladder() {
  begin gpu_ladder
  local status=0
  step runs/gpu_ladder/console.log env PYTHON="$PY" bash scripts/gpu_ladder.sh --out runs/gpu_ladder \
    --budget "${BUDGET:-480}" || status=$?
  pack gpu_ladder runs/gpu_ladder
  return "$status"
}

extras() {              # results in runs/gpu_extras, work folders beside it (not packed)
  begin gpu_extras
  local status=0
  step runs/gpu_extras/console.log "$PY" benchmarks/callback_timing.py --repeats "${REPEATS:-2}" \
    --work runs/gpu_extras_work/callback_timing --result runs/gpu_extras/callback_timing_cuda.json || status=$?
  pack gpu_extras runs/gpu_extras
  step runs/gpu_extras/console.log env PYTHON="$PY" bash scripts/gpu_smoke.sh --work runs/gpu_extras_work/smoke \
    --out runs/gpu_extras/gpu_smoke_cuda.json || status=$?
  pack gpu_extras runs/gpu_extras
  return "$status"
}

case "${1:-}" in
  ladder) ladder ;;
  extras) extras ;;
  pack) pack gpu_ladder runs/gpu_ladder; pack gpu_extras runs/gpu_extras ;;
  *) echo "usage: bash scripts/gpu_session.sh ladder|extras|pack (the header says which call runs which)" >&2; exit 2 ;;
esac
