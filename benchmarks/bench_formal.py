"""Where the formal-language study's time goes, read from a finished run (nothing is rerun):

    python benchmarks/bench_formal.py runs/formal_languages

Per (language, variant, role kind): how many models, their training strings, optimizer steps and seconds (each
model's losses.json records the seconds its process took: training, scoring every string at every epoch, saving),
then the run's wall time from run.json. Models train `formal.workers` at a time, so the sum of model seconds is
about workers x the training wall time.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    run_dir = Path(argv[0])
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for path in sorted((run_dir / "formal" / "models").rglob("losses.json")):
        record = json.loads(path.read_text())
        job = record["job"]
        kind = "full" if job["role"] == "full" else "fold"
        groups[(job["language"], job["variant"], kind)].append(record)
    print("| language | variant | models | training strings | steps | seconds per model (mean) | seconds in all |")
    print("|---|---|---|---|---|---|---|")
    total = 0.0
    for (language, variant, kind), records in groups.items():
        seconds = [r["seconds"] for r in records]
        total += sum(seconds)
        strings = sorted({r["training_strings"] for r in records})
        steps = sorted({r["steps"] for r in records})
        print(f"| {language} | {variant} ({kind}) | {len(records)} | {strings[0]}–{strings[-1]} | "
              f"{steps[0]}–{steps[-1]} | {sum(seconds) / len(seconds):.1f} | {sum(seconds):.0f} |")
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
    print(f"\nmodel seconds in all: {total:.0f} ({total / 60:.1f} min); run.json wall: {run.get('wall_seconds')} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
