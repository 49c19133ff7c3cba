"""bf16 training works under every MEMLENS_CPU_KERNELS level on the processor the tests run on (harness/core/
kernels.py). On an Intel Xeon with AMX, ATen held to AVX2 with oneDNN left to the hardware raised in bf16 SDPA's
backward at sequence length >= 64 (`pack_vnni2 is only supported when avx512 is supported`); each level now caps all
three libraries together. Each level runs in a fresh process, since every library picks its kernels once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memlens.harness.core import kernels

# In the child: memlens's pin first (as `memlens` and the tests do before torch loads), then bf16 attention forward and
# backward at two lengths past the crash's threshold, then one LoRA optimizer step of a tiny Llama in bf16 on SDPA.
CHILD = r"""
import json, os
from memlens.harness.core.kernels import pin_cpu_kernels, effective_kernels
pin_cpu_kernels()
import torch
torch.manual_seed(0)
for length in (64, 128):
    q = torch.randn(1, 4, length, 32, dtype=torch.bfloat16, requires_grad=True)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    out.float().sum().backward()
    assert out.shape == q.shape and torch.isfinite(q.grad.float()).all()
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, max_position_embeddings=128, attn_implementation="sdpa")
model = get_peft_model(LlamaForCausalLM(config).to(torch.bfloat16),
                       LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
ids = torch.randint(0, 128, (2, 96))
losses = []
for _ in range(2):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
print(json.dumps({"losses": losses, "kernels": effective_kernels(),
                  "variables": {k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}}))
"""


@pytest.mark.parametrize("level", kernels.LEVELS)
def test_bf16_attention_and_a_lora_step_train_under_every_kernel_level(level):
    if level == "portable":
        # `portable` is one of the named levels on every processor (avx2, or default without AVX2), whose own case
        # runs the same environment: the same pins is what is asserted here.
        named = kernels.level_for("portable", kernels.cpu_flags())
        assert kernels.pins_for("portable", kernels.cpu_flags(), {}) == kernels.LEVEL_PINS[named]
        return
    env = {k: v for k, v in os.environ.items() if k not in (*kernels.PINNED_VARIABLES, kernels.KERNELS_VARIABLE)}
    done = subprocess.run([sys.executable, "-c", CHILD], env={**env, kernels.KERNELS_VARIABLE: level},
                          capture_output=True, text=True, timeout=300)
    lacking = [f for f in kernels.LEVEL_NEEDS.get(level, ()) if f not in kernels.cpu_flags()]
    if lacking:             # a level this processor lacks is refused, never run at a lower level than recorded
        assert done.returncode != 0 and f"this processor lacks {', '.join(lacking)}" in done.stderr
        return
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(loss == loss and loss < 10 for loss in result["losses"])          # finite, near ln(128) = 4.85
    assert result["losses"][1] < result["losses"][0]                             # the step trained
    expected = kernels.pins_for(level, kernels.cpu_flags(), {})
    assert result["variables"] == {k: expected.get(k) for k in kernels.PINNED_VARIABLES}
    assert result["kernels"]["onednn_max_isa"] == expected.get("ONEDNN_MAX_CPU_ISA")
