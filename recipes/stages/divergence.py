"""A stage whose training diverged stops there, with a clear error, instead of finishing with non-finite weights.

Why: a loss or gradient norm that turns NaN or infinite makes every later update NaN, and the Trainer carries on
to the end (it even logs such a loss as 0.0 unless `logging_nan_inf_filter` is off, which
memlens.recipes.stages.devices.trl_device_kwargs sets). The stage would then be marked finished, and the audit would
score a model that produces no text at all: its extraction rate a confident "0 of n" that says nothing about
memorization. Seen on a GPU: the 60 M-parameter ladder's FT.3 at the 5 M base's learning rate (bf16, NaN by step 20).

Every logged step of every stage passes through TrainLog.append (memlens.recipes.stages.training_log), which calls
`DivergenceWatch.observe`; the first non-finite value raises TrainingDiverged. Checkpoints saved after the last
finite logged step are removed, because a rerun resumes from the latest checkpoint and would resume the divergence.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.layout import TRAIN_LOG, checkpoint_dirs, models_dir

# The logged values whose divergence ruins the weights: the training loss and the pre-clipping gradient norm
# (a NaN norm makes clipping multiply every gradient by NaN). Rewards and KL are measurements, not updates.
WATCHED = ("loss", "grad_norm")


class TrainingDiverged(UserError):
    """A stage's loss or gradient norm became NaN or infinite; the stage is not finished."""


def non_finite(logs: dict[str, Any]) -> dict[str, float]:
    """The watched values of one logged step that are NaN or infinite (empty when the step is healthy)."""
    bad = {}
    for key in WATCHED:
        value = logs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            bad[key] = float(value)
    return bad


def remove_checkpoints_after(model_dir: Path, step: int) -> list[int]:
    """Delete the `checkpoint-<s>` directories with s > step (trained past the last finite log); their steps."""
    after = {s: path for s, path in checkpoint_dirs(model_dir).items() if s > step}
    for path in after.values():
        shutil.rmtree(path, ignore_errors=True)
    return list(after)


def model_name(model_dir: Path) -> str:
    """The model's name as the run gives it: `RLFT.4/beta=0.005` for a sweep point (models/RLFT.4/beta=0.005/),
    else the directory's own name."""
    if model_dir.parent.parent.name == models_dir(".").name:
        return f"{model_dir.parent.name}/{model_dir.name}"
    return model_dir.name


def diverged_message(name: str, step: int, bad: dict[str, float], logs: dict[str, Any], last_finite: int,
                     removed: list[int]) -> str:
    values = ", ".join(f"{k} {v}" for k, v in bad.items())
    lr = logs.get("learning_rate")
    at_lr = f" at learning rate {lr:.3g}" if isinstance(lr, (int, float)) else ""
    kept = (f"checkpoints after step {last_finite} were removed ({', '.join(map(str, removed))}) so that a rerun "
            "does not resume from them" if removed else f"no checkpoint was saved after step {last_finite}")
    return (f"stage {name} diverged: at step {step} its {values}{at_lr}; the stage is not finished and its weights "
            f"are unusable. Fix: lower the stage's learning rate (`stages.{name.split('/')[0]}.lr=...`) or raise its batch size, and "
            f"rerun the same command ({kept}; to train it afresh, remove models/{name}/). Every logged step is in "
            f"models/{name}/{TRAIN_LOG}.")


class DivergenceWatch:
    """Follows one stage's logged steps; `observe` raises TrainingDiverged at the first non-finite one."""

    def __init__(self, model_dir: Path):
        self.model_dir = Path(model_dir)
        self.name = model_name(self.model_dir)
        self.last_finite = 0

    def start(self, step: int) -> None:
        """Training begins (or resumes) at `step`: the checkpoint it resumed from was finite when saved."""
        self.last_finite = int(step)

    def observe(self, step: int, logs: dict[str, Any], main_process: bool = True) -> None:
        bad = non_finite(logs)
        if not bad:
            self.last_finite = int(step)
            return
        # Every process sees the same reduced logs and raises; only the main one touches the files.
        removed = remove_checkpoints_after(self.model_dir, self.last_finite) if main_process else []
        raise TrainingDiverged(diverged_message(self.name, int(step), bad, logs, self.last_finite, removed))
