"""RLFT stage: REINFORCE with a KL penalty towards the initial model (paper 003 Sec. 2.1, Appendix A.3).

    memlens train experiment=smoke                       # every stage, RLFT.* among them
    # a stage with `sweep: {beta: [0.005, 0.1, 0.5]}` trains one model per point: RLFT.1/beta=0.005, ...

The paper optimizes the FT model against the RM score "using a variant of REINFORCE with a KL
regularization term towards the initial model" (A.3), α being the KL coefficient (Sec. 5). Here:
TRL's RLOOTrainer (REINFORCE Leave-One-Out). Its `beta` is α: the k1 estimate
sum_t log pi(y_t) - log pi_ref(y_t) of each completion is subtracted from its reward, scaled by beta.
`algorithm: grpo` uses GRPOTrainer instead (per-token k3 KL in the loss; beta must be > 0 so a
reference model is loaded). `algorithm: ppo` runs our own compact PPO (recipes/stages/ppo.py; TRL removed its
PPOTrainer in 1.13) in the form of Ziegler et al. 2019 and InstructGPT: per-token reward
-beta * (log pi - log pi_ref) plus the RM score at the last token, GAE advantages on a value model
initialised from the RM, clipped surrogate; the `ppo_*`, `gamma`, `gae_lambda`, `clip_range`, `vf_coef`,
`value_clip`, `target_kl`, `kl_horizon` keys apply to it only. The three share prompts, reward,
checkpoints (checkpoint-<step>/ every save_steps), resume and provenance. After training, the initial and
the trained policy complete the same `eval_prompts` fixed prompts and the RM scores both
(recipes/stages/rl_eval.py, `reward_eval.json`): the findings' evidence that the reward rose.

Only prompts are used (Sec. 2.1: "the associated targets are discarded"): FIM rows (id, prefix, target,
suffix) give `format_psm_prompt(prefix, suffix)`; code rows (id, text, source_file) are split at a
seeded random line into prefix / (discarded) line / suffix first; sd_rl_prompts rows (Sec. 5.3) give
their SD example's whole FIM context (`rl_prefix`, `rl_suffix`), whose first 100 tokens the audit
checks. The reward of a completion is the RM score of `format_psm_training(prefix, completion, suffix)`
— exactly the text the RM was trained on.

Models load in the model preset's dtype (recipes/stages/models.py). With `model.lora.enabled` the policy trains
LoRA adapters (RLOO/GRPO through TRL's `peft_config`; PPO's value model also its score head), the KL
reference is the initial model, and the policy saved at the stage root is merged into a plain model;
checkpoints hold the adapters. The reward model is frozen and never gets adapters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from memlens.harness.core.processes import is_main_process, world_size
from memlens.harness.core.stats import reward_score_stats
from memlens.harness.core.user_data import repeated
from memlens.harness.model.load import model_fingerprint
from memlens.harness.model.rewards import score_texts
from memlens.harness.text import fim
from memlens.harness.text.rl_contexts import prompt_contexts, split_code_at_line  # noqa: F401  (tests)
from memlens.recipes.sandbox import runner as sandbox
from memlens.recipes.stages import ppo, rl_eval, verifiable_rewards
from memlens.recipes.stages.contract import (
    PROVENANCE_FILE,
    StageContext,
    StageSettings,
    latest_checkpoint,
    load_init_tokenizer,
    run_recipe,
)
from memlens.recipes.stages.devices import trl_device_kwargs
from memlens.recipes.stages.models import (
    load_sequence_classifier,
    load_stage_model,
    load_tokenizer,
    lora_config,
    save_lora_stage,
    stop_generation_at_family_stops,
    wrap_lora,
)
from memlens.recipes.stages.training_log import TrainLog, attach_stage_console
from memlens.recipes.stages.verifiable_rewards import ROW_FIELDS, FunctionReward, ranking_scores

ALGORITHMS = ("rloo", "grpo", "ppo")   # ppo: ours (recipes/stages/ppo.py), TRL has none since 1.13
REWARD_KINDS = ("model", "function")
REWARD_KEYS = ("kind", "function", "heldout", "sandbox")
REWARD_DIR = "reward_function"         # a function reward's ranking scores on its held-out rows, in the stage dir
PPO_KEYS = ("ppo_epochs", "ppo_minibatches", "clip_range", "vf_coef", "value_clip", "gamma", "gae_lambda",
            "target_kl", "kl_horizon")


@dataclass
class RLSettings(StageSettings):
    """Keys of a `recipe: rl` stage (conf/experiment/*.yaml, `stages.<NAME>`)."""

    init: str = ""                 # policy start and KL reference: an FT stage name or a model directory
    reward_model: str = ""         # the RM stage (or directory) whose score is the reward (reward.kind: model)
    reward: dict[str, Any] = field(default_factory=dict)  # {kind: model} (default): reward_model's score;
                                   # {kind: function, function: identifier_reuse+parses, heldout: [rm_pd2_val]}: a
                                   # verifiable reward (recipes/stages/verifiable_rewards.py), its ranking AUC on `heldout`
                                   # labelled rows the findings' evidence that it rewards the right completions
    prompts: list[str] = field(default_factory=list)  # prompt datasets: FIM rows (sd_*) or code rows (pd_3)
    algorithm: str = "rloo"        # rloo (REINFORCE leave-one-out, KL in the reward) | grpo (KL in the loss)
                                   # | ppo (per-token KL in the reward, GAE, clipped surrogate; recipes/stages/ppo.py)
    beta: float = 0.1              # KL coefficient α; smaller -> policy drifts further from init (Sec. 5.1)
    lr: float = 3e-6               # AdamW learning rate; larger -> more drift/memorization (Appendix E, Fig. 7)
    epochs: float = 1.0            # passes over the prompts (the paper's RLFT.4 runs 14)
    max_steps: int = -1            # > 0 stops after this many optimizer steps (overrides epochs)
    num_generations: int = 4       # completions sampled per prompt (the leave-one-out group), 2..8
    prompts_per_step: int = 2      # prompts per optimizer step; completions per step = this * num_generations
    max_completion_length: int = 64  # tokens per sampled completion
    temperature: float = 1.0       # sampling temperature; lower -> less exploration
    context_chars: int = 2000      # keep the last N chars of the prefix and first N of the suffix in a prompt
    save_steps: int = 50           # a checkpoint-<step>/ every N optimizer steps (each is audited)
    logging_steps: int = 1         # log reward / kl / loss every N steps
    eval_prompts: int = 48         # after training: the initial and the trained policy complete this many fixed
                                   # prompts and the RM scores both (recipes/stages/rl_eval.py; the findings' evidence
                                   # that the reward rose); 0 skips it. ↑ tighter interval, ~1 s per prompt on CPU.
                                   # 24 left the sign test short on a rise of one initial spread (17/24 up, p 0.064)
    eval_samples: int = 4          # sampled completions per evaluation prompt
    fim_family: str | None = None  # FIM sentinel family (memlens.harness.text.fim); None = the preset's, else detected
    # algorithm: ppo only (Ziegler et al. 2019; Schulman et al. 2016/2017 for GAE and clipping)
    ppo_epochs: int = 4            # optimisation passes over each rollout batch; more -> faster drift, less stable
    ppo_minibatches: int = 1       # minibatches per pass (one optimizer step each)
    clip_range: float = 0.2        # PPO ratio clip ε; smaller -> smaller policy steps
    vf_coef: float = 0.1           # weight of the value loss
    value_clip: float = 0.2        # clip of the value prediction's change per rollout
    gamma: float = 1.0             # GAE discount (1: the score at the end counts fully for every token)
    gae_lambda: float = 0.95       # GAE λ; lower -> less variance, more bias from the value model
    target_kl: float | None = None  # adaptive α (Ziegler et al. Sec. 2.2) towards this KL in nats per
                                   # completion (they use 6 for style tasks); null: α = beta, fixed
    kl_horizon: int = 10000        # adaptive α's horizon in samples; larger -> slower adaptation

    def __post_init__(self, where: str) -> None:
        super().__post_init__(where)
        if not self.init:
            raise self.bad("init", "set it to the FT stage to start from (e.g. FT.1) or a model directory")
        self.check_reward()
        if isinstance(self.prompts, str):
            self.prompts = [self.prompts]
        self.prompts = list(self.prompts)
        if not self.prompts:
            raise self.bad("prompts", "name the prompt dataset(s), e.g. pd_3 or [sd_base, sd_links]")
        if self.algorithm not in ALGORITHMS:
            raise self.bad("algorithm", f"use one of {', '.join(ALGORITHMS)}")
        if not float(self.beta) >= 0:
            raise self.bad("beta", "the KL coefficient must be >= 0")
        if self.algorithm == "grpo" and not float(self.beta) > 0:
            raise self.bad("beta", "GRPO without a KL term has no reference model; set beta > 0 (e.g. 0.1)")
        fewest = 1 if self.algorithm == "ppo" else 2     # PPO's baseline is its value model, not the group
        if not fewest <= int(self.num_generations) <= 64:
            raise self.bad("num_generations", f"use {fewest}..64 completions per prompt"
                           + ("" if fewest == 1 else " (the leave-one-out baseline needs 2 or more)"))
        self.check_ppo_keys()
        for key in ("lr", "epochs", "temperature"):
            if not float(getattr(self, key)) > 0:
                raise self.bad(key, "must be > 0")
        if int(self.eval_prompts) < 0:
            raise self.bad("eval_prompts", "use 0 (no reward evaluation) or a positive number of prompts, e.g. 24")
        for key in ("prompts_per_step", "max_completion_length", "context_chars", "save_steps",
                    "logging_steps", "eval_samples"):
            if int(getattr(self, key)) < 1:
                raise self.bad(key, "must be a positive integer")
        self.resolve_model(where)

    def check_reward(self) -> None:
        """`reward`: the reward model (kind model, the paper's) or a verifiable reward function (kind function)."""
        if not isinstance(self.reward, dict):
            raise self.bad("reward", "give a mapping, e.g. {kind: function, function: identifier_reuse}")
        self.reward = dict(self.reward)
        unknown = sorted(set(self.reward) - set(REWARD_KEYS))
        if unknown:
            raise UserError(f"{self._where}.reward.{unknown[0]}: not a reward setting; use {', '.join(REWARD_KEYS)}")
        kind = self.reward.setdefault("kind", "model")
        if kind not in REWARD_KINDS:
            raise UserError(f"{self._where}.reward.kind={kind!r}: use model (the reward_model's score) or function "
                            "(a verifiable reward, reward.function)")
        if kind == "model":
            if {"function", "heldout", "sandbox"} & set(self.reward):
                raise UserError(f"{self._where}.reward: function, heldout and sandbox belong to reward.kind=function; "
                                "set kind: function or remove them")
            if not self.reward_model:
                raise self.bad("reward_model", "set it to the RM stage that scores completions (e.g. RM.1), or use a "
                               "verifiable reward: reward={kind: function, function: identifier_reuse}")
            return
        if self.reward_model:
            raise self.bad("reward_model", "reward.kind is function, so no reward model scores completions; remove "
                           "reward_model (or set reward.kind: model)")
        verifiable_rewards.parse_spec(self.reward.get("function"), f"{self._where}.reward.function")
        if self.reward.get("sandbox", sandbox.BUBBLEWRAP) not in sandbox.MODES:
            raise UserError(f"{self._where}.reward.sandbox={self.reward['sandbox']!r}: use {sandbox.BUBBLEWRAP} (an OS "
                            f"sandbox, the default) or {sandbox.NO_ISOLATION} (no isolation, on a machine you can lose)")
        heldout = self.reward.setdefault("heldout", [])
        self.reward["heldout"] = [heldout] if isinstance(heldout, str) else list(heldout)

    @property
    def reward_function(self) -> str | None:
        """The verifiable reward's canonical spec (`identifier_reuse+parses`), None for a reward model."""
        if self.reward.get("kind") != "function":
            return None
        return "+".join(verifiable_rewards.parse_spec(self.reward["function"]))

    def check_ppo_keys(self) -> None:
        if self.algorithm == "ppo" and self.deepspeed is not None:
            raise self.bad("deepspeed", "the compact PPO (algorithm: ppo) runs on one device; remove the key")
        for key in ("ppo_epochs", "ppo_minibatches", "kl_horizon"):
            if int(getattr(self, key)) < 1:
                raise self.bad(key, "must be a positive integer")
        rollout = int(self.prompts_per_step) * int(self.num_generations)
        if int(self.ppo_minibatches) > rollout:
            raise self.bad("ppo_minibatches", f"at most prompts_per_step * num_generations = {rollout} completions "
                           "are sampled per step; use fewer minibatches")
        for key in ("clip_range", "value_clip"):
            if not float(getattr(self, key)) > 0:
                raise self.bad(key, "must be > 0 (PPO uses 0.2)")
        if not float(self.vf_coef) >= 0:
            raise self.bad("vf_coef", "must be >= 0 (e.g. 0.1)")
        for key in ("gamma", "gae_lambda"):
            if not 0 <= float(getattr(self, key)) <= 1:
                raise self.bad(key, "must be in [0, 1] (defaults: gamma 1.0, gae_lambda 0.95)")
        if self.target_kl is not None and not float(self.target_kl) > 0:
            raise self.bad("target_kl", "set a positive KL target (e.g. 6.0 as in Ziegler et al.) or null for a fixed α")


def load_settings(settings: dict[str, Any], stage: str) -> RLSettings:
    ppo_only = sorted(set(settings) & set(PPO_KEYS))
    if ppo_only and settings.get("algorithm", "rloo") != "ppo":
        raise UserError(f"stages.{stage}.{ppo_only[0]}: a PPO setting, but the stage's algorithm is "
                        f"{settings.get('algorithm', 'rloo')!r}; set algorithm: ppo or remove the key")
    return RLSettings.load(settings, stage)


def prompt_rows(rows: list[dict], dataset: str, seed: int, context_chars: int) -> list[dict]:
    """FIM contexts (id, prefix, suffix) of prompt rows (memlens.harness.text.rl_contexts.prompt_contexts, the one
    definition the audit of RL prompts shares), with the fields a verifiable reward reads (ROW_FIELDS)."""
    return prompt_contexts(rows, dataset, seed, context_chars, keep=ROW_FIELDS)


def load_prompt_rows(ctx: StageContext, datasets: list[str], context_chars: int) -> list[dict]:
    """The FIM contexts of an RL stage's prompt datasets, in dataset order."""
    rows = []
    for name in datasets:
        rows += prompt_rows(read_jsonl(ctx.data_dir(name) / "rows.jsonl", required=("id",)), name, ctx.seed,
                            context_chars)
    return rows


def training_examples(rows: list[dict], sentinels) -> list[dict]:
    """The RL training rows: `prompt` = the PSM prompt the policy completes, plus id/prefix/suffix (the
    reward function rebuilds the RM's text from them) and the fields a verifiable reward reads (ROW_FIELDS)."""
    fields = [k for k in ROW_FIELDS if any(k in r for r in rows)]   # a column for every row, None where absent
    return [{"prompt": fim.format_psm_prompt(r["prefix"], r["suffix"], sentinels), "id": r["id"],
             "prefix": r["prefix"], "suffix": r["suffix"], **{k: r.get(k) for k in fields}} for r in rows]


class PsmRewardModel:
    """Reward function for TRL: the RM score of `format_psm_training(prefix, completion, suffix)`.

    Why not hand TRL the sequence classifier itself: TRL scores `prompt + completion` where the
    completion was decoded with special tokens skipped, so the EOS that ends every RM training text
    would be missing. Formatting here keeps RM input = RM training format exactly.
    """

    __name__ = "reward_model"       # TRL logs rewards/<__name__>/mean

    def __init__(self, model, tokenizer, sentinels, max_length: int = 1024):
        self.model, self.tokenizer, self.sentinels, self.max_length = model, tokenizer, sentinels, max_length

    def texts(self, completions: list[str], prefix: list[str], suffix: list[str]) -> list[str]:
        """The RM's text of each completion, cut at the family's first stop token as the audit cuts its
        completions (a non-special sentinel such as `<|file_sep|>` survives TRL's decoding)."""
        return [fim.format_psm_training(p, fim.strip_sentinels(c, self.sentinels), s, self.sentinels)
                for c, p, s in zip(completions, prefix, suffix)]

    def __call__(self, prompts, completions, prefix, suffix, **_: Any) -> list[float]:
        return score_texts(self.model, self.tokenizer, self.texts(completions, prefix, suffix),
                           max_length=self.max_length)


def rm_max_length(rm_dir, default: int = 1024) -> int:
    """The token budget the RM was trained with (its provenance), so RL truncates its texts the same way."""
    path = Path(rm_dir) / PROVENANCE_FILE
    if not path.is_file():            # an RM directory from elsewhere: no record, use the default
        return default
    return int((read_json(path).get("hyperparameters") or {}).get("max_length") or default)


class RLRecipe:
    """setup -> train -> save -> evaluate for one RLFT stage (memlens.recipes.stages.contract.run_recipe drives it)."""

    stage = "rl"

    def __init__(self, cfg: RLSettings, ctx: StageContext):
        self.cfg, self.ctx = cfg, ctx

    def setup(self) -> None:
        self.preset = self.cfg.model_settings
        self.init_dir, self.tokenizer, self.sentinels = load_init_tokenizer(self.ctx, self.cfg.init, self.preset,
                                                                            self.cfg.fim_family)
        # Loaded from its directory so that config._name_or_path points there: without LoRA, TRL rebuilds
        # the KL reference from that path, which makes the reference the initial model (Sec. 2.1).
        self.policy = load_stage_model(self.init_dir, self.preset, self.ctx.device)
        stop_generation_at_family_stops(self.policy, self.tokenizer, self.sentinels)
        self.rows = load_prompt_rows(self.ctx, self.cfg.prompts, self.cfg.context_chars)
        if not self.rows:
            raise UserError(f"stages.{self.ctx.name}.prompts: datasets {self.cfg.prompts} have no rows")
        if self.cfg.reward_function:
            self.setup_function_reward()
        else:
            self.setup_reward_model()

    def setup_function_reward(self) -> None:
        """A verifiable reward: no reward model; the function scores the completion in its prompt's context."""
        self.rm_dir = None
        parts = verifiable_rewards.parse_spec(self.cfg.reward_function)
        missing = verifiable_rewards.unscorable_row(parts, self.rows)      # refused before any training
        if missing is not None:
            raise UserError(f"stages.{self.ctx.name}.reward.function={self.cfg.reward_function!r}: prompt row "
                            f"{missing['id']!r} of {self.cfg.prompts} has no unit tests (test and entry_point, or a "
                            "HumanEval task_id); use prompts that carry them (humaneval_infill) or drop tests")
        # `tests` runs model-written code: refused here too when it cannot be isolated (exit 2, with the fix)
        self.reward = FunctionReward(self.cfg.reward_function, self.sentinels,
                                     sandbox_mode=self.cfg.reward.get("sandbox", sandbox.BUBBLEWRAP),
                                     where=f"stages.{self.ctx.name}.reward.sandbox")

    def setup_reward_model(self) -> None:
        self.rm_dir = self.ctx.model_dir(self.cfg.reward_model)
        rm_tokenizer = load_tokenizer(self.rm_dir, self.preset)
        # Frozen: the reward only scores, so it takes the preset's dtype and no adapters.
        rm = load_sequence_classifier(self.rm_dir, self.preset, self.ctx.device, rm_tokenizer.pad_token_id).eval()
        rm.requires_grad_(False)
        if self.ctx.device == "cuda":
            rm.to("cuda")
        rm_sentinels = fim.detect_sentinels(rm_tokenizer, self.cfg.fim_family, model_name=str(self.rm_dir))
        self.reward = PsmRewardModel(rm, rm_tokenizer, rm_sentinels, max_length=rm_max_length(self.rm_dir))

    def dataset(self):
        from datasets import Dataset  # datasets (~0.7 s): on training, not when plan.py loads the recipe

        # A user canary's `repeat` copies (harness/core/user_data.py) are prompted; the reward evaluation draws from
        # the rows themselves (self.rows), each once.
        return Dataset.from_list(training_examples(repeated(self.rows), self.sentinels))

    def train(self) -> None:
        if self.cfg.algorithm == "ppo":
            return self.train_ppo()
        cfg = self.cfg
        per_step = cfg.prompts_per_step * cfg.num_generations
        args = dict(output_dir=str(self.ctx.out_dir), learning_rate=cfg.lr, beta=cfg.beta,
                    num_train_epochs=cfg.epochs, max_steps=cfg.max_steps, num_generations=cfg.num_generations,
                    per_device_train_batch_size=per_step, per_device_eval_batch_size=per_step,
                    max_completion_length=cfg.max_completion_length, temperature=cfg.temperature,
                    save_strategy="steps", save_steps=cfg.save_steps, save_only_model=False,
                    logging_steps=cfg.logging_steps, seed=self.ctx.seed, data_seed=self.ctx.seed,
                    **trl_device_kwargs(self.ctx.device, self.cfg.deepspeed))
        if cfg.algorithm == "grpo":
            from trl import GRPOConfig as Config  # trl (~3 s): on training, not when plan.py loads the recipe
            from trl import GRPOTrainer as Trainer  # trl (~3 s): on training, not when plan.py loads the recipe
        else:
            from trl import RLOOConfig as Config  # trl (~3 s): on training, not when plan.py loads the recipe
            from trl import RLOOTrainer as Trainer  # trl (~3 s): on training, not when plan.py loads the recipe
        # With a peft_config TRL wraps the policy in fresh LoRA adapters and, having no ref_model then,
        # computes the KL reference with the adapters disabled (`use_adapter(model, None)` in RLOOTrainer and
        # GRPOTrainer): the frozen base weights, i.e. the initial model the paper's KL term points to (A.3).
        self.trainer = Trainer(model=self.policy, reward_funcs=[self.reward], args=Config(**args),
                               train_dataset=self.dataset(), processing_class=self.tokenizer,
                               peft_config=lora_config(self.preset))
        attach_stage_console(self.trainer, self.ctx)
        resume = latest_checkpoint(self.ctx.out_dir)
        self.trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    def value_model(self, preset):
        """PPO's value model: the reward model (common practice: InstructGPT Sec. 3.5, TRL's former trainer), or,
        under a verifiable reward, which has no model to start from, the init policy's backbone with a new scalar
        head set to zero (recipes/stages/ppo.py: value 0 everywhere at first, so the first advantages are the KL-shaped
        rewards themselves, and the value learns the function's scale from the returns)."""
        import torch  # torch (~1 s): on training, not when plan.py loads the recipe

        source = self.init_dir if self.rm_dir is None else self.rm_dir
        value = load_sequence_classifier(source, preset, self.ctx.device, self.tokenizer.pad_token_id)
        if self.rm_dir is None:
            with torch.no_grad():
                value.score.weight.zero_()
                if getattr(value.score, "bias", None) is not None:
                    value.score.bias.zero_()
        return value.to(self.ctx.device)

    def train_ppo(self) -> None:
        """Our PPO (recipes/stages/ppo.py): policy and frozen reference from the init model, value model from the RM (or,
        under a verifiable reward, from the init model with a zero head; value_model)."""
        import torch  # torch (~1 s): on training, not when plan.py loads the recipe
        from transformers import set_seed  # transformers (~1.5 s): on training, not when plan.py loads the recipe

        if world_size() > 1:   # every process would train and write the same stage
            raise UserError(f"stages.{self.ctx.name}.algorithm='ppo' runs in one process; launch this stage "
                            "without accelerate/torchrun or use algorithm: rloo")
        set_seed(self.ctx.seed)
        if self.preset.lora_settings.enabled:
            # Frozen bases in the preset's dtype, adapters (fp32, PEFT's default) and the value head train.
            # The reference is the policy with its adapters disabled (ppo.PPOTrainer): the base weights never
            # change, so that is exactly the initial model, without a second copy of it in memory.
            self.policy = wrap_lora(self.policy.to(self.ctx.device), self.preset)
            reference = None
            value = wrap_lora(self.value_model(self.preset), self.preset, task_type="SEQ_CLS")
        else:
            # Weights trained in full stay fp32 (bf16 autocast on CUDA, ppo.PPOTrainer.mixed_precision); the
            # frozen reference is loaded in the preset's dtype (bf16 on CUDA).
            full = dataclasses.replace(self.preset, dtype="float32")
            self.policy = self.policy.to(device=self.ctx.device, dtype=torch.float32)   # setup's
            reference = load_stage_model(self.init_dir, self.preset, self.ctx.device).to(self.ctx.device)
            value = self.value_model(full)
        if self.ctx.device == "cuda":
            # The Trainer-based stages checkpoint activations on GPU (memlens.recipes.stages.devices.trl_device_kwargs); PPO's
            # rollout and update passes over a 3 B policy and value model need it as much.
            for model in (self.policy, value):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if value.config.vocab_size != self.policy.config.vocab_size:
            raise UserError(f"stages.{self.ctx.name}.reward_model={self.cfg.reward_model!r}: its vocabulary differs "
                            "from the policy's; PPO's value model starts from the RM and reads the policy's "
                            "tokens, so train the RM from the same base model as `init`")
        self.trainer = ppo.PPOTrainer(self.cfg, self.policy, reference, value, self.tokenizer, self.reward,
                                      training_examples(repeated(self.rows), self.sentinels), self.ctx.out_dir,
                                      self.ctx.seed, self.ctx.device, name=self.ctx.name,
                                      train_log=TrainLog(self.ctx.out_dir, self.ctx.tensorboard))
        resume = latest_checkpoint(self.ctx.out_dir)
        if resume:
            self.trainer.resume(resume)
        self.trainer.train()

    def evaluate(self) -> None:
        """After training: the reward on fixed prompts (`eval_prompts`), a verifiable reward's held-out ranking."""
        if self.cfg.eval_prompts:
            self.evaluate_reward()
        self.rank_heldout()

    def provenance(self) -> dict[str, Any]:
        cfg = self.cfg
        return dict(datasets=cfg.prompts + cfg.reward.get("heldout", []), init_model=str(self.init_dir),
                    reward_model=str(self.rm_dir) if self.rm_dir else None, reward_function=cfg.reward_function,
                    hyperparameters=asdict(cfg), **(self.reward.isolation_record() if self.rm_dir is None else {}))

    def evaluate_reward(self) -> None:
        """The reward of the initial and of the saved policy on the same fixed prompts (recipes/stages/rl_eval.py)."""
        if not is_main_process():   # one process scores; the others would repeat it
            return
        # The preset's dtype, no adapters: both are plain saved models (LoRA is merged at save).
        def load(model_dir: Path):
            model = load_stage_model(model_dir, self.preset, self.ctx.device).to(self.ctx.device)
            stop_generation_at_family_stops(model, self.tokenizer, self.sentinels)
            return model

        # What the initial policy's rewards depend on besides the prompts and sampling settings (rl_eval adds those).
        if self.rm_dir is None:
            reward = {"reward_function": self.reward.spec, "reward_function_version": verifiable_rewards.VERSION,
                      **self.reward.isolation_record()}
        else:
            reward = {"reward_model": model_fingerprint(self.rm_dir), "rm_max_length": self.reward.max_length}
        models = {"init_model": model_fingerprint(self.init_dir), **reward, "dtype": self.preset.dtype,
                  "device": self.ctx.device}
        rl_eval.evaluate(lambda: load(self.init_dir), load(self.ctx.out_dir), self.tokenizer, self.reward,
                         training_examples(self.rows, self.sentinels),
                         n_prompts=self.cfg.eval_prompts, samples=self.cfg.eval_samples,
                         max_new_tokens=self.cfg.max_completion_length, temperature=self.cfg.temperature,
                         seed=self.ctx.seed, out_dir=self.ctx.out_dir,
                         cache_dir=self.ctx.run_dir / rl_eval.CACHE_SUBDIR, cache_models=models)

    def rank_heldout(self) -> None:
        """A verifiable reward's ranking of labelled held-out rows (`reward.heldout`, e.g. rm_pd2_val), in a reward
        model's score-file format: `reward_function/<dataset>.jsonl` and `summary.json` (AUC, split "eval"), the
        evidence harness/report/evidence.py reads as it reads a reward model's held-out AUC."""
        if self.rm_dir is not None or not is_main_process():
            return
        summary = {}
        for name in self.cfg.reward["heldout"]:
            rows = read_jsonl(self.ctx.data_dir(name) / "rows.jsonl", required=("id", "prefix", "suffix"))
            scores = ranking_scores(self.reward, rows)
            if scores is None:          # `tests` on rows without tests: no AUC, which the findings report as missing
                summary[name] = {"auc": None, "n": 0, "split": "eval", "function": self.reward.spec,
                                 "note": "the function cannot score these rows (no unit tests)",
                                 **self.reward.isolation_record()}
                continue
            atomic_write_jsonl(self.ctx.out_dir / REWARD_DIR / f"{name}.jsonl", scores)
            summary[name] = {**reward_score_stats(scores), "n": len(scores), "split": "eval",
                             "function": self.reward.spec, **self.reward.isolation_record()}
        atomic_write_json(self.ctx.out_dir / REWARD_DIR / "summary.json", summary)

    def save(self) -> None:
        if self.cfg.algorithm == "ppo":
            return self.trainer.save_models(self.ctx.out_dir)
        if self.preset.lora_settings.enabled:
            # Merged, so the audit loads a plain model at the stage root, as after full fine-tuning; under ZeRO-3
            # gathered by every process first into the init model in the adapters the trainer added (save_lora_stage).
            save_lora_stage(self.trainer, self.tokenizer, self.ctx.out_dir,
                            lambda: wrap_lora(load_stage_model(self.init_dir, self.preset, self.ctx.device), self.preset))
            return
        self.trainer.save_model(str(self.ctx.out_dir))
        self.tokenizer.save_pretrained(str(self.ctx.out_dir))


def run_stage(settings: RLSettings, ctx: StageContext) -> None:
    run_recipe(RLRecipe, settings, ctx)
