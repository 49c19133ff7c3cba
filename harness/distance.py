"""Edit distances used by every memorization measure (paper 003 Sec. 3, Sec. 4.2, Appendices B-D).

The one definition of normalized edit distance (NED) and of the paper's sliding-window NED, plus a fast
batch form that returns exactly the same values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein


def normalized_edit_distance(a: str, b: str) -> float:
    """Levenshtein distance / max(len(a), len(b)), in [0, 1]; 0.0 when both are empty (paper 003 Sec. 3)."""
    longest = max(len(a), len(b))
    if longest == 0:
        return 0.0
    return Levenshtein.distance(a, b) / longest


def sliding_window_ned(target: str, completion: str) -> float:
    """Minimum NED between `target` and every len(target)-character window of `completion`.

    Paper 003 Sec. 4.2 / Appendix C: a completion may wrap the target in unrelated text (RLHF models are
    verbose), so the target is compared with each window of its own length, i = 0 .. len(completion) -
    len(target), and the minimum is kept. A completion shorter than the target is compared whole.
    Windows are in characters here (the paper's Appendix B speaks of tokens; characters make the measure
    independent of the audited model's tokenizer).
    """
    if not target:
        raise ValueError("sliding_window_ned: the target is empty; an empty target cannot be memorized")
    width = len(target)
    last = max(0, len(completion) - width)
    return min(normalized_edit_distance(target, completion[i:i + width]) for i in range(last + 1))


# --- Batch form -------------------------------------------------------------------------------------
#
# The batch form returns exactly the values of `sliding_window_ned` while computing far fewer window
# distances. With m = len(target), window i is W_i = completion[i:i+m] and d_i = Lev(target, W_i); the
# answer is min_i d_i / m (every window has length m, so max(len) = m).
#
# Why each shortcut is exact:
# 1. completion shorter than (or as long as) the target: one window, the whole completion: d / m.
# 2. target occurs verbatim in the completion: some window equals the target, d = 0, the minimum.
# 3. Triangle bound. W_{i+1} is W_i with its first character deleted and one character appended, so
#    Lev(W_i, W_j) <= 2|i - j|, and by the triangle inequality of Levenshtein distance
#    d_j >= d_i - 2|i - j| for every evaluated window i. Hence
#        lb_j = max over evaluated i of (d_i - 2|i - j|)
#    is a lower bound on d_j, and a window with lb_j >= best (the smallest d evaluated so far) cannot
#    lower the minimum; it is never evaluated. (This is the skip-ahead rule -- from window i with
#    distance d the next window that can beat best is i + floor((d - best) / 2) + 1 -- applied in both
#    directions and from every evaluated window.) `best` only decreases, so a ruled-out window stays out.
# 4. Coarse-to-fine rounds: round 0 evaluates every STRIDES[0]-th window (and the last one); each
#    later round evaluates the still-possible windows (lb < best) on a finer stride, plus, per pair, the
#    possible window with the smallest lb; the last stride is 1, i.e. every still-possible window. After
#    that round every unevaluated window has lb >= best, so best is the exact minimum (point 3).
# The window distances of a round are computed in C++ by rapidfuzz.process.cpdist (GIL released,
# `workers` threads); the bounds are numpy segmented prefix/suffix maxima over all pairs at once.
#
# Measured and not used (benchmarks/README.md): edlib's infix ("HW") alignment is a valid lower bound
# on every d_i (each window is one of the substrings it minimises over), but costs about six window
# evaluations per pair and on unmemorized pairs lies ~14 edits below the window minimum, so it rarely
# stops the search (memorized pairs already stop early: their low best prunes everything around it);
# rapidfuzz's score_cutoff only speeds Levenshtein up when the cutoff is small (banded kernel), i.e. not
# on the unmemorized majority, and a capped value would weaken the bounds of point 3. Bounding a run of
# windows by one distance to the chunk that spans them (d_j >= Lev(target, chunk) - extra length) was
# simulated too and needs more work than point 3 alone.

_STRIDES = (8, 4, 2, 1)
_MIN_PAIRS_PER_THREAD = 2048  # below this, starting rapidfuzz's threads costs more than it saves
_MAX_WINDOWS_PER_CHUNK = 1 << 21  # ~2M windows: ~100 MB of bookkeeping arrays at most


def _segmented_running_max(values: np.ndarray, segment: np.ndarray, n_segments: int,
                           reverse: bool) -> np.ndarray:
    """Running maximum of `values` (>= 0, -1 for "none") restarted at each segment (ids ascending)."""
    span = int(values.max()) + 2 if values.size else 1  # offset that keeps segments from mixing
    if reverse:
        offset = (n_segments - 1 - segment[::-1]).astype(np.int64) * span
        run = np.maximum.accumulate(values[::-1] + offset) - offset
        return run[::-1]
    offset = segment.astype(np.int64) * span
    return np.maximum.accumulate(values + offset) - offset


def _threads(workers: int, n_pairs: int) -> int:
    return workers if n_pairs >= _MIN_PAIRS_PER_THREAD else 1


def _window_minima(targets: list[str], completions: list[str], workers: int) -> list[int]:
    """min_i Lev(target, completion[i:i+m]) for pairs whose completion is longer than the target."""
    n_pairs = len(targets)
    widths = np.array([len(t) for t in targets], dtype=np.int64)
    n_windows = np.array([len(c) for c in completions], dtype=np.int64) - widths + 1
    starts = np.concatenate(([0], np.cumsum(n_windows)[:-1]))
    segment = np.repeat(np.arange(n_pairs), n_windows)
    position = np.arange(segment.size, dtype=np.int64) - starts[segment]
    distance = np.full(segment.size, -1, dtype=np.int64)  # -1: not evaluated
    best = np.full(n_pairs, np.iinfo(np.int64).max, dtype=np.int64)
    shift = 2 * int(n_windows.max())  # keeps d_i - 2i + shift >= 0

    width_of = widths.tolist()

    def evaluate(flat: np.ndarray) -> None:
        segs = segment[flat].tolist()
        queries = [targets[s] for s in segs]
        windows = [completions[s][p:p + width_of[s]] for s, p in zip(segs, position[flat].tolist())]
        distance[flat] = process.cpdist(queries, windows, scorer=Levenshtein.distance,
                                        workers=_threads(workers, len(flat)))
        np.minimum.at(best, segment[flat], distance[flat])

    is_last = position == (n_windows[segment] - 1)
    evaluate(np.flatnonzero((position % _STRIDES[0] == 0) | is_last))
    for stride in _STRIDES[1:]:
        done = distance >= 0
        left = _segmented_running_max(np.where(done, distance + 2 * position, -1), segment, n_pairs,
                                      reverse=False)
        right = _segmented_running_max(np.where(done, distance - 2 * position + shift, -1), segment,
                                       n_pairs, reverse=True)
        lower = np.maximum(left - 2 * position, right + 2 * position - shift)
        possible = ~done & (lower < best[segment])
        if not possible.any():
            break
        pick = possible & (position % stride == 0)
        # per pair, also the possible window(s) with the smallest bound, so every round makes progress
        masked = np.where(possible, lower, np.iinfo(np.int64).max)
        pick |= possible & (masked == np.minimum.reduceat(masked, starts)[segment])
        evaluate(np.flatnonzero(pick))
    # After the stride-1 round no window can be below best (see point 4): best is exact.
    return best.tolist()


def sliding_window_ned_batch(targets: Sequence[str], completions: Sequence[str], *,
                             workers: int = -1) -> list[float]:
    """`sliding_window_ned(t, c)` for each pair, exactly, but much faster on large batches.

    `workers` is the number of threads rapidfuzz uses for the window distances (-1: all cores).
    """
    if len(targets) != len(completions):
        raise ValueError(f"sliding_window_ned_batch: {len(targets)} targets but "
                         f"{len(completions)} completions")
    result: list[float | None] = [None] * len(targets)
    whole: list[int] = []      # completion no longer than the target: a single comparison
    windowed: list[int] = []   # completion longer than the target: search the windows
    for k, (target, completion) in enumerate(zip(targets, completions)):
        if not target:
            raise ValueError(f"sliding_window_ned_batch: target {k} is empty; an empty target cannot be "
                             "memorized")
        if len(completion) <= len(target):
            whole.append(k)
        elif target in completion:
            result[k] = 0.0
        else:
            windowed.append(k)
    if whole:
        raw = process.cpdist([targets[k] for k in whole], [completions[k] for k in whole],
                             scorer=Levenshtein.distance, workers=_threads(workers, len(whole)))
        for k, d in zip(whole, raw.tolist()):
            result[k] = d / len(targets[k])
    for chunk in _chunks_by_windows(windowed, targets, completions):
        minima = _window_minima([targets[k] for k in chunk], [completions[k] for k in chunk], workers)
        for k, d in zip(chunk, minima):
            result[k] = d / len(targets[k])
    return result


def _chunks_by_windows(indices: list[int], targets: Sequence[str], completions: Sequence[str]):
    """Consecutive groups of pairs with at most _MAX_WINDOWS_PER_CHUNK windows in total (bounded memory:
    the round bookkeeping holds a few int64 arrays per window)."""
    chunk: list[int] = []
    n_windows = 0
    for k in indices:
        windows = len(completions[k]) - len(targets[k]) + 1
        if chunk and n_windows + windows > _MAX_WINDOWS_PER_CHUNK:
            yield chunk
            chunk, n_windows = [], 0
        chunk.append(k)
        n_windows += windows
    if chunk:
        yield chunk
