#!/usr/bin/env bash
# Rewrites constraints.txt from the environment scripts/setup.sh built (.venv): run it after a deliberate upgrade of a
# pin, then rerun the suite and the quickstart, whose numbers the pins hold (docs/methods.md, "What reproduces where").
set -euo pipefail
cd "$(dirname "$0")/.."
{
  head -4 constraints.txt
  # torch's local version label (+cpu) names the build, not the release: scripts/setup.sh chooses the build.
  .venv/bin/python -m pip freeze --exclude-editable | grep -v '^memlens' | sed -E 's/^torch==([0-9.]+)\+cpu$/torch==\1/' \
    | LC_ALL=C sort -f
} > constraints.txt.tmp
mv constraints.txt.tmp constraints.txt
echo "[lock] constraints.txt: $(grep -vc '^#' constraints.txt) packages"
