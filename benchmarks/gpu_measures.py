"""The probability-based audit measures on a GPU: each family's trimmed smoke run (benchmarks/gpu_smoke.py's) with
`audit.measures=[ned,mia,discoverable]` on the given device in the preset's bf16, then FT.1's exact-target
log-probabilities of the SD.Base prompts under greedy, top-k 40 and T = 1 sampling on CPU and on the device in fp32,
compared (the same -inf pattern, the largest difference of the finite ones). Writes gpu_measures_<device>.json.

    .venv/bin/python benchmarks/gpu_measures.py --device cuda qwen2.5-coder codegemma
    .venv/bin/python benchmarks/gpu_measures.py --device cpu deepseek-coder        # the plumbing, on CPU
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memlens.harness.core.io import atomic_write_json, read_jsonl  # noqa: E402
from memlens.harness.model.logprobs import SamplingScheme  # noqa: E402
from tests.families import build_family  # noqa: E402
from tests.integration.test_model_families import trimmed_smoke  # noqa: E402

SCHEMES = (SamplingScheme("greedy", 0), SamplingScheme("top_k40", 1.0, 40), SamplingScheme("t1", 1.0))


def scheme_logprobs_on(run_dir: Path, device: str) -> np.ndarray:
    """FT.1's log p(exact target) of every SD.Base row under SCHEMES, in fp32 on `device`."""
    import torch

    from memlens.harness.model.load import load_causal_lm, model_sentinels
    from memlens.harness.model.logprobs import fim_scheme_logprobs

    rows = read_jsonl(run_dir / "data" / "sd_base" / "rows.jsonl")
    model, tok = load_causal_lm(run_dir / "models" / "FT.1", device, dtype=torch.float32)
    return fim_scheme_logprobs(model, tok, [r["prefix"] for r in rows], [r["target"] for r in rows],
                               [r["suffix"] for r in rows], model_sentinels(run_dir / "models" / "FT.1", None), SCHEMES)


def run_family(name: str, work: Path, device: str) -> dict:
    model_dir = build_family(name, work / name / "fixture")
    run_dir = work / name / "run"
    args = [a.replace("device=cpu", f"device={device}")
            .replace("audit.measures=[ned]", "audit.measures=[ned,mia,discoverable]")
            for a in trimmed_smoke(name, model_dir, run_dir)] + ["data.sd.heldout_size=20"]
    start = time.time()
    result = subprocess.run([sys.executable, "-m", "memlens", *args], cwd=REPO, capture_output=True, text=True)
    entry = {"family": name, "exit_code": result.returncode, "wall_seconds": round(time.time() - start, 1),
             "measure_seconds": [line for line in result.stdout.splitlines() if "[audit] measure" in line]}
    if result.returncode:
        entry["error"] = (result.stdout + result.stderr)[-3000:]
        return entry
    cpu, dev = scheme_logprobs_on(run_dir, "cpu"), scheme_logprobs_on(run_dir, device)
    finite = np.isfinite(cpu) & np.isfinite(dev)
    entry.update(examples=len(cpu), same_zero_probability=bool((np.isinf(cpu) == np.isinf(dev)).all()),
                 max_abs_diff_finite=float(np.abs(cpu[finite] - dev[finite]).max()) if finite.any() else None)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="+")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--work", default="runs/gpu_measures")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from memlens.harness.core.provenance import provenance

    results = [run_family(name, Path(args.work), args.device) for name in args.families]
    out = Path(args.out or REPO / "benchmarks" / "results" / f"gpu_measures_{args.device}.json")
    atomic_write_json(out, {"device": args.device, "results": results, "provenance": provenance(seed=0, datasets={})})
    print(json.dumps(results, indent=1))
    sys.exit(max(r["exit_code"] for r in results))


if __name__ == "__main__":
    main()
