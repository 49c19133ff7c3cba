"""What reaches the console: one progress bar per training stage on a terminal, a few plain lines off it,
and the library noise the project itself triggers, filtered once, here, each filter with its reason.

A run's console is meant to be read: a status line per stage, the audit's lines, the findings table and
where the report is. Per-step figures go to files (`models/<NAME>/train_log.jsonl`, recipes/stages/contract.py),
not to the console. Off a terminal (a log file, CI) a progress bar's redraws are one line each (`\\r`
frames in a file), so there a loop prints at most one line per PROGRESS_LINE_PERCENT % instead.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from typing import TextIO

PROGRESS_LINE_PERCENT = 25   # off a terminal: at most one progress line per this share of a stage's steps

# Library progress bars the stage bar replaces: datasets' `map` bars ("Tokenizing train dataset") and the
# hub/transformers bars of weight loading and saving ("Loading weights", "Writing model shards"). The
# variables are read when those libraries are imported; a value the user set is kept.
QUIET_LIBRARY_ENV = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}

# transformers log records that the project triggers by design, matched on their text.
EXPECTED_TRANSFORMERS_RECORDS = (
    # Trainer's checkpoint sorting on filesystems with coarse mtimes; it falls back to step order, which is
    # exactly how memlens.harness.core.layout orders checkpoints anyway.
    "mtime may not be reliable on this filesystem",
)


def attached_to_terminal(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default: stderr, where progress bars draw) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _is_expected_load_report(message: str) -> bool:
    """A transformers LOAD REPORT whose only entries are a new `score` head: every reward and value model is
    a language model given a freshly initialised one-unit head on purpose (recipes/stages/reward.py, recipes/stages/ppo.py);
    any other missing, unexpected or mismatched key still reaches the console."""
    if "LOAD REPORT" not in message:
        return False
    rows = [line for line in message.splitlines() if "|" in line and not set(line) <= set("-+| ")]
    entries = [row.split("|")[0].strip() for row in rows[1:]]          # rows[0] is the table's header
    return bool(entries) and all(key.startswith("score.") for key in entries) \
        and all("MISSING" in row for row in rows[1:])


class ExpectedRecords(logging.Filter):
    """Drops the transformers records the project triggers by design (the CLI installs it on transformers'
    handler: memlens.harness.model.load.filter_transformers_records)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _is_expected_load_report(message):
            return False
        return not any(text in message for text in EXPECTED_TRANSFORMERS_RECORDS)


TRAINING_COMMANDS = ("run", "train", "nmt")   # the commands that train, and so meet the records above


def quiet_libraries() -> None:
    """Called once per process by the CLI, before any library is imported. (The transformers record filter,
    ExpectedRecords, imports transformers' logging (~1 s): the CLI installs it for TRAINING_COMMANDS only.)"""
    for key, value in QUIET_LIBRARY_ENV.items():
        os.environ.setdefault(key, value)
    # TRL 1.16 still reads and sets transformers 5's deprecated `gradient_checkpointing` names (its configs
    # default gradient_checkpointing=True, its trainers read model.is_gradient_checkpointing), which warns
    # at every stage start; our own code passes the new name (memlens.recipes.stages.devices.trl_device_kwargs).
    warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing(_kwargs)?` is deprecated",
                            category=FutureWarning)


class StageProgress:
    """A stage's training progress: a tqdm bar on a terminal; off it, a line at each PROGRESS_LINE_PERCENT %
    crossed (never at 100 %: the stage's status line follows). Only the main process shows it."""

    def __init__(self, name: str, total: int, initial: int = 0, enabled: bool = True,
                 terminal: bool | None = None, out: TextIO | None = None):
        self.name, self.total, self.step = name, max(int(total), 0), int(initial)
        self.enabled = enabled and self.total > 0
        self.terminal = attached_to_terminal() if terminal is None else terminal
        self.out = out
        self.start = time.perf_counter()
        self.last_mark = self._mark(self.step)
        self.bar = None
        if self.enabled and self.terminal:
            from tqdm.auto import tqdm  # lazy: only a loop that shows progress needs it

            self.bar = tqdm(total=self.total, initial=self.step, desc=name, unit="step", dynamic_ncols=True,
                            leave=False)

    def _mark(self, step: int) -> int:
        """How many PROGRESS_LINE_PERCENT shares of the stage `step` completes."""
        return (100 * step // self.total) // PROGRESS_LINE_PERCENT if self.total else 0

    def update(self, step: int, loss: float | None = None) -> None:
        if not self.enabled or step <= self.step:
            return
        if self.bar is not None:
            self.bar.update(step - self.step)
            if loss is not None:
                self.bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        elif self._mark(step) > self.last_mark and step < self.total:
            self.last_mark = self._mark(step)
            print(f"[{self.name}] step {step}/{self.total} ({100 * step // self.total} %), "
                  f"{time.perf_counter() - self.start:.0f} s", file=self.out or sys.stdout, flush=True)
        self.step = step

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
