"""The stage recipes an experiment can name (`stages.<NAME>.recipe`), one registry.

A recipe is a module with `load_settings(settings, stage) -> <its StageSettings subclass>` (strict: every key
checked, the error naming `stages.<NAME>.<key>`; the plan calls it once per stage) and `run_stage(settings, ctx:
StageContext)`, which trains from that parsed object (setup, train, save, then provenance.json last, resumable from
its last checkpoint). The plan reads the keys a stage accepts from load_settings' return annotation, so a module that
lacks either function or the annotation is refused, naming it, when it is first resolved. The built-in recipes are
imported here by name, so a reader (or an import-graph tool) follows `memlens run` to each trainer's config through
imports alone; they import no trainer at module level (torch, transformers and TRL load when a stage trains: ~0.1 s
for all five). A plugin's recipe is a `module` path string, imported when a stage first uses it. A new stage is its
module plus one `STAGES.register(...)`.
"""

from __future__ import annotations

import importlib
import typing
from dataclasses import dataclass
from types import ModuleType

from memlens.harness.core.errors import UserError
from memlens.harness.core.registry import Registry
from memlens.recipes.stages import preference, pretrain, reward, rl, sft
from memlens.recipes.stages.contract import StageSettings


@dataclass(frozen=True)
class StageRecipe:
    module: ModuleType | str   # load_settings(mapping, stage) and run_stage(parsed settings, ctx): the module itself
    #                            (built-ins) or its importable path (a plugin's, imported on first use)
    trains: str        # one line for docs and messages


STAGES: Registry[StageRecipe] = Registry("stage recipe", "recipe")
STAGES.register("pretrain", StageRecipe(pretrain, "FIM pre-training (or the shipped base)"))
STAGES.register("sft", StageRecipe(sft, "supervised fine-tuning with FIM (PSM)"))
STAGES.register("reward", StageRecipe(reward, "a reward model (pointwise or pairwise)"))
STAGES.register("rl", StageRecipe(rl, "RL with a KL penalty: RLOO, GRPO (TRL) or PPO"))
STAGES.register("preference", StageRecipe(preference, "a preference objective: IPO, DPO, DPO+NLL, SimPO, CPO, ORPO, KTO"))
# Older names an experiment may still use: the preference stage was `recipe: ipo` before it trained seven objectives.
ALIASES = {"ipo": "preference"}


def canonical_recipe(recipe: object, stage: str) -> str:
    """The registered name of `stages.<stage>.recipe` (an older alias resolved); unknown names are refused."""
    name = ALIASES.get(recipe, recipe) if isinstance(recipe, str) else recipe
    if name not in STAGES:
        raise UserError(f"stages.{stage}.recipe={recipe!r}: use one of {', '.join(STAGES)}")
    return name


def recipe_module(recipe: str, stage: str) -> ModuleType:
    """The module of a (registered or aliased) recipe (a plugin's imported on first use), checked against the
    contract, so that a plugin's slip fails when the run is planned, naming its module, not later inside a trainer."""
    module = STAGES[canonical_recipe(recipe, stage)].module
    if isinstance(module, str):
        module = importlib.import_module(module)
    settings_class(module, f"stages.{stage}.recipe={recipe!r}")
    return module


def settings_class(module: ModuleType, where: str) -> type[StageSettings]:
    """The StageSettings subclass a recipe module's `load_settings` returns, read from its return annotation (the
    plan reads the keys a stage accepts from it before any settings are parsed)."""
    fix = (f"{where}: recipe module {module.__name__!r}: annotate load_settings' return type with its StageSettings "
           "subclass, e.g. `def load_settings(settings: dict, stage: str) -> MySettings:`")
    for entry in ("load_settings", "run_stage"):
        if not callable(getattr(module, entry, None)):
            raise UserError(f"{where}: recipe module {module.__name__!r} has no {entry}(); define "
                            "load_settings(settings, stage) and run_stage(settings, ctx) (docs/architecture.md, "
                            "'How to add a stage')")
    try:
        cls = typing.get_type_hints(module.load_settings).get("return")
    except NameError as e:      # a string annotation naming what the module does not define at its top
        raise UserError(f"{fix} defined at the module's top ({e})") from e
    if not (isinstance(cls, type) and issubclass(cls, StageSettings)):
        raise UserError(fix if cls is None else f"{fix} (it is annotated {cls!r})")
    return cls
