"""Teacher-forced log-probabilities of a target given its FIM prompt: the loss side of the model layer.

Paper 004 Sec. 3 measures memorization through the loss of a string, `loss(M, s)`; paper 003's exposure
test (Carlini et al. 2019) ranks candidate secrets by their summed negative log-likelihood. Both are one
teacher-forced pass per length-sorted batch here, prompts encoded by the one rule (memlens.harness.model.encode).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memlens.harness.model.decode import length_sorted_batches
from memlens.harness.model.encode import adds_bos, encode_texts, pad_id_of
from memlens.harness.model.load import accepts_logits_to_keep


def encode_fim_examples(tokenizer, prefixes: Sequence[str], targets: Sequence[str],
                        suffixes: Sequence[str], sentinels) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) per example: the PSM prompt `[PRE]prefix[SUF]suffix[MID]`, then the target.

    The prompt is encoded exactly as greedy decoding encodes it (`memlens.harness.model.encode.encode_texts`, BOS kept
    where the tokenizer adds one), so a loss and a completion condition on the same tokens. The target is
    encoded on its own without special tokens: the `<fim_middle>` sentinel before it is an added token
    (special or not, added tokens are matched before BPE runs), so a tokenizer splits the training text
    `...<fim_middle>middle<eos>` at it and the middle gets the same ids as here. EOS is not part of the
    target: we measure the string, not where it stops.
    """
    if not (len(prefixes) == len(targets) == len(suffixes)):
        raise ValueError(f"prefixes/targets/suffixes differ in length: "
                         f"{len(prefixes)}/{len(targets)}/{len(suffixes)}")
    prompts = encode_texts(tokenizer, [sentinels.prompt(p, s) for p, s in zip(prefixes, suffixes)])
    target_ids = tokenizer(list(targets), add_special_tokens=False)["input_ids"]
    for i, ids in enumerate(target_ids):
        if not ids:
            raise ValueError(f"example {i}: empty target has no tokens to score; drop it or fix its `target`")
    return [(list(p), list(t)) for p, t in zip(prompts, target_ids)]


def iter_target_log_softmax(model, examples: Sequence[tuple[list[int], list[int]]], batch_size: int = 16,
                            pad_id: int = 0, progress: bool | None = None, desc: str = "loss",
                            shared: Sequence[int] = ()):
    """(example index, (target tokens, vocab) log-softmax, target ids tensor) per example, one forward pass per
    batch: the one teacher-forced pass under every loss and per-token log-prob of the project.

    Rows are right-padded (positions 0..n-1 of every real token are then the same as unpadded), grouped by
    length so a batch carries little padding. No attention mask is passed: under causal attention a real token
    never sees the pads after it, so its logits are those of the row alone, and the pass takes the fused causal
    attention kernel instead of a materialised (batch, query, key) mask (~35 % faster on CPU at ~700 tokens;
    `test_target_loss_batched_equals_single_and_hf_loss` holds it to the unbatched loss). Only the logits from
    the first target-predicting position onwards are materialised (`logits_to_keep`), which matters for
    49k-token vocabularies and long FIM prompts.

    `shared`: ids every row is preceded by (a ReCaLL prefix, `with_context`). Their keys and values are computed
    once and reused by every batch, so a conditioned pass costs about what the plain one does, whatever the
    prefix's length (the logits are those of the concatenated row, to float rounding).
    """
    import torch  # heavy: the model layer loads torch on first use
    from tqdm.auto import tqdm  # with torch: progress of the teacher-forced passes

    device = next(model.parameters()).device
    keep_arg = accepts_logits_to_keep(model)
    prefix_cache = None
    if shared:
        with torch.inference_mode():
            prefix_cache = model(input_ids=torch.tensor([list(shared)], device=device), use_cache=True).past_key_values
    bar = tqdm(total=len(examples), desc=desc, unit="ex", leave=False, dynamic_ncols=True,
               disable=(not progress) if progress is not None else None)   # None: only on a terminal
    try:
        for idx in length_sorted_batches([len(p) + len(t) for p, t in examples], batch_size):
            rows = [examples[i][0] + examples[i][1] for i in idx]
            width = max(len(r) for r in rows)
            input_ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], device=device)
            # Target token j of a row sits at position len(prompt)+j and is predicted at len(prompt)+j-1.
            first = min(len(examples[i][0]) for i in idx) - 1
            if first < 0:
                raise ValueError("an example has an empty prompt; the PSM prompt always has sentinels, "
                                 "so this means a tokenizer dropped them")
            kwargs = {"logits_to_keep": width - first} if keep_arg else {}
            if prefix_cache is not None:
                kwargs["past_key_values"] = copy.deepcopy(prefix_cache)   # each batch appends to its own copy
                kwargs["past_key_values"].batch_repeat_interleave(len(idx))
            with torch.inference_mode():
                logits = model(input_ids=input_ids, use_cache=prefix_cache is not None, **kwargs).logits
            offset = width - logits.shape[1]          # logits column c predicts token c + offset + 1
            for row, i in enumerate(idx):
                n_prompt, target = len(examples[i][0]), examples[i][1]
                cols = torch.arange(n_prompt - 1, n_prompt - 1 + len(target), device=device) - offset
                with torch.inference_mode():
                    logp = torch.log_softmax(logits[row, cols].float(), dim=-1)
                yield i, logp, torch.tensor(target, device=device)
            bar.update(len(idx))
    finally:
        bar.close()


