"""A stage's training log and console: its logged steps (the Trainer's per-step dictionaries) go to `train_log.jsonl` in
the stage's directory (and TensorBoard when asked), not to the console, which shows one progress bar per stage
(memlens.harness.core.console): every recipe hands its trainer to `attach_stage_console`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memlens.harness.core.config import require_bool
from memlens.harness.core.console import StageProgress
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_jsonl, jsonl_line, read_jsonl
from memlens.harness.core.layout import (
    TENSORBOARD_DIR,
    TRAIN_LOG,
)
from memlens.recipes.stages import preemption
from memlens.recipes.stages.contract import StageContext
from memlens.recipes.stages.divergence import DivergenceWatch


def require_tensorboard(enabled: Any) -> bool:
    """The root key `tensorboard`, checked before any training: a boolean, and the package when true."""
    if not require_bool(enabled, "tensorboard"):
        return False
    try:
        import tensorboard  # noqa: F401  (torch.utils.tensorboard needs it)
    except ModuleNotFoundError:
        raise UserError("tensorboard=true: the tensorboard package is not installed; `pip install tensorboard` "
                        "into this environment, or leave tensorboard=false (every logged step is in "
                        "models/<NAME>/train_log.jsonl either way)") from None
    return True


def _loggable(value: Any) -> Any:
    """A log value as JSON keeps it: numbers and strings as they are, anything else (a tensor) as a number
    when it has one, else its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class TrainLog:
    """`models/<NAME>/train_log.jsonl`: one object per logged training step, `step` first, then what the
    trainer logged (loss, learning rate, reward, KL, ...); with `tensorboard`, the numbers also go to
    `models/<NAME>/tensorboard/`. trainer_state.json keeps its own copy (harness/report/evidence.py reads it).

    A resumed stage logs again every step after the checkpoint it resumes from, so `start(step)` first drops
    what a killed run logged past that step: the file never holds a step twice.

    Every logged step of every stage passes here, so this is where a diverged stage stops: `append` raises
    TrainingDiverged at the first NaN or infinite loss or gradient norm (memlens.recipes.stages.divergence)."""

    def __init__(self, out_dir: Path, tensorboard: bool = False, main_process: bool = True):
        self.path = Path(out_dir) / TRAIN_LOG
        self.tensorboard_dir = Path(out_dir) / TENSORBOARD_DIR if tensorboard else None
        self.main_process = main_process
        self.writer = None
        self.watch = DivergenceWatch(Path(out_dir))

    def start(self, step: int) -> None:
        self.watch.start(step)
        if not self.main_process:
            return
        if self.path.is_file():
            rows = read_jsonl(self.path)
            kept = [r for r in rows if isinstance(r.get("step"), int) and r["step"] <= step]
            if len(kept) != len(rows):
                atomic_write_jsonl(self.path, kept)
        if self.tensorboard_dir is not None and self.writer is None:
            from torch.utils.tensorboard import SummaryWriter  # torch (~1 s): only tensorboard=true writes events

            # purge_step: TensorBoard drops the events a killed run wrote after the resumed step
            self.writer = SummaryWriter(log_dir=str(self.tensorboard_dir), purge_step=step + 1 if step else None)

    def append(self, step: int, logs: dict[str, Any]) -> None:
        row = {"step": int(step), **{k: _loggable(v) for k, v in logs.items() if k != "step"}}
        if self.main_process:
            self._write(row)
        try:
            self.watch.observe(int(step), row, self.main_process)   # after the row is stored: the log shows the NaN
        except Exception:
            self.close()
            raise

    def _write(self, row: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(jsonl_line(row))
        if self.writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(key, value, row["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _stage_console_callback():
    """The TrainerCallback class (built on first use: importing transformers costs seconds)."""
    # transformers (~1.5 s): when a stage trains; every recipe imports common.py
    from transformers import TrainerCallback

    class StageConsoleCallback(TrainerCallback):
        """Logged steps -> train_log.jsonl; progress -> one bar (terminal) or a few lines (elsewhere)."""

        def __init__(self, name: str, log: TrainLog):
            self.name, self.log, self.progress = name, log, None

        def on_train_begin(self, args, state, control, **kwargs):
            # Called after a resumed run has loaded its checkpoint's state: global_step is where it resumes.
            self.log.main_process = state.is_world_process_zero
            self.log.start(state.global_step)
            self.progress = StageProgress(self.name, state.max_steps, initial=state.global_step,
                                          enabled=state.is_world_process_zero)

        def on_step_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.update(state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                self.log.append(state.global_step, {"epoch": state.epoch, **logs})
                if self.progress is not None and isinstance(logs.get("loss"), (int, float)):
                    self.progress.update(state.global_step, loss=float(logs["loss"]))

        def on_train_end(self, args, state, control, **kwargs):
            if self.progress is not None:
                self.progress.close()
            self.log.close()

    return StageConsoleCallback


def attach_stage_console(trainer, ctx: StageContext) -> None:
    """Give a transformers/TRL trainer the project's console: its per-step dictionaries go to
    `models/<NAME>/train_log.jsonl` (and TensorBoard with `tensorboard=true`) instead of being printed,
    and its progress is one bar per stage on a terminal, a line per 25 % elsewhere (harness/core/console.py).
    Replaces the Trainer's PrinterCallback (disable_tqdm=True) or ProgressCallback, whichever it has."""
    # transformers (~1.5 s): when a stage trains; every recipe imports common.py
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(_stage_console_callback()(ctx.name, TrainLog(ctx.out_dir, ctx.tensorboard)))
    # Every stage's Trainer passes here: a job told it will be stopped saves and stops (memlens.recipes.stages.preemption)
    trainer.add_callback(preemption.trainer_callback())
