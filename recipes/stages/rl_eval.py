"""Did an RL stage raise its reward? The reward of the initial and the trained policy on the same prompts.

Why not the training log: each RL step samples a few new prompts, and the reward of a step follows how
hard those prompts are. In a reference run of the whole chain (experiment=findings, 12 steps of 2
prompts) RLFT.1's per-step reward curve was the same at every α because every α drew the same prompts,
so "last steps vs first steps" measured the prompts, not the policy. Here both policies complete one
fixed, seeded set of the stage's own prompts, `samples` completions each, with the same random stream
(common random numbers), and the change is read per prompt (paired), so prompt difficulty cancels.

The result, `reward_eval.json` in the stage directory, is written before provenance.json (the finished
marker) and read by harness/report/evidence.py.

The initial policy's rewards depend only on the initial policy, the RM and the evaluation's own settings, so
sweep points of one stage (same `init`, same RM, same prompts) compute them once: they are stored under
`<run_dir>/cache/rl_reward_eval/<fingerprint>.json`, the fingerprint covering the weights and tokenizer files of
both models (memlens.harness.audit.run.model_fingerprint), the chosen prompts' text and every sampling setting.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlens.harness.core.io import atomic_write_json, read_json, sha256_json
from memlens.harness.core.stats import sign_test
from memlens.recipes.stages.fim_context import left_padded_prompts
from memlens.recipes.stages.ppo import reward_columns

EVAL_FILE = "reward_eval.json"
CACHE_SUBDIR = Path("cache") / "rl_reward_eval"   # under the run directory
CACHE_VERSION = 1                                  # bump when prompt_rewards computes something else


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
    import torch  # torch (~1 s): rl.py imports rl_eval.py when the plan is composed

    device = next(model.parameters()).device
    rows = [p for p in prompts for _ in range(samples)]
    texts: list[str] = []
    model.eval()
    for start in range(0, len(rows), batch_size):
        torch.manual_seed(seed + start)
        enc = left_padded_prompts(tokenizer, rows[start:start + batch_size]).to(device)
        with torch.inference_mode():
            # Stops where the policy's generation_config says: the family's stop tokens
            # (memlens.recipes.stages.models.stop_generation_at_family_stops); the reward function strips what is left.
            out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
        texts += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return [texts[i * samples:(i + 1) * samples] for i in range(len(prompts))]


def prompt_rewards(model, tokenizer, reward_fn, examples: list[dict], samples: int, max_new_tokens: int,
                   temperature: float, seed: int) -> list[float]:
    """Mean reward of each example's sampled completions, in example order."""
    completions = sample_completions(model, tokenizer, [e["prompt"] for e in examples], samples,
                                     max_new_tokens, temperature, seed)
    flat = [c for group in completions for c in group]
    # Every column of each example, once per sample, as the trainers pass them (prefix, suffix, a verifiable
    # reward's row fields).
    scores = reward_fn(prompts=None, completions=flat,
                       **reward_columns([e for e in examples for _ in range(samples)]))
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


def initial_cache_path(cache_dir: Path, models: dict[str, Any], chosen: list[dict],
                       settings: dict[str, Any]) -> Path:
    """Where the initial policy's rewards for these models, prompts and settings are stored."""
    covers = {"cache_version": CACHE_VERSION, **models, **settings,
              "prompts": [[e["id"], e["prompt"], e["prefix"], e["suffix"]] for e in chosen]}
    return Path(cache_dir) / f"{sha256_json(covers)[:32]}.json"


def cached_initial_rewards(path: Path | None, chosen: list[dict]) -> list[float] | None:
    """The stored rewards if `path` holds them for exactly these prompt ids, else None."""
    if path is None or not path.is_file():
        return None
    record = read_json(path)
    if record.get("prompt_ids") != [e["id"] for e in chosen]:
        return None
    return [float(x) for x in record["initial"]]


def evaluate(load_initial: Callable[[], Any], final_model, tokenizer, reward_fn, examples: list[dict], *,
             n_prompts: int, samples: int, max_new_tokens: int, temperature: float, seed: int, out_dir: Path,
             cache_dir: Path | None = None, cache_models: dict[str, Any] | None = None) -> dict[str, Any]:
    """Score both policies on the same seeded prompts and write EVAL_FILE into out_dir (atomically).

    `load_initial()` returns the initial policy; it is not called when the cache (`cache_dir`, keyed by
    `cache_models`, the identity of the initial policy and the RM) already holds its rewards."""
    chosen = eval_examples(examples, n_prompts, seed)
    kwargs = dict(samples=samples, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    cache = initial_cache_path(cache_dir, cache_models or {}, chosen, kwargs) if cache_dir else None
    initial = cached_initial_rewards(cache, chosen)
    initial_cached = initial is not None
    if initial is None:
        initial = prompt_rewards(load_initial(), tokenizer, reward_fn, chosen, **kwargs)
        if cache is not None:
            atomic_write_json(cache, {"what": "initial policy's per-prompt mean reward (recipes/stages/rl_eval.py)",
                                      **(cache_models or {}), **kwargs,
                                      "prompt_ids": [e["id"] for e in chosen], "initial": initial})
    final = prompt_rewards(final_model, tokenizer, reward_fn, chosen, **kwargs)
    record = {"what": "reward (RM score or verifiable reward) of sampled completions on fixed prompts: initial vs "
                      "trained policy (paired)",
              **kwargs, "prompt_ids": [e["id"] for e in chosen], "initial": initial, "final": final,
              "initial_from_cache": initial_cached, **paired_change(initial, final)}
    atomic_write_json(Path(out_dir) / EVAL_FILE, record)
    return record
