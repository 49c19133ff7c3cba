"""How a stage's setting travels from the command line to its TRL trainer config: `stages.IPO.lr` on a finished smoke
run, followed by a profiler hook until the preference stage builds its `DPOConfig`.

    python benchmarks/settings_path.py --run runs/smoke            # a finished `memlens run experiment=smoke`

It copies the run's data and models to a scratch directory, overrides `stages.IPO.lr` there (so the IPO stage, and only
it, must retrain) and runs `memlens run` in this process with a profiler hook. It prints how often the stage's settings
were parsed (calls of `StageSettings.load` for `stages.IPO`), and the memlens calls on the stack at each parse and when
`DPOConfig` is built: the path the value takes, as function and file. The run stops there (nothing is trained).
Recorded in benchmarks/results/settings_path.txt.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import memlens

PACKAGE_ROOT = Path(memlens.__file__).resolve().parent.parent     # the checkout: harness/, recipes/, memlens/


class TrainerConfigBuilt(Exception):
    """Raised when the trainer config is built: the path is complete, training is not needed."""


def memlens_stack(frame) -> list[str]:
    """The memlens functions on the stack below `frame`, outermost first, as `file:function`."""
    calls = []
    while frame is not None:
        path = Path(frame.f_code.co_filename).resolve()
        if path.is_file() and path.is_relative_to(PACKAGE_ROOT) and "benchmarks" not in path.parts and "tests" not in path.parts:
            calls.append(f"{path.relative_to(PACKAGE_ROOT)}:{frame.f_code.co_name}")
        frame = frame.f_back
    return calls[::-1]


def own_file(frame) -> str:
    path = Path(frame.f_code.co_filename).resolve()
    return str(path.relative_to(PACKAGE_ROOT)) if path.is_file() and path.is_relative_to(PACKAGE_ROOT) else ""


def trace(run_dir: Path, stage: str, lr: str) -> dict:
    """Run `memlens run experiment=smoke` on `run_dir` with `stages.<stage>.lr=<lr>` and record the path."""
    from memlens.harness.cli import main

    seen: dict = {"parses": [], "inside": [], "trainer_config": None}
    parsing: list = []          # the frame of the parse in progress, while it runs

    def hook(frame, event, arg):
        if parsing and event == "return" and frame is parsing[0]:
            parsing.clear()
            return
        if event != "call":
            return
        name = frame.f_code.co_name
        if parsing:
            if memlens_stack(frame)[-1:] == [f"{own_file(frame)}:{name}"]:
                seen["inside"][-1].add(f"{own_file(frame)}:{name}")
            return
        if name == "load" and frame.f_locals.get("stage") == stage and "settings" in frame.f_locals:
            seen["parses"].append(memlens_stack(frame))
            seen["inside"].append(set())
            parsing.append(frame)
        elif name == "__init__" and type(frame.f_locals.get("self")).__name__ == "DPOConfig":
            seen["trainer_config"] = memlens_stack(frame.f_back)
            sys.setprofile(None)
            raise TrainerConfigBuilt

    sys.setprofile(hook)
    try:
        main(["run", "experiment=smoke", f"run_dir={run_dir}", "device=cpu", "after_training=[]",
              f"stages.{stage}.lr={lr}"])
    except TrainerConfigBuilt:
        pass
    finally:
        sys.setprofile(None)
    return seen


def describe(seen: dict) -> str:
    lines = [f"settings parsed: {len(seen['parses'])} time(s)"]
    for i, (stack, inside) in enumerate(zip(seen["parses"], seen["inside"]), 1):
        lines.append(f"parse {i}: {len(stack)} memlens calls on the stack, "
                     f"{len({c.split(':')[0] for c in stack})} files; inside the parse {len(inside)} memlens "
                     f"functions in {len({c.split(':')[0] for c in inside})} files: {', '.join(sorted(inside))}")
        lines += [f"    {c}" for c in stack]
    stack = seen["trainer_config"] or []
    lines.append(f"DPOConfig built: {len(stack)} memlens calls on the stack, {len({c.split(':')[0] for c in stack})} files")
    lines += [f"    {c}" for c in stack]
    calls = {c for s in seen["parses"] + seen["inside"] + [stack] for c in s}
    lines.append(f"distinct memlens functions on these paths: {len(calls)}, "
                 f"in {len({c.split(':')[0] for c in calls})} files")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished `memlens run experiment=smoke` directory")
    parser.add_argument("--stage", default="IPO")
    parser.add_argument("--lr", default="2.0e-4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        for part in ("data", "models", "run.json"):
            source = args.run / part
            (shutil.copytree if source.is_dir() else shutil.copy2)(source, run_dir / part)
        print(describe(trace(run_dir, args.stage, args.lr)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