def token_losses_batched(model, examples: Sequence[tuple[list[int], list[int]]], batch_size: int = 16,
                         pad_id: int = 0, reduction: str = "mean", progress: bool | None = None) -> np.ndarray:
    """Cross-entropy of each example's target ids given its prompt ids (`iter_target_log_softmax`).
    reduction: "mean" (per-token average, paper 004's string loss) or "sum" (sequence negative log-likelihood,
    for ranking candidates of different length as in the exposure test)."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r}: use 'mean' or 'sum'")
    out = np.empty(len(examples), dtype=np.float64)
    for i, logp, target in iter_target_log_softmax(model, examples, batch_size, pad_id, progress):
        nll = -logp.gather(1, target[:, None]).squeeze(1)
        out[i] = float(nll.mean() if reduction == "mean" else nll.sum())
    return out


TOKEN_FIELDS = ("ids", "logp", "mu", "var", "top1")   # what `token_logprob_stats_batched` stores per token (the cache covers it)


def token_logprob_stats_batched(model, examples: Sequence[tuple[list[int], list[int]]], batch_size: int = 16,
                                pad_id: int = 0, progress: bool | None = None, shared: Sequence[int] = ()
                                ) -> list[dict[str, list]]:
    """Per example and target token: its id `ids`, `logp` = log p(x_t | x_<t), the mean `mu` and variance `var` of
    log p(z | x_<t) under z ~ p(. | x_<t) (Zhang et al. 2024, Min-K%++ Sec. 3: the calibration of the next-token
    distribution), and `top1`, the most likely next token (EZ-MIA's error zone, Ilic et al. 2026 Sec. 3: the
    positions where it is not x_t), all from the same forward pass as the losses. The mean of -logp is exactly
    `token_losses_batched`'s loss. The ids let an attack look a token up in a reference distribution (DC-PDD's
    token frequencies). These few numbers per token are what the attacks read of the full next-token distribution,
    so the cache never stores a vocabulary-sized row."""
    import torch  # heavy: the model layer loads torch on first use

    out: list[dict[str, list] | None] = [None] * len(examples)
    for i, logp, target in iter_target_log_softmax(model, examples, batch_size, pad_id, progress, desc="logprobs",
                                                   shared=shared):
        with torch.inference_mode():
            p = logp.exp()
            mu = (p * logp).sum(-1)
            var = (p * (logp - mu[:, None]) ** 2).sum(-1).clamp_min(0.0)
            tok = logp.gather(1, target[:, None]).squeeze(1)
        out[i] = {"ids": target.tolist(), "logp": _float32_digits(tok), "mu": _float32_digits(mu),
                  "var": _float32_digits(var), "top1": logp.argmax(-1).tolist()}
    return out  # type: ignore[return-value]


CONTEXT_RULE = "one prefix for every row of a set: cut from its start to fit beside the longest row"


def with_context(examples: Sequence[tuple[list[int], list[int]]], context: Sequence[int], head: int,
                 max_tokens: int | None = None) -> tuple[list[int], list[tuple[list[int], list[int]]]]:
    """(shared ids, the rows after them): the same (prompt, target) pairs with `context` ids inserted after each
    prompt's first `head` ids (its BOS, where the tokenizer adds one), so that the same target tokens are scored
    given a text before them (ReCaLL's prefix, Xie et al. 2024 Sec. 3). The shared ids are the head and all of the
    context but its last id, which stays in each row so that every row still has a prompt. With `max_tokens`,
    the context keeps the last ids that fit beside the longest row: one prefix for every row."""
    if not examples or not context:
        return [], [(list(p), list(t)) for p, t in examples]
    longest = max(len(p) + len(t) for p, t in examples)
    room = len(context) if max_tokens is None else max(0, min(len(context), max_tokens - longest))
    if room == 0:
        return [], [(list(p), list(t)) for p, t in examples]
    kept = list(context[len(context) - room:])
    head_ids = list(examples[0][0][:head])
    return head_ids + kept[:-1], [([kept[-1]] + list(p[head:]), list(t)) for p, t in examples]


def _float32_digits(values) -> list[float]:
    """A float32 tensor as Python floats of 7 significant digits (float32's precision): the cache stores one value
    per token, and the full repr of a float32 widened to float64 (-0.10000000149011612) doubles its size."""
    return [float(f"{x:.7g}") for x in values.tolist()]


def encode_whole_programs(tokenizer, texts: Sequence[str], max_tokens: int | None = None
                          ) -> list[tuple[list[int], list[int]]]:
    """(first token, the rest) per text: the whole program scored as plain causal text (no FIM sentinels), as
    membership-inference attacks score a document (mimir, Duan et al. 2024). With a BOS token every program
    token is scored; without one the first token has no context and is the prompt. A program longer than
    `max_tokens` (the model's context) is scored on its first `max_tokens` tokens."""
    out = []
    for n, ids in enumerate(encode_texts(tokenizer, list(texts))):
        ids = list(ids)[:max_tokens] if max_tokens else list(ids)
        if len(ids) < 2:
            raise ValueError(f"program {n}: fewer than two tokens; nothing to score")
        out.append((ids[:1], ids[1:]))
    return out


def target_losses(model, tokenizer, prefixes: Sequence[str], targets: Sequence[str],
                  suffixes: Sequence[str], sentinels, batch_size: int = 16, reduction: str = "mean",
                  progress: bool | None = None) -> np.ndarray:
    """Per-example loss of `target` given the PSM FIM prompt of (prefix, suffix): mean token cross-
    entropy over the target tokens only (prompt tokens masked out), as a float64 array in input order.

    This is the loss of paper 004 Sec. 3 (recollection "loss(M_e, s)") for a FIM example.
    """
    examples = encode_fim_examples(tokenizer, prefixes, targets, suffixes, sentinels)
    pad_id = pad_id_of(tokenizer)
    return token_losses_batched(model, examples, batch_size, pad_id, reduction, progress)


def shared_prompt_target_nll(model, prompt: Sequence[int], targets: Sequence[Sequence[int]], batch_size: int = 16,
                             pad_id: int = 0) -> np.ndarray:
    """Summed negative log-likelihood of each of `targets` given one shared `prompt`: the prompt's forward pass
    runs once and its KV cache serves every target (the exposure test scores ~100 candidate secrets behind the
    same FIM prompt, paper 003 Sec. 4 after Carlini et al. 2019, where a prompt is ~20 times longer than a
    target). Equal to `token_losses_batched(..., reduction="sum")` over (prompt, target) pairs up to float32
    rounding: the target positions attend to cached keys instead of recomputed ones (tested to 1e-4)."""
    import torch  # heavy: the model layer loads torch on first use

    if not prompt:
        raise ValueError("an empty prompt: the PSM prompt always has sentinels, so a tokenizer dropped them")
    device = next(model.parameters()).device
    kwargs = {"logits_to_keep": 1} if accepts_logits_to_keep(model) else {}
    out = np.empty(len(targets), dtype=np.float64)
    with torch.inference_mode():
        first = model(input_ids=torch.tensor([list(prompt)], device=device), use_cache=True, **kwargs)
        first_logp = torch.log_softmax(first.logits[0, -1].float(), dim=-1)   # predicts every target's token 0
        for start in range(0, len(targets), batch_size):
            chunk = [list(t) for t in targets[start:start + batch_size]]
            if any(not t for t in chunk):
                raise ValueError("an empty target has no tokens to score")
            nll = [-float(first_logp[t[0]]) for t in chunk]
            width = max(len(t) for t in chunk) - 1            # the rest of each target, fed after the prompt
            if width > 0:
                cache = copy.deepcopy(first.past_key_values)
                cache.batch_repeat_interleave(len(chunk))
                rest = torch.tensor([t[:-1] + [pad_id] * (width + 1 - len(t)) for t in chunk], device=device)
                mask = torch.tensor([[1] * len(prompt) + [1] * (len(t) - 1) + [0] * (width + 1 - len(t))
                                     for t in chunk], device=device)
                logits = model(input_ids=rest, attention_mask=mask, past_key_values=cache, use_cache=True).logits
                logp = torch.log_softmax(logits.float(), dim=-1)
                for row, t in enumerate(chunk):
                    nxt = torch.tensor(t[1:], device=device)
                    nll[row] -= float(logp[row, :len(t) - 1].gather(1, nxt[:, None]).sum())
            out[start:start + len(chunk)] = nll
    return out


def shared_prompt_losses(model, tokenizer, prefix: str, suffix: str, targets: Sequence[str], sentinels,
                         batch_size: int = 16) -> np.ndarray:
    """Summed target NLL of each of `targets` in the FIM hole between one `prefix` and `suffix`, the prompt and
    targets encoded exactly as `target_losses` encodes them (`encode_fim_examples`)."""
    if not targets:
        return np.empty(0, dtype=np.float64)
    prompt = encode_fim_examples(tokenizer, [prefix], [targets[0]], [suffix], sentinels)[0][0]
    # The targets alone, as encode_fim_examples encodes a target (the prompt is the same for all: encoded once).
    target_ids = [t for _, t in encode_fim_examples(tokenizer, [""] * len(targets), list(targets),
                                                    [""] * len(targets), sentinels)]
    pad_id = pad_id_of(tokenizer)
    return shared_prompt_target_nll(model, prompt, target_ids, batch_size, pad_id)


def _in_context(tokenizer, examples: list[tuple[list[int], list[int]]], context: str | None,
                max_tokens: int | None) -> tuple[list[int], list[tuple[list[int], list[int]]]]:
    """(shared ids, rows): `examples` as they are (no context), or with `context`'s ids before each prompt, after
    its BOS (`with_context`)."""
    if not context:
        return [], examples
    ids = tokenizer(context, add_special_tokens=False)["input_ids"]
    return with_context(examples, ids, head=1 if adds_bos(tokenizer) else 0, max_tokens=max_tokens)


def target_token_logprobs(model, tokenizer, prefixes: Sequence[str], targets: Sequence[str],
                          suffixes: Sequence[str], sentinels, batch_size: int = 16,
                          progress: bool | None = None, context: str | None = None,
                          max_tokens: int | None = None) -> list[dict[str, list]]:
    """Per-token log-probs (with Min-K%++'s mu and var) of `target` given the PSM prompt: the inputs of
    `target_losses`, one value per target token instead of their mean. `context`: a text before the prompt."""
    shared, examples = _in_context(tokenizer, encode_fim_examples(tokenizer, prefixes, targets, suffixes, sentinels),
                                   context, max_tokens)
    return token_logprob_stats_batched(model, examples, batch_size, pad_id_of(tokenizer), progress, shared)


def program_token_logprobs(model, tokenizer, texts: Sequence[str], batch_size: int = 16,
                           progress: bool | None = None, max_tokens: int | None = None,
                           context: str | None = None) -> list[dict[str, list]]:
    """Per-token log-probs (with mu and var) of each whole text as plain causal text (`encode_whole_programs`);
    `context`: a text before it (the same tokens scored)."""
    shared, examples = _in_context(tokenizer, encode_whole_programs(tokenizer, texts, max_tokens), context, max_tokens)
    return token_logprob_stats_batched(model, examples, batch_size, pad_id_of(tokenizer), progress, shared)


@dataclass(frozen=True)
class SamplingScheme:
    """A decoding scheme whose chance of producing an exact target is scored (probabilistic discoverable
    extraction, Hayes et al. 2024 Sec. 3): `temperature` 0 is greedy decoding; otherwise logits are divided by
    the temperature, then only the `top_k` largest are kept (None: all), as transformers' samplers apply them
    (TemperatureLogitsWarper, then TopKLogitsWarper: a token ties with the k-th largest logit is kept)."""

    name: str
    temperature: float = 1.0
    top_k: int | None = None

    def __post_init__(self):
        if not isinstance(self.temperature, (int, float)) or isinstance(self.temperature, bool) \
                or self.temperature < 0:
            raise ValueError(f"scheme {self.name!r}: temperature={self.temperature!r} must be >= 0 (0 = greedy)")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or self.top_k < 1):
            raise ValueError(f"scheme {self.name!r}: top_k={self.top_k!r} must be a positive integer or null")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def scheme_token_logprobs(logp, target, scheme: SamplingScheme):
    """log p(target token | its prefix) under `scheme`, per target position, from the model's (tokens, vocab)
    log-softmax `logp`: greedy gives 0 where the target token is the argmax (the first maximum, as argmax
    decoding takes it) and -inf elsewhere; sampling renormalises over the kept tokens (-inf for a dropped one)."""
    import torch  # heavy: the model layer loads torch on first use

    if scheme.greedy:
        hit = logp.argmax(dim=-1) == target
        return torch.where(hit, 0.0, float("-inf"))
    scaled = logp / scheme.temperature      # log_softmax is shift-invariant: same as logits / T
    if scheme.top_k is not None and scheme.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, scheme.top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.log_softmax(scaled, dim=-1).gather(1, target[:, None]).squeeze(1)


def scheme_target_logprobs(model, examples: Sequence[tuple[list[int], list[int]]], schemes: Sequence[SamplingScheme],
                           batch_size: int = 16, pad_id: int = 0, progress: bool | None = None) -> np.ndarray:
    """(examples, schemes) log-probability that decoding the prompt under each scheme produces exactly the target
    ids as its first tokens: the sum of the per-token log-probs (Hayes et al. 2024 Sec. 3, p_z = prod_t
    p(z_t | z_<t)), from the one teacher-forced pass (`iter_target_log_softmax`), no sampling."""
    import torch  # heavy: the model layer loads torch on first use

    out = np.empty((len(examples), len(schemes)), dtype=np.float64)
    for i, logp, target in iter_target_log_softmax(model, examples, batch_size, pad_id, progress,
                                                   desc="discoverable"):
        with torch.inference_mode():
            out[i] = [float(scheme_token_logprobs(logp, target, s).sum()) for s in schemes]
    return out


def fim_scheme_logprobs(model, tokenizer, prefixes: Sequence[str], targets: Sequence[str], suffixes: Sequence[str],
                        sentinels, schemes: Sequence[SamplingScheme], batch_size: int = 16,
                        progress: bool | None = None) -> np.ndarray:
    """`scheme_target_logprobs` of each target in its PSM prompt, encoded as the losses encode it."""
    examples = encode_fim_examples(tokenizer, prefixes, targets, suffixes, sentinels)
    return scheme_target_logprobs(model, examples, schemes, batch_size, pad_id_of(tokenizer), progress)
