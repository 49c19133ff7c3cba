"""Edit distances used by every memorization measure (paper 003 Sec. 3, Appendix C).

The one definition of normalized edit distance (NED) and of the paper's sliding-window NED.
"""

from __future__ import annotations

from collections.abc import Sequence

from rapidfuzz.distance import Levenshtein


def normalized_edit_distance(a: str, b: str) -> float:
    """Levenshtein distance / max(len(a), len(b)); 0.0 when both are empty (paper 003 Sec. 3)."""
    longest = max(len(a), len(b))
    if longest == 0:
        return 0.0
    return Levenshtein.distance(a, b) / longest


def sliding_window_ned(target: str, completion: str) -> float:
    """Minimum NED between `target` and every len(target)-character window of `completion`.

    Paper 003 Appendix C: the completion may continue past the target, so the target is compared with
    each window of its own length; a completion shorter than the target is compared whole.
    """
    if not target:
        raise ValueError("sliding_window_ned: the target is empty")
    width = len(target)
    last = max(0, len(completion) - width)
    return min(normalized_edit_distance(target, completion[i:i + width]) for i in range(last + 1))


def sliding_window_ned_batch(targets: Sequence[str], completions: Sequence[str]) -> list[float]:
    """`sliding_window_ned` for each (target, completion) pair."""
    if len(targets) != len(completions):
        raise ValueError(f"sliding_window_ned_batch: {len(targets)} targets but {len(completions)} completions")
    return [sliding_window_ned(t, c) for t, c in zip(targets, completions)]
