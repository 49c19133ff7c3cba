"""The preference stage: IPO (paper 003 Sec. 5.4, Fig. 6b) and the preference objectives used since.

    memlens train experiment=smoke        # every stage of the experiment, IPO among them
    memlens run -m experiment=preference_objectives stages.PREF.objective=ipo,dpo,dpo+sft   # one model each

`objective` picks the loss; every one is TRL's (none is written here), trained on the same pairs, prompts and
budget:
- `ipo` (default; the paper's): Identity Preference Optimization (Azar et al., 2024) through DPOTrainer with
  loss_type="ipo": loss = (Δ - 1/(2β))², Δ the difference of the policy/reference log-ratios of chosen and
  rejected (TRL averages log-probs per token for IPO).
- `dpo`: DPO's sigmoid loss (Rafailov et al., 2023), DPOTrainer loss_type="sigmoid".
- `dpo+sft`: DPO plus the NLL of the chosen completion, DPOTrainer's multi-loss `loss_type=["sigmoid", "sft"]`
  with `loss_weights=[1, sft_weight]`: the RPO recipe (Pang et al., 2024; NLL weight 1) and MPO's mixing.
- `simpo`, `cpo`: reference-free, trl.experimental's CPOTrainer (SimPO, Meng et al., 2024: length-normalised
  log-likelihood margin with target γ, no NLL term; CPO, Xu et al., 2024: sigmoid loss on log-likelihoods plus
  the NLL of the chosen, cpo_alpha = 1).
- `orpo`: reference-free, trl.experimental's ORPOTrainer (Hong et al., 2024): NLL of the chosen plus β × the
  log odds-ratio term.
- `kto`: TRL's KTOTrainer (Ethayarajh et al., 2024) on unpaired rows derived from the same pairs: each pair gives
  its chosen completion as desirable and its rejected one as undesirable (`unpaired_rows`).
`beta` is the objective's β (IPO's τ); unset, each objective takes its customary value (OBJECTIVES), and a
mapping {objective: β} sets it per objective, so that one swept stage can hold every objective at its own β.

The prompt is the FIM context `format_psm_prompt(prefix, suffix)`; chosen / rejected are the completions
followed by EOS, as in PSM training text. The reference of the reference-based objectives is the initial model,
loaded explicitly from the init directory; with `model.lora.enabled` the policy trains LoRA adapters and the
reference is the same model with its adapters disabled (no second copy), and the saved model is merged into a
plain one. After training, the initial and the trained model score the stage's pairs (recipes/stages/preference_eval.py,
`preference_eval.json`): the same evidence for every objective that the stage fit its pairs, whatever its trainer
logs. CPOTrainer and ORPOTrainer put the tokenizer's BOS before every prompt when it has one, also for a family
whose tokenizer does not add it (StarCoder2's BOS is its EOS); the DPO and KTO objectives follow the family.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from memlens.harness.core.io import read_jsonl
from memlens.harness.core.objectives import DEFAULT_OBJECTIVE, OBJECTIVES, PREFERENCE_STAGE
from memlens.harness.core.processes import is_main_process
from memlens.harness.core.registry import Registry
from memlens.harness.core.user_data import repeated
from memlens.harness.text import fim
from memlens.recipes.stages import preference_eval
from memlens.recipes.stages.contract import (
    StageContext,
    StageSettings,
    latest_checkpoint,
    load_init_tokenizer,
    run_recipe,
)
from memlens.recipes.stages.devices import trl_device_kwargs
from memlens.recipes.stages.fim_context import fit_fim_context
from memlens.recipes.stages.models import load_stage_model, lora_config, save_lora_stage, wrap_lora
from memlens.recipes.stages.training_log import attach_stage_console

PAIR_FIELDS = ("id", "prefix", "suffix", "chosen", "rejected")


@dataclass
class PreferenceSettings(StageSettings):
    """Keys of a `recipe: preference` stage (conf/experiment/*.yaml, `stages.<NAME>`; `recipe: ipo`, its older
    name, is accepted)."""

    init: str = ""                 # model to align and KL reference: a stage name (PT) or a model directory
    datasets: list[str] = field(default_factory=list)       # pairwise rows, e.g. [pairs_sd_base, pairs_sd_links]
    eval_datasets: list[str] = field(default_factory=list)  # pairwise validation sets (eval loss)
    objective: str | None = None   # ipo (paper Sec. 5.4; the default) | dpo | dpo+sft | simpo | cpo | orpo | kto
    loss: str | None = None        # the older name of `objective`: refused with a message that names `objective`
    beta: Any = None               # the objective's β (IPO: τ, target margin 1/(2β); smaller -> larger margin, more
                                   # drift); a number, {objective: β} per objective, or unset: OBJECTIVES' value
    sft_weight: float = 1.0        # dpo+sft: weight of the chosen completion's NLL (RPO: 1); ↑ more likelihood on chosen
    simpo_gamma: float = 0.5       # simpo: target reward margin γ (TRL's default)
    eval_pairs: int = 256          # after training: the initial and the trained model score this many of the training
                                   # pairs (recipes/stages/preference_eval.py); 0 skips it
    lr: float = 1e-6               # AdamW learning rate; higher -> fits (and memorizes) the pairs faster
    epochs: float = 1.0            # passes over the pairs
    max_steps: int = -1            # > 0 stops after this many optimizer steps (overrides epochs)
    batch_size: int = 4            # pairs per device step
    grad_accum: int = 1            # gradient accumulation steps
    max_length: int = 1024         # tokens of prompt + completion; TRL cuts longer ones at the end
    context_chars: int = 2000      # keep at most the last N chars of the prefix and first N of the suffix;
                                   # the context is also trimmed (in tokens) so the completion fits max_length
    fim_family: str | None = None  # FIM sentinel family (memlens.harness.text.fim); None = the preset's, else detected

    def __post_init__(self, where: str) -> None:
        super().__post_init__(where)
        if not self.init:
            raise self.bad("init", "set it to the model to align (e.g. PT) or a model directory")
        if isinstance(self.datasets, str):
            self.datasets = [self.datasets]
        if isinstance(self.eval_datasets, str):
            self.eval_datasets = [self.eval_datasets]
        self.datasets, self.eval_datasets = list(self.datasets), list(self.eval_datasets)
        if not self.datasets:
            raise self.bad("datasets", "list at least one pairwise dataset, e.g. [pairs_sd_base, pairs_sd_links]")
        self.objective = self.resolve_objective()
        self.beta = self.resolve_beta()
        for key in ("beta", "lr", "epochs", "simpo_gamma"):
            if not float(getattr(self, key)) > 0:
                raise self.bad(key, "must be > 0")
        if not float(self.sft_weight) >= 0:
            raise self.bad("sft_weight", "must be >= 0 (the RPO recipe uses 1)")
        if int(self.eval_pairs) < 0:
            raise self.bad("eval_pairs", "use 0 (no evaluation) or a positive number of pairs, e.g. 256")
        for key in ("batch_size", "grad_accum", "max_length", "context_chars", "save_steps", "logging_steps"):
            if int(getattr(self, key)) < 1:
                raise self.bad(key, "must be a positive integer")
        if self.objective == "kto" and int(self.batch_size) * 2 < 2:
            raise self.bad("batch_size", "KTO estimates its KL term across a batch; use 1 or more pairs")
        self.resolve_model(where)


    def resolve_objective(self) -> str:
        if self.loss is not None:
            raise self.bad("loss", f"the key is now `objective`; write objective: {self.loss} (one of "
                           f"{', '.join(OBJECTIVES)}) and remove loss")
        if self.objective is not None and self.objective not in OBJECTIVES:
            raise self.bad("objective", f"use one of {', '.join(OBJECTIVES)}")
        return self.objective or DEFAULT_OBJECTIVE

    def resolve_beta(self) -> float:
        """β of this stage's objective: the stage's number, its entry in a {objective: β} mapping, or OBJECTIVES'."""
        beta = self.beta
        if isinstance(beta, dict):
            unknown = sorted(set(beta) - set(OBJECTIVES))
            if unknown:
                raise self.bad("beta", f"unknown objective(s) {unknown} in the mapping; use {', '.join(OBJECTIVES)}")
            beta = beta.get(self.objective)
        if beta is None:
            return OBJECTIVES[self.objective].beta
        try:
            return float(beta)
        except (TypeError, ValueError):
            raise self.bad("beta", "give a number, or a mapping {objective: number}") from None


def unpaired_rows(rows: list[dict]) -> list[dict]:
    """KTO's unpaired data from pairs (`prompt`, `chosen`, `rejected`): the chosen completion desirable, the
    rejected one undesirable, each pair's two rows next to each other (the trainer shuffles)."""
    return [row for r in rows for row in ({"prompt": r["prompt"], "completion": r["chosen"], "label": True},
                                          {"prompt": r["prompt"], "completion": r["rejected"], "label": False})]


def load_settings(settings: dict[str, Any], stage: str) -> PreferenceSettings:
    return PreferenceSettings.load(settings, stage)


class PreferenceRecipe:
    """setup -> train -> save -> evaluate for one preference stage (IPO or another objective; memlens.recipes.stages.contract.run_recipe
    drives it)."""

    stage = PREFERENCE_STAGE

    def __init__(self, cfg: PreferenceSettings, ctx: StageContext):
        self.cfg, self.ctx = cfg, ctx

    def setup(self) -> None:
        self.preset = self.cfg.model_settings
        self.init_dir, self.tokenizer, self.sentinels = load_init_tokenizer(self.ctx, self.cfg.init, self.preset,
                                                                            self.cfg.fim_family)
        self.policy = load_stage_model(self.init_dir, self.preset, self.ctx.device)
        # With LoRA, DPOTrainer (and KTOTrainer) get a peft_config and no ref_model: they then compute the reference
        # log-probs with the adapters disabled (`use_adapter(model, None)`), i.e. with the frozen initial model.
        # A reference-free objective has none.
        self.reference = (None if self.preset.lora_settings.enabled or not OBJECTIVES[self.cfg.objective].reference
                          else load_stage_model(self.init_dir, self.preset, self.ctx.device).eval())
        self.rows = {name: read_jsonl(self.ctx.data_dir(name) / "rows.jsonl", required=PAIR_FIELDS)
                     for name in dict.fromkeys(self.cfg.datasets + self.cfg.eval_datasets)}

    def dataset(self, names: list[str]):
        """The trainer's rows: pairs, or for KTO the same pairs unpaired (unpaired_rows)."""
        from datasets import Dataset  # datasets (~0.7 s): on training, not when plan.py loads the recipe

        pairs = self.pair_examples(names)
        return Dataset.from_list(unpaired_rows(pairs) if self.cfg.objective == "kto" else pairs)

    def pair_examples(self, names: list[str]) -> list[dict]:
        """prompt = PSM prompt, chosen/rejected = completion + EOS; several sets shuffled together."""
        eos = self.eos()
        rows = [r for name in names for r in repeated(self.rows[name])]   # a user row's `repeat` copies
        random.Random(self.ctx.seed).shuffle(rows)
        return [{"prompt": fim.format_psm_prompt(r["prefix"], r["suffix"], self.sentinels),
                 "chosen": r["chosen"] + eos, "rejected": r["rejected"] + eos} for r in self.trimmed(rows)]

    def eos(self) -> str:
        return self.sentinels.eos or self.tokenizer.eos_token

    def trimmed(self, rows: list[dict]) -> list[dict]:
        """The rows with the context the stage trains on: `context_chars` each side, then fit to max_length."""
        eos, n = self.eos(), self.cfg.context_chars
        out = []
        for r in rows:
            prefix, suffix = self.fit_context(r["prefix"][-n:], r["suffix"][:n], [r["chosen"] + eos, r["rejected"] + eos])
            out.append({**r, "prefix": prefix, "suffix": suffix})
        return out

    def fit_context(self, prefix: str, suffix: str, completions: list[str]) -> tuple[str, str]:
        """Trim the FIM context so prompt + completion fit max_length with the completion whole.

        TRL truncates at the end (keep_start), which would cut the chosen/rejected lines: the very
        tokens IPO learns from (memlens.recipes.stages.fim_context.fit_fim_context keeps the context nearest the hole)."""
        longest = max(len(self.tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions)
        prefix, suffix, _ = fit_fim_context(self.tokenizer, prefix, suffix, longest, self.cfg.max_length)
        return prefix, suffix

    def common_args(self, batch_size: int) -> dict[str, Any]:
        """What every objective's TRL config shares: budget, schedule, checkpoints, seed, device."""
        cfg = self.cfg
        return dict(output_dir=str(self.ctx.out_dir), beta=cfg.beta, learning_rate=cfg.lr,
                    num_train_epochs=cfg.epochs, max_steps=cfg.max_steps, per_device_train_batch_size=batch_size,
                    per_device_eval_batch_size=batch_size, gradient_accumulation_steps=cfg.grad_accum,
                    max_length=cfg.max_length, save_strategy="steps", save_steps=cfg.save_steps,
                    save_only_model=False, logging_steps=cfg.logging_steps,
                    eval_strategy="steps" if cfg.eval_datasets else "no",
                    eval_steps=cfg.save_steps if cfg.eval_datasets else None,
                    seed=self.ctx.seed, data_seed=self.ctx.seed,
                    **trl_device_kwargs(self.ctx.device, self.cfg.deepspeed))

    def trainer_for_objective(self):
        """The TRL trainer of `objective` (harness/core/objectives.py), built by its TRAINERS entry."""
        cfg = self.cfg
        data = dict(train_dataset=self.dataset(cfg.datasets),
                    eval_dataset=self.dataset(cfg.eval_datasets) if cfg.eval_datasets else None,
                    processing_class=self.tokenizer, peft_config=lora_config(self.preset))
        objective = OBJECTIVES[cfg.objective]
        return TRAINERS[objective.trainer](self, objective, data)

    def train(self) -> None:
        self.trainer = self.trainer_for_objective()
        attach_stage_console(self.trainer, self.ctx)
        resume = latest_checkpoint(self.ctx.out_dir)
        self.trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    def provenance(self) -> dict[str, Any]:
        return dict(datasets=list(self.rows), init_model=str(self.init_dir), hyperparameters=asdict(self.cfg))

    def evaluate(self) -> None:
        """Log-probabilities of the training pairs under the initial and the trained model (preference_eval.json)."""
        if not is_main_process() or not self.cfg.eval_pairs:
            return
        rows = self.trimmed([r for name in self.cfg.datasets for r in self.rows[name]])   # each pair once
        load = lambda d: load_stage_model(d, self.preset, self.ctx.device).to(self.ctx.device)  # noqa: E731
        preference_eval.evaluate(lambda: load(self.init_dir), load(self.ctx.out_dir), self.tokenizer, self.sentinels,
                                 rows, n_pairs=self.cfg.eval_pairs, seed=self.ctx.seed, out_dir=self.ctx.out_dir,
                                 objective=self.cfg.objective)

    def save(self) -> None:
        if self.preset.lora_settings.enabled:
            # Merged, so the audit loads a plain model at the stage root, as after full fine-tuning; under ZeRO-3
            # gathered by every process first into the init model in the adapters the trainer added (save_lora_stage).
            save_lora_stage(self.trainer, self.tokenizer, self.ctx.out_dir,
                            lambda: wrap_lora(load_stage_model(self.init_dir, self.preset, self.ctx.device), self.preset))
            return
        self.trainer.save_model(str(self.ctx.out_dir))
        self.tokenizer.save_pretrained(str(self.ctx.out_dir))


# The TRL trainers the objectives run on: (recipe, objective, data) -> a trainer ready to train. An objective names
# one (Objective.trainer); a new objective on a new TRL trainer registers its builder here.
TRAINERS: Registry = Registry("preference trainer", "Objective.trainer")


@TRAINERS.register("dpo")
def dpo_trainer(recipe: PreferenceRecipe, objective, data: dict):
    from trl import DPOConfig, DPOTrainer  # trl (~3 s): on training, not when plan.py loads the recipe

    weights = [1.0, float(recipe.cfg.sft_weight)] if objective.nll else None   # DPOTrainer's multi-loss weights
    args = DPOConfig(loss_type=list(objective.loss_type), loss_weights=weights,
                     **recipe.common_args(recipe.cfg.batch_size))
    return DPOTrainer(model=recipe.policy, ref_model=recipe.reference, args=args, **data)


@TRAINERS.register("kto")
def kto_trainer(recipe: PreferenceRecipe, objective, data: dict):
    from trl import KTOConfig, KTOTrainer  # trl (~3 s): on training, not when plan.py loads the recipe

    # Each pair gives two rows, so a step sees the completions of batch_size pairs, as the paired objectives do.
    args = KTOConfig(**recipe.common_args(2 * recipe.cfg.batch_size))
    return KTOTrainer(model=recipe.policy, ref_model=recipe.reference, args=args, **data)


@TRAINERS.register("cpo")
def cpo_trainer(recipe: PreferenceRecipe, objective, data: dict):
    from trl.experimental.cpo import CPOConfig, CPOTrainer  # trl (~3 s): on training, not when plan.py loads the recipe

    args = CPOConfig(loss_type=objective.loss_type, cpo_alpha=1.0 if objective.nll else 0.0,
                     simpo_gamma=recipe.cfg.simpo_gamma, **recipe.common_args(recipe.cfg.batch_size))
    return CPOTrainer(model=recipe.policy, args=args, **data)


@TRAINERS.register("orpo")
def orpo_trainer(recipe: PreferenceRecipe, objective, data: dict):
    # trl (~3 s): on training, not when plan.py loads the recipe
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    return ORPOTrainer(model=recipe.policy, args=ORPOConfig(**recipe.common_args(recipe.cfg.batch_size)), **data)


def run_stage(settings: PreferenceSettings, ctx: StageContext) -> None:
    run_recipe(PreferenceRecipe, settings, ctx)
