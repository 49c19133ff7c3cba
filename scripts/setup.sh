#!/usr/bin/env bash
# Creates .venv if missing and installs memlens with the exact versions of constraints.txt (the environment its
# numbers were computed with; pyproject.toml declares the wider ranges memlens works with, for installing beside your
# own stack). Idempotent: reinstalls only when pyproject.toml, constraints.txt or this script changed.
#
# Prerequisites: Linux (tested on x86-64), Python >= 3.10 with venv (tested on 3.11) (PYTHON=python3.11 picks one), ~2 GB of disk, the package
# index reachable. Takes ~2 minutes the first time.
#
# torch: the CPU build, wherever this runs. PyPI's torch for Linux x86-64 is the CUDA build (several GB, with nvidia-*
# packages); when pip would resolve torch to that, it comes from PyTorch's CPU wheel index instead. Where the index pip
# is configured with already serves a CPU build (as on the machines this project is developed on), that one is used.
# MEMLENS_TORCH_INDEX=URL forces an index (e.g. https://download.pytorch.org/whl/cu126 for a GPU); MEMLENS_TORCH_INDEX=pip
# takes whatever pip resolves.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CPU_INDEX=https://download.pytorch.org/whl/cpu
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=(.venv/bin/python -m pip)
# --no-compile, then one parallel compileall at the end: pip byte-compiles every file it installs on one core (torch
# alone: 20 s of a 51 s setup); compileall -j 0 does the same files on every core (benchmarks/README.md "Setup").
install=("${pip[@]}" install --no-compile)
stamp=.venv/.memlens-installed
want=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
quiet() { grep -v "^WARNING: Location" || true; }

torch_source() {
  # The index torch comes from: "" (pip's own) when pip resolves torch without nvidia-* packages, else the CPU index.
  local pin report
  pin=$(grep -i '^torch==' constraints.txt)
  if [ -n "${MEMLENS_TORCH_INDEX:-}" ]; then
    [ "$MEMLENS_TORCH_INDEX" = pip ] && echo "" || echo "$MEMLENS_TORCH_INDEX"
    return
  fi
  report=$(mktemp)
  "${pip[@]}" install -q --dry-run --ignore-installed --report "$report" "$pin" 2>/dev/null | quiet
  if grep -q '"name": "nvidia-' "$report" 2>/dev/null; then echo "$CPU_INDEX"; else echo ""; fi
  rm -f "$report"
}

if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing memlens into .venv"
  started=$(date +%s)
  "${pip[@]}" install -q --upgrade pip 2>&1 | quiet
  index=$(torch_source)
  if [ -n "$index" ]; then
    echo "[setup] torch: the CPU build from $index (pip would take the CUDA build here; MEMLENS_TORCH_INDEX=pip keeps it)"
    "${install[@]}" -q "$(grep -i '^torch==' constraints.txt)" --index-url "$index" 2>&1 | quiet
  else
    "${install[@]}" -q "$(grep -i '^torch==' constraints.txt)" 2>&1 | quiet
  fi
  # -qq: setuptools' editable build warns (a 10-line BuildBackendWarning) that folders named like the
  # packages take precedence over them, which is the point of an editable install; errors still show, and
  # the import check below catches a failed install.
  # Before the rename to memlens this project installed as `memaudit` (another tool's name on PyPI): an old
  # .venv's editable memaudit would keep its top-level names on the path, so it goes first.
  "${pip[@]}" uninstall -qq -y memaudit 2>/dev/null || true
  "${install[@]}" -qq -c constraints.txt -e '.[test]' 2>&1 | quiet
  # what pip would have compiled, on every core; a file that does not compile (a package's template) is skipped, as
  # pip skips it
  .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >/dev/null 2>&1 || true
  .venv/bin/python -c "import memlens.harness, memlens.recipes, memlens.synthetic_data, torch, trl" \
    || { echo "[setup] install failed" >&2; exit 1; }
  # DeepSpeed beside .venv, not in it (pyproject.toml's `deepspeed` extra says why): only the ZeRO-3 test's processes
  # see it, on PYTHONPATH (tests/integration/run_helpers.py DEEPSPEED_OVERLAY). Pure Python, no ops compiled; the
  # pins are deepspeed's own dependencies that .[test] does not bring.
  rm -rf .venv/deepspeed-overlay
  "${install[@]}" -qq --no-deps --target .venv/deepspeed-overlay deepspeed==0.19.8 einops==0.8.2 \
    hjson==3.1.0 msgpack==1.2.4 ninja==1.13.2 py-cpuinfo==9.0.0 2>&1 | quiet
  .venv/bin/python -m compileall -q -j 0 .venv/deepspeed-overlay >/dev/null 2>&1 || true
  echo "$want" > "$stamp"
  echo "[setup] installed in $(( $(date +%s) - started )) s. Run memlens from this shell with: source .venv/bin/activate   (or call .venv/bin/memlens)"
fi
# memlens's own modules byte-compiled too, on every core (a fraction of a second when up to date): where the
# environment sets PYTHONDONTWRITEBYTECODE, every memlens process (the tests start hundreds) would otherwise compile
# the modules it imports from source.
.venv/bin/python -m compileall -q -j 0 memlens harness recipes synthetic_data tests benchmarks >/dev/null 2>&1 || true
