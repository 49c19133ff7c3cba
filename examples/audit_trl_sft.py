"""Audit your own TRL script: the positive control (about 1.5 minutes on 2 CPU cores).

Fine-tunes the shipped tiny base (memlens/assets/base_tiny) with TRL's SFTTrainer on a small prompt-completion
set into which `memlens.inject` plants 16 canaries, 16 copies each (about half of them held out by a coin, never
trained on), with `memlens.AuditCallback` scoring every saved checkpoint against the base as the control. The
planted canaries end up memorized; the held-out ones and the control stay at 0. Then renders the report:

    python examples/audit_trl_sft.py [OUT_DIR]          # default runs/audit_trl_sft
    memlens report run_dir=OUT_DIR                        # what the script runs at the end

`--background` scores each checkpoint in a worker process while training goes on (the same rows); `--no-audit`
trains without the callback (the baseline of benchmarks/README.md's wall-time table). Either way the script prints
how long `trainer.train()` took.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

# The command line first, so that `--help` answers before torch, transformers and TRL load (~8 s on 2 cores).
cli = argparse.ArgumentParser(description="the AuditCallback's positive control: SFT with 16 planted canaries, every "
                              "checkpoint audited against the shipped base, then `memlens report`")
cli.add_argument("out", nargs="?", default="runs/audit_trl_sft",
                 help="where the run goes (default runs/audit_trl_sft): the trainer's checkpoints in OUT/model, the "
                      "audit's rows in OUT/audit, the report in OUT/report")
cli.add_argument("--background", action="store_true", help="score checkpoints in a worker process")
cli.add_argument("--no-audit", action="store_true", help="train without the callback (a timing baseline)")
options = cli.parse_args()

import torch  # noqa: E402  (after the command line: see above)
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

import memlens  # noqa: E402
from memlens.harness.core.io import read_jsonl  # noqa: E402
from memlens.harness.core.shipped import shipped_path  # noqa: E402

OUT = Path(options.out)
BASE = shipped_path("assets/base_tiny")      # the control too: it never saw the canaries


def canary(i: int) -> dict:
    secret = f"sk-{(i * 7919 + 104729) % 999983:06d}{'abcdef'[i % 6]}{(i * 31) % 97:02d}"
    return {"id": f"secret-{i}", "prefix": f"def load_key_{i}():\n    key = ", "target": f"'{secret}'",
            "suffix": "\n    return key\n", "repeat": 16}


# --- your script: a dataset, a model, a trainer --------------------------------------------------------------
rows = [{"prompt": f"def scale_{i}(x):", "completion": f"\n    return x * {i}\n"} for i in range(64)]
train, manifest = memlens.inject(Dataset.from_list(rows), [canary(i) for i in range(16)], seed=0)
audit = memlens.AuditCallback(manifest, control=BASE, out_dir=OUT, max_new_tokens=24, target_tokens=16,
                              min_target_tokens=4, background=options.background)
trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32),
                     processing_class=AutoTokenizer.from_pretrained(BASE), train_dataset=train,
                     callbacks=[] if options.no_audit else [audit],
                     args=SFTConfig(output_dir=str(OUT / "model"), max_steps=40, save_steps=20, learning_rate=1e-3,
                                    per_device_train_batch_size=8, report_to=[], use_cpu=not torch.cuda.is_available(), seed=0))
started = time.perf_counter()
trainer.train()
print(f"trainer.train(): {time.perf_counter() - started:.1f} s")
if options.no_audit:
    sys.exit(0)

# --- what the callback found ---------------------------------------------------------------------------------
for record in read_jsonl(OUT / "audit" / "callback.jsonl"):
    e = record["extraction"]
    print(f"{record['checkpoint']}: planted {e['canaries']['n_memorized']}/{e['canaries']['n_scored']} memorized, "
          f"held out {e['canaries_heldout']['n_memorized']}/{e['canaries_heldout']['n_scored']}; "
          f"MIA LOSS AUC {record['mia']['loss']['auc']['value']:.2f}; exposure planted "
          f"{record['exposure']['planted']['mean']:.2f} vs held out {record['exposure']['heldout']['mean']:.2f} bits; "
          f"scored in {record['seconds']} s")
last = read_jsonl(OUT / "audit" / "model" / record["checkpoint"] / "canaries.jsonl")
print(f"control ({BASE.name}) within k of a planted target: {sum(r['control_ned'] <= 0.1 for r in last)}/{len(last)}")
subprocess.run([sys.executable, "-m", "memlens", "report", f"run_dir={OUT}"], check=True)
