"""memlens.AuditCallback's curves in MLflow, read back from MLflow's own local file store.

TensorBoard is read back in the test suite (tests/integration/test_audit_callback.py: tensorboard is a test extra).
MLflow is not a memlens dependency, so this script installs `mlflow-skinny` beside .venv, in an overlay folder put on
the child's PYTHONPATH only (pinned to .venv's versions of everything they share, so nothing in .venv is shadowed),
trains the shipped base with TRL's SFTTrainer for 4 steps with `report_to=["mlflow"]` and the callback attached
(`audit.attach(trainer)`), and reads every `memlens/` metric back with MLflow's client from the `file:` store
(`MLFLOW_ALLOW_FILE_STORE=true`: MLflow 3 keeps that store in maintenance; it is the one that needs no server),
comparing each with callback.jsonl at its checkpoint's step:

    .venv/bin/python benchmarks/crosscheck_trackers.py [--overlay DIR]     # default /tmp/memlens-trackers-overlay

Exits 1 when a value is missing or differs. The overlay is kept for a rerun (delete it when done).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MLFLOW = "mlflow-skinny==3.17.2"

CHILD = r"""
import json, sys
from pathlib import Path
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
import memlens
from memlens.harness.audit.callback import tracker_metrics
from memlens.harness.core.io import read_jsonl
from memlens.harness.core.shipped import shipped_path

out = Path(sys.argv[1])
base = shipped_path("assets/base_tiny")
rows = [{"prompt": f"def scale_{i}(x):", "completion": f"\n    return x * {i}\n"} for i in range(32)]
canaries = [{"id": f"s{i}", "prefix": f"def load_key_{i}():\n    key = ", "target": f"'sk-{i:03d}q{i * 7 % 10}'",
             "suffix": "\n    return key\n", "repeat": 4} for i in range(8)]
train, manifest = memlens.inject(Dataset.from_list(rows), canaries, seed=0)
audit = memlens.AuditCallback(manifest, control=base, out_dir=out, max_new_tokens=12, target_tokens=8,
                              min_target_tokens=2)
trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                     processing_class=AutoTokenizer.from_pretrained(base), train_dataset=train,
                     args=SFTConfig(output_dir=str(out / "model"), max_steps=4, save_steps=2, learning_rate=1e-3,
                                    per_device_train_batch_size=8, report_to=["mlflow"], use_cpu=True, seed=0,
                                    logging_steps=1))
audit.attach(trainer)
trainer.train()

import mlflow
client = mlflow.tracking.MlflowClient()
(experiment,) = [e for e in client.search_experiments()]
(run,) = client.search_runs([experiment.experiment_id])
expected = {}
for record in read_jsonl(out / "audit" / "callback.jsonl"):
    for key, value in tracker_metrics(record).items():
        expected[(key, record["step"])] = value
got = {}
for key, _ in expected:
    for m in client.get_metric_history(run.info.run_id, key):
        got[(key, m.step)] = m.value
has_loss = bool(client.get_metric_history(run.info.run_id, "loss"))
print(json.dumps({"mlflow": mlflow.__version__, "expected": len(expected), "has_loss": has_loss,
                  "missing": [f"{k}@{s}" for k, s in expected if (k, s) not in got],
                  "max_difference": max((abs(got[k] - v) for k, v in expected.items() if k in got), default=None),
                  "keys": sorted({k for k, _ in expected})}))
"""


def overlay(path: Path) -> Path:
    """mlflow-skinny and its dependencies under `path`, every package .venv also has pinned to .venv's version."""
    if (path / "mlflow").is_dir():
        return path
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    constraints = path.with_suffix(".constraints.txt")
    constraints.write_text("\n".join(line for line in freeze.splitlines()
                                     if line and not line.startswith("-e") and "memlens" not in line) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(path), "-c", str(constraints),
                    MLFLOW], check=True)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--overlay", type=Path, default=Path(tempfile.gettempdir()) / "memlens-trackers-overlay")
    args = ap.parse_args()
    extra = overlay(args.overlay)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(extra), "MLFLOW_TRACKING_URI": f"file://{tmp}/mlruns", "MLFLOW_ALLOW_FILE_STORE": "true",
               "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        done = subprocess.run([sys.executable, "-c", CHILD, f"{tmp}/run"], env=env, capture_output=True, text=True,
                              cwd=tmp)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"MLflow {result['mlflow']} (file store): {result['expected']} memlens values expected, "
          f"{len(result['missing'])} missing, largest difference {result['max_difference']}; the trainer's loss "
          f"logged beside them: {result['has_loss']}")
    print("keys:", ", ".join(result["keys"]))
    ok = not result["missing"] and result["has_loss"] and (result["max_difference"] or 0) < 1e-6
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
