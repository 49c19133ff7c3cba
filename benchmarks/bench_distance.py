"""Sliding-window NED: the exact batch form (harness.distance) vs a naive per-window rapidfuzz loop.

Pairs look like an audit's: targets of 150-250 characters cut from the Python standard library's source,
completions of 200-260 characters (64 tokens of code). Mix (seeded): 80% not memorized (code from
elsewhere in the same file), 7% the exact target inside other code, 5% a near copy (0-8 random
character substitutions, wrapped in other code), 8% an early stop (completion shorter than the target).

    .venv/bin/python benchmarks/bench_distance.py                 # 10,000 pairs, 3 repeats
    .venv/bin/python benchmarks/bench_distance.py --n 2000 --repeats 1

Prints wall and CPU time of each path (best of the repeats), the speed-ups, the number of window
distances each path computes (load-independent), asserts the values are identical, and prints the
machine load (`uptime`) before and after, since the CPU may be shared.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rapidfuzz import process  # noqa: E402
from rapidfuzz.distance import Levenshtein  # noqa: E402

import harness.distance as distance  # noqa: E402


def stdlib_sources(min_chars: int = 3000) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.glob("*.py"))]
    return [t for t in texts if len(t) >= min_chars]


def realistic_pairs(n: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """n (target, completion, kind) triples; see the module docstring for the mix."""
    rng = random.Random(seed)
    sources = stdlib_sources()
    targets, completions, kinds = [], [], []
    for _ in range(n):
        src = rng.choice(sources)
        width = rng.randint(150, 250)
        start = rng.randrange(300, len(src) - width - 300)
        target = src[start:start + width]
        length = rng.randint(200, 260)
        roll = rng.random()
        if roll < 0.80:
            other = rng.randrange(0, len(src) - length)
            completion, kind = src[other:other + length], "not_memorized"
        elif roll < 0.92:
            kind = "exact_copy" if roll < 0.87 else "near_copy"
            copy = list(target)
            if kind == "near_copy":
                for _ in range(rng.randint(0, 8)):
                    copy[rng.randrange(width)] = rng.choice("abcxyz_ ()=")
            lead = rng.randint(0, 20)
            tail = max(0, length - width - lead)
            completion = src[start - lead:start] + "".join(copy) + src[start + width:start + width + tail]
        else:
            completion, kind = src[start + width:start + width + rng.randint(0, 140)], "early_stop"
        targets.append(target)
        completions.append(completion)
        kinds.append(kind)
    return targets, completions, kinds


def naive_sliding_ned(targets: list[str], completions: list[str]) -> list[float]:
    """The definition as a plain loop: one rapidfuzz call per window."""
    out = []
    for target, completion in zip(targets, completions):
        m = len(target)
        if len(completion) <= m:
            out.append(Levenshtein.distance(target, completion) / m)
        else:
            out.append(min(Levenshtein.distance(target, completion[i:i + m])
                           for i in range(len(completion) - m + 1)) / m)
    return out


def timed(fn, repeats: int):
    best_wall = best_cpu = float("inf")
    result = None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return result, best_wall, best_cpu


def count_batch_window_distances(targets, completions) -> int:
    """Window distances the batch form computes (wraps cpdist for one extra run; not timed)."""
    counted = [0]
    original = process.cpdist

    def counting_cpdist(queries, choices, **kwargs):
        counted[0] += len(queries)
        return original(queries, choices, **kwargs)

    distance.process.cpdist = counting_cpdist
    try:
        distance.sliding_window_ned_batch(targets, completions)
    finally:
        distance.process.cpdist = original
    return counted[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    targets, completions, kinds = realistic_pairs(args.n, args.seed)
    mix = {k: kinds.count(k) for k in sorted(set(kinds))}
    print(f"{args.n} pairs {mix}; target chars {min(map(len, targets))}-{max(map(len, targets))}, "
          f"completion chars {min(map(len, completions))}-{max(map(len, completions))}")

    naive, naive_wall, naive_cpu = timed(lambda: naive_sliding_ned(targets, completions), args.repeats)
    rows = [("naive per-window loop", naive_wall, naive_cpu)]
    for workers in (1, -1):
        fast, wall, cpu = timed(lambda: distance.sliding_window_ned_batch(targets, completions,
                                                                          workers=workers), args.repeats)
        assert fast == naive, f"batch (workers={workers}) differs from the naive loop"
        rows.append((f"sliding_window_ned_batch workers={workers}", wall, cpu))
    naive_windows = sum(max(1, len(c) - len(t) + 1) for t, c in zip(targets, completions))
    batch_windows = count_batch_window_distances(targets, completions)

    print(f"\n{'path':<40} {'wall s':>8} {'cpu s':>8} {'x wall':>7} {'x cpu':>7}")
    for name, wall, cpu in rows:
        print(f"{name:<40} {wall:8.3f} {cpu:8.3f} {naive_wall / wall:7.2f} {naive_cpu / cpu:7.2f}")
    print(f"\nwindow distances computed: naive {naive_windows}, batch {batch_windows} "
          f"({naive_windows / batch_windows:.2f}x fewer)")
    print(f"values identical on all {args.n} pairs: True")
    print("load after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
