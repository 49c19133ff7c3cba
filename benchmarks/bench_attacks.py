"""Cost of every membership-inference attack together against LOSS alone, per 1,000 examples, on the same rows.

LOSS reads one teacher-forced pass of each text. The other attacks share that pass and add what they name
(harness/measures/mia.py `Attack.needs`), each computed once per model and shared by every attack that reads it: the
control model's pass (reference loss, EZ-MIA), a pass after the non-member prefix (ReCaLL, Con-ReCall) and one after the
member prefix (Con-ReCall), whose prefix keys and values are computed once for all rows
(memlens.harness.model.logprobs.with_context), and the token counts of a reference corpus (DC-PDD). The
checkpoint-sequence attacks read scores already stored. This times those passes through the model interface the audit
calls, nothing cached, on the shipped base (assets/base_tiny) with the stdlib FIM examples of benchmarks/bench_mia.py,
then scoring every attack on every row.

    .venv/bin/python benchmarks/bench_attacks.py               # 512 examples, batch 32, 2 threads
    .venv/bin/python benchmarks/bench_attacks.py --n 256 --threads 1

By definition ReCaLL needs one more pass and Con-ReCall two, so all attacks cost at least three plain passes where a
control is reused across checkpoints (the audit scores the control once per run), four where it is not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_audit import stdlib_texts  # noqa: E402
from benchmarks.bench_mia import fim_examples  # noqa: E402
from memlens.harness.core.shipped import shipped_path  # noqa: E402
from memlens.harness.measures import mia  # noqa: E402
from memlens.harness.model.load import torch_threads  # noqa: E402
from memlens.harness.model.scorer import CausalLMScorer  # noqa: E402
from memlens.harness.text.fim import FAMILIES  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    sentinels = FAMILIES["memlens"]
    scorer = CausalLMScorer.load(shipped_path("assets/base_tiny"), "cpu", batch_size=args.batch_size, progress=False)
    control = CausalLMScorer.load(shipped_path("assets/base_tiny"), "cpu", batch_size=args.batch_size, progress=False)
    texts = stdlib_texts()
    examples = fim_examples(scorer.tokenizer, texts, args.n + 2 * mia.PREFIX_SHOTS)
    member_shots, nonmember_shots = examples[:mia.PREFIX_SHOTS], examples[mia.PREFIX_SHOTS:2 * mia.PREFIX_SHOTS]
    rows = examples[2 * mia.PREFIX_SHOTS:]
    for r in member_shots + nonmember_shots:
        r["code"] = r["program"]
    reference = texts[:200]
    with torch_threads(args.threads):
        scorer.target_token_logprobs(rows[:8], sentinels)        # warm-up: first-call allocations
        plain, t_plain = timed(lambda: scorer.target_token_logprobs(rows, sentinels))
        loss_scores, t_loss = timed(lambda: [mia.loss_score(v) for v in plain])
        ctrl, t_control = timed(lambda: control.target_token_logprobs(rows, sentinels))
        nonmember, t_nonmember = timed(lambda: scorer.target_token_logprobs(
            rows, sentinels, context=mia.prefix_text(nonmember_shots)))
        member, t_member = timed(lambda: scorer.target_token_logprobs(
            rows, sentinels, context=mia.prefix_text(member_shots)))
        frequency, t_frequency = timed(lambda: mia.TokenFrequency.of(
            scorer.tokenizer(reference, add_special_tokens=False)["input_ids"], len(scorer.tokenizer)))
        earlier = [{"loss": s, "reference": 0.0} for s in loss_scores]
        _, t_score = timed(lambda: [mia.attack_scores(mia.AttackInputs(
            values=v, text=r["target"], control=c, nonmember_prefix=nm, member_prefix=m, token_frequency=frequency,
            trajectory=[e])) for v, r, c, nm, m, e in zip(plain, rows, ctrl, nonmember, member, earlier)])
    per_1k = 1000 / len(rows)
    base = t_plain + t_loss
    every = t_plain + t_control + t_nonmember + t_member + t_frequency + t_score
    reused = every - t_control
    print(f"{len(rows)} examples (target span), batch {args.batch_size}, {args.threads} threads, "
          f"{len(mia.ATTACKS)} attacks")
    for label, t in (("plain pass", t_plain), ("LOSS scoring", t_loss), ("control pass", t_control),
                     ("non-member-prefix pass", t_nonmember), ("member-prefix pass", t_member),
                     ("reference token counts (once)", t_frequency), ("scoring every attack", t_score)):
        print(f"  {label:32s} {t * per_1k:8.2f} s per 1,000")
    print(f"LOSS alone:                          {base * per_1k:8.2f} s per 1,000")
    print(f"every attack, control pass included: {every * per_1k:8.2f} s per 1,000 ({every / base:.2f} x LOSS)")
    print(f"every attack, control reused:        {reused * per_1k:8.2f} s per 1,000 ({reused / base:.2f} x LOSS)")
    print("load after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
