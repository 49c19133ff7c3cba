"""memlens.AuditCallback's curves read back from what MLflow, W&B and trackio wrote to their own local stores.

TensorBoard is read back in the test suite (tests/integration/test_audit_callback.py: tensorboard is a test extra).
The other trackers are not memlens dependencies, so this script installs each into an overlay folder of its own, put
on the child's PYTHONPATH only (pinned to .venv's versions of everything they share, so nothing in .venv is shadowed),
trains the shipped base with TRL's SFTTrainer for 4 steps with `report_to=[<tracker>]` and the callback attached
(`audit.attach(trainer)`), and reads every `memlens/` metric back from the tracker's own store with no network,
comparing each with callback.jsonl at its checkpoint's step:

- MLflow (`mlflow-skinny`): its client on the `file:` store (`MLFLOW_ALLOW_FILE_STORE=true`: MLflow 3 keeps that store
  in maintenance; it is the one that needs no server), at MLflow's step.
- W&B (`wandb`, `WANDB_MODE=offline`): the run's `.wandb` file. W&B 0.31 ships no Python reader of it (its Go core
  writes it), so `read_wandb_records` below reads the format (a LevelDB log: 32 KiB blocks of checksummed chunks)
  and decodes each chunk as W&B's own protobuf `Record`; a checksum or parse failure fails the check.
- trackio: its SQLite store (`TRACKIO_DIR`) through trackio's own `SQLiteStorage.get_logs`.

transformers' W&B and trackio integrations file every training row under `train/` (its `rewrite_logs`) with the
trainer's step as the metric `train/global_step`, so there the keys read `train/memlens/...` and a value's step is the
`train/global_step` logged beside it.

    .venv/bin/python benchmarks/crosscheck_trackers.py [--trackers mlflow wandb trackio] [--overlay DIR]

DIR (default /tmp/memlens-trackers-overlay) holds one folder per tracker, kept for a rerun (delete it when done).
Exits 1 when a value is missing or differs, or the trainer's loss is not beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TRAIN = r"""
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

tracker, out = sys.argv[1], Path(sys.argv[2])
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
                                    per_device_train_batch_size=8, report_to=[tracker], use_cpu=True, seed=0,
                                    logging_steps=1))
audit.attach(trainer)
trainer.train()
expected = {}
for record in read_jsonl(out / "audit" / "callback.jsonl"):
    for key, value in tracker_metrics(record).items():
        expected[(key, record["step"])] = value
"""

# Each reader leaves `version`, `got` {(memlens key, trainer step): value} and `has_loss` for REPORT.
READ_MLFLOW = r"""
import mlflow
version = mlflow.__version__
client = mlflow.tracking.MlflowClient()
(experiment,) = [e for e in client.search_experiments()]
(run,) = client.search_runs([experiment.experiment_id])
got = {}
for key, _ in expected:
    for m in client.get_metric_history(run.info.run_id, key):
        got[(key, m.step)] = m.value
has_loss = bool(client.get_metric_history(run.info.run_id, "loss"))
"""

READ_WANDB = r"""
import struct, zlib
import wandb
from wandb.proto import wandb_internal_pb2 as pb

BLOCK, HEADER = 32768, 7   # LevelDB log format, as W&B's datastore writes it
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4

def read_wandb_records(path):
    data = path.read_bytes()
    ident, magic, file_version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, file_version) == (b":W&B", 0xBEE1, 0), f"{path}: not a W&B log ({ident}, {magic:#x})"
    pos, pending = 7, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:          # a block's tail too short for a header is padding
            pos += left
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + length]
        if kind == 0 and length == 0:
            break
        assert zlib.crc32(bytes([kind]) + chunk) & 0xFFFFFFFF == checksum, f"{path}: bad checksum at {pos}"
        pos += HEADER + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record

version = wandb.__version__
wandb.finish()      # W&B's core writes the file asynchronously: the run's last rows are there once it is finished
(log,) = Path.cwd().glob("wandb/offline-run-*/run-*.wandb")
got, has_loss = {}, False
for record in read_wandb_records(log):
    if record.WhichOneof("record_type") != "history":
        continue
    row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
    has_loss |= "train/loss" in row
    for key, value in row.items():
        if key.startswith("train/memlens/"):
            got[(key.removeprefix("train/"), row["train/global_step"])] = value
