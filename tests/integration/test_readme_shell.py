"""README.md's commands as a newcomer runs them: in a new shell that has only the system's PATH, after the one line the
README gives for it (`source .venv/bin/activate`). A README that forgot the line, or a command that works only from a
shell where memlens happened to be on the PATH, fails here. Each documented memlens command is run with `--cfg job`
(composed and checked by the real console script, nothing run); the example script answers `--help`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.doc_commands import code_lines, memlens_argv

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ACTIVATE = "source .venv/bin/activate"


def readme_commands() -> list[list[str]]:
    """Every runnable `memlens ...` command of README.md (placeholders left out, as the composition test does)."""
    found = {}
    for line in code_lines(README):
        argv = memlens_argv(line)
        if argv:
            found.setdefault(" ".join(argv), argv)
    return list(found.values())


def new_shell(script: str) -> subprocess.CompletedProcess:
    """bash with a fresh environment: the system's PATH and HOME, no venv, nothing of this pytest process."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_readme_says_how_to_reach_the_command_before_it_uses_it():
    activation = README.find(ACTIVATE)
    first_bare = min(README.find(f"`memlens {word}") for word in ("run", "nmt", "check") if f"`memlens {word}" in README)
    assert 0 <= activation < first_bare, "README must say `source .venv/bin/activate` before its first memlens command"
    assert "scripts/setup.sh" in README[:activation] or "scripts/quickstart.sh" in README[:activation]


def test_without_the_line_memlens_is_not_found():
    """The premise: a plain shell has no memlens (else the test below proves nothing)."""
    done = new_shell("command -v memlens || echo absent")
    assert done.stdout.strip() == "absent", done.stdout


@pytest.mark.slow
def test_every_readme_command_runs_in_a_new_shell_after_the_activation_line():
    commands = readme_commands()
    assert len(commands) >= 8, commands
    lines = [ACTIVATE, "set -e", "memlens --version", "python examples/audit_trl_sft.py --help > /dev/null"]
    for argv in commands:
        lines.append(f"echo '$ memlens {shlex.join(argv)}'")
        lines.append(f"memlens {shlex.join(argv)} --cfg job > /dev/null")
    done = new_shell("\n".join(lines))
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert re.search(r"^memlens \d", done.stdout, flags=re.M), done.stdout[:500]
