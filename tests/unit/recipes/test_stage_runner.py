"""recipes.common.run_recipe, the one stage runner: setup -> train -> save -> evaluate in that order, provenance.json
last and on the main process only, a finished stage with the same settings skipped, changed settings retrained.
A recording recipe (it writes a file per step) stands in for a trainer: what is under test is the runner."""

import json

import pytest

from memlens.harness.core.errors import UserError
from memlens.recipes.common import PROVENANCE_FILE, StageContext, StageSettings, run_recipe
from memlens.recipes.stages import STAGES, canonical_recipe


class Recording:
    stage = "recording"
    calls: list[str] = []

    def __init__(self, cfg, ctx):
        self.cfg, self.ctx = cfg, ctx

    def _step(self, name):
        Recording.calls.append(name)
        assert not (self.ctx.out_dir / PROVENANCE_FILE).exists()       # provenance comes last

    def setup(self):
        self._step("setup")

    def train(self):
        self._step("train")
        self.ctx.out_dir.mkdir(parents=True, exist_ok=True)

    def save(self):
        self._step("save")

    def evaluate(self):
        self._step("evaluate")

    def provenance(self):
        return {"datasets": [], "init_model": "base", "steps": 3}


def load(settings, stage):
    return StageSettings.load(settings, stage) if settings else None


@pytest.fixture(autouse=True)
def fresh_calls(monkeypatch):
    Recording.calls = []
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def test_the_runner_runs_the_contract_in_order_then_writes_provenance(tmp_path):
    ctx = StageContext(tmp_path, "X.1")
    run_recipe(Recording, load, {}, ctx)
    assert Recording.calls == ["setup", "train", "save", "evaluate"]
    record = json.loads((ctx.out_dir / PROVENANCE_FILE).read_text())
    assert record["stage"] == "recording" and record["steps"] == 3 and record["settings"] == {}
    run_recipe(Recording, load, {}, ctx)                      # finished with these settings: skipped
    assert Recording.calls == ["setup", "train", "save", "evaluate"]


def test_only_the_main_process_writes_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    ctx = StageContext(tmp_path, "X.1")
    run_recipe(Recording, load, {}, ctx)
    assert Recording.calls == ["setup", "train", "save", "evaluate"]   # every process trains (the trainer shards)
    assert not (ctx.out_dir / PROVENANCE_FILE).exists()
    monkeypatch.setenv("RANK", "0")
    run_recipe(Recording, load, {}, ctx)
    assert (ctx.out_dir / PROVENANCE_FILE).is_file()


def test_every_registered_stage_is_a_module_with_the_runner_s_entry_points():
    from memlens.recipes.stages import recipe_module

    for name in STAGES:
        module = recipe_module(name, "S")
        assert callable(module.run_stage) and callable(module.load_settings), name
    assert canonical_recipe("ipo", "S") == "preference"
    with pytest.raises(UserError, match=r"stages\.S\.recipe='dpo': use one of pretrain, sft, reward, rl, preference"):
        canonical_recipe("dpo", "S")
