"""Kill-and-resume: SIGKILL `memlens train stage=PT` after a checkpoint, rerun, it continues from it.

Evidence that it resumed rather than restarted: the checkpoint written before the kill is untouched
(same file mtime), later checkpoints appear, and the final step count is the planned one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pipeline_helpers import write_smoke_datasets

from memlens.harness.core.io import read_json, read_jsonl
from tests.integration.run_helpers import REPO, memlens, status_lines

pytestmark = pytest.mark.slow

# 24 steps of 8 x 64 tokens with a checkpoint every 4: long enough to kill in the middle.
PT_ARGS = ["train", "stage=PT", "experiment=smoke", "build_data=false", "device=cpu",
           "stages.PT.max_tokens=12288", "stages.PT.max_seq_len=64", "stages.PT.save_steps=4",
           "stages.PT.tokenizer_chars=20000", "+stages.PT.save_total_limit=null"]


def whole_checkpoints(out_dir: Path) -> list[Path]:
    return sorted((p.parent for p in out_dir.glob("checkpoint-*/trainer_state.json")),
                  key=lambda p: int(p.name.split("-")[1]))


def test_killed_stage_resumes_from_its_last_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    write_smoke_datasets(run_dir)
    out_dir = run_dir / "models" / "PT"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen([sys.executable, "-m", "memlens", *PT_ARGS, f"run_dir={run_dir}"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 240
        while len(whole_checkpoints(out_dir)) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, f"the stage exited (code {proc.returncode}) before it could be killed"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's process group only
        proc.wait()
    ckpts = whole_checkpoints(out_dir)
    assert ckpts, "no checkpoint was written before the kill"
    assert not (out_dir / "provenance.json").exists(), "the stage finished before it could be killed"
    last = ckpts[-1]
    last_step = int(last.name.split("-")[1])
    mtime = (last / "model.safetensors").stat().st_mtime_ns

    result = memlens(*PT_ARGS, f"run_dir={run_dir}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert status_lines(result.stdout) == {"PT": "resumed"}
    assert (out_dir / "provenance.json").is_file()
    assert (last / "model.safetensors").stat().st_mtime_ns == mtime          # not retrained
    state = read_json(out_dir / "trainer_state.json")
    assert state["global_step"] == 24 and state["global_step"] > last_step
    assert [int(p.name.split("-")[1]) for p in whole_checkpoints(out_dir)][-1] == 24
    # train_log.jsonl: every logged step once, although the killed run may have logged past its checkpoint
    logged = [row["step"] for row in read_jsonl(out_dir / "train_log.jsonl") if "loss" in row]
    assert logged == list(range(2, 25, 2))

    again = memlens(*PT_ARGS, f"run_dir={run_dir}")                           # finished: skipped
    assert status_lines(again.stdout) == {"PT": "skipped"}
