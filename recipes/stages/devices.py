"""A stage's device: the TrainingArguments flags TRL needs per device (CPU, CUDA), and DeepSpeed (on a GPU, or its CPU
accelerator over gloo under a multi-process launch), with the ZeRO stage a DeepSpeed file asks for."""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json
from memlens.harness.model.load import pick_device


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA device is present, else 'cpu' (one rule, in memlens.harness.model.decode)."""
    return pick_device(device)


def trl_device_kwargs(device: str, deepspeed_config: str | None = None) -> dict[str, Any]:
    """TRL/transformers TrainingArguments flags per device.

    Every TRL config defaults to bf16=True and gradient_checkpointing=True, which fail or crawl on
    CPU: there we pass use_cpu=True, bf16=False, gradient_checkpointing=False (bf16 matmuls measured
    ~1.8x slower than fp32 on CPU). On CUDA we train in bf16 with activation checkpointing and hand
    over the DeepSpeed config when one is given. On CPU a DeepSpeed config is used only when the stage
    gives one explicitly (`stages.<NAME>.deepspeed`): DeepSpeed's CPU accelerator over gloo, under a
    multi-process launch (deepspeed_on_cpu); without one the CPU flags are exactly as before.

    On every device `logging_nan_inf_filter=False`: the Trainer then logs a NaN loss as NaN (with the filter it logs
    the mean of the finite ones, 0.0 when none is), so that a diverged stage stops at once
    (memlens.recipes.stages.divergence). It changes what is logged only when a loss is not finite.
    """
    logging = {"logging_nan_inf_filter": False}
    if device == "cpu":
        # `activation_checkpointing`: transformers 5's name (`gradient_checkpointing` is its deprecated alias)
        kwargs: dict[str, Any] = {"use_cpu": True, "bf16": False, "activation_checkpointing": False,
                                  "report_to": "none", "dataloader_num_workers": 0, **logging}
        if deepspeed_config:
            del kwargs["use_cpu"]          # use_cpu=True makes accelerate skip DeepSpeed
            kwargs.update(deepspeed_on_cpu(deepspeed_config), dataloader_pin_memory=False)  # no accelerator to pin for
        return kwargs
    # Gradient checkpointing said explicitly: TRL's configs default it on, transformers' TrainingArguments
    # (the pointwise reward model's trainer) off; a 3 B model's activations need it on a GPU either way.
    kwargs = {"bf16": True, "report_to": "none", "gradient_checkpointing": True,
              "gradient_checkpointing_kwargs": {"use_reentrant": False}, **logging}
    if deepspeed_config:
        kwargs["deepspeed"] = deepspeed_config
    return kwargs


def deepspeed_on_cpu(deepspeed_config: str) -> dict[str, Any]:
    """Make DeepSpeed (its CPU accelerator, gloo) the distributed state of this process and return the
    TrainingArguments flags that use it: `deepspeed` and `accelerator_config.use_configured_state`.

    accelerate finds no DeepSpeed backend without CUDA: its PartialState gives DeepSpeed a backend only on an
    accelerator, and with `use_cpu` it never takes DeepSpeed. So the state is made here — ACCELERATE_USE_DEEPSPEED
    set, accelerate's state reset, a PartialState over gloo (DeepSpeed's comm joins the process group the launch
    already set up) — and the Trainer told to use it as configured. Needs a launch (`accelerate launch`, e.g.
    launch/cpu_2proc.yaml): a plain process has no process group to join. The environment variable is restored after
    the stage (run_recipe)."""
    if "LOCAL_RANK" not in os.environ:
        raise UserError(f"deepspeed={deepspeed_config} with device=cpu: DeepSpeed on CPU needs a multi-process launch "
                        "(`accelerate launch --config_file launch/cpu_2proc.yaml -m memlens train ...`); "
                        "or remove the stage's deepspeed key to train in one process")
    if importlib.util.find_spec("deepspeed") is None:
        raise UserError(f"deepspeed={deepspeed_config}: DeepSpeed is not installed; `pip install -e '.[deepspeed]'`, "
                        "or remove the stage's deepspeed key")
    from accelerate import PartialState  # accelerate (~1 s): DeepSpeed on CPU only; every recipe imports common.py
    from accelerate.state import AcceleratorState  # accelerate: DeepSpeed on CPU only
    from accelerate.utils import DistributedType  # accelerate: DeepSpeed on CPU only
    from deepspeed.accelerator import get_accelerator, set_accelerator  # deepspeed: optional, checked above

    if get_accelerator().device_name() != "cpu":     # device=cpu on a machine that has an accelerator
        # deepspeed: optional (the deepspeed extra), DeepSpeed on CPU only
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

        set_accelerator(CPU_Accelerator())
    # Collectives over gloo, not DeepSpeed's shared-memory kernel: that one is compiled on first use (measured
    # 133 s on 2 cores, and it needs g++ and ninja); `compatible: false` makes DeepSpeed skip it (deepspeed.ops keeps
    # the edited table).
    import deepspeed.ops  # deepspeed: optional, checked above
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder  # deepspeed: optional, checked above

    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    # A fresh state for every trainer, as TrainingArguments makes one without use_configured_state (an Accelerator
    # takes a DeepSpeed plugin only when it is the first of its state: a second stage in this process needs its own).
    AcceleratorState._reset_state(reset_partial_state=True)
    device = os.environ.get("ACCELERATE_TORCH_DEVICE")
    os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"
    try:
        PartialState(backend="gloo")
    finally:
        if device is None:
            del os.environ["ACCELERATE_TORCH_DEVICE"]
        else:
            os.environ["ACCELERATE_TORCH_DEVICE"] = device
    if PartialState().distributed_type != DistributedType.DEEPSPEED:
        raise UserError(f"deepspeed={deepspeed_config} with device=cpu: accelerate did not set up DeepSpeed over gloo "
                        f"(distributed type {PartialState().distributed_type}); remove the stage's deepspeed key")
    return {"deepspeed": deepspeed_config, "accelerator_config": {"use_configured_state": True}}


@contextmanager
def deepspeed_left_behind_cleared():
    """Train and save a stage, then clear what a DeepSpeed trainer leaves in the process: accelerate sets
    ACCELERATE_USE_DEEPSPEED=true for good once it is given a DeepSpeed plugin (a later stage's TrainingArguments
    would then build a default DeepSpeed plugin of its own), and transformers' ZeRO-3 switch (HfDeepSpeedConfig, a
    weak reference) lives as long as the trainer does (the stage's evaluation, which loads the saved model in the main
    process alone, and a later stage's from_pretrained would build a partitioned model and wait for the other
    processes). Without DeepSpeed neither is set, and this changes nothing."""
    before = os.environ.get("ACCELERATE_USE_DEEPSPEED")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)
        else:
            os.environ["ACCELERATE_USE_DEEPSPEED"] = before
        if "transformers.integrations.deepspeed" in sys.modules:
            sys.modules["transformers.integrations.deepspeed"].unset_hf_deepspeed_config()


def zero_stage(deepspeed_config: str | None) -> int | None:
    """The ZeRO stage a DeepSpeed JSON asks for (None: no DeepSpeed)."""
    if not deepspeed_config:
        return None
    return int((read_json(Path(deepspeed_config)).get("zero_optimization") or {}).get("stage", 0))
