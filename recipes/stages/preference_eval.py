"""Did a preference stage fit its pairs? The same measurement for every objective, read from the models.

Each TRL trainer logs its own notion of "accuracy": DPOTrainer the share of pairs whose implicit reward (β times
the summed policy/reference log-ratio) is higher for the chosen completion, CPOTrainer and ORPOTrainer the
policy's own log-likelihoods (no reference), KTOTrainer none (its rows are unpaired). To compare objectives on
one footing, the initial and the trained model score the stage's training pairs after training, and

    Δ(y) = log π_trained(y | x) - log π_init(y | x)        (summed over the tokens of y; EOS not included)

gives per pair the implicit-reward margin Δ(chosen) - Δ(rejected): DPOTrainer's accuracy with the initial model
as the reference, measured for every objective. Also recorded: the mean Δ of the chosen and of the rejected
completions (the likelihood displacement: IPO lowers the rejected line far more than it raises the chosen one,
docs/results.md under F8), the share of pairs the trained model itself ranks chosen over rejected (what a reference-free
objective optimises) before and after, and the exact sign test of the margins. `preference_eval.json` in the
stage directory, written before provenance.json; harness/report/evidence.py reads it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlens.harness.core.io import atomic_write_json
from memlens.harness.core.stats import sign_test, wilson_interval
from memlens.harness.model.logprobs import target_losses

EVAL_FILE = "preference_eval.json"


def pair_logprobs(model, tokenizer, sentinels, rows: list[dict]) -> tuple[list[float], list[float]]:
    """Summed log-probability of each row's chosen and rejected completion given its PSM prompt, by the one
    teacher-forced scorer (memlens.harness.model.logprobs.target_losses: the audit's encoding)."""
    prefixes, suffixes = [r["prefix"] for r in rows], [r["suffix"] for r in rows]
    out = []
    for side in ("chosen", "rejected"):
        nll = target_losses(model, tokenizer, prefixes, [r[side] for r in rows], suffixes, sentinels,
                            reduction="sum", progress=False)
        out.append([-float(x) for x in nll])
    return out[0], out[1]


def summarize(initial: tuple[list[float], list[float]], final: tuple[list[float], list[float]]) -> dict[str, Any]:
    """The record's statistics from (chosen, rejected) log-probabilities of the initial and the trained model."""
    (c0, r0), (c1, r1) = initial, final
    n = len(c0)
    d_chosen = [b - a for a, b in zip(c0, c1)]
    d_rejected = [b - a for a, b in zip(r0, r1)]
    margins = [dc - dr for dc, dr in zip(d_chosen, d_rejected)]
    won = sum(m > 0 for m in margins)
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return {"n_pairs": n, "accuracy": won / n if n else None, "accuracy_ci95": wilson_interval(won, n),
            "chosen_logp_initial": mean(c0), "chosen_logp_final": mean(c1),
            "rejected_logp_initial": mean(r0), "rejected_logp_final": mean(r1),
            "chosen_change": mean(d_chosen), "rejected_change": mean(d_rejected), "margin_change": mean(margins),
            "policy_accuracy_initial": mean([float(c > r) for c, r in zip(c0, r0)]),
            "policy_accuracy_final": mean([float(c > r) for c, r in zip(c1, r1)]), **sign_test(margins)}


def evaluate(load_initial: Callable[[], Any], final_model, tokenizer, sentinels, rows: list[dict], *, n_pairs: int,
             seed: int, out_dir: Path, objective: str) -> dict[str, Any]:
    """Score a seeded sample of `n_pairs` training pairs (all, when there are fewer) with both models; write
    EVAL_FILE into out_dir (atomically)."""
    chosen = rows if len(rows) <= n_pairs else random.Random(f"{seed}:preference-eval").sample(rows, n_pairs)
    initial = pair_logprobs(load_initial(), tokenizer, sentinels, chosen)
    final = pair_logprobs(final_model, tokenizer, sentinels, chosen)
    record = {"what": "summed log-probability of each training pair's chosen and rejected completion under the "
                      "initial and the trained model (recipes/stages/preference_eval.py)",
              "objective": objective, "pair_ids": [r["id"] for r in chosen],
              "initial": {"chosen": initial[0], "rejected": initial[1]},
              "final": {"chosen": final[0], "rejected": final[1]}, **summarize(initial, final)}
    atomic_write_json(Path(out_dir) / EVAL_FILE, record)
    return record
