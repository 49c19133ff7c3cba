"""Exact greedy decoding with a known draft (the audit's target): verify the draft in one pass, then decode.

Greedy decoding is a deterministic function of the prompt, so any guess of its output can be checked
with one teacher-forced forward pass over prompt + guess (the verification step of speculative
decoding, Leviathan et al. 2023, with greedy acceptance): the greedy token at each position is the
argmax of the logits there, every guessed token up to the first one that differs from it is the
greedy output, and the argmax at the first difference is the next greedy token. The audit knows a
guess no generic decoder has — the target — and the examples it exists to find (memorized ones) are
exactly those whose greedy completion *is* the target: one pass settles them instead of 64 decode
steps. A row that diverges after k tokens saves k steps.

After verification the KV cache is kept: the rejected draft positions are masked out of the
attention mask (positions are counted over unmasked tokens, so the model sees prompt + accepted
tokens exactly), and the rows still running decode one token per step. A finished row (EOS or
`max_new_tokens`) leaves the batch at once: on CPU decoding is compute-bound per row, so a finished
row that stayed (as it does in `generate`) would still cost a row-step per step.

Identical outputs to plain greedy decoding up to floating point: the verification pass computes the
draft positions' logits in one batched forward instead of one per step, so the last bits can differ
and a near-tie between the top two logits can break the other way (benchmarks/bench_draft.py
counts and shows every difference).
"""

from __future__ import annotations

from collections.abc import Sequence

from memlens.harness.model.encode import cut_at_eos
from memlens.harness.model.load import accepts_logits_to_keep


def draft_ids(tokenizer, drafts: Sequence[str], eos_ids: Sequence[int]) -> list[list[int]]:
    """Each draft's token ids, followed by EOS: a FIM model trained on `prefix suffix middle <eos>` ends a
    memorized middle with EOS, so a memorized row is settled, EOS included, by the verification pass."""
    enc = tokenizer(list(drafts), add_special_tokens=False)["input_ids"] if drafts else []
    tail = [int(eos_ids[0])] if eos_ids else []
    return [list(ids) + tail for ids in enc]


def accepted_length(draft: Sequence[int], greedy: Sequence[int]) -> int:
    """How many leading draft tokens equal the greedy tokens at the same positions."""
    n = 0
    for d, g in zip(draft, greedy):
        if d != g:
            break
        n += 1
    return n


def finish(tokens: list[int], eos_ids: Sequence[int], max_new_tokens: int) -> tuple[list[int], bool]:
    """(the tokens cut at the first EOS and at max_new_tokens, whether the row is done)."""
    allowed = tokens[:max_new_tokens]
    kept = cut_at_eos(allowed, eos_ids)
    return kept, len(kept) < len(allowed) or len(tokens) >= max_new_tokens


def _new_static_cache(model, max_cache_len: int):
    """A preallocated KV cache written in place (as `greedy_complete` decodes: a dynamic cache's
    per-step concatenation of every layer's keys and values dominated a decode step here)."""
    from transformers import StaticCache  # heavy: transformers loads on first use, in the model layer only

    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def _keep_rows(cache, keep) -> None:
    """Drop finished rows from every layer of a static cache (batch dimension 0)."""
    for layer in cache.layers:
        if getattr(layer, "is_initialized", False):
            layer.keys = layer.keys[keep]
            layer.values = layer.values[keep]
            layer.batch_size = int(keep.numel())


def _forward(model, input_ids, attention_mask, position_ids, cache, cache_position, keep_logits: int,
             takes_logits_to_keep: bool):
    kwargs = {"logits_to_keep": keep_logits} if takes_logits_to_keep else {}
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                past_key_values=cache, cache_position=cache_position, use_cache=True, **kwargs)
    return out.logits[:, -keep_logits:, :]


