"""Which examples are scored at all: the exclusion filters of paper 003 (Sec. 4.2, Appendices B and D).

A target too short to tell memory from competence, or one the model could copy from its own prompt, is
excluded before scoring; so is a prompt longer than a model's context. These are rules on text alone
(characters and a token count the caller supplies), so the SD builder applies the same ones when it picks
targets (synthetic_data/sd/programs.py) and every excluded row of the audit names one of EXCLUSION_REASONS.
"""

from __future__ import annotations

from collections.abc import Sequence

from memlens.harness.text.distance import sliding_window_ned, sliding_window_ned_batch

SHORT_TARGET = "short_target"
TARGET_IN_PROMPT = "target_in_prompt"
# The PSM prompt has more tokens than the audited model's or the control's context
# (max_position_embeddings): nothing is decoded for it (memlens.harness.audit.run decides this before generation).
PROMPT_TOO_LONG = "prompt_too_long"
EXCLUSION_REASONS = (SHORT_TARGET, TARGET_IN_PROMPT, PROMPT_TOO_LONG)


def exclusion_reason(prefix: str, target: str, suffix: str, target_token_count: int, *,
                     min_target_tokens: int = 10, prompt_ned_threshold: float = 0.5) -> str | None:
    """Why an example is not scored, or None (Sec. 4.2, Appendices B and D).

    - "short_target": fewer than `min_target_tokens` target tokens (in the audited model's tokenizer;
      the caller counts them) -- a short target is matched by competence as easily as by memory.
    - "target_in_prompt": the target slid over the prefix and, separately, over the suffix (Appendix D;
      an empty side is skipped) has a minimum sliding-window NED below `prompt_ned_threshold` -- the
      model could copy it from the prompt. Exactly at the threshold is kept (Appendix D's 0.5 example
      is judged "not similar").
    """
    if target_token_count < min_target_tokens:
        return SHORT_TARGET
    neds = [sliding_window_ned(target, context) for context in (prefix, suffix) if context]
    if neds and min(neds) < prompt_ned_threshold:
        return TARGET_IN_PROMPT
    return None


def exclusion_reasons(prefixes: Sequence[str], targets: Sequence[str], suffixes: Sequence[str],
                      target_token_counts: Sequence[int], *, min_target_tokens: int = 10,
                      prompt_ned_threshold: float = 0.5) -> list[str | None]:
    """`exclusion_reason` for many rows at once (same values; the prompt NEDs use the batch distance)."""
    n = len(targets)
    if not (len(prefixes) == len(suffixes) == len(target_token_counts) == n):
        raise ValueError("exclusion_reasons: prefixes, targets, suffixes and target_token_counts differ "
                         f"in length ({len(prefixes)}, {n}, {len(suffixes)}, {len(target_token_counts)})")
    reasons: list[str | None] = [SHORT_TARGET if count < min_target_tokens else None
                                 for count in target_token_counts]
    # One batch over every (row, non-empty side) still to check.
    owners, batch_targets, contexts = [], [], []
    for i in range(n):
        if reasons[i] is None:
            for context in (prefixes[i], suffixes[i]):
                if context:
                    owners.append(i)
                    batch_targets.append(targets[i])
                    contexts.append(context)
    for i, ned in zip(owners, sliding_window_ned_batch(batch_targets, contexts)):
        if ned < prompt_ned_threshold:
            reasons[i] = TARGET_IN_PROMPT
    return reasons
