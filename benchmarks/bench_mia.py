"""Membership-inference and probabilistic-extraction audit cost relative to the extraction audit, on the same rows
and the same model.

Per model and checkpoint, the extraction audit (paper 003 Sec. 4.2) greedy-decodes each FIM prompt up to
`audit.max_new_tokens` tokens; the membership-inference audit (harness/measures/mia.py) reads the per-token
log-probabilities of the target given the same prompt in one teacher-forced pass (and, with
`audit.mia_spans=[target,program]`, of the whole program as plain text in a second one); the discoverable audit
(harness/measures/discoverable.py) one teacher-forced pass of the target for all its decoding schemes. All run through
the one model interface (memlens.harness.model.scorer.CausalLMScorer), so this times exactly what the audits call, with
nothing cached, on the shipped base (assets/base_tiny, 5 M parameters) and FIM examples cut from the Python standard
library (a 100-600 character prefix, a 64-token target, a 0-300 character suffix).

    .venv/bin/python benchmarks/bench_mia.py              # 512 examples, batch 32, 2 threads
    .venv/bin/python benchmarks/bench_mia.py --n 256 --threads 1

Prints seconds per 1,000 examples for each path, their ratio, and the machine load before and after; a model
that memorized its rows stops decoding early (the target-as-draft decoder), so the extraction cost here is the
no-memorization worst case, which is what most audited rows are.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_audit import stdlib_texts  # noqa: E402
from memlens.harness.core.shipped import shipped_path  # noqa: E402
from memlens.harness.model.load import torch_threads  # noqa: E402
from memlens.harness.model.logprobs import SamplingScheme  # noqa: E402
from memlens.harness.model.scorer import CausalLMScorer  # noqa: E402
from memlens.harness.text.fim import FAMILIES, format_psm_prompt  # noqa: E402

SCHEMES = (SamplingScheme("greedy", 0), SamplingScheme("top_k40", 1.0, 40))   # conf/audit/default.yaml's


def fim_examples(tokenizer, texts: list[str], n: int, target_tokens: int = 64, seed: int = 0) -> list[dict]:
    """n examples {prefix, target, suffix, program}: the target is `target_tokens` tokens of the file."""
    rng = random.Random(seed)
    pool = [t for t in texts if len(t) > 2000]
    out = []
    while len(out) < n:
        t = rng.choice(pool)
        a = rng.randint(0, len(t) - 1900)
        p, q = rng.randint(100, 600), rng.randint(0, 300)
        rest = t[a + p:]
        ids = tokenizer(rest, add_special_tokens=False)["input_ids"][:target_tokens]
        target = tokenizer.decode(ids)
        if not rest.startswith(target) or len(ids) < target_tokens:
            continue
        suffix = rest[len(target):len(target) + q]
        out.append({"id": len(out), "prefix": t[a:a + p], "target": target, "suffix": suffix,
                    "program": t[a:a + p] + target + suffix})
    return out


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    sentinels = FAMILIES["memlens"]
    scorer = CausalLMScorer.load(shipped_path("assets/base_tiny"), "cpu", batch_size=args.batch_size,
                                 max_new_tokens=args.max_new_tokens, progress=False, sentinels=sentinels)
    examples = fim_examples(scorer.tokenizer, stdlib_texts(), args.n)
    prompts = [format_psm_prompt(e["prefix"], e["suffix"], sentinels) for e in examples]
    with torch_threads(args.threads):
        scorer.target_token_logprobs(examples[:8], sentinels)          # warm-up: first-call allocations
        t_ned = seconds(lambda: scorer.complete(prompts))
        t_target = seconds(lambda: scorer.target_token_logprobs(examples, sentinels))
        t_program = seconds(lambda: scorer.program_token_logprobs([e["program"] for e in examples]))
        t_discoverable = seconds(lambda: scorer.scheme_logprobs(examples, sentinels, SCHEMES))
    per_1k = 1000 / len(examples)
    print(f"{len(examples)} examples, batch {args.batch_size}, {args.threads} threads, greedy up to "
          f"{args.max_new_tokens} new tokens")
    print(f"extraction (greedy completions): {t_ned * per_1k:7.1f} s per 1,000 examples")
    print(f"mia, target span (one pass):     {t_target * per_1k:7.1f} s per 1,000 examples "
          f"({t_target / t_ned:.2f} x extraction)")
    print(f"mia, whole program (one pass):   {t_program * per_1k:7.1f} s per 1,000 examples "
          f"({t_program / t_ned:.2f} x extraction)")
    print(f"discoverable, greedy + top-k 40:  {t_discoverable * per_1k:7.1f} s per 1,000 examples "
          f"({t_discoverable / t_ned:.2f} x extraction)")
    print("load after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
