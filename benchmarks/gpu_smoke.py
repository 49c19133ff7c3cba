"""GPU smoke of the public-model presets: each family's fixture (tests/families.py) through every stage and
the audit on the given device, then greedy completions of the same model on CPU and on that device in
fp32, compared. Writes one JSON (per-stage seconds, audit throughput, agreement) for benchmarks/README.md.

    bash scripts/gpu_smoke.sh                          # CUDA, bf16, every family -> benchmarks/results/
    .venv/bin/python benchmarks/gpu_smoke.py --device cpu --families qwen2.5-coder   # the plumbing, on CPU

The fixtures are tiny random-initialised models: this proves the CUDA path (dtype, LoRA merge, stop
tokens, DDP-free single-GPU runs) and measures overheads, not the speed of a 3 B model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memlens.harness.core.io import atomic_write_json, read_json, read_jsonl  # noqa: E402
from tests.families import FAMILIES, build_family  # noqa: E402
from tests.integration.test_model_families import trimmed_smoke  # noqa: E402


def run_family(name: str, work: Path, device: str) -> dict:
    """The trimmed smoke run of one family on `device`; per-stage seconds and audit throughput."""
    model_dir = build_family(name, work / "fixtures" / name)
    run_dir = work / "runs" / name
    args = [a.replace("device=cpu", f"device={device}") for a in trimmed_smoke(name, model_dir, run_dir)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    start = time.time()
    result = subprocess.run([sys.executable, "-m", "memlens", *args], cwd=REPO, env=env, capture_output=True,
                            text=True)
    entry = {"family": name, "preset": FAMILIES[name].preset, "device": device, "exit_code": result.returncode,
             "wall_seconds": round(time.time() - start, 1)}
    if result.returncode != 0:
        entry["error"] = (result.stdout + result.stderr)[-3000:]
        return entry
    record = read_json(run_dir / "run.json")
    entry["stages"] = {s["model"]: s["seconds"] for s in record["stages"]}
    audit_line = [line for line in result.stdout.splitlines() if line.startswith("[memlens] audit ")]
    audit_seconds = float(audit_line[-1].split()[-2]) if audit_line else None
    rows = sum(1 for p in (run_dir / "audit").glob("*/**/*.jsonl") for r in read_jsonl(p) if "control_ned" in r)
    entry.update(audit_seconds=audit_seconds, audit_rows=rows,
                 audit_rows_per_second=round(rows / audit_seconds, 2) if audit_seconds else None)
    entry["cpu_vs_device"] = compare_greedy(name, run_dir, device)
    return entry


def compare_greedy(name: str, run_dir: Path, device: str) -> dict | None:
    """Greedy completions of FT.1 on sd_base prompts in fp32 on CPU and on `device`: how many agree."""
    if device == "cpu":
        return None
    import torch

    from memlens.harness.model.decode import greedy_complete
    from memlens.harness.model.load import load_causal_lm
    from memlens.harness.text.fim import FAMILIES as SENTINELS
    from memlens.harness.text.fim import format_psm_prompt

    s = SENTINELS[name]
    rows = read_jsonl(run_dir / "data" / "sd_base" / "rows.jsonl")
    prompts = [format_psm_prompt(r["prefix"], r["suffix"], s) for r in rows]
    out = {}
    for where in ("cpu", device):
        model, tok = load_causal_lm(run_dir / "models" / "FT.1", where, dtype=torch.float32)
        out[where] = greedy_complete(model, tok, prompts, max_new_tokens=32, sentinels=s, progress=False)
    same = sum(a == b for a, b in zip(out["cpu"], out[device]))
    return {"prompts": len(prompts), "identical": same, "dtype": "float32"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--work", default="runs/gpu_smoke", help="fixtures and run directories")
    parser.add_argument("--out", default=None, help="result JSON (default benchmarks/results/gpu_smoke_<device>.json)")
    args = parser.parse_args()
    from memlens.harness.core.provenance import provenance

    results = [run_family(name, Path(args.work), args.device) for name in args.families]
    out = Path(args.out or REPO / "benchmarks" / "results" / f"gpu_smoke_{args.device}.json")
    device_name = None
    if args.device == "cuda":
        import torch

        device_name = torch.cuda.get_device_name(0)
    atomic_write_json(out, {"device": args.device, "device_name": device_name, "results": results,
                            "provenance": provenance(seed=0, datasets={})})
    print(json.dumps(results, indent=1))
    sys.exit(max(r["exit_code"] for r in results))


if __name__ == "__main__":
    main()
