"""The stage recipes an experiment can name (`stages.<NAME>.recipe`), one registry.

A recipe is a module with `load_settings(settings, stage) -> <its StageSettings subclass>` (strict: every key
checked, the error naming `stages.<NAME>.<key>`; the plan calls it once per stage) and `run_stage(settings, ctx:
StageContext)`, which trains from that parsed object (setup, train, save, then provenance.json last, resumable from
its last checkpoint). Modules are imported when a stage uses
them, so listing the recipes loads no trainer. A new stage is its module plus one `STAGES.register(...)`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from memlens.harness.core.errors import UserError
from memlens.harness.core.registry import Registry


@dataclass(frozen=True)
class StageRecipe:
    module: str        # importable: load_settings(mapping, stage) and run_stage(parsed settings, ctx)
    trains: str        # one line for docs and messages


STAGES: Registry[StageRecipe] = Registry("stage recipe", "recipe")
STAGES.register("pretrain", StageRecipe("memlens.recipes.stages.pretrain", "FIM pre-training (or the shipped base)"))
STAGES.register("sft", StageRecipe("memlens.recipes.stages.sft", "supervised fine-tuning with FIM (PSM)"))
STAGES.register("reward", StageRecipe("memlens.recipes.stages.reward", "a reward model (pointwise or pairwise)"))
STAGES.register("rl", StageRecipe("memlens.recipes.stages.rl", "RL with a KL penalty: RLOO, GRPO (TRL) or PPO"))
STAGES.register("preference", StageRecipe("memlens.recipes.stages.preference",
                                          "a preference objective: IPO, DPO, DPO+NLL, SimPO, CPO, ORPO, KTO"))
# Older names an experiment may still use: the preference stage was `recipe: ipo` before it trained seven objectives.
ALIASES = {"ipo": "preference"}


def canonical_recipe(recipe: object, stage: str) -> str:
    """The registered name of `stages.<stage>.recipe` (an older alias resolved); unknown names are refused."""
    name = ALIASES.get(recipe, recipe) if isinstance(recipe, str) else recipe
    if name not in STAGES:
        raise UserError(f"stages.{stage}.recipe={recipe!r}: use one of {', '.join(STAGES)}")
    return name


def recipe_module(recipe: str, stage: str):
    """The module of a (registered or aliased) recipe, imported on first use."""
    return importlib.import_module(STAGES[canonical_recipe(recipe, stage)].module)
