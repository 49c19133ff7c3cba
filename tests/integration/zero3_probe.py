"""`python -m tests.integration.zero3_probe ARGS` = `memlens ARGS`, with a probe in the FT stage's save: before the
recipe saves, every process runs the trained model as DeepSpeed holds it (ZeRO-3: each weight partitioned over the
processes, gathered for the forward pass by DeepSpeed's hooks) on a fixed text, and the main process writes to
$ZERO3_PROBE (safetensors) its input ids, those logits and which weights were partitioned. The merged model the
recipe then saves must give the same logits (tests/integration/test_multiprocess_save.py). A helper, not a test."""

from __future__ import annotations

import json
import os

from memlens.recipes.stages.sft import SFTRecipe

PROBE_TEXT = "def add(a, b):\n    return a + b\n\nclass Stack:\n    def push(self, x):\n        self.items.append(x)\n"


def probe_then_save(save):
    def wrapped(self) -> None:
        import torch
        from safetensors.torch import save_file

        engine = self.trainer.model_wrapped
        ids = torch.tensor([self.tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]])
        # Local numel 0 while DeepSpeed keeps only this process's partition (ds_tensor) of the weight.
        partitioned = [name for name, p in engine.module.named_parameters()
                       if getattr(p, "ds_numel", 0) > 0 and p.numel() == 0]
        engine.module.eval()
        with torch.no_grad():
            logits = engine(input_ids=ids).logits.float()        # every process: ZeRO-3 gathers per layer
        if self.trainer.is_world_process_zero():
            save_file({"input_ids": ids, "logits": logits.contiguous()}, os.environ["ZERO3_PROBE"],
                      metadata={"partitioned": json.dumps(partitioned),
                                "world_size": str(torch.distributed.get_world_size())})
        save(self)

    return wrapped


SFTRecipe.save = probe_then_save(SFTRecipe.save)

from memlens.harness.cli import main  # noqa: E402  (after the probe is in place)

main()
