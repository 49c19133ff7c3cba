"""Scoring checkpoints in the background (`memlens.AuditCallback(..., background=True)`): a worker process, the jobs
it is sent and the snapshots it scores.

The worker is a process started by command, `python -m memlens.harness.audit.callback` (WORKER_MODULE), that reads one
JSON job per line on stdin and writes one JSON reply per line on stdout: never a multiprocessing child, whose spawn
re-imports the parent's `__main__` — a user's training script without a `__main__` guard would train again in it. It
shares no CUDA, thread or interpreter state with training. Each job scores a snapshot of one checkpoint (its files
hard-linked, so the trainer's rotation cannot delete what the worker is reading), at most `max_pending` queued.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.measures.mia import TokenFrequency

WORKER_MODULE = "memlens.harness.audit.callback"   # `python -m` it: the worker loop (callback.background_worker)
PENDING_SUBDIR = "pending"             # <out_dir>/audit/pending/<checkpoint>/: what the worker scores, then removes
BACKGROUND_THREADS = 1                 # the worker's CPU threads: the trainer keeps the others


def snapshot_checkpoint(checkpoint: Path, pending: Path) -> Path:
    """A checkpoint's weight, config and tokenizer files hard-linked (copied across file systems) under `pending`, so
    that the worker scores exactly what was saved even after the trainer's rotation deleted the original."""
    out = pending / checkpoint.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in checkpoint.iterdir():
        if path.is_file() and not path.name.startswith(("optimizer", "scheduler", "rng_state", "training_args")):
            try:
                os.link(path, out / path.name)
            except OSError:
                shutil.copy2(path, out / path.name)
    return out


def reference_json(reference) -> dict | list | None:
    """DC-PDD's reference as a job carries it: a TokenFrequency as its counts, texts as they are."""
    if isinstance(reference, TokenFrequency):
        return {"counts": {str(k): v for k, v in reference.counts.items()}, "total": reference.total,
                "vocab_size": reference.vocab_size}
    return reference


def reference_from_json(value) -> TokenFrequency | list | None:
    """The reference a job carried, as the worker's callback takes it (the inverse of `reference_json`)."""
    if isinstance(value, dict):
        return TokenFrequency({int(k): v for k, v in value["counts"].items()}, value["total"], value["vocab_size"])
    return value


class BackgroundScorer:
    """One worker process (`background_worker`, started by command: it shares no CUDA, thread or interpreter state
    with training) scoring checkpoints in the order they were saved, at most `max_pending` queued: a save waits for
    the oldest beyond that, so scoring falls behind training by a bounded amount only."""

    def __init__(self, audit_dir: Path, max_pending: int):
        self.audit_dir, self.max_pending = audit_dir, max_pending
        self.process = None
        self.replies = None
        self.pending = 0

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.replies = queue.Queue()

        def read(stream, replies):
            for line in stream:
                replies.put(line)
            replies.put(None)                   # the worker exited

        threading.Thread(target=read, args=(self.process.stdout, self.replies), daemon=True).start()

    def submit(self, init_args: dict, reference, snapshot: Path, step: int, control_dir: Path) -> list[dict]:
        """Queue one checkpoint; return the records finished meanwhile (waiting for the oldest when full)."""
        if self.process is None:
            self.start()
        finished = []
        while self.pending >= self.max_pending:
            finished.append(self._next(block=True))
        job = {"init_args": init_args, "reference": reference_json(reference), "snapshot": str(snapshot),
               "step": step, "control_dir": str(control_dir)}
        self.process.stdin.write(json.dumps(job, default=str) + "\n")
        self.process.stdin.flush()
        self.pending += 1
        return finished + self.done()

    def _next(self, block: bool) -> dict | None:
        try:
            line = self.replies.get(block=block)
        except queue.Empty:
            return None
        if line is None:
            raise UserError(f"AuditCallback(background=True): the scoring worker exited ({self.process.wait()}) with "
                            f"{self.pending} checkpoint(s) unscored; its error is above. Score them afterwards with "
                            "`memlens audit`, or train with background=False")
        reply = json.loads(line)
        self.pending -= 1
        if "error" in reply:
            raise UserError(f"AuditCallback(background=True): scoring a checkpoint failed in the worker:\n"
                            f"{reply['error']}")
        return reply["record"]

    def done(self) -> list[dict]:
        """The records finished so far, in order (the others stay queued)."""
        finished = []
        while self.pending and (record := self._next(block=False)) is not None:
            finished.append(record)
        return finished

    def drain(self) -> list[dict]:
        """Wait for every queued checkpoint; stop the worker."""
        finished = [self._next(block=True) for _ in range(self.pending)]
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()
            self.process = None
        return finished
