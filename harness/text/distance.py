"""Edit distances used by every memorization measure (paper 003 Sec. 3, Sec. 4.2, Appendices B-D).

The one definition of normalized edit distance (NED) and of the paper's sliding-window NED, plus a fast
batch form that returns exactly the same values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from rapidfuzz.distance import Levenshtein


def normalized_edit_distance(a: str, b: str) -> float:
    """Levenshtein distance / max(len(a), len(b)), in [0, 1]; 0.0 when both are empty (paper 003 Sec. 3)."""
    longest = max(len(a), len(b))
    if longest == 0:
        return 0.0
    return Levenshtein.distance(a, b) / longest


def sliding_window_ned(target: str, completion: str) -> float:
    """Minimum NED between `target` and the window of `completion` starting at each position n.

    Paper 003 Sec. 4.2 / Appendix C: a completion may wrap the target in unrelated text (RLHF models are
    verbose), so the target is compared with "the characters in the response after position n" for
    every n, and the minimum is kept. Contract: for len(completion) > len(target),
        min over n in 0 .. len(completion)-1 of NED(target, completion[n:n+len(target)]),
    which includes the tail windows starting in the last len(target)-1 characters (shorter than the
    target: a completion that ends inside the target still counts); a completion no longer than the
    target is compared whole, NED(target, completion). Windows are in characters (the paper's Appendix B
    speaks of tokens; characters make the measure independent of the audited model's tokenizer).
    """
    if not target:
        raise ValueError("sliding_window_ned: the target is empty; an empty target cannot be memorized")
    width = len(target)
    if len(completion) <= width:
        return normalized_edit_distance(target, completion)
    return min(normalized_edit_distance(target, completion[i:i + width]) for i in range(len(completion)))


# --- Batch form -------------------------------------------------------------------------------------
#
# The batch form returns exactly the values of `sliding_window_ned` while doing a small part of the
# work: every pair is handled inside one compiled kernel (harness/text/_window_kernel.py, numba), whose
# docstring proves the search exact. In short, with m = len(target), n = len(completion), A[s][e] =
# Lev(target, completion[s:e]) and d_j = A[j][min(j+m, n)] the distance of window j (no window is
# longer than m, so its NED is d_j / m):
# 1. completion no longer than the target: one comparison with the whole completion, d / m.
# 2. target occurs verbatim in the completion (checked here, in C): some window equals it, NED 0.
# 3. otherwise: one bit-parallel pass from start s gives A[s][e] for *every* end e at about the cost of
#    one window distance, and d_j >= A[s][min(j+m, n)] - |j - s| (the two strings differ by |j - s| characters
#    at the front), a bound much tighter than the window-to-window triangle bound d_j >= d_s - 2|j - s|.
#    Passes start at the window with the smallest bound until no window's bound is below the best
#    distance found: then that best distance is the exact minimum.
#
# Measured (benchmarks/README.md, Distance): on 10,000 realistic pairs ~5 passes per unmemorized pair
# instead of ~34 window distances (6.7x fewer text columns overall), ~8x less CPU than the naive loop.
# Tried and not kept: rapidfuzz's process.cpdist in coarse-to-fine rounds pruned by the triangle bound
# (the previous version: exact, 2.3-2.5x; ~2.6 us per window distance however rapidfuzz is called, and
# the triangle bound needs ~12 windows per unmemorized pair); edlib's infix distance as a bound (costs
# ~6 windows, lies ~14 edits below the minimum); rapidfuzz's score_cutoff (only faster far below the
# true distance); reverse passes, early-stopped passes, other start orders (more columns).

_MIN_PAIRS_PER_THREAD = 1024          # below this a thread costs more than it saves
_MAX_CHARS_PER_CALL = 1 << 22         # ~4M characters (16 MB of code points) per kernel call


def sliding_window_ned_batch(targets: Sequence[str], completions: Sequence[str], *,
                             workers: int = -1) -> list[float]:
    """`sliding_window_ned(t, c)` for each pair, exactly, but much faster on large batches.

    `workers` is the number of threads running the compiled kernel (-1: all cores). The first call in
    a fresh checkout compiles the kernel (~5 s on this machine, then cached on disk by numba).
    """
    if len(targets) != len(completions):
        raise ValueError(f"sliding_window_ned_batch: {len(targets)} targets but "
                         f"{len(completions)} completions")
    result: list[float | None] = [None] * len(targets)
    searched: list[int] = []
    for k, (target, completion) in enumerate(zip(targets, completions)):
        if not target:
            raise ValueError(f"sliding_window_ned_batch: target {k} is empty; an empty target cannot be "
                             "memorized")
        if len(completion) > len(target) and target in completion:
            result[k] = 0.0  # shortcut 2: a window equals the target
        else:
            searched.append(k)
    chunks = list(_chunks_by_chars(searched, targets, completions))
    n_threads = _threads(workers, len(searched))
    if n_threads > 1 and len(chunks) < n_threads:
        chunks = [part for chunk in chunks for part in _split(chunk, n_threads)]
    if n_threads > 1:
        with ThreadPoolExecutor(n_threads) as pool:  # the kernel releases the GIL (nogil=True)
            minima = list(pool.map(lambda chunk: _kernel_minima(chunk, targets, completions), chunks))
    else:
        minima = [_kernel_minima(chunk, targets, completions) for chunk in chunks]
    for chunk, values in zip(chunks, minima):
        for k, d in zip(chunk, values):
            result[k] = d / len(targets[k])  # windows and short completions: max(len) = len(target)
    return result


def _kernel_minima(indices: list[int], targets: Sequence[str], completions: Sequence[str],
                   counts: np.ndarray | None = None) -> list[int]:
    """min_j Lev(t, c[j:j+m]) (or Lev(t, c) when c is no longer than t) for the pairs `indices`."""
    from memlens.harness.text._window_kernel import window_minima  # numba is imported on first use only

    texts = [targets[k] for k in indices] + [completions[k] for k in indices]
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    starts = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    # UTF-32 gives one uint32 per code point, so offsets are Python string indices; surrogatepass
    # keeps lone surrogates (legal in a Python str) as their own code points.
    codes = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    n = len(indices)
    out = np.empty(n, dtype=np.int64)
    window_minima(codes, starts[:n], lengths[:n], starts[n:], lengths[n:], out,
                  np.zeros(2, dtype=np.int64) if counts is None else counts)
    return out.tolist()


def _threads(workers: int, n_pairs: int) -> int:
    wanted = (os.cpu_count() or 1) if workers == -1 else workers
    if wanted < 1:
        raise ValueError(f"sliding_window_ned_batch: workers={workers}; use -1 (all cores) or >= 1")
    return max(1, min(wanted, n_pairs // _MIN_PAIRS_PER_THREAD))


def _split(chunk: list[int], parts: int) -> list[list[int]]:
    size = -(-len(chunk) // parts)
    return [chunk[i:i + size] for i in range(0, len(chunk), size)]


def _chunks_by_chars(indices: list[int], targets: Sequence[str], completions: Sequence[str]):
    """Consecutive groups of pairs with at most _MAX_CHARS_PER_CALL characters in total (bounded memory:
    the kernel gets one array of code points per call)."""
    chunk: list[int] = []
    n_chars = 0
    for k in indices:
        chars = len(targets[k]) + len(completions[k])
        if chunk and n_chars + chars > _MAX_CHARS_PER_CALL:
            yield chunk
            chunk, n_chars = [], 0
        chunk.append(k)
        n_chars += chars
    if chunk:
        yield chunk
