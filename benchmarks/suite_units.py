"""Where the test suite's time goes, per unit: pytest's `--durations=0` lines (setup, call and teardown of each test)
summed per unit as tests/conftest.py hands units to the workers (`work_unit`), the longest first, as the markdown
table tests/README.md keeps ("Time"). Given several logs, one column each, ranked by the first.

    bash scripts/test.sh --durations=0 > before.log 2>&1        # a whole run, every test's durations
    python benchmarks/suite_units.py before.log after.log --top 20

A unit's seconds are one worker's wall seconds; the last row sums every test of the log (the work of all workers),
so that it reads against the run's wall time times its workers."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.scheduling import unit_name, work_unit  # noqa: E402  (the scheduler's own units: one definition)

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(.+?)\s*$")


def unit_seconds(log: str) -> Counter:
    """{unit: seconds} from one pytest log's duration lines (a unit named from its file name on)."""
    seconds: Counter = Counter()
    for line in log.splitlines():
        match = DURATION.match(line)
        if match:
            seconds[unit_name(work_unit(match.group(3)))] += float(match.group(1))
    return seconds


def table(columns: dict[str, Counter], top: int) -> str:
    """The top units of the first column, each column's seconds beside them, and the sum of each column."""
    first = next(iter(columns.values()))
    lines = ["| unit | " + " | ".join(f"{name} (s)" for name in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for unit, _ in first.most_common(top):
        lines.append(f"| {unit} | " + " | ".join(f"{c[unit]:.1f}" if unit in c else "—" for c in columns.values())
                     + " |")
    lines.append("| **all units (work of all workers)** | "
                 + " | ".join(f"**{sum(c.values()):.0f}**" for c in columns.values()) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path, help="pytest logs run with --durations=0")
    parser.add_argument("--names", nargs="*", help="a column name per log (default: the file names)")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    names = args.names or [str(log) for log in args.logs]
    if len(names) != len(args.logs) or len(set(names)) != len(names):
        parser.error(f"--names: {len(args.logs)} different names, one per log (given: {names})")
    columns = {}
    for name, log in zip(names, args.logs):
        seconds = unit_seconds(log.read_text(encoding="utf-8", errors="replace"))
        if not seconds:
            parser.error(f"{log}: no duration lines (run pytest with --durations=0)")
        columns[name] = seconds
    print(table(columns, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