def draft_greedy_generate(model, prompts: Sequence[Sequence[int]], drafts: Sequence[Sequence[int]],
                          max_new_tokens: int, eos_ids: Sequence[int], pad_id: int,
                          stats: dict | None = None) -> list[list[int]]:
    """Greedy completions (token ids, cut at EOS) of a batch of prompts, each verified against its draft.

    `stats` (optional) gains `rows`, `settled_by_draft` (rows finished by the verification pass) and
    `draft_tokens_accepted`.
    """
    import torch  # heavy: torch loads on first use, in the model layer only

    device = next(model.parameters()).device
    drafts = [list(d)[:max(max_new_tokens - 1, 0)] for d in drafts]   # accepted + 1 <= max_new_tokens
    seqs = [list(p) + d for p, d in zip(prompts, drafts)]
    width = max(len(s) for s in seqs)
    keep = max(len(d) for d in drafts) + 1
    input_ids = torch.tensor([[pad_id] * (width - len(s)) + s for s in seqs], device=device)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=device)
    # Positions as `generate` counts them under left padding: over the unmasked tokens.
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    cache = _new_static_cache(model, width + max_new_tokens)
    takes_keep = accepts_logits_to_keep(model)   # read once: the decode loop calls forward every step
    with torch.inference_mode():
        logits = _forward(model, input_ids, mask, positions, cache, torch.arange(width, device=device), keep,
                          takes_keep)
        greedy = logits.float().argmax(-1).tolist()
    outputs, running, next_pos = [], [], []
    for r, d in enumerate(drafts):
        g = greedy[r][keep - 1 - len(d):]        # greedy tokens after the prompt's last token and each draft token
        accepted = accepted_length(d, g)
        tokens, done = finish(g[:accepted + 1], eos_ids, max_new_tokens)
        outputs.append(tokens)
        mask[r, width - len(d) + accepted:] = 0  # rejected draft tokens: out of the context from now on
        if stats is not None:
            stats["rows"] = stats.get("rows", 0) + 1
            stats["settled_by_draft"] = stats.get("settled_by_draft", 0) + int(done)
            stats["draft_tokens_accepted"] = stats.get("draft_tokens_accepted", 0) + min(accepted, len(tokens))
        if not done:
            running.append(r)
            next_pos.append(len(prompts[r]) + accepted)   # where the greedy token after the draft sits
    _decode_rest(model, cache, mask, running, next_pos, [outputs[r] for r in running], width,
                 max_new_tokens, eos_ids, takes_keep)
    return outputs


def _decode_rest(model, cache, mask, running: list[int], next_pos: list[int], outputs: list[list[int]],
                 width: int, max_new_tokens: int, eos_ids: Sequence[int], takes_logits_to_keep: bool) -> None:
    """Greedy steps for the rows still running, one token each, appending to `outputs` in place; a row
    leaves the batch (and the cache) as soon as it emits EOS or reaches `max_new_tokens`."""
    import torch  # heavy: torch loads on first use, in the model layer only

    if not running:
        return
    device = mask.device
    rows = torch.tensor(running, device=device)
    _keep_rows(cache, rows)
    mask = mask[rows]
    live = list(range(len(running)))                  # indices into `outputs` of the rows in the batch
    last = torch.tensor([[o[-1]] for o in outputs], device=device)
    pos = torch.tensor(next_pos, device=device)
    eos = set(eos_ids)
    column = width
    with torch.inference_mode():
        while live:
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
            logits = _forward(model, last, mask, pos[:, None], cache,
                              torch.tensor([column], device=device), 1, takes_logits_to_keep)
            tokens = logits[:, -1].float().argmax(-1).tolist()
            column += 1
            still = []
            for j, (i, t) in enumerate(zip(live, tokens)):
                if t in eos:
                    continue
                outputs[i].append(t)
                if len(outputs[i]) < max_new_tokens:
                    still.append(j)
            if len(still) < len(live):
                if not still:
                    break
                keep = torch.tensor(still, device=device)
                _keep_rows(cache, keep)
                mask = mask[keep]
                pos = pos[keep]
                live = [live[j] for j in still]
                tokens = [tokens[j] for j in still]
            last = torch.tensor([[t] for t in tokens], device=device)
            pos = pos + 1
