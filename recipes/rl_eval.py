"""Did an RL stage raise its reward? The RM score of the initial and the trained policy on the same prompts.

Why not the training log: each RL step samples a few new prompts, and the reward of a step follows how
hard those prompts are. In the reference quickstart (12 steps of 2 prompts) RLFT.1's per-step reward
curve was the same at every α because every α drew the same prompts, so "last steps vs first steps"
measured the prompts, not the policy. Here both policies complete one fixed, seeded set of the stage's
own prompts, `samples` completions each, with the same random stream (common random numbers), and the
change is read per prompt (paired), so prompt difficulty cancels.

The result, `reward_eval.json` in the stage directory, is written before provenance.json (the finished
marker) and read by harness/report/evidence.py.
"""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path
from typing import Any

from harness.io import atomic_write_json
from harness.stats import sign_test

EVAL_FILE = "reward_eval.json"


def eval_examples(examples: list[dict], n_prompts: int, seed: int) -> list[dict]:
    """A seeded sample of the stage's training examples (all of them when there are fewer)."""
    if len(examples) <= n_prompts:
        return list(examples)
    return random.Random(f"{seed}:rl-reward-eval").sample(examples, n_prompts)


def sample_completions(model, tokenizer, prompts: list[str], samples: int, max_new_tokens: int,
                       temperature: float, seed: int, batch_size: int = 32) -> list[list[str]]:
    """`samples` sampled completions per prompt (decoded without special tokens, as the RL trainers
    hand them to the reward function). The generator is reseeded per batch, so two models given the
    same prompts draw from the same random stream."""
    import torch

    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    device = next(model.parameters()).device
    rows = [p for p in prompts for _ in range(samples)]
    texts: list[str] = []
    try:
        model.eval()
        for start in range(0, len(rows), batch_size):
            torch.manual_seed(seed + start)
            enc = tokenizer(rows[start:start + batch_size], return_tensors="pt", padding=True,
                            add_special_tokens=False).to(device)
            with torch.inference_mode():
                out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                     max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
            texts += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
    return [texts[i * samples:(i + 1) * samples] for i in range(len(prompts))]


def prompt_rewards(model, tokenizer, reward_fn, examples: list[dict], samples: int, max_new_tokens: int,
                   temperature: float, seed: int) -> list[float]:
    """Mean reward of each example's sampled completions, in example order."""
    completions = sample_completions(model, tokenizer, [e["prompt"] for e in examples], samples,
                                     max_new_tokens, temperature, seed)
    flat = [c for group in completions for c in group]
    prefixes = [e["prefix"] for e in examples for _ in range(samples)]
    suffixes = [e["suffix"] for e in examples for _ in range(samples)]
    scores = reward_fn(None, flat, prefixes, suffixes)
    return [sum(scores[i * samples:(i + 1) * samples]) / samples for i in range(len(examples))]


def paired_change(initial: list[float], final: list[float]) -> dict[str, Any]:
    """Mean per-prompt change final - initial, in reward units and in units of the initial policy's spread
    across prompts; its 95 % interval (normal approximation, mean ± 1.96 SE); the exact sign test."""
    diffs = [b - a for a, b in zip(initial, final)]
    n = len(diffs)
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(n) if n > 1 else float("nan")
    sd_initial = statistics.stdev(initial) if n > 1 else float("nan")
    return {"n_prompts": n, "mean_initial": statistics.fmean(initial), "mean_final": statistics.fmean(final),
            "change": mean, "change_ci95": [mean - 1.96 * se, mean + 1.96 * se], "sd_initial": sd_initial,
            "change_in_sd": mean / sd_initial if sd_initial and sd_initial > 0 else None,
            **sign_test(diffs)}


def evaluate(initial_model, final_model, tokenizer, reward_fn, examples: list[dict], *, n_prompts: int,
             samples: int, max_new_tokens: int, temperature: float, seed: int, out_dir: Path) -> dict[str, Any]:
    """Score both policies on the same seeded prompts and write EVAL_FILE into out_dir (atomically)."""
    chosen = eval_examples(examples, n_prompts, seed)
    kwargs = dict(samples=samples, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    initial = prompt_rewards(initial_model, tokenizer, reward_fn, chosen, **kwargs)
    final = prompt_rewards(final_model, tokenizer, reward_fn, chosen, **kwargs)
    record = {"what": "RM score of sampled completions on fixed prompts: initial vs trained policy (paired)",
              **kwargs, "prompt_ids": [e["id"] for e in chosen], "initial": initial, "final": final,
              **paired_change(initial, final)}
    atomic_write_json(Path(out_dir) / EVAL_FILE, record)
    return record
