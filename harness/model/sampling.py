"""Sampled completions of a model on FIM prompts, seeded per prompt and cached: what the audit of RL prompts reads.

An RL stage learns from completions its policy samples; the membership test of its prompts (harness/audit/
prompt_mia.py) samples the audited model and the stage's initial model the same way, m completions per prompt at a
fixed temperature (ancestral sampling: top_k 0, top_p 1, as recipes/stages/rl_eval.py samples the policy). Each
prompt draws from its own generator, seeded by (seed, prompt id), and is decoded alone (its m samples share its
prompt's pass), so a prompt's samples do not depend on which other prompts were asked for, in which order or batch: a
rerun with more prompts reuses every stored one.

Stored in the one cache of the model layer (memlens.harness.model.cache.ScoreCache):
`<cache_dir>/samples/<key>.jsonl`, {id, completions: [m texts]}, the key covering the model's fingerprint, the
prompts' text and every sampling setting; a fully cached rerun loads no weights.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memlens.harness.model.cache import (
    ScoreCache,
    cache_key,
    cached_token_logprobs,
    examples_fingerprint,
    loss_cache,
)
from memlens.harness.model.encode import cut_at_eos, encode_texts
from memlens.harness.model.load import (
    accepts_logits_to_keep,
    load_causal_lm,
    load_reward_model,
    model_fingerprint,
    model_sentinels,
)
from memlens.harness.model.rewards import score_texts
from memlens.harness.model.scorer import CausalLMScorer
from memlens.harness.text.fim import format_psm_training, stop_token_ids, strip_sentinels

SAMPLES = "sampled_completions"
SAMPLES_SUBDIR = "samples"
# What the cache key says of the draw (a change of how samples are drawn must change it, so no stale sample is read).
SAMPLING = ("ancestral (top_k 0, top_p 1), one generator per prompt seeded by (seed, id), the prompt's pass (its last "
            "position's logits) shared by its samples")


def prompt_seed(seed: int, prompt_id: Any) -> int:
    """The generator seed of one prompt's samples: a function of (seed, id) alone."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()[:8], "big") >> 1


# Cache layers that batch_repeat_interleave repeats whole (transformers 5: keys and values, nothing else); a layer
# with a recurrent state (linear attention), a preallocated size (static) or quantized parts is not among them.
REPEATABLE_CACHE_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")


def repeatable_cache(past) -> bool:
    """Whether a prompt's cache can be shared by n rows through `batch_repeat_interleave`."""
    layers = getattr(past, "layers", None)
    return (type(past).__name__ == "DynamicCache" and bool(layers)
            and all(type(layer).__name__ in REPEATABLE_CACHE_LAYERS for layer in layers))


def sample_continuations(model, prompt_ids: Sequence[int], n: int, max_new_tokens: int, temperature: float,
                         generator, *, excluded: frozenset[int] = frozenset(),
                         stop_ids: Sequence[int] = ()) -> list[list[int]]:
    """`n` continuations of one prompt, each drawn token by token from softmax(logits / temperature) (ancestral: no
    top-k, no top-p), `excluded` ids never drawn, every draw from `generator` (torch's global random state untouched),
    the model in eval mode meanwhile. The prompt's forward pass runs once and its key/value cache is shared by the n
    rows, which then decode as one batch without padding (every row has the same length), so a prompt's draws do not
    depend on any other prompt. A cache whose layers cannot be repeated that way (static, linear-attention or
    quantized layers: `repeatable_cache`) gets the prompt's pass run on n rows instead. Rows run to `max_new_tokens`
    unless every row has drawn a stop id (the ids after a row's first stop id are the caller's to cut, as
    transformers' generate pads them). The model's generation_config (repetition penalty, suppressed tokens, ...) is
    not read: the draw is the model's own distribution at `temperature`."""
    import torch  # heavy: the model layer only

    device = next(model.parameters()).device
    stops = torch.tensor(sorted(set(stop_ids)), dtype=torch.long)
    banned = sorted(excluded)     # filtered to the logits' width once the first logits are known
    last_only = {"logits_to_keep": 1} if accepts_logits_to_keep(model) else {}   # the prompt's last position
    was_training = model.training
    model.eval()
    rows: list[list[int]] = [[] for _ in range(n)]
    try:
        with torch.inference_mode():
            prompt = torch.tensor([list(prompt_ids)], device=device)
            result = model(input_ids=prompt, use_cache=True, **last_only)
            past = result.past_key_values
            if n > 1 and repeatable_cache(past):
                past.batch_repeat_interleave(n)
            elif n > 1:
                result = model(input_ids=prompt.repeat(n, 1), use_cache=True, **last_only)
                past = result.past_key_values
            logits = result.logits[:, -1].float().cpu().expand(n, -1)
            banned = [i for i in banned if i < logits.shape[1]]
            done = torch.zeros(n, dtype=torch.bool)
            for step in range(max_new_tokens):
                logits = logits / temperature
                if banned:
                    logits[:, banned] = float("-inf")
                tokens = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)   # [n, 1]
                for row, token in zip(rows, tokens[:, 0].tolist()):
                    row.append(int(token))
                done |= torch.isin(tokens[:, 0], stops)
                if step == max_new_tokens - 1 or bool(done.all()):
                    break
                result = model(input_ids=tokens.to(device), past_key_values=past, use_cache=True, **last_only)
                past = result.past_key_values
                logits = result.logits[:, -1].float().cpu()
        return rows
    finally:
        model.train(was_training)


