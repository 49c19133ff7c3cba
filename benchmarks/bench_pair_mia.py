"""Cost of preference-pair membership (PREMIA, `audit.measures=[...,pair_mia]` and the AuditCallback on a preference
dataset), per 1,000 pairs, by part.

A pair is scored from four summed log-probs: the chosen and the rejected completion given the pair's prompt, under the
audited model and under its reference (the stage's initial model; the callback's control). Each side is one teacher-
forced pass of the model interface the audit calls (harness/audit/preference_mia.py `_pair_values`, through the
log-prob cache), so a model costs two passes per pair: the reference once per run, the audited model once per
checkpoint. Besides them the blind baseline (their classifier on the pair texts, once per dataset) and the scoring
(three attacks, their bootstrap intervals and the paired gain over the blind baseline). Pairs: the stdlib FIM examples
of benchmarks/bench_mia.py (64-token targets) as prompt + chosen, the next example's target as the rejected side; the
shipped base as the reference and a seeded perturbation of it as the audited model (so the scores spread as a trained
model's do), nothing cached, FIM family memlens. The blind baseline is one fit per dataset: its seconds are given for
the pairs measured, not scaled to 1,000.

    .venv/bin/python benchmarks/bench_pair_mia.py               # 512 pairs (256 members, 256 non-members), batch 32
    .venv/bin/python benchmarks/bench_pair_mia.py --n 256 --threads 1
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_attacks import timed  # noqa: E402
from benchmarks.bench_audit import stdlib_texts  # noqa: E402
from benchmarks.bench_mia import fim_examples  # noqa: E402
from memlens.harness.audit.preference_mia import _pair_values, pair_metrics, score_pairs  # noqa: E402
from memlens.harness.core.shipped import shipped_path  # noqa: E402
from memlens.harness.core.stats import BOOTSTRAP_N, BOOTSTRAP_SEED  # noqa: E402
from memlens.harness.measures.blind_mia import blind_baseline  # noqa: E402
from memlens.harness.measures.preference_mia import pair_text  # noqa: E402
from memlens.harness.model.load import load_tokenizer, torch_threads  # noqa: E402


def pairs_of(n: int) -> list[dict]:
    """n pairs {id, prefix, suffix, chosen, rejected}: an example's target chosen, the next one's rejected."""
    tokenizer = load_tokenizer(shipped_path("assets/base_tiny"))
    examples = fim_examples(tokenizer, stdlib_texts(), n + 1)
    return [{"id": i, "prefix": e["prefix"], "suffix": e["suffix"], "chosen": e["target"],
             "rejected": examples[i + 1]["target"]} for i, e in enumerate(examples[:n])]


def perturbed_copy(base: Path, out: Path, scale: float = 0.01, seed: int = 0) -> Path:
    """The model at `base` with seeded Gaussian noise of `scale` times each weight's spread added, saved at `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator) * scale * weight.std())
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    pairs = pairs_of(args.n)
    half = args.n // 2
    sets = {"p:members": pairs[:half], "p:nonmembers": pairs[half:]}
    base = shipped_path("assets/base_tiny")
    per_k = 1000 / args.n
    with torch_threads(args.threads), tempfile.TemporaryDirectory() as cold, tempfile.TemporaryDirectory() as tuned:
        audited = perturbed_copy(base, Path(tuned))
        reference, one_model = timed(lambda: _pair_values(base, sets, Path(cold), "cpu", args.batch_size, "memlens"))
        values, audited_s = timed(lambda: _pair_values(audited, sets, Path(cold), "cpu", args.batch_size, "memlens"))
        _, cached = timed(lambda: _pair_values(audited, sets, Path(cold), "cpu", args.batch_size, "memlens"))
    blind, blind_s = timed(lambda: blind_baseline([pair_text(r) for r in sets["p:members"]],
                                                  [pair_text(r) for r in sets["p:nonmembers"]],
                                                  n_boot=BOOTSTRAP_N, seed=BOOTSTRAP_SEED))
    ids = [r["id"] for r in pairs]
    blind_ids = dict(zip(ids, [*blind["scores"][0], *blind["scores"][1]]))

    def score():
        rows = [*score_pairs(sets["p:members"], 1, values["p:members"], reference["p:members"], blind_ids),
                *score_pairs(sets["p:nonmembers"], 0, values["p:nonmembers"], reference["p:nonmembers"], blind_ids)]
        return pair_metrics(rows, BOOTSTRAP_N, BOOTSTRAP_SEED)

    _, scoring = timed(score)
    print(f"{args.n} pairs, batch {args.batch_size}, {args.threads} threads; seconds per 1,000 pairs:")
    print(f"| the reference's passes (chosen + rejected), nothing cached | {one_model * per_k:.2f} |")
    print(f"| the audited model's passes, nothing cached | {audited_s * per_k:.2f} |")
    print(f"| the same, from the cache (a rerun) | {cached * per_k:.2f} |")
    print(f"| scoring the three attacks, {BOOTSTRAP_N} bootstrap resamples | {scoring * per_k:.2f} |")
    print(f"| **each further checkpoint (reference and baseline reused)** | **{(audited_s + scoring) * per_k:.2f}** |")
    print(f"blind baseline on the {args.n} pair texts, once per dataset: {blind_s:.2f} s")
    print("load after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
