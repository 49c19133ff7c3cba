"""Reading the commands the docs show: code lines of a Markdown file, comment lines of a config file, and the argv of a
`memlens ...` line (tests/unit/project/test_docs_commands.py composes them; tests/integration/test_readme_shell.py runs
README.md's in a new shell); and a page's Python blocks (tests/integration/test_plugins.py runs docs/architecture.md's)."""

from __future__ import annotations

import re
import shlex

from memlens.harness.cli import COMMANDS as CLI_COMMANDS

# A template that names a placeholder (`experiment=<name>`, `key=value ...`) is a pattern, not a command.
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|\[key=value")


def code_lines(text: str) -> list[str]:
    """Lines of fenced and indented code blocks (continuations joined), and inline code spans."""
    lines: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        lines += block.replace("\\\n", " ").splitlines()
    unfenced = re.sub(r"```.*?```", "", text, flags=re.S)
    indented = re.findall(r"(?m)^(?: {4}.*\n?)+", unfenced)
    for block in indented:
        lines += re.sub(r"\\\n\s*", " ", block).splitlines()
    lines += re.findall(r"`([^`\n]+)`", unfenced)
    return [line.strip() for line in lines]


def python_blocks(text: str) -> list[str]:
    """The fenced ```python blocks of a Markdown page, in order."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def memlens_argv(line: str) -> list[str] | None:
    """`memlens <command> ...` (also `python -m memlens ...`, `accelerate launch ... -m memlens ...`) as argv."""
    line = line.split(" #", 1)[0].strip()
    match = re.search(r"(?:^|\s)(?:\.venv/bin/)?memlens\s+(.*)$|-m memlens\s+(.*)$", line)
    if not match or PLACEHOLDER.search(line):
        return None
    argv = shlex.split(match.group(1) or match.group(2))
    # `memlens run` alone in a sentence names the command; a command to copy has settings.
    return argv if len(argv) >= 2 and not argv[0].startswith("-") else None


def comment_lines(text: str) -> list[str]:
    r"""A config file's comment lines (each YAML opens with the command that runs it), `\` continuations joined."""
    lines, pending = [], ""
    for raw in text.splitlines():
        if not raw.lstrip().startswith("#"):
            pending = ""
            continue
        line = pending + raw.lstrip().lstrip("#").strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        words = line.split()
        if words[:1] == ["memlens"] and len(words) > 1 and words[1] in CLI_COMMANDS:   # a command, not prose naming one
            lines.append(re.split(r"\s{2,}(?=[#(])", line)[0])     # without its trailing explanation
    return lines
