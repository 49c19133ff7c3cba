"""A bubblewrap that stops starting sandboxes mid-run, for the tests of `tests` reward failures that are ours."""

from __future__ import annotations

from pathlib import Path

from memlens.recipes.sandbox import runner as sandbox


def bwrap_that_fails_after(tmp_path: Path, calls: int, message: str, code: int = 1) -> Path:
    """A stand-in for bubblewrap that runs the real one for its first `calls` invocations (the probe, honest checks),
    then fails before any sandbox starts with `message` and exit `code`, as bubblewrap itself does when the kernel
    refuses it mid-run (e.g. ENOSPC once the namespace limit is used up)."""
    count, real = tmp_path / "calls", sandbox.bwrap_path()
    script = tmp_path / "bwrap"
    # one line appended per call (atomic, as sandboxes start in parallel), then counted: calls before this one
    script.write_text(f'#!/bin/sh\necho . >> {count}; n=$(($(wc -l < {count}) - 1))\n'
                      f'if [ "$n" -ge {calls} ]; then echo "{message}" >&2; exit {code}; fi\nexec {real} "$@"\n')
    script.chmod(0o755)
    return script