"""

READ_TRACKIO = r"""
import trackio
from trackio.sqlite_storage import SQLiteStorage
version = trackio.__version__
(project,) = SQLiteStorage.get_projects()
(run,) = SQLiteStorage.get_runs(project)
got, has_loss = {}, False
for row in SQLiteStorage.get_logs(project, run):
    has_loss |= "train/loss" in row
    for key, value in row.items():
        if key.startswith("train/memlens/"):
            got[(key.removeprefix("train/"), row["train/global_step"])] = value
"""

REPORT = r"""
print(json.dumps({"version": version, "expected": len(expected), "has_loss": has_loss,
                  "missing": [f"{k}@{s}" for k, s in expected if (k, s) not in got],
                  "max_difference": max((abs(got[k] - v) for k, v in expected.items() if k in got), default=None),
                  "keys": sorted({k for k, _ in expected})}))
"""


@dataclass(frozen=True)
class Tracker:
    """One tracker: what pip installs, the module that shows it is installed, its local store's settings (given the
    run's temporary folder) and the code that reads the store back."""
    package: str
    module: str
    store_env: Callable[[str], dict[str, str]]
    reader: str
    store: str
    shadows: tuple[str, ...] = ()     # packages whose .venv version the tracker refuses: the overlay's own is used


TRACKERS = {
    "mlflow": Tracker("mlflow-skinny==3.17.2", "mlflow",
                      lambda tmp: {"MLFLOW_TRACKING_URI": f"file://{tmp}/mlruns", "MLFLOW_ALLOW_FILE_STORE": "true"},
                      READ_MLFLOW, "file store"),
    "wandb": Tracker("wandb==0.31.0", "wandb",
                     lambda tmp: {"WANDB_MODE": "offline", "WANDB_DIR": tmp, "WANDB_SILENT": "true",
                                  "WANDB_DISABLE_GIT": "true"},
                     READ_WANDB, "offline .wandb file"),
    # trackio 0.43 requires pillow<13 (.venv has 13.0.0); pillow is not on the training path, so the child uses the
    # overlay's pillow and the result line says so.
    "trackio": Tracker("trackio==0.43.0", "trackio", lambda tmp: {"TRACKIO_DIR": f"{tmp}/trackio"},
                       READ_TRACKIO, "SQLite store", shadows=("pillow",)),
}


def overlay(path: Path, tracker: Tracker) -> Path:
    """`tracker`'s package and its dependencies under `path`, every package .venv also has pinned to .venv's
    version."""
    if (path / tracker.module).is_dir():
        return path
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    constraints = path.with_suffix(".constraints.txt")
    constraints.parent.mkdir(parents=True, exist_ok=True)
    constraints.write_text("\n".join(line for line in freeze.splitlines()
                                     if line and not line.startswith("-e") and "memlens" not in line
                                     and line.split("==")[0].lower() not in tracker.shadows) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(path), "-c", str(constraints),
                    tracker.package], check=True)
    return path


def crosscheck(name: str, tracker: Tracker, overlay_root: Path) -> bool:
    """Train with `report_to=[name]` and compare the tracker's store with callback.jsonl; prints one result line."""
    extra = overlay(overlay_root / name, tracker)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(extra), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               **tracker.store_env(tmp)}
        done = subprocess.run([sys.executable, "-c", TRAIN + tracker.reader + REPORT, name, f"{tmp}/run"], env=env,
                              capture_output=True, text=True, cwd=tmp)
    if done.returncode:
        print(f"{name}: the run or its read-back failed\n{done.stderr[-3000:]}", file=sys.stderr)
        return False
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{name} {result['version']} ({tracker.store}): {result['expected']} memlens values expected, "
          f"{len(result['missing'])} missing, largest difference {result['max_difference']}; the trainer's loss "
          f"logged beside them: {result['has_loss']}"
          + (f"; shadowing .venv's {', '.join(tracker.shadows)}" if tracker.shadows else ""))
    print("  keys:", ", ".join(result["keys"]))
    if result["missing"]:
        print("  missing:", ", ".join(result["missing"]))
    return not result["missing"] and result["has_loss"] and (result["max_difference"] or 0) < 1e-6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trackers", nargs="+", choices=sorted(TRACKERS), default=list(TRACKERS))
    ap.add_argument("--overlay", type=Path, default=Path(tempfile.gettempdir()) / "memlens-trackers-overlay")
    args = ap.parse_args()
    results = [crosscheck(name, TRACKERS[name], args.overlay) for name in args.trackers]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
