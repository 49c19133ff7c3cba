"""memlens.recipes.stages.contract.run_recipe, the one stage runner: setup -> train -> save -> evaluate in that order, provenance.json
last and on the main process only, a finished stage with the same settings skipped, changed settings retrained.
A recording recipe (it writes a file per step) stands in for a trainer: what is under test is the runner."""

import json
import sys
import types

import pytest

from memlens.harness.core.errors import UserError
from memlens.recipes.orchestration.stage_plan import settings_fields
from memlens.recipes.stages.contract import PROVENANCE_FILE, StageContext, StageSettings, run_recipe
from memlens.recipes.stages.registry import STAGES, StageRecipe, canonical_recipe, recipe_module, settings_class


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


def no_settings():
    """The base settings with nothing set: what a recipe's settings share, parsed as the plan parses them."""
    return StageSettings.load({}, "X.1")


@pytest.fixture(autouse=True)
def fresh_calls(monkeypatch):
    Recording.calls = []
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def test_the_runner_runs_the_contract_in_order_then_writes_provenance(tmp_path):
    ctx = StageContext(tmp_path, "X.1")
    run_recipe(Recording, no_settings(), ctx)
    assert Recording.calls == ["setup", "train", "save", "evaluate"]
    record = json.loads((ctx.out_dir / PROVENANCE_FILE).read_text())
    assert record["stage"] == "recording" and record["steps"] == 3 and record["settings"] == {}
    run_recipe(Recording, no_settings(), ctx)                      # finished with these settings: skipped
    assert Recording.calls == ["setup", "train", "save", "evaluate"]


def test_only_the_main_process_writes_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    ctx = StageContext(tmp_path, "X.1")
    run_recipe(Recording, no_settings(), ctx)
    assert Recording.calls == ["setup", "train", "save", "evaluate"]   # every process trains (the trainer shards)
    assert not (ctx.out_dir / PROVENANCE_FILE).exists()
    monkeypatch.setenv("RANK", "0")
    run_recipe(Recording, no_settings(), ctx)
    assert (ctx.out_dir / PROVENANCE_FILE).is_file()


class NoDatasets(Recording):
    def provenance(self):
        return {"init_model": "base"}


def test_a_recipe_whose_provenance_names_no_datasets_records_none(tmp_path):
    """`datasets` has a default: a stage that reads none of the run's datasets (a plugin's checkpoint average) may
    leave it out of provenance(), instead of a TypeError after it trained and saved."""
    ctx = StageContext(tmp_path, "X.1")
    run_recipe(NoDatasets, no_settings(), ctx)
    record = json.loads((ctx.out_dir / PROVENANCE_FILE).read_text())
    assert record["datasets"] == {} and record["init_model"] == "base" and record["stage"] == "recording"


def test_a_recipe_module_without_its_settings_annotation_is_refused_where_it_is_resolved(monkeypatch):
    """The plan reads a stage's keys from load_settings' return annotation; a module without it is refused when the
    plan resolves it (before anything trains), naming the module and the fix, not with a KeyError: 'return'."""
    module = types.ModuleType("lab_stage_plugin")
    module.load_settings = lambda settings, stage: StageSettings.load(settings, stage)
    module.run_stage = lambda settings, ctx: None
    monkeypatch.setitem(sys.modules, module.__name__, module)
    fix = (r"stages\.S\.recipe='lab': recipe module 'lab_stage_plugin': annotate load_settings' return type with its "
           r"StageSettings subclass")
    with STAGES.registered("lab", StageRecipe(module.__name__, "a test stage")):
        with pytest.raises(UserError, match=fix):
            recipe_module("lab", "S")
        with pytest.raises(UserError, match=fix):
            settings_fields("lab", "S")                              # where the plan read it

        def returns_a_dict(settings, stage) -> dict: ...
        module.load_settings = returns_a_dict
        with pytest.raises(UserError, match=r"\(it is annotated <class 'dict'>\)"):
            recipe_module("lab", "S")

        def unresolvable(settings, stage) -> "LabSettings": ...      # noqa: F821 - a name the module lacks
        module.load_settings = unresolvable
        with pytest.raises(UserError, match=r"defined at the module's top \(name 'LabSettings' is not defined\)"):
            recipe_module("lab", "S")

        del module.run_stage
        with pytest.raises(UserError, match=r"recipe module 'lab_stage_plugin' has no run_stage\(\)"):
            recipe_module("lab", "S")

        def annotated(settings, stage) -> StageSettings: ...
        module.load_settings, module.run_stage = annotated, lambda settings, ctx: None
        assert settings_class(recipe_module("lab", "S"), "x") is StageSettings
        assert settings_fields("lab", "S") == {"model", "deepspeed", "lr", "save_steps", "logging_steps"}


def test_every_registered_stage_is_a_module_with_the_runner_s_entry_points():
    from memlens.recipes.stages.registry import recipe_module

    for name in STAGES:
        module = recipe_module(name, "S")
        assert callable(module.run_stage) and callable(module.load_settings), name
    assert canonical_recipe("ipo", "S") == "preference"
    with pytest.raises(UserError, match=r"stages\.S\.recipe='dpo': use one of pretrain, sft, reward, rl, preference"):
        canonical_recipe("dpo", "S")


def test_shared_settings_live_in_the_base_and_each_recipe_keeps_its_own_defaults():
    """TRL's pattern: the fields every stage has are declared once (StageSettings), a recipe redeclares one only for
    its own default; the parsed object keeps the mapping it was given, which provenance records."""
    import dataclasses

    from memlens.recipes.stages.registry import recipe_module

    shared = {f.name for f in dataclasses.fields(StageSettings)}
    assert shared == {"model", "deepspeed", "lr", "save_steps", "logging_steps"}
    lrs = {}
    for name in ("pretrain", "sft", "reward", "rl", "preference"):      # the built-ins (a plugin may add more)
        cls = recipe_module(name, "S").load_settings.__annotations__["return"]
        cls = getattr(recipe_module(name, "S"), cls) if isinstance(cls, str) else cls
        assert issubclass(cls, StageSettings) and shared <= {f.name for f in dataclasses.fields(cls)}, name
        lrs[name] = next(f.default for f in dataclasses.fields(cls) if f.name == "lr")
    assert lrs == {"pretrain": 2e-3, "sft": 1e-3, "reward": 1e-5, "rl": 3e-6, "preference": 1e-6}
    given = {"init": "PT", "datasets": ["pairs_sd_base"], "lr": 1e-4}
    parsed = recipe_module("preference", "IPO").load_settings(given, "IPO")
    assert parsed.lr == 1e-4 and parsed.objective == "ipo" and parsed.given == given
    given["lr"] = 2e-4
    assert parsed.given["lr"] == 1e-4                          # a copy: what was parsed is what provenance records
