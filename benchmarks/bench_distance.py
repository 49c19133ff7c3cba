"""Sliding-window NED: the exact batch form (memlens.harness.text.distance) vs a naive per-window rapidfuzz loop.

Pairs look like an audit's: targets of 150-250 characters cut from the Python standard library's source,
completions of 200-260 characters (64 tokens of code). Mix (seeded): 80% not memorized (code from
elsewhere in the same file), 7% the exact target inside other code, 5% a near copy (0-8 random
character substitutions, wrapped in other code), 8% an early stop (completion shorter than the target).

    .venv/bin/python benchmarks/bench_distance.py                 # 10,000 pairs, 3 repeats
    .venv/bin/python benchmarks/bench_distance.py --n 2000 --repeats 1

Prints wall and CPU time of each path (best of the repeats; the batch form is called once untimed
first, so numba's compile/cache load is not counted there -- it is measured separately, in fresh
processes, cold and from the on-disk cache), the speed-ups, the work each path does in text columns
(load-independent), asserts the values are identical, and prints the machine load (`uptime`) before
and after, since the CPU may be shared.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from rapidfuzz.distance import Levenshtein  # noqa: E402

import memlens.harness.text.distance as distance  # noqa: E402


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


def batch_work(targets, completions) -> tuple[int, int, int]:
    """(text columns, forward passes, pairs) of the batch form's kernel: the pairs that are not settled
    by the verbatim-substring check. One naive window distance is m columns (bit-parallel, m = target
    length), so columns compare the work of both paths independently of the load."""
    searched = [k for k, (t, c) in enumerate(zip(targets, completions)) if not (len(c) > len(t) and t in c)]
    counts = np.zeros(2, dtype=np.int64)
    distance._kernel_minima(searched, targets, completions, counts)
    return int(counts[0]), int(counts[1]), len(searched)


FIRST_CALL = """
import time
start = time.perf_counter()
from memlens.harness.text.distance import sliding_window_ned_batch
sliding_window_ned_batch(["ab"], ["xayb"], workers=1)  # no verbatim copy: runs the kernel
print(time.perf_counter() - start)
"""


def first_call_seconds(cache_dir: str) -> float:
    """Import + first call in a fresh process with numba's cache in `cache_dir`."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    run = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, check=True,
                         env=env, cwd=Path(__file__).resolve().parents[1])
    return float(run.stdout.strip())


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

    with tempfile.TemporaryDirectory() as cache_dir:
        cold = first_call_seconds(cache_dir)
        warm = first_call_seconds(cache_dir)
    print(f"first call in a fresh process (import + compile): {cold:.2f} s cold, {warm:.2f} s from "
          "numba's on-disk cache")
    distance.sliding_window_ned_batch(["ab"], ["xayb"])  # compile/cache load: not timed

    naive, naive_wall, naive_cpu = timed(lambda: naive_sliding_ned(targets, completions), args.repeats)
    rows = [("naive per-window loop", naive_wall, naive_cpu)]
    for workers in (1, -1):
        fast, wall, cpu = timed(lambda w=workers: distance.sliding_window_ned_batch(targets, completions, workers=w),
                                args.repeats)
        assert fast == naive, f"batch (workers={workers}) differs from the naive loop"
        rows.append((f"sliding_window_ned_batch workers={workers}", wall, cpu))
    naive_windows = sum(max(1, len(c) - len(t) + 1) for t, c in zip(targets, completions))
    naive_columns = sum(max(1, len(c) - len(t) + 1) * len(t) if len(c) > len(t) else len(c)
                        for t, c in zip(targets, completions))
    columns, passes, searched = batch_work(targets, completions)

    print(f"\n{'path':<40} {'wall s':>8} {'cpu s':>8} {'x wall':>7} {'x cpu':>7}")
    for name, wall, cpu in rows:
        print(f"{name:<40} {wall:8.3f} {cpu:8.3f} {naive_wall / wall:7.2f} {naive_cpu / cpu:7.2f}")
    print(f"\nwork in text columns: naive {naive_columns} ({naive_windows} window distances), batch "
          f"{columns} in {passes} forward passes over {searched} searched pairs "
          f"({naive_columns / columns:.2f}x fewer columns)")
    for kind in sorted(set(kinds)):
        picked = [k for k in range(args.n) if kinds[k] == kind]
        kind_targets = [targets[k] for k in picked]
        kind_completions = [completions[k] for k in picked]
        kind_columns, kind_passes, kind_searched = batch_work(kind_targets, kind_completions)
        kind_naive = sum(max(1, len(c) - len(t) + 1) * len(t) if len(c) > len(t) else len(c)
                         for t, c in zip(kind_targets, kind_completions))
        print(f"  {kind:<14} {len(picked):5d} pairs: {kind_searched:5d} searched, "
              f"{kind_passes / max(1, kind_searched):.2f} passes per searched pair, "
              f"{kind_naive / max(1, kind_columns):.2f}x fewer columns than naive")
    print(f"values identical on all {args.n} pairs: True")
    print("load after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
