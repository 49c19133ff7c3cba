#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the whole test suite: unit tests (seconds) and integration
# tests that train real tiny models on CPU. Extra arguments go to pytest, e.g. `-k distance`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v bwrap >/dev/null 2>&1 || echo "[test] bubblewrap (bwrap) is not installed: the tests reward's sandbox tests \
will skip (apt-get install bubblewrap; .ci/run installs it as root)"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python -m ruff check .   # the linter, pinned in the test extras: a fraction of a second
# Two pytest-xdist workers, one per core (tests/conftest.py: one torch thread each, a file's tests on one worker);
# --durations=25: every run ends with its slowest tests, the table tests/README.md keeps (benchmarks: no timed asserts).
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --durations=25 "$@" tests
