"""docs/own-data.md as a newcomer copies it: every `memlens ...` command composes (config keys, experiments,
stage and audit-plan overrides; no training), and every JSON row it shows passes the reader the commands use."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from memlens.harness.cli import COMMANDS, compose
from memlens.harness.core.user_data import read_canaries, read_preference_pairs

DOC = Path(__file__).resolve().parents[3] / "docs" / "own-data.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


COMMAND_LINES = [line for block in blocks("bash") for line in block.splitlines() if line.startswith("memlens ")]


def test_the_page_shows_each_way_to_bring_ones_own_data():
    text = " ".join(COMMAND_LINES)
    for needed in ("data.canaries.file=", "data.preference.file=", "model.pretrained=", "audit.examples=",
                   "audit.all_checkpoints=true", "memlens report"):
        assert needed in text, needed


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_every_command_composes(line):
    from memlens.recipes.orchestration.stage_plan import plan

    command, *overrides = shlex.split(line)[1:]
    assert command in COMMANDS
    cfg = compose([o for o in overrides if o not in ("-m", "--multirun")])
    if command == "run":
        planned = plan(cfg)                                   # stages and their settings validate
        for entry in cfg.audit_plan:
            assert set(entry["models"]) <= {s.name for s in planned}, entry
        if "data.canaries.file=my_canaries.jsonl" in overrides:   # planted somewhere, and audited
            trained_on = {d for s in planned for key in ("datasets", "prompts") for d in s.given.get(key) or []}
            assert "canaries" in trained_on and any("canaries" in e["datasets"] for e in cfg.audit_plan)


def test_every_json_row_shown_is_accepted(tmp_path):
    rows = [json.loads(line) for block in blocks("json") for line in block.splitlines() if line.strip()]
    canaries = [r for r in rows if "target" in r]
    pairs = [r for r in rows if "chosen" in r]
    assert canaries and pairs and len(canaries) + len(pairs) == len(rows)
    count = lambda text: len(text.encode("utf-8"))            # noqa: E731  (bytes: what a new model gets)
    for name, subset, reader in (("c.jsonl", canaries, read_canaries), ("p.jsonl", pairs, read_preference_pairs)):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in subset))
        assert len(reader(path, count, 10, "bytes")) == len(subset)
