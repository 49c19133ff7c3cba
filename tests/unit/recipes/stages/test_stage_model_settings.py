"""The `model` key of the RM, RL and IPO stages (the preset the pipeline injects): checked like SFT's, with
errors that name `stages.<NAME>.model...` and the valid keys."""

import dataclasses
import re

import pytest

from memlens.harness.core.errors import UserError
from memlens.recipes.stages import preference, pretrain, reward, rl, sft
from memlens.recipes.stages.contract import StageSettings

MINIMAL = {reward: {"init": "FT.1", "datasets": ["rm_pd2"]},
           rl: {"init": "FT.1", "reward_model": "RM.1", "prompts": ["pd_3"]},
           preference: {"init": "PT", "datasets": ["pairs_sd_base"]}}
RECIPES = [pytest.param(module, id=module.__name__.split(".")[-1]) for module in MINIMAL]


@pytest.mark.parametrize("module", RECIPES)
@pytest.mark.parametrize("model, message", [
    ({"bogus": 1}, "stages.S.1.model: unknown key(s) ['bogus']; valid keys are ["),
    ({"lora": {"enabled": True, "rank": 8}}, "stages.S.1.model.lora: unknown key(s) ['rank']; valid keys are ["),
    ({"lora": {"enabled": True, "r": 0}}, "stages.S.1.model.lora.r=0"),
    ({"lora": {"enabled": "yes"}}, "stages.S.1.model.lora.enabled='yes'"),
    ({"dtype": "fp8"}, "stages.S.1.model.dtype='fp8'"),
])
def test_bad_model_key_names_the_stage_and_the_key(module, model, message):
    with pytest.raises(UserError, match=re.escape(message)):
        module.load_settings({**MINIMAL[module], "model": model}, "S.1")


# Every stage recipe: PT and FT as well as RM, RL and IPO.
EVERY = {**MINIMAL, pretrain: {"datasets": ["pd_pt"]}, sft: {"init": "PT", "datasets": ["pd_1"]}}
EVERY_RECIPE = [pytest.param(module, id=module.__name__.split(".")[-1]) for module in EVERY]


@pytest.mark.parametrize("module", EVERY_RECIPE)
def test_every_recipe_loads_its_settings_through_the_one_strict_loader(module):
    """One base (recipes.stages.contract.StageSettings): an unknown key names the stage, the key and the valid keys;
    a bool field takes only a real boolean; a bad value names stages.<NAME>.<key>=<value>."""
    settings = module.load_settings(dict(EVERY[module]), "S.1")
    assert isinstance(settings, StageSettings)
    with pytest.raises(UserError, match=re.escape("stages.S.1: unknown key(s) ['modle']; valid keys are [")):
        module.load_settings({**EVERY[module], "modle": {}}, "S.1")
    with pytest.raises(UserError, match=r"valid keys are \[.*'model'"):
        module.load_settings({**EVERY[module], "modle": {}}, "S.1")
    for flag in [f.name for f in dataclasses.fields(settings) if f.type in (bool, "bool")]:
        with pytest.raises(UserError, match=re.escape(f"stages.S.1.{flag}")):
            module.load_settings({**EVERY[module], flag: "yes"}, "S.1")
    with pytest.raises(UserError, match=re.escape("stages.S.1.lr=-1.0: ")):
        module.load_settings({**EVERY[module], "lr": -1.0}, "S.1")
    assert "where" not in dataclasses.asdict(settings)      # provenance records settings, not where they came from


@pytest.mark.parametrize("module", RECIPES)
def test_fim_family_comes_from_the_preset_unless_the_stage_names_one(module):
    preset = {"fim_family": "starcoder2", "dtype": "bfloat16", "lora": {"enabled": True}}
    settings = module.load_settings({**MINIMAL[module], "model": preset}, "S.1")
    assert settings.fim_family == "starcoder2" and settings.model_settings.lora_settings.enabled
    assert settings.model_settings.dtype == "bfloat16"
    own = module.load_settings({**MINIMAL[module], "model": preset, "fim_family": "memlens"}, "S.1")
    assert own.fim_family == "memlens"
    assert module.load_settings(dict(MINIMAL[module]), "S.1").model_settings.lora_settings.enabled is False
