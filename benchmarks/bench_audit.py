"""Audit throughput: batched greedy completion (memlens.harness.model.decode) vs a per-example `generate` loop.

The baseline decodes one prompt at a time with `model.generate`, the way Pythia's memorization script
scores its sequences. Both paths see the same ~5M-parameter Llama (hidden 256, 5 layers, 4 heads,
ffn 688, vocab 4096; seeded random init, so no row stops early at EOS: every prompt decodes the full
64 new tokens, the worst case) and the same 256 FIM prompts cut from the Python standard library.

    .venv/bin/python benchmarks/bench_audit.py                  # 256 prompts x 64 new tokens
    .venv/bin/python benchmarks/bench_audit.py --n 64 --batch-size 16 --baseline-n 16 --threads 2

Prints examples/s of each path, the speed-up, whether both paths produced identical completions,
and the machine load (`uptime`) before and after.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memlens.harness.model.decode import greedy_complete  # noqa: E402
from memlens.harness.model.encode import encode_texts  # noqa: E402
from memlens.harness.text.fim import FAMILIES, format_psm_prompt  # noqa: E402
from tests.tiny import tiny_llama, tiny_tokenizer  # noqa: E402


def stdlib_texts(max_files: int = 300, max_chars: int = 4000) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py"))[:max_files]
    return [p.read_text(encoding="utf-8", errors="replace")[:max_chars] for p in files]


def fim_prompts(texts: list[str], n: int, seed: int = 0) -> list[str]:
    """n PSM prompts: a 100-600 char prefix, a 50-200 char hole, a 0-300 char suffix from one file."""
    rng = random.Random(seed)
    s = FAMILIES["memlens"]
    out = []
    pool = [t for t in texts if len(t) > 1200]
    while len(out) < n:
        t = rng.choice(pool)
        a = rng.randint(0, len(t) - 1100)
        p, m, q = rng.randint(100, 600), rng.randint(50, 200), rng.randint(0, 300)
        out.append(format_psm_prompt(t[a:a + p], t[a + p + m:a + p + m + q], s))
    return out


def per_example_generate(model, tokenizer, prompts, max_new_tokens):
    """Baseline: one `generate` call per prompt (batch of 1, no padding), as in Pythia's script."""
    import torch

    out = []
    for ids in encode_texts(tokenizer, prompts):
        x = torch.tensor([ids])
        with torch.inference_mode():
            g = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                               max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                               pad_token_id=tokenizer.pad_token_id)
        new = g[0, x.shape[1]:].tolist()
        if tokenizer.eos_token_id in new:
            new = new[:new.index(tokenizer.eos_token_id)]
        out.append(tokenizer.decode(new, skip_special_tokens=True))
    return out


def prefill_floor(model, tokenizer, prompts, batch_size) -> float:
    """Seconds of one forward pass over every prompt (length-grouped batches, last logits only).

    Every decoding strategy pays at least this much compute to read the prompts, so
    baseline_time / (this) bounds the speed-up any batching can reach on these prompts.
    """
    import torch

    from memlens.harness.model.decode import length_sorted_batches

    enc = encode_texts(tokenizer, prompts)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for idx in length_sorted_batches([len(e) for e in enc], batch_size):
            rows = [enc[i] for i in idx]
            w = max(len(r) for r in rows)
            ids = torch.tensor([[0] * (w - len(r)) + r for r in rows])
            mask = torch.tensor([[0] * (w - len(r)) + [1] * len(r) for r in rows])
            model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
    return time.perf_counter() - t0


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--baseline-n", type=int, default=None,
                    help="time the slow baseline on only this many prompts (rate extrapolated)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads for both paths (1: stable on a shared machine)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)

    print("load before:", uptime(), flush=True)
    texts = stdlib_texts()
    tok = tiny_tokenizer(texts, vocab_size=4096)
    model = tiny_llama(tok, hidden=256, layers=5, heads=4, ffn=688, max_positions=2048)
    n_params = sum(p.numel() for p in model.parameters())
    prompts = fim_prompts(texts, args.n)
    lengths = [len(e) for e in encode_texts(tok, prompts)]
    print(f"model {n_params / 1e6:.2f}M params, {len(prompts)} prompts of {min(lengths)}-{max(lengths)} "
          f"tokens (mean {sum(lengths) / len(lengths):.0f}), {args.max_new_tokens} new tokens, "
          f"torch threads {torch.get_num_threads()}", flush=True)

    c0 = time.process_time()
    t_floor = prefill_floor(model, tok, prompts, args.batch_size)
    c_floor = time.process_time() - c0
    print(f"prefill floor (one forward over all prompts): {t_floor:.1f}s = "
          f"{len(prompts) / t_floor:.1f} ex/s", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    batched = greedy_complete(model, tok, prompts, args.max_new_tokens, args.batch_size, progress=False)
    t_batched, c_batched = time.perf_counter() - t0, time.process_time() - c0
    print(f"batched (batch {args.batch_size}): {t_batched:.1f}s = {len(prompts) / t_batched:.1f} ex/s "
          f"(CPU {c_batched:.1f}s)", flush=True)

    nb = args.baseline_n or len(prompts)
    t0, c0 = time.perf_counter(), time.process_time()
    single = per_example_generate(model, tok, prompts[:nb], args.max_new_tokens)
    t_single, c_single = time.perf_counter() - t0, time.process_time() - c0
    print(f"per-example generate: {t_single:.1f}s for {nb} = {nb / t_single:.2f} ex/s (CPU {c_single:.1f}s)",
          flush=True)
    same = sum(a == b for a, b in zip(batched[:nb], single))
    result = {"batched_ex_per_s": len(prompts) / t_batched, "baseline_ex_per_s": nb / t_single,
              "speedup": (len(prompts) / t_batched) / (nb / t_single), "identical": f"{same}/{nb}",
              "speedup_cpu_time": (len(prompts) / c_batched) / (nb / c_single),
              "prefill_floor_ex_per_s": len(prompts) / t_floor,
              "max_speedup_bound": (len(prompts) / t_floor) / (nb / t_single),
              "max_speedup_bound_cpu_time": (len(prompts) / c_floor) / (nb / c_single)}
    print(json.dumps(result))
    print("load after:", uptime())


if __name__ == "__main__":
    main()
