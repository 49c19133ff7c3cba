"""Nothing the project reads back is unpickled with arbitrary code: every `torch.load` in the repository
passes `weights_only=True` (models themselves are safetensors only, harness/model/decode.py)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SOURCES = ("harness", "recipes", "synthetic_data", "scripts", "benchmarks", "tests")


def torch_load_calls(text: str) -> list[str]:
    """The argument text of every `torch.load(...)` call (balanced parentheses)."""
    calls = []
    for match in re.finditer(r"\btorch\.load\(", text):
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        calls.append(text[match.end():i - 1])
    return calls


def test_the_scan_finds_calls_with_and_without_the_flag():
    text = "a = torch.load(p, weights_only=False)\nb = torch.load(f(p), map_location='cpu', weights_only=True)\n"
    assert torch_load_calls(text) == ["p, weights_only=False", "f(p), map_location='cpu', weights_only=True"]


def test_every_torch_load_passes_weights_only_true():
    unsafe = []
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():
                continue
            for args in torch_load_calls(path.read_text(encoding="utf-8")):
                if not re.search(r"\bweights_only\s*=\s*True\b", args):
                    unsafe.append(f"{path.relative_to(REPO)}: torch.load({args})")
    assert not unsafe, unsafe
