"""Fixtures of the audit integration tests: a tiny Llama trained until it reproduces some FIM examples.

Session-scoped and built once (~10 s): a BPE tokenizer and a seeded tiny Llama; the untrained copy is
the control, the copy trained on the PSM training texts of the `trained` examples is the audited model,
saved with two intermediate checkpoints. Held-out examples (never trained on) and one short-target
example give rows that must not be memorized.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

AUDIT_TRAIN_STEPS = (30, 90)      # checkpoint-30 (barely trained), checkpoint-90, then the final model
AUDIT_FINAL_STEPS = 150


def _fim_examples(n: int, seed: int) -> list[dict]:
    """FIM examples whose targets hold random tokens: guessable by no model that did not see them."""
    rng = random.Random(seed)
    words = ["alpha", "delta", "kappa", "omega", "sigma", "theta", "gamma", "zeta", "lambda", "rho"]
    out = []
    for i in range(n):
        key = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))
        name = f"{rng.choice(words)}_{rng.choice(words)}_{i}"
        out.append({
            "id": f"ex{i:03d}",
            "prefix": f"import hashlib\n\ndef {name}(data):\n    \"\"\"Sign data for service {i}.\"\"\"\n",
            "target": f"    token = hashlib.sha256(b'{key}' + data).hexdigest()\n    return token[:{8 + i % 5}]\n",
            "suffix": f"\n\nprint({name}(b'x'))\n",
            "subset": "links" if i % 3 == 0 else "base",
            **({"pii_path": f"/home/user{i}/secrets/{key[:6]}.txt"} if i % 3 == 0 else {}),
        })
    return out


@pytest.fixture(scope="session")
def audit_world(tmp_path_factory):
    """{root, examples_path, examples, trained_ids, model_dir, control_dir} — built once per session."""
    import torch

    from memlens.harness.text.fim import FAMILIES, format_psm_training
    from tests.tiny import save, tiny_llama, tiny_tokenizer, train_on_texts

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("audit_world")
    s = FAMILIES["memlens"]
    examples = _fim_examples(12, seed=1)
    examples.append({"id": "short", "prefix": "x = [1, 2, 3]\ny = len(", "target": "x)", "suffix": "\n"})
    trained = [ex for ex in examples if int(ex["id"][2:] if ex["id"] != "short" else 99) < 8]
    texts = [format_psm_training(ex["prefix"], ex["target"], ex["suffix"], s) for ex in trained]
    tokenizer = tiny_tokenizer([ex["prefix"] + ex["target"] + ex["suffix"] for ex in examples] * 4,
                               vocab_size=512)

    control_dir = save(tiny_llama(tokenizer, seed=0), tokenizer, root / "models" / "CONTROL")
    model = tiny_llama(tokenizer, seed=0)
    model_dir = root / "models" / "FT.1"
    done = 0
    for step in (*AUDIT_TRAIN_STEPS, AUDIT_FINAL_STEPS):
        train_on_texts(model, tokenizer, texts, steps=step - done, lr=1e-2, batch_size=8, seed=step)
        done = step
        save(model, tokenizer, model_dir if step == AUDIT_FINAL_STEPS else model_dir / f"checkpoint-{step}")

    examples_path = root / "data" / "canaries.jsonl"
    examples_path.parent.mkdir(parents=True)
    examples_path.write_text("".join(json.dumps(ex) + "\n" for ex in examples), encoding="utf-8")
    return {"root": root, "examples_path": examples_path, "examples": examples,
            "trained_ids": {ex["id"] for ex in trained}, "model_dir": model_dir, "control_dir": control_dir}


def audit_overrides(world: dict, out_dir: Path, *extra: str) -> list[str]:
    return [f"audit.model_dir={world['model_dir']}", f"audit.control_dir={world['control_dir']}",
            f"audit.examples={world['examples_path']}", f"audit.out_dir={out_dir}", "audit.progress=false",
            "device=cpu", *extra]


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    """(run_dir, result) of `memlens run experiment=smoke`, the sequential run, built once for the whole session:
    the first pytest-xdist worker that needs it runs it under a lock in the workers' shared temporary root and
    records its output; the other waits on the lock and reads it. So test_pipeline_smoke.py's tests spread over both
    workers (tests/conftest.py SPREAD_FILES) around one run. Tests read it and never write into it: one that runs a
    command on it works on a copy (`copy_run`)."""
    import fcntl

    from tests.integration.run_helpers import memlens

    root = tmp_path_factory.getbasetemp()
    shared = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "smoke_shared"
    shared.mkdir(exist_ok=True)
    record = shared / "result.json"
    with open(shared / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes, or the worker dies
        if not record.is_file():
            done = memlens("run", "experiment=smoke", f"run_dir={shared / 'run'}", "device=cpu")
            tmp = record.with_suffix(".tmp")
            tmp.write_text(json.dumps({"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}))
            tmp.replace(record)
    saved = json.loads(record.read_text())
    result = subprocess.CompletedProcess(["memlens", "run", "experiment=smoke"], saved["returncode"],
                                         saved["stdout"], saved["stderr"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return shared / "run", result
