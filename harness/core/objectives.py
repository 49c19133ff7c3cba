"""The preference objectives, one registry: what each is, for the preference stage that trains it
(recipes/stages/preference.py builds its TRL trainer from `trainer` and `loss_type`) and for the report and findings that
compare them (P1-P3 group them by `reference`). It sits in core, below both, because both read it.

Adding an objective: one `OBJECTIVES.register(name, Objective(...))` here (or in your module) naming one of the
trainers of recipes/stages/preference.py's TRAINERS (DPOTrainer, KTOTrainer, CPOTrainer, ORPOTrainer); an objective that
needs another TRL trainer also registers a builder there.
"""

from __future__ import annotations

from dataclasses import dataclass

from memlens.harness.core.registry import Registry


@dataclass(frozen=True)
class Objective:
    """One preference objective: its label, which TRL trainer runs it and how."""

    label: str                   # as tables and figures print it
    trainer: str                 # a key of recipes/stages/preference.py TRAINERS: dpo | kto | cpo | orpo
    reference: bool              # anchored to the initial model (a KL or log-ratio term) or reference-free
    nll: bool                    # has an NLL term on the chosen completion
    beta: float                  # β when the stage sets none: TRL's default, or the objective paper's
    loss_type: tuple[str, ...] | str = ()   # DPOTrainer's loss_type list, CPOTrainer's loss_type


OBJECTIVES: Registry[Objective] = Registry("preference objective", "objective")
OBJECTIVES.register("ipo", Objective("IPO", "dpo", reference=True, nll=False, beta=0.1, loss_type=("ipo",)))
OBJECTIVES.register("dpo", Objective("DPO", "dpo", reference=True, nll=False, beta=0.1, loss_type=("sigmoid",)))
OBJECTIVES.register("dpo+sft", Objective("DPO+NLL", "dpo", reference=True, nll=True, beta=0.1,
                                         loss_type=("sigmoid", "sft")))
# SimPO's β: the paper's 2.0 (its models use 2.0-2.5; TRL's CPOConfig default, 0.1, is CPO's); γ TRL's 0.5
OBJECTIVES.register("simpo", Objective("SimPO", "cpo", reference=False, nll=False, beta=2.0, loss_type="simpo"))
OBJECTIVES.register("cpo", Objective("CPO", "cpo", reference=False, nll=True, beta=0.1, loss_type="sigmoid"))
OBJECTIVES.register("orpo", Objective("ORPO", "orpo", reference=False, nll=True, beta=0.1))
OBJECTIVES.register("kto", Objective("KTO", "kto", reference=True, nll=False, beta=0.1))
DEFAULT_OBJECTIVE = "ipo"        # paper 003 Sec. 5.4's
PREFERENCE_STAGE = "preference"  # the stage recipe that trains them, as provenance.json's `stage` records it
OLDER_STAGE_NAMES = ("ipo",)     # ... and as runs recorded it before the recipe was named for all its objectives


def is_preference_stage(stage: str | None) -> bool:
    return stage == PREFERENCE_STAGE or stage in OLDER_STAGE_NAMES


def recorded_objective(hyperparameters: dict) -> str:
    """The objective a preference stage's provenance records (older runs: the `loss` key, or none for IPO)."""
    return str(hyperparameters.get("objective") or hyperparameters.get("loss") or DEFAULT_OBJECTIVE)
