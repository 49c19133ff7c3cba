"""What an audit running inside someone's training process needs from torch and transformers (the model layer is
where they are imported): the Trainer's callback base class, a block that leaves every random generator as it found
it, and a barrier that exists only under a distributed launch. harness/audit/callback.py builds on these."""

from __future__ import annotations

import contextlib
import copy
import random
import sys

import numpy as np


def trainer_callback_base() -> type:
    """transformers' `TrainerCallback`: every event a no-op, so a subclass defines only the events it uses."""
    from transformers import TrainerCallback  # heavy: the model layer loads transformers on first use

    return TrainerCallback


def exportable_state_base() -> type:
    """transformers' `ExportableState`: a callback whose `state()` the trainer saves in each checkpoint's
    trainer_state.json and restores on `train(resume_from_checkpoint=...)`."""
    from transformers.trainer_callback import ExportableState  # heavy: as trainer_callback_base

    return ExportableState


@contextlib.contextmanager
def rng_untouched():
    """Python's, NumPy's and torch's random generators (every CUDA device's too) restored after the block: work done
    inside it leaves a training run's random stream as it was."""
    import torch  # heavy: the model layer loads torch on first use

    py, npy = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


def barrier_if_distributed() -> None:
    """Wait for every process of a launch when there is one (DDP, accelerate, DeepSpeed); else nothing."""
    import torch.distributed as dist  # heavy: the model layer loads torch on first use

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def log_to_trackers(trainer, metrics: dict[str, float], step: int | None = None) -> None:
    """Log `metrics` on every `report_to` integration of `trainer`, at `step` (default: the trainer's current step).
    At the current step it is transformers.Trainer.log (the base class's: a TRL trainer's override would also flush
    the training metrics it is averaging into this row); at an earlier step (a checkpoint scored in the background
    and finished later) the trainer's callback handler gets the row with its state's step set to that checkpoint's,
    and the trainer's log history keeps it with that step."""
    from transformers import Trainer  # heavy: the model layer loads transformers on first use

    if not metrics:
        return
    if step is None or step == trainer.state.global_step:
        Trainer.log(trainer, dict(metrics))
        return
    state = copy.copy(trainer.state)
    state.global_step = int(step)
    trainer.state.log_history.append({**metrics, "step": int(step)})
    trainer.callback_handler.on_log(trainer.args, state, trainer.control, dict(metrics))


def running_trainer(callback) -> object | None:
    """The transformers Trainer whose callback handler is calling `callback` now, or None. A callback gets no handle
    to its trainer or to the reporting integrations (the handler passes model, processing_class, optimizer,
    lr_scheduler and the dataloaders), so it is found on the call stack: the nearest frame whose `self` is a Trainer
    holding this very callback (`callbacks=[...]` and `trainer.add_callback(...)` alike). Called from an event such
    as on_train_begin, that frame is the trainer's training loop."""
    from transformers import Trainer  # heavy: the model layer loads transformers on first use

    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, Trainer) and any(c is callback for c in owner.callback_handler.callbacks):
            return owner
        frame = frame.f_back
    return None
