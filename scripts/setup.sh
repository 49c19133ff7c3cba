#!/usr/bin/env bash
# Creates .venv if missing and installs memlens with its pinned dependencies. Idempotent: reinstalls
# only when pyproject.toml changed. torch comes first and pinned: `torch==2.13.0` is the CPU build on
# this machine's local disk, while an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.memlens-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing memlens into .venv (first time: ~2 minutes)"
  .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -m pip install -q torch==2.13.0 2>&1 | grep -v "^WARNING: Location" || true
  # -qq: setuptools' editable build warns (a 10-line BuildBackendWarning) that folders named like the
  # packages take precedence over them, which is the point of an editable install; errors still show, and
  # the import check below catches a failed install.
  # Before the rename to memlens this project installed as `memaudit` (another tool's name on PyPI): an old
  # .venv's editable memaudit would keep its top-level names on the path, so it goes first.
  .venv/bin/python -m pip uninstall -qq -y memaudit 2>/dev/null || true
  .venv/bin/python -m pip install -qq -e '.[test]' 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import memlens.harness, memlens.recipes, memlens.synthetic_data, torch, trl" \
    || { echo "[setup] install failed" >&2; exit 1; }
  # DeepSpeed beside .venv, not in it (pyproject.toml's `deepspeed` extra says why): only the ZeRO-3 test's processes
  # see it, on PYTHONPATH (tests/integration/run_helpers.py DEEPSPEED_OVERLAY). Pure Python, no ops compiled; the
  # pins are deepspeed's own dependencies that .[test] does not bring.
  rm -rf .venv/deepspeed-overlay
  .venv/bin/python -m pip install -qq --no-deps --target .venv/deepspeed-overlay deepspeed==0.19.8 einops==0.8.2 \
    hjson==3.1.0 msgpack==1.2.4 ninja==1.13.2 py-cpuinfo==9.0.0 2>&1 | grep -v "^WARNING: Location" || true
  echo "$want" > "$stamp"
fi
