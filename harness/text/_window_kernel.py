"""Numba kernel behind `memlens.harness.text.distance.sliding_window_ned_batch` (paper 003 Sec. 4.2, Appendix C).

Kept in its own module so that `import memlens.harness.text.distance` does not import numba (~0.6 s); the kernel
is compiled on first use and cached on disk (`cache=True`): about 5 s the very first time on this machine
(more under load), about 1 s (numba import + cache load) in each later process. numba keys that cache by this
file's path and timestamp, and a cached kernel imports the module name it was compiled under: a cache written
under this module's name before the rename to memlens (`memlens.harness.text._window_kernel`) would be loaded, and fail,
until this file changed, which the rename's edit of this docstring did. Plain loops only:
np.unique/np.searchsorted for the non-ASCII lookup doubled the compile time; a code-point-indexed
array (`slot`, 8.9 MB, zero pages until touched) does it in O(1) instead.

Notation: target t of length m, completion c of length n, A[s][e] = Lev(t, c[s:e]), window j is
c[j:end_j] with end_j = min(j + m, n) and d_j = A[j][end_j]. For n > m the kernel returns min_j d_j over
j = 0 .. n-1: the full windows j <= n-m and the tail windows j > n-m, which are shorter than the target
(paper 003 Sec. 4.2: "the n'th edit distance is ... the characters in the response after position n");
for n <= m it returns Lev(t, c) (the whole completion). Both are exact; the caller divides by m (a tail
window is shorter than the target, so max(len) is m for every window).

How (and why it is exact):
1. One *forward pass* from start s runs Myers' bit-parallel edit-distance recurrence (Myers 1999, block
   form: the target is the pattern, 64 rows per uint64 word, one text character per column) over
   c[s:n] and records the bottom row, i.e. A[s][e] for every e in s..n, in n - s columns. It costs
   about what one window distance costs (m columns) but yields far more than d_s = A[s][s+m].
2. Bound. c[s:end_j] and window j differ only by |j - s| characters at the front (inserted or
   deleted), so Lev(c[s:end_j], c[j:end_j]) <= |j - s| and, by the triangle inequality,
       d_j >= A[s][end_j] - |j - s|     for every j with end_j >= s (tail windows included).
   This dominates the window-to-window triangle bound d_j >= d_s - 2|j - s| (A[s][.] changes by at
   most 1 per column), and on unrelated code it is much tighter: appending a character to c[s:e]
   usually costs an insertion, so A[s][j+m] grows with j and the bound decays slowly.
3. Search: pass from s = 0; keep best = the smallest d_s seen and, per window, the largest bound lb_j
   from any pass. Then repeatedly pass from the unevaluated window with the smallest lb_j < best. When
   none is left, every unevaluated window has d_j >= lb_j >= best, so best is the exact minimum.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_HIGH_BIT = np.uint64(1 << 63)
_SHIFT_TOP = np.uint64(63)
ASCII_ROWS = 256  # code points < 256 index the match table directly; others go through `slot`
_CODE_POINTS = 0x110000  # every Unicode code point (incl. surrogates): UTF-32 values are below this


@nb.njit(cache=True, nogil=True)
def _forward_pass(words, table, rows_of_text, s, n, m, vp, vn, bottom):
    """bottom[e] = Lev(t, c[s:e]) for e in s..n (Myers' block algorithm, global distance).

    Column e has D[0][e] = e - s (the top row grows by one per text character: horizontal delta +1
    into the first word) and starts from D[i][s] = i (all vertical deltas +1). carry_p / carry_m
    (0 or 1) is the horizontal delta +1 / -1 leaving the top bit of one word into the next: Myers
    1999's advance_block (`if hin < 0: Eq |= 1`, shift the carry into Ph / Mh) without branches."""
    last_bit = np.uint64((m - 1) % 64)
    for w in range(words):
        vp[w] = _ALL_ONES
        vn[w] = _ZERO
    score = m
    bottom[s] = score
    for e in range(s, n):
        row = rows_of_text[e]
        carry_p = _ONE  # horizontal delta +1 enters the top word (D[0][e] = e - s)
        carry_m = _ZERO
        ph = _ZERO
        mh = _ZERO
        for w in range(words):
            eq = table[row, w]
            pv = vp[w]
            mv = vn[w]
            xv = eq | mv
            eq |= carry_m
            xh = (((eq & pv) + pv) ^ pv) | eq
            ph = mv | ~(xh | pv)
            mh = pv & xh
            out_p = ph >> _SHIFT_TOP
            out_m = mh >> _SHIFT_TOP
            shifted_p = (ph << _ONE) | carry_p
            shifted_m = (mh << _ONE) | carry_m
            vp[w] = shifted_m | ~(xv | shifted_p)
            vn[w] = shifted_p & xv
            carry_p = out_p
            carry_m = out_m
        # ph, mh of the last word: bit m-1 is the bottom row's horizontal delta
        score += np.int64((ph >> last_bit) & _ONE) - np.int64((mh >> last_bit) & _ONE)
        bottom[e + 1] = score


@nb.njit(cache=True, nogil=True)
def _window_search(words, table, rows_of_text, m, n, vp, vn, bottom, lower, evaluated, counts):
    """min over windows j = 0..n-1 of Lev(t, c[j:min(j+m, n)]) (n > m), by the bounded search of the module
    doc; windows j > n-m are the tail windows, shorter than the target."""
    n_windows = n
    for j in range(n_windows):
        lower[j] = -1  # distances are >= 0: no information yet
        evaluated[j] = False
    best = m + n
    s = 0
    while s >= 0:
        _forward_pass(words, table, rows_of_text, s, n, m, vp, vn, bottom)
        counts[0] += n - s
        counts[1] += 1
        evaluated[s] = True
        if bottom[min(s + m, n)] < best:
            best = bottom[min(s + m, n)]
        for j in range(max(0, s - m), n_windows):  # windows with end_j >= s: bottom[end_j] is from this pass
            if not evaluated[j]:
                bound = bottom[min(j + m, n)] - abs(j - s)
                if bound > lower[j]:
                    lower[j] = bound
        s = -1
        smallest = best  # only windows whose bound is below best can still lower the minimum
        for j in range(n_windows):
            if not evaluated[j] and lower[j] < smallest:
                smallest = lower[j]
                s = j
    return best


@nb.njit(cache=True, nogil=True)
def window_minima(codes, target_start, target_len, completion_start, completion_len, out, counts):
    """out[p] = min_j Lev(t_p, c_p[j:min(j+m, n)]) over j = 0..n-1 if n = len(c_p) > m, else Lev(t_p, c_p).

    `codes` holds all strings as Unicode code points (uint32); the pairs' strings are slices of it.
    counts[0] += text columns processed, counts[1] += forward passes (work done, load-independent).
    """
    n_pairs = len(target_start)
    # slot[ch] (ch >= 256): 1 + the row offset of code point ch among the current target's other code
    # points, 0 if absent; set per pair and reset after it, so lookups are O(1) for any alphabet.
    slot = np.zeros(_CODE_POINTS, np.int64)
    max_m = 1
    max_n = 1
    max_other = 0  # most distinct code points >= 256 in one target: the table's extra rows
    for p in range(n_pairs):
        max_m = max(max_m, target_len[p])
        max_n = max(max_n, completion_len[p])
        other = 0
        for i in range(target_start[p], target_start[p] + target_len[p]):
            if codes[i] >= ASCII_ROWS and slot[codes[i]] == 0:
                slot[codes[i]] = 1
                other += 1
        for i in range(target_start[p], target_start[p] + target_len[p]):
            if codes[i] >= ASCII_ROWS:
                slot[codes[i]] = 0
        max_other = max(max_other, other)
    max_words = (max_m + 63) // 64
    # Match table (Myers' Peq): row = character, bit i of word w set iff t[64w + i] is that character.
    # Rows 0..255: code points < 256; then one row per distinct other code point of the target; the
    # row after those stays all-zero and serves every completion character >= 256 absent from the
    # target (a code point < 256 absent from it has an all-zero row of its own).
    table = np.zeros((ASCII_ROWS + max_other + 1, max_words), np.uint64)
    rows_of_text = np.empty(max_n, np.int64)
    vp = np.empty(max_words, np.uint64)
    vn = np.empty(max_words, np.uint64)
    bottom = np.empty(max_n + 1, np.int64)
    lower = np.empty(max_n + 1, np.int64)
    evaluated = np.empty(max_n + 1, np.bool_)
    for p in range(n_pairs):
        m = target_len[p]
        n = completion_len[p]
        words = (m + 63) // 64
        target = codes[target_start[p]:target_start[p] + m]
        completion = codes[completion_start[p]:completion_start[p] + n]
        n_others = 0
        for i in range(m):
            ch = target[i]
            if ch < ASCII_ROWS:
                row = np.int64(ch)
            else:
                if slot[ch] == 0:
                    n_others += 1
                    slot[ch] = n_others
                row = ASCII_ROWS + slot[ch] - 1
            table[row, i // 64] |= _ONE << np.uint64(i % 64)
        for e in range(n):
            ch = completion[e]
            if ch < ASCII_ROWS:
                rows_of_text[e] = np.int64(ch)
            elif slot[ch] == 0:
                rows_of_text[e] = ASCII_ROWS + n_others  # the all-zero row: absent from the target
            else:
                rows_of_text[e] = ASCII_ROWS + slot[ch] - 1
        if n <= m:
            _forward_pass(words, table, rows_of_text, 0, n, m, vp, vn, bottom)
            counts[0] += n
            counts[1] += 1
            out[p] = bottom[n]
        else:
            out[p] = _window_search(words, table, rows_of_text, m, n, vp, vn, bottom, lower, evaluated,
                                    counts)
        for i in range(m):  # clear what this target set (the table and slots serve the next pair)
            ch = target[i]
            if ch < ASCII_ROWS:
                table[np.int64(ch), i // 64] = _ZERO
            else:
                slot[ch] = 0
        for k in range(n_others):
            for w in range(words):
                table[ASCII_ROWS + k, w] = _ZERO
