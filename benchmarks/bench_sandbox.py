"""Cost and honesty of the `tests` reward (recipes/sandbox/runner.py) on every HumanEval problem.

    .venv/bin/python benchmarks/bench_sandbox.py                  # bubblewrap, one check at a time
    .venv/bin/python benchmarks/bench_sandbox.py --workers 4      # as FunctionReward batches them
    .venv/bin/python benchmarks/bench_sandbox.py --mode none      # the unisolated opt-out, for comparison

Scores each problem's canonical solution (must pass) and a known-wrong body (`return None`, which fails every
problem's tests) through FunctionReward exactly as the RL trainers call it, and prints how many of each passed
and the wall time per check. Results are recorded in benchmarks/README.md ("The tests reward's sandbox").
"""

from __future__ import annotations

import argparse
import statistics
import time

from memlens.recipes.stages.verifiable_rewards import FunctionReward, _humaneval_problems

WRONG = "    return None\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="bubblewrap", choices=["bubblewrap", "none"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    args = parser.parse_args()
    problems = list(_humaneval_problems().values())[:args.limit]
    reward = FunctionReward("tests", workers=args.workers, sandbox_mode=args.mode)
    times, honest, wrong = [], [], []
    start = time.perf_counter()
    for batch_start in range(0, len(problems), args.workers):
        batch = problems[batch_start:batch_start + args.workers]
        for body, out in ((None, honest), (WRONG, wrong)):
            t = time.perf_counter()
            scores = reward(completions=[p["canonical_solution"] if body is None else body for p in batch],
                            prefix=[p["prompt"] for p in batch], suffix=[""] * len(batch),
                            task_id=[p["task_id"] for p in batch])
            times.append((time.perf_counter() - t) / len(batch))
            out += [(p["task_id"], s) for p, s in zip(batch, scores)]
    total = time.perf_counter() - start
    print(f"isolation {reward.isolation}, workers {args.workers}, {len(problems)} problems, "
          f"{2 * len(problems)} checks in {total:.1f} s")
    print(f"canonical solutions passing: {sum(s == 1.0 for _, s in honest)}/{len(honest)} "
          f"(not: {[t for t, s in honest if s != 1.0]})")
    print(f"wrong bodies passing: {sum(s == 1.0 for _, s in wrong)}/{len(wrong)} "
          f"(passing: {[t for t, s in wrong if s == 1.0]})")
    print(f"wall time per check: mean {1000 * statistics.mean(times):.0f} ms, "
          f"median {1000 * statistics.median(times):.0f} ms (batch wall / batch size)")


if __name__ == "__main__":
    main()
