"""Seconds per FT.3-shaped training step on the shipped base (batch 4 x 512 tokens, AdamW, forward + backward +
step), to tell a slower machine from a slower setting (docs/methods.md, "What reproduces where").

    python benchmarks/bench_train_step.py                                  # as this process's variables say
    env -u ATEN_CPU_CAPABILITY -u MKL_CBWR python benchmarks/bench_train_step.py        # torch's own choice
    ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 python benchmarks/bench_train_step.py        # memlens's pins

Prints the kernel variables, torch's kernel level, ms per step (mean of 20 after 3 warm-up steps) and the final
loss (the same loss under two settings means the same bits for this step)."""

from __future__ import annotations

import os
import time

import torch

from memlens.harness.core.shipped import shipped_dir
from memlens.harness.model.load import load_causal_lm


def main(steps: int = 20, warmup: int = 3) -> None:
    torch.manual_seed(0)
    model, _ = load_causal_lm(shipped_dir("assets") / "base_tiny", "cpu")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    batch = torch.randint(0, model.config.vocab_size, (4, 512))

    def step() -> float:
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    ms = 1000 * (time.perf_counter() - start) / steps
    variables = " ".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR") if k in os.environ)
    print(f"{variables or '(no kernel variables)'}: torch kernels {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads, {ms:.0f} ms/step, loss {loss:.6f}")


if __name__ == "__main__":
    main()
