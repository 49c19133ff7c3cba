"""A stage whose job is about to be stopped saves where it is and stops, so that the requeued job resumes there and
trains the bits an uninterrupted run trains.

On a cluster a job is stopped before its stage finishes: SLURM signals it before its time limit (`--signal`, which
submitit sets from `launcher.slurm.signal_delay_s`), or preempts it (SIGTERM, then SIGKILL after the cluster's
KillWait). A `memlens train` started by the launcher (MEMLENS_PREEMPTIBLE=1 in its environment, from
memlens.recipes.orchestration.launcher) listens for SIGUSR2 and SIGTERM; on either, the stage's trainer saves a
checkpoint at the end of the step it is in and stops, and the command exits with PREEMPTED_EXIT_CODE. The job's
callable (launcher.TrainJob, a submitit Checkpointable) then has submitit requeue the job; the requeued
`memlens train` resumes from that checkpoint (memlens.recipes.stages.contract.latest_checkpoint).

A checkpoint saved off the stage's save schedule is moved to `preempted-<step>/`: the audit scores `checkpoint-*`
only, and the Trainer rotates `checkpoint-*` only (save_total_limit), so the model directory ends as an uninterrupted
run's. It is removed once the stage has finished (`discard_preemption_checkpoints`). Outside a job nothing changes:
the signals keep their default meaning.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.core.layout import TRAINER_STATE, checkpoint_name

ENVIRONMENT = "MEMLENS_PREEMPTIBLE"         # "1" in the environment of a job the launcher submits
SIGNALS = (signal.SIGUSR2, signal.SIGTERM)  # SLURM's signal before the limit (submitit's), and preemption's
PREEMPTED_EXIT_CODE = 75                    # EX_TEMPFAIL: stopped on purpose, to be run again
PREFIX = "preempted-"

_requested: list[int] = []                  # the signals received (a list: set from a signal handler)


class Preempted(UserError):
    """The stage saved a checkpoint and stopped because its job is being stopped; rerunning resumes there."""

    exit_code = PREEMPTED_EXIT_CODE


def listen() -> bool:
    """In a job (MEMLENS_PREEMPTIBLE=1): turn SIGUSR2 and SIGTERM into a request to save and stop. Returns whether
    it listens."""
    if os.environ.get(ENVIRONMENT) != "1":
        return False
    for signum in SIGNALS:
        signal.signal(signum, lambda received, frame: _requested.append(received))
    return True


def requested() -> bool:
    return bool(_requested)


def preempted_name(step: int) -> str:
    return f"{PREFIX}{int(step)}"


def preempted_step(name: str) -> int | None:
    """`preempted-<step>` -> step; None for any other name."""
    suffix = name[len(PREFIX):] if name.startswith(PREFIX) else ""
    return int(suffix) if suffix.isdigit() else None


def preemption_checkpoints(out_dir: str | Path) -> dict[int, Path]:
    """{step: directory} of the whole checkpoints saved for a preemption (trainer_state.json is written last)."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return {}
    found = {step: p for p in out_dir.iterdir()
             if p.is_dir() and (step := preempted_step(p.name)) is not None and (p / TRAINER_STATE).is_file()}
    return dict(sorted(found.items()))


def set_aside(out_dir: Path, step: int, on_schedule: bool) -> Path:
    """The checkpoint just saved at `step` for the preemption: kept as `checkpoint-<step>` when the schedule saves
    that step anyway, else moved to `preempted-<step>/`. Returns where it is."""
    saved = Path(out_dir) / checkpoint_name(step)
    if on_schedule or not saved.is_dir():
        return saved
    target = Path(out_dir) / preempted_name(step)
    if target.exists():
        shutil.rmtree(target)
    saved.rename(target)
    return target


def stop(name: str, where: Path) -> Preempted:
    """The error the stage stops with, naming where it will resume."""
    signals = ", ".join(signal.Signals(s).name for s in dict.fromkeys(_requested))
    return Preempted(f"stage {name} stopped for its job's preemption ({signals}): saved {where}; the requeued job "
                     "(or the same command, rerun) resumes there")


def discard_preemption_checkpoints(out_dir: Path) -> None:
    """After the stage finished: the checkpoints kept only to resume from go (the audit never sees them)."""
    for directory in preemption_checkpoints(out_dir).values():
        shutil.rmtree(directory, ignore_errors=True)


_stopped: dict[str, int | bool] = {}          # the step a stop saved at, and whether the schedule saves it anyway


def record_stop(step: int, on_schedule: bool) -> None:
    _stopped.update(step=int(step), on_schedule=bool(on_schedule))


def raise_if_stopped(out_dir: Path, name: str) -> None:
    """After a stage's training: raise Preempted (its checkpoint set aside) when it stopped for a preemption."""
    if _stopped:
        raise stop(name, set_aside(out_dir, int(_stopped["step"]), bool(_stopped["on_schedule"])))


def trainer_callback():
    """A transformers TrainerCallback that, once a stop is requested, saves at the end of the current step (outside
    the save_total_limit rotation, which would otherwise delete a scheduled checkpoint early) and stops training."""
    from transformers import TrainerCallback  # transformers (~1.5 s): built when a stage trains

    class SaveAndStopOnPreemption(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if requested() and not _stopped:
                record_stop(state.global_step, control.should_save)   # the schedule decided before this callback
                args.save_total_limit = None        # this save must not rotate a scheduled checkpoint out early
                control.should_save = True
                control.should_training_stop = True
            return control

    return SaveAndStopOnPreemption()