def sample_prompts(model, tokenizer, prompts: Sequence[str], ids: Sequence[Any], sentinels, *, samples: int,
                   temperature: float, max_new_tokens: int, seed: int) -> list[list[str]]:
    """`samples` completions of each prompt (cut at the family's stop tokens, special tokens skipped), each prompt's
    from its own generator seeded by (seed, its id)."""
    import torch  # heavy: the model layer only

    eos = stop_token_ids(tokenizer, sentinels) or ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None
                                                   else [])
    out = []
    for ids_, pid in zip(encode_texts(tokenizer, list(prompts)), ids):
        generator = torch.Generator(device="cpu").manual_seed(prompt_seed(seed, pid))
        new = sample_continuations(model, ids_, samples, max_new_tokens, temperature, generator, stop_ids=eos)
        texts = tokenizer.batch_decode([cut_at_eos(r, eos) for r in new], skip_special_tokens=True)
        out.append([strip_sentinels(t, sentinels) for t in texts])
    return out


def cached_samples(model_dir: str | Path, rows: Sequence[dict], sentinels, cache_dir: str | Path, *, samples: int,
                   temperature: float, max_new_tokens: int, seed: int, device: str = "cpu",
                   chunk: int = 8) -> tuple[dict[Any, list[str]], ScoreCache]:
    """({id: its `samples` completions}, the cache) of `model_dir` on `rows` (id, prefix, suffix), prompted in the
    model's format; weights loaded on a cache miss only."""
    covers = {"model": model_fingerprint(model_dir), "examples_sha256": examples_fingerprint(rows, ("id", "prefix",
                                                                                                     "suffix")),
              "prompt_format": getattr(sentinels, "family", None), "stop_tokens": list(sentinels.stop_tokens()),
              "samples": samples, "temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
              "sampling": SAMPLING}
    cache = ScoreCache(Path(cache_dir) / SAMPLES_SUBDIR / f"{cache_key(SAMPLES, **covers)}.jsonl",
                       field="completions")
    loaded: list = []

    def compute(missing: list[dict]):
        if not loaded:
            loaded.extend(load_causal_lm(model_dir, device))
        model, tokenizer = loaded
        for start in range(0, len(missing), chunk):
            part = missing[start:start + chunk]
            texts = sample_prompts(model, tokenizer, [sentinels.prompt(r["prefix"], r["suffix"]) for r in part],
                                   [r["id"] for r in part], sentinels, samples=samples, temperature=temperature,
                                   max_new_tokens=max_new_tokens, seed=seed)
            yield list(range(start, start + len(part))), texts

    values = cache.get(list(rows), compute)
    return values, cache


def sample_rows(rows: Sequence[dict], samples: dict[Any, list[str]], keep_empty: bool = False) -> list[dict]:
    """One FIM row per sampled completion (id `<prompt id>#<i>`, target = the completion): what a teacher-forced pass
    or a reward model reads; an empty completion has no token to score and is left out unless `keep_empty` (a reward
    model scores it, as the RL stage's reward did)."""
    return [{"id": f"{r['id']}#{i}", "prefix": r["prefix"], "suffix": r["suffix"], "target": c}
            for r in rows for i, c in enumerate(samples[r["id"]]) if c or keep_empty]


def cached_sample_logprobs(model_dir: str | Path, rows: Sequence[dict], sentinels, cache_dir: str | Path,
                           device: str = "cpu", batch_size: int = 16) -> dict[Any, float]:
    """{sample row id: log p(completion | its PSM prompt)} summed over the completion's tokens under `model_dir`, through
    the model layer's one cached teacher-forced pass (span "target", the extraction audit's encoding)."""
    scorer = CausalLMScorer.load(model_dir, device, batch_size=batch_size, lazy=True)
    values = cached_token_logprobs(scorer, list(rows), sentinels, cache_dir, "target")
    scorer.release()
    return {key: float(sum(v["logp"])) for key, v in values.items()}


REWARD_SCORES = "sample_reward_scores"


def cached_sample_rewards(rm_dir: str | Path, rows: Sequence[dict], cache_dir: str | Path, *, max_length: int,
                          device: str = "cpu") -> dict[Any, float]:
    """{sample row id: the reward model's score} of each completion in the reward model's training format
    (format_psm_training(prefix, completion, suffix) in the RM's own sentinels, as recipes/stages/rl.py's
    PsmRewardModel scores it), truncated to the RM's `max_length`; cached by the RM's fingerprint and the texts."""
    sentinels = model_sentinels(rm_dir, None)
    texts = [{"id": r["id"], "text": format_psm_training(r["prefix"], strip_sentinels(r["target"], sentinels),
                                                          r["suffix"], sentinels)} for r in rows]
    cache = loss_cache(cache_dir, REWARD_SCORES, model=model_fingerprint(rm_dir), max_length=max_length,
                       examples=examples_fingerprint(texts, ("id", "text")))
    loaded: list = []

    def compute(missing: list[dict]):
        if not loaded:
            loaded.extend(load_reward_model(rm_dir, device))
        for start in range(0, len(missing), 256):
            part = missing[start:start + 256]
            yield list(range(start, start + len(part))), score_texts(*loaded, [t["text"] for t in part],
                                                                     max_length=max_length)

    return cache.get(texts, compute)
