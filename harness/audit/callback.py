"""`memlens.AuditCallback`: audit a Trainer or TRL run from inside it, every time it saves a checkpoint.

The people who align code models run their own TRL scripts. With `memlens.inject` (synthetic_data/inject.py)
they plant canaries in their dataset; this callback then scores each checkpoint the trainer saves, as
`memlens audit` scores a run's checkpoints, and writes in the same layout, so `memlens report run_dir=<out_dir>`
renders the rates over steps:

    <out_dir>/canaries/manifest.json (+ .planted.jsonl, .heldout.jsonl)   what was planted, what was held out
    <out_dir>/audit/<model>/checkpoint-<step>/canaries.jsonl               extraction rows of the planted canaries
    <out_dir>/audit/<model>/checkpoint-<step>/canaries_heldout.jsonl       ... of the held-out twins (rate ~0)
    <out_dir>/audit/summary.json                                           rebuilt from every row
    <out_dir>/audit/mia/<model>/summary.json                               membership inference per checkpoint
    <out_dir>/audit/pair_mia/<model>/summary.json                          membership of preference pairs (below)
    <out_dir>/audit/prompt_mia/<model>/summary.json                        membership of RL prompts (below)
    <out_dir>/audit/exposure/<model>/checkpoint-<step>.jsonl + summary.json exposure of each canary (below)
    <out_dir>/audit/reward/<model>/summary.json                            a reward model's ranking (below)
    <out_dir>/audit/callback.jsonl                                         per checkpoint: step, seconds, rates

Measures (paper 003 Def. 3.1 for extraction; memlens.harness.measures.mia for the attacks):
  extraction  each canary's prompt (its prefix, as the trainer saw it: memlens.harness.model.prompts) completed greedily
              by the checkpoint and by `control`; memorized when the checkpoint is within k of the target and
              the control is not. The held-out twins are scored the same way: a rate above 0 there means the
              target is guessable, not memorized.
  mia         the registered attacks, planted (members) vs held-out (non-members) canaries: AUC and TPR at low
              FPR with bootstrap 95 % intervals; the reference attack, EZ-MIA and RMIA are calibrated on `control`
              (RMIA's population: the held-out canaries).
  pair_mia    on a preference dataset (DPO, IPO, CPO, ORPO, ...): PREMIA (Feng et al. 2024, Sec. 4;
              harness/audit/preference_mia.py) on each canary's preference pair as the trainer read it (the prompt
              left to right), planted vs held out (memlens.inject draws the held-out pairs' rejected sides from the
              data). The reference of its ratios is the paper's, the model the stage started from: `pair_reference`,
              else the local directory the trainer's model was loaded from (a PEFT model: its base); where neither
              exists the measure is skipped and the log says why (the control is a counterfactual, not PREMIA's
              reference: its ratios would cancel everything the fine-tune learned).
  prompt_mia  on a prompt-only dataset (GRPO, RLOO, ...): Min-kNN distance (Zhang et al. 2026;
              harness/audit/prompt_mia.py) of m = 8 completions (`max_new_tokens` each, T = 1) sampled after each
              canary's prompt as the trainer holds it (the whole canary, left to right), by the checkpoint and by
              the model the run started from (as pair_mia's reference: `pair_reference`, else the trainer's local
              model directory), planted vs held out. RL has no target string to score: what it trains on is prompts.
              DIBA's features need the run's reward, which the callback does not have, so they are not scored.
  exposure    Carlini et al. 2019 (Sec. 4), the rank form, with held-out twins as the sample of the canaries'
              randomness space: each canary's target given its prompt ranked by summed NLL among a pool of held-out
              targets (`exposure_candidates`, seeded) in the same place; exposure = log2(candidates) - log2(rank), ties
              against the canary (memlens.harness.measures.exposure). Each pooled held-out canary ranked among the rest
              of the pool is the null: what the procedure gives a canary the model never trained on (uniform only when a
              prompt says nothing of its own target).
  reward      for a reward model (a sequence classifier, e.g. TRL's RewardTrainer) instead of both: does it rank
              the planted canaries' completions above the held-out ones'? The reward as a membership score, AUC
              with its interval.

`control`: a model directory trained the same way without the canaries (paper 003's counterfactual), or "base"
for a PEFT model: its base with the adapters off, which never saw the fine-tuning data at all — a weaker control
(it also differs from the checkpoint in everything else the fine-tune learned), said so in callback.jsonl.

Training is unchanged by the callback: it reads the checkpoint the trainer just wrote from disk, never the model
in training, and restores every random generator it could touch. Under DDP the main process scores while the
others wait at a barrier. A checkpoint without consolidated weights (ZeRO-3 or FSDP sharded state) is not
scored: the log says so and how to audit it afterwards with `memlens audit`.
"""

from __future__ import annotations

import inspect
import json
import random
import shutil
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from memlens.harness.audit.background import (
    BACKGROUND_THREADS,
    PENDING_SUBDIR,
    BackgroundScorer,
    reference_from_json,
    snapshot_checkpoint,
)
from memlens.harness.audit.epsilon import DEFAULT_GUESSES, EpsilonSettings
from memlens.harness.audit.mia import MiaSettings, audit_mia, collect_summaries
from memlens.harness.audit.preference_mia import PRIMARY_PAIR_ATTACK, audit_pair_mia, collect_pair_summaries
from memlens.harness.audit.preflight import check_new_tokens, check_survival, control_refusal, dataloader_parts
from memlens.harness.audit.preflight import report as report_survival
from memlens.harness.audit.prompt_mia import PromptMiaSettings, RLModel, audit_prompt_mia, collect_prompt_summaries
from memlens.harness.audit.run import AuditState, audit_checkpoint, write_summary
from memlens.harness.audit.settings import AuditJob, AuditSettings
from memlens.harness.core.errors import UserError
from memlens.harness.core.injected import has_pairs, pair_files, read_manifest, write_manifest
from memlens.harness.core.io import (
    RowStore,
    atomic_write_json,
    atomic_write_jsonl,
    read_json,
    read_jsonl,
    require_creatable_dir,
)
from memlens.harness.core.layout import (
    CANARIES,
    CANARY_EXPOSURE_SUBDIR,
    REWARD_RANKING_SUBDIR,
    check_name,
    checkpoint_name,
    epsilon_dir,
    heldout_dataset,
    mia_dir,
    pair_mia_dir,
    prompt_mia_dir,
    require_inside,
)
from memlens.harness.core.provenance import provenance
from memlens.harness.core.stats import BOOTSTRAP_N, BOOTSTRAP_SEED
from memlens.harness.measures.epsilon import audit_epsilon, guess_counts
from memlens.harness.measures.exposure import exposure_from_losses, exposure_summary
from memlens.harness.measures.memorization import summarize_rows
from memlens.harness.measures.mia import TokenFrequency, attack_metrics
from memlens.harness.measures.prompt_mia import PRIMARY_PROMPT_ATTACK
from memlens.harness.model.load import ADAPTER_CONFIG, has_weights, model_sentinels, set_threads
from memlens.harness.model.rewards import score_texts
from memlens.harness.model.scorer import CausalLMScorer
from memlens.harness.model.training import (
    barrier_if_distributed,
    exportable_state_base,
    log_to_trackers,
    rng_untouched,
    running_trainer,
    trainer_callback_base,
)

# what a causal LM's checkpoint is scored with by default (pair_mia: only where the manifest holds preference pairs)
CALLBACK_MEASURES = ("extraction", "mia", "exposure", "pair_mia", "prompt_mia")
OPTIONAL = ("epsilon",)                 # asked for by name: the one-run ε bounds need fair-coin held-out canaries
PREFLIGHT_MODES = ("raise", "warn", "off")   # a planted copy that gets no loss: refuse to train, say so, or skip
FAIR_COIN = 0.5                         # memlens.inject's heldout_fraction the one-run bounds assume
REWARD = "reward"                       # what a reward model's checkpoint is scored with instead
CALLBACK_LOG = "callback.jsonl"
_ATTACHED: dict[str, Any] = {}          # out_dir -> weak reference to the trainer attach() was given
EPSILON_DELTA = EpsilonSettings.delta   # δ of the callback's ε bounds: audit.epsilon_delta's default
REFERENCE_NAME = "the trainer's training rows (token ids)"   # DC-PDD's reference when the user names none
BASE = "base"                           # control="base": a PEFT model's base, adapters off


# ------------------------------------------------------------------------------------------------ manifest
def _manifest_files(manifest, out_dir: Path) -> tuple[dict, Path, Path]:
    """(the manifest, its planted and held-out JSONL) copied under `<out_dir>/canaries/`: the audit's own record
    of what was planted, whatever happens to the file the user passed."""
    try:
        manifest = read_manifest(manifest)
    except UserError as e:
        raise UserError(f"AuditCallback: {e}") from None
    planted, heldout = write_manifest(manifest, out_dir / CANARIES / "manifest.json")
    return manifest, planted, heldout


def default_prompt_format(manifest: dict) -> str:
    """How a model trained on the manifest's format is asked for a canary: `chat` for conversations (a
    conversational preference set included), else the prefix left to right (memlens.harness.model.prompts)."""
    return "chat" if manifest.get("format") == "conversational" or manifest.get("conversational") else "prefix"


# ------------------------------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class CallbackSettings:
    """When the callback scores, and with what (recorded in callback.jsonl)."""

    every: int = 1                       # score every N-th save
    limit: int | None = None             # score at most this many checkpoints
    measures: tuple[str, ...] = CALLBACK_MEASURES
    prompt_format: str | None = None     # prefix / chat / a FIM family; None: from the manifest's format

    def __post_init__(self):
        if not isinstance(self.every, int) or self.every < 1:
            raise UserError(f"AuditCallback(every={self.every!r}): a positive integer (1: every save)")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise UserError(f"AuditCallback(limit={self.limit!r}): None or a positive integer")
        bad = [m for m in self.measures if m not in CALLBACK_MEASURES + OPTIONAL]
        if bad or not self.measures:
            raise UserError(f"AuditCallback(measures={list(self.measures)!r}): a non-empty list of "
                            f"{list(CALLBACK_MEASURES + OPTIONAL)} (a reward model is scored by its ranking instead, "
                            "automatically)")
        if "epsilon" in self.measures and "mia" not in self.measures:
            raise UserError("AuditCallback(measures=[..., 'epsilon']): the ε bounds rank the canaries by their MIA "
                            "scores; add 'mia'")


@dataclass(frozen=True, kw_only=True)
class CallbackArgs:
    """AuditCallback's keyword arguments, in one place: their defaults (docs/audit-callback.md's table), their checks
    (all made here, before the callback writes anything), and the form `state()` saves with each checkpoint
    (`asdict`), so a resumed trainer rebuilds the callback as it was: the manifest as its copy under out_dir, paths as
    strings, `reference` only as the user's texts, never a computed table."""

    manifest: str = field(init=False)        # the manifest's copy, <out_dir>/canaries/manifest.json
    control: str | Path                      # a model trained without the canaries, or "base" (a PEFT model's base)
    out_dir: str | Path
    every: int = 1                           # score every N-th save
    limit: int | None = None                 # score at most this many checkpoints
    measures: Sequence[str] = CALLBACK_MEASURES
    model_name: str | None = None            # None: the trainer's output dir's name
    prompt_format: str | None = None         # prefix / chat / a FIM family; None: from the manifest's format
    k: float = AuditSettings.k
    max_new_tokens: int = AuditSettings.max_new_tokens
    target_tokens: int = AuditSettings.target_tokens
    min_target_tokens: int = AuditSettings.min_target_tokens
    batch_size: int = 16
    device: str = "auto"
    exposure_candidates: int = 32            # held-out targets each canary is ranked among
    preflight: str = "raise"                 # one of PREFLIGHT_MODES
    background: bool = False                 # score in a worker process while training goes on
    max_pending: int = 2                     # checkpoints queued for the worker before a save waits
    reference: Sequence[str] | None = None   # texts whose token frequencies calibrate DC-PDD; None: the training rows
    pair_reference: str | Path | None = None  # the model the run started from (PREMIA's reference, prompt_mia's
                                              # initial model); None: found

    def __post_init__(self):
        out_dir = require_creatable_dir("AuditCallback(out_dir)", Path(self.out_dir))
        self.settings()                                       # every, limit, measures
        control = str(self.control)
        if control != BASE and not has_weights(control):
            raise UserError(f"AuditCallback(control={control!r}): not a model directory with *.safetensors "
                            "weights; pass a model trained the same way without the canaries (paper 003's "
                            "counterfactual control), or 'base' for a PEFT model")
        if self.model_name is not None:
            check_name(self.model_name, "AuditCallback(model_name)")
        self.audit_settings(self.prompt_format)               # k, the token counts, batch size, device
        if not isinstance(self.exposure_candidates, int) or self.exposure_candidates < 1:
            raise UserError(f"AuditCallback(exposure_candidates={self.exposure_candidates!r}): a positive integer "
                            "(held-out targets each canary is ranked among; 32 gives up to 5 bits)")
        if self.reference is not None and (isinstance(self.reference, str)
                                           or not all(isinstance(t, str) for t in self.reference)):
            raise UserError("AuditCallback(reference=...): a list of texts (public text of the kind the model trains "
                            "on, none of them a canary) whose token frequencies calibrate DC-PDD; None: the "
                            "trainer's own tokenized training data")
        if self.pair_reference is not None and not has_weights(str(self.pair_reference)):
            raise UserError(f"AuditCallback(pair_reference={str(self.pair_reference)!r}): not a model directory with "
                            "*.safetensors weights; pass the model the run started from (PREMIA's reference), or "
                            "None to take the directory the trainer's model was loaded from")
        if self.preflight not in PREFLIGHT_MODES:
            raise UserError(f"AuditCallback(preflight={self.preflight!r}): one of {', '.join(PREFLIGHT_MODES)} "
                            "(raise: refuse to train when a planted copy gets no loss; warn: say so and train; off: "
                            "no check)")
        if not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise UserError(f"AuditCallback(max_pending={self.max_pending!r}): a positive integer (checkpoints queued "
                            "for background scoring before a save waits for the oldest)")
        # the saved form: plain strings and lists
        for name, value in (("out_dir", str(out_dir)), ("manifest", str(out_dir / CANARIES / "manifest.json")),
                            ("control", control), ("measures", list(self.measures)),
                            ("pair_reference", str(self.pair_reference) if self.pair_reference is not None else None),
                            ("reference", list(self.reference) if self.reference is not None else None)):
            object.__setattr__(self, name, value)

    def settings(self) -> CallbackSettings:
        """When the callback scores, and with what (recorded in callback.jsonl)."""
        return CallbackSettings(self.every, self.limit, tuple(self.measures), self.prompt_format)

    def audit_settings(self, prompt_format: str | None) -> AuditSettings:
        """The extraction audit's settings, asking for a canary in `prompt_format` (this argument's, else the
        manifest's: default_prompt_format)."""
        return AuditSettings(k=self.k, max_new_tokens=self.max_new_tokens, target_tokens=self.target_tokens,
                             min_target_tokens=self.min_target_tokens, batch_size=self.batch_size,
                             fim_family=prompt_format, device=self.device, progress=False)


def _init_signature() -> inspect.Signature:
    """AuditCallback(manifest, *, <CallbackArgs' fields>, log=print), for help() and editors: the keywords are
    CallbackArgs', written once."""
    keywords = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                for p in inspect.signature(CallbackArgs).parameters.values()]
    return inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                              inspect.Parameter("manifest", inspect.Parameter.POSITIONAL_OR_KEYWORD), *keywords,
                              inspect.Parameter("log", inspect.Parameter.KEYWORD_ONLY, default=print,
                                                annotation="Callable[[str], None]")])


def _is_reward_model(model) -> bool:
    """A sequence classifier with one output (TRL's RewardTrainer model), PEFT-wrapped or not."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = [*(getattr(base.config, "architectures", None) or []), type(base).__name__]
    return any(name.endswith("ForSequenceClassification") for name in names)


def _peft_base(model) -> Path:
    """The local base model directory of a PEFT model (control="base")."""
    config = getattr(model, "peft_config", None)
    if not config:
        raise UserError("AuditCallback(control='base'): the model is not a PEFT model, so it has no base to compare "
                        "with; pass control=<a model directory trained the same way without the canaries>")
    base = Path(_peft_base_name(config))
    if not has_weights(base):
        raise UserError(f"AuditCallback(control='base'): the PEFT base {base} is not a local model directory with "
                        "*.safetensors weights; save the base model locally (save_pretrained) and load it from there")
    return base


def _peft_base_name(peft_config: dict) -> str:
    """The base model a PEFT model's (first) adapter applies to, as its config names it."""
    return str(next(iter(peft_config.values())).base_model_name_or_path)


def initial_model_dir(model) -> Path | None:
    """The local directory the trainer's model was loaded from (a PEFT model: its base, what its adapters start from),
    PREMIA's reference (Feng et al. 2024, Sec. 4: the model the preference stage started from; TRL's DPO reference
    when none is given); None where that is not a local model directory."""
    if model is None:
        return None
    config = getattr(model, "peft_config", None)
    path = _peft_base_name(config) if config else getattr(getattr(model, "config", None), "_name_or_path", None)
    return Path(str(path)) if path and has_weights(str(path)) else None


TEXT_COLUMNS = ("text", "prompt", "completion", "chosen", "rejected")   # TRL's dataset columns, before tokenizing


def training_token_frequency(dataloader, tokenizer, max_rows: int = 20_000) -> TokenFrequency | None:
    """DC-PDD's reference distribution from the trainer's own training rows (the first `max_rows`): their token-id
    columns as the trainer processed them (`input_ids`, TRL's `prompt_ids`, `chosen_ids`, `completion_ids`, ...), or,
    for a trainer that tokenizes as it goes (GRPO, RLOO), their plain-text columns under the tokenizer: the data the
    run already has. The planted copies are among them, a few rows in thousands; their share of the counts only
    lowers their own DC-PDD scores."""
    dataset = getattr(dataloader, "dataset", None)
    names = [str(c) for c in (getattr(dataset, "column_names", None) or [])]
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)      # a processor wraps its tokenizer
    if not names or tokenizer is None:
        return None
    rows = dataset.select(range(min(len(dataset), max_rows)))
    ids = [list(seq) for c in names if c.endswith("_ids") for seq in rows[c] if seq]
    if not ids:
        texts = [t for c in names if c in TEXT_COLUMNS for t in rows[c] if isinstance(t, str) and t]
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    return TokenFrequency.of(ids, len(tokenizer)) if ids else None


# ------------------------------------------------------------------------------------------------ background
def score_in_background(init_args: dict, reference, snapshot: Path, step: int, control_dir: Path) -> dict:
    """The worker's job: the callback rebuilt from its arguments scores one snapshot as the synchronous callback
    would (the same code, the same rows), then removes the snapshot."""
    callback = AuditCallback(**{**init_args, "background": False, "preflight": "off"}, log=lambda _: None)
    callback.reference = reference
    try:
        return callback.score(snapshot, step, control_dir=control_dir)
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)


def background_worker() -> None:
    """`python -m memlens.harness.audit.callback`: read one job per stdin line (JSON), score it, write its record as
    one stdout line. A process of its own, started by command and never by forking or re-importing the training
    script (a user's script has no `__main__` guard: multiprocessing's spawn would run its training again)."""

    set_threads(BACKGROUND_THREADS)
    out = sys.stdout
    sys.stdout = sys.stderr                      # anything the scoring prints must not corrupt the protocol
    for line in sys.stdin:
        job = json.loads(line)
        try:
            record = score_in_background(job["init_args"], reference_from_json(job["reference"]),
                                         Path(job["snapshot"]), job["step"], Path(job["control_dir"]))
            reply = {"record": record}
        except Exception:  # noqa: BLE001 - the parent raises it, with the worker's traceback
            reply = {"error": traceback.format_exc()}
        out.write(json.dumps(reply, default=str) + "\n")
        out.flush()


# ------------------------------------------------------------------------------------------------ the callback
class AuditCallback(trainer_callback_base(), exportable_state_base()):
    """Score each checkpoint a transformers Trainer (SFT, DPO-family, KTO, reward, GRPO, RLOO trainers of TRL)
    saves: k-approximate counterfactual extraction against `control` and membership inference, or a reward
    model's ranking of planted vs held-out canaries. See this module's docstring for the layout."""

    def __init__(self, manifest, *, log: Callable[[str], None] = print, **arguments):
        """`manifest`: what memlens.inject returned, or its JSON path (copied under out_dir); the keywords are
        CallbackArgs' (control and out_dir required), all checked before anything is written."""
        self.args = CallbackArgs(**arguments)
        if why := control_refusal(self.args.control, manifest):
            raise UserError(why)
        self.out_dir = Path(self.args.out_dir)
        self.settings = self.args.settings()
        self.manifest, self.planted, self.heldout = _manifest_files(manifest, self.out_dir)
        self.control = self.args.control
        self.model_name = str(self.args.model_name) if self.args.model_name is not None else None
        self.audit = self.args.audit_settings(self.args.prompt_format or default_prompt_format(self.manifest))
        self.exposure_candidates = self.args.exposure_candidates
        self.reference: TokenFrequency | list[str] | None = (list(self.args.reference)
                                                             if self.args.reference is not None else None)
        self.preflight = self.args.preflight
        self.pair_reference: Path | None = (Path(self.args.pair_reference) if self.args.pair_reference is not None
                                            else None)
        self._told_pairs = False                              # the once-only "pairs not scored" message
        self._told_prompts = False                            # the once-only "prompts not scored" message
        self.background = BackgroundScorer(self.audit_dir, self.args.max_pending) if self.args.background else None
        self.log = log
        link = _ATTACHED.get(str(self.out_dir.resolve()))
        self.trainer = link() if link is not None else None   # attach(): the trainer whose log() reaches its trackers
        self._told_untracked = False                          # the once-only "no tracker reached" message
        self.saves = 0
        self.scored = 0

    @property
    def audit_dir(self) -> Path:
        return self.out_dir / "audit"

    def attach(self, trainer) -> AuditCallback:
        """Add this callback to `trainer` and log every scored checkpoint's figures through the trainer's own `log()`
        (`memlens/...` keys at the checkpoint's step), so each `report_to` integration (TensorBoard, W&B, MLflow,
        trackio) receives them beside the loss. `callbacks=[audit]` and `trainer.add_callback(audit)` link the
        trainer too, at on_train_begin (memlens.harness.model.training.running_trainer: a callback gets no handle to
        its trainer, and editing `logs` in `on_log` comes after the reporting callbacks ran); attach() links it
        before training, also for a loop that runs the callbacks with no Trainer's `train()` on the call stack."""
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        self.trainer = trainer
        _ATTACHED[str(self.out_dir.resolve())] = weakref.ref(trainer)   # a callback restored on resume finds it
        return self

    def state(self) -> dict:
        """transformers' ExportableState: saved in every checkpoint's trainer_state.json; on
        `train(resume_from_checkpoint=...)` with `restore_callback_states_from_checkpoint=True` the trainer rebuilds
        the callback from it (its arguments; the trainer link through attach()). The counters are then recounted
        from callback.jsonl and the save schedule (`on_train_begin`), with or without that flag, and no scored
        checkpoint is scored again."""
        return {"args": asdict(self.args), "attributes": {"saves": self.saves, "scored": self.scored}}

    def on_train_begin(self, args, state, control, **kwargs):
        self._find_trainer(args)
        if self.pair_reference is None:
            self.pair_reference = initial_model_dir(kwargs.get("model"))
        if state.global_step:                        # resumed: count what was done, from what is on disk
            # trainer_state.json is written before a save's on_save runs, so a restored state lags that save by one;
            # callback.jsonl and the save schedule are exact.
            self.scored = len(self._scored())
            steps = args.save_steps if str(getattr(args, "save_strategy", "steps")).endswith("steps") else 0
            self.saves = (int(state.global_step // steps) if steps and steps >= 1
                          else max(self.saves + 1, self.scored * self.settings.every))
        if self.preflight != "off" and state.is_world_process_zero and not state.global_step:
            check_new_tokens(kwargs.get("model"), kwargs.get("processing_class"), self.manifest, self.log,
                             self.preflight == "raise", getattr(self.trainer, "ref_model", None))
            dataset, collator = dataloader_parts(kwargs.get("train_dataloader"))
            if dataset is not None and collator is not None:
                report_survival(check_survival(args, dataset, collator, kwargs.get("processing_class"), self.manifest),
                                self.model_name or Path(args.output_dir).name, self.log, self.preflight == "raise")
        if self.background is not None and state.is_world_process_zero and self.background.process is None:
            self.background.start()                 # its imports (torch, transformers) overlap the first steps
        if self.reference is None:
            self.reference = training_token_frequency(kwargs.get("train_dataloader"), kwargs.get("processing_class"))
        return control

    def _find_trainer(self, args) -> None:
        """Link the trainer running this callback, however it was added (`callbacks=[audit]`, `add_callback`,
        `attach`), so each scored checkpoint reaches its `report_to` trackers through its `log()`; where none is
        found and trackers are set, say so once, naming attach()."""
        self.trainer = running_trainer(self) or self.trainer
        trackers = [str(t) for t in (getattr(args, "report_to", None) or []) if str(t) != "none"]
        if self.trainer is None and trackers and not self._told_untracked:
            self._told_untracked = True
            self.log(f"[memlens] AuditCallback: report_to={trackers} is set, but no transformers Trainer holding this "
                     "callback is on the call stack, so the memlens/ figures reach no tracker (they are still in "
                     f"{self.audit_dir / CALLBACK_LOG}); call audit.attach(trainer) to log them through the trainer")

    def _scored(self) -> set[str]:
        """The checkpoints callback.jsonl already holds (a resumed run scores none of them again)."""
        path = self.audit_dir / CALLBACK_LOG
        return {r["checkpoint"] for r in RowStore(path, key="checkpoint").rows()} if path.is_file() else set()

    def on_save(self, args, state, control, **kwargs):
        self.saves += 1
        due = self.saves % self.settings.every == 0 and (self.settings.limit is None
                                                         or self.scored < self.settings.limit)
        if not due or checkpoint_name(state.global_step) in self._scored():
            return control
        self.scored += 1
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / checkpoint_name(state.global_step)
            model = kwargs.get("model")
            if self.background is not None and not (model is not None and _is_reward_model(model)):
                self._submit(checkpoint, state.global_step, model, args)
            else:
                with rng_untouched():
                    self.score(checkpoint, state.global_step, model, args, kwargs.get("processing_class"))
        barrier_if_distributed()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.background is not None:
            self._finished(self.background.done())
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.background is not None and state.is_world_process_zero:
            self._finished(self.background.drain())      # the queue finishes before the run is over
        return control

    # -------------------------------------------------------------------------------------------- background
    def _submit(self, checkpoint: Path, step: int, model, args) -> None:
        """Queue one checkpoint for the background worker: its files hard-linked where the trainer's rotation
        (save_total_limit) cannot delete them, the control resolved here (the worker has no model)."""
        name = self.model_name or Path(args.output_dir).name
        control_dir = _peft_base(model) if self.control == BASE else Path(self.control)
        snapshot = snapshot_checkpoint(checkpoint, self.audit_dir / PENDING_SUBDIR)
        reference = self.reference
        pair_reference = str(self.pair_reference) if self.pair_reference is not None else None
        self._finished(self.background.submit(dict(asdict(self.args), model_name=name, pair_reference=pair_reference),
                                              reference, snapshot, int(step), control_dir))

    def _finished(self, records: list[dict]) -> None:
        """Log what the worker finished: on the console, and in the trainer's trackers at each checkpoint's step."""
        for record in records:
            if self.trainer is not None and "deferred" not in record:
                log_to_trackers(self.trainer, tracker_metrics(record), step=record["step"])
            self.log(f"[memlens] {record['model']}/{record['checkpoint']}: scored in the background in "
                     f"{record['seconds']:.1f} s" + "".join(f"; {k} {v}" for k, v in _headline(record).items()))

    # -------------------------------------------------------------------------------------------- scoring
    def score(self, checkpoint: Path, step: int, model=None, args=None, tokenizer=None,
              control_dir: Path | None = None) -> dict:
        """Score one saved checkpoint; returns (and appends to callback.jsonl) what was done and how long it took.
        `control_dir`: the control resolved already (a background worker has no model to find a PEFT base from)."""
        name = self.model_name or (Path(args.output_dir).name if args is not None else checkpoint.parent.name)
        record: dict[str, Any] = {"checkpoint": checkpoint.name, "step": int(step), "model": name}
        started = time.perf_counter()
        if not (has_weights(checkpoint) or (checkpoint / ADAPTER_CONFIG).is_file()):
            record["deferred"] = (f"{checkpoint}: no consolidated *.safetensors weights (ZeRO-3 / FSDP sharded "
                                  "state, or a save still in progress): not scored now. Set "
                                  "stage3_gather_16bit_weights_on_model_save=true (DeepSpeed) or a FULL_STATE_DICT "
                                  "(FSDP), or consolidate it and run `memlens audit audit.model_dir=<checkpoint> "
                                  f"audit.control_dir=<control> audit.examples={self.planted}` afterwards")
            self.log(f"[memlens] {record['deferred']}")
        else:
            control_dir = control_dir or (_peft_base(model) if self.control == BASE else Path(self.control))
            record["control"] = {"dir": str(control_dir), "kind": "PEFT base, adapters off: weaker than a model "
                                 "trained without the canaries" if self.control == BASE else "as given"}
            if model is not None and _is_reward_model(model):
                record[REWARD] = self._reward(checkpoint, name, model, tokenizer)
            else:
                if "extraction" in self.settings.measures:
                    record["extraction"] = self._extraction(checkpoint, name, control_dir)
                if "mia" in self.settings.measures:
                    record["mia"] = self._mia(checkpoint, name, control_dir)
                if "pair_mia" in self.settings.measures and self._pairs_scorable():
                    record["pair_mia"] = self._pair_mia(checkpoint, name)
                if "prompt_mia" in self.settings.measures and self._prompts_scorable():
                    record["prompt_mia"] = self._prompt_mia(checkpoint, name)
                if "exposure" in self.settings.measures:
                    record["exposure"] = self._exposure(checkpoint, name)
                if "epsilon" in self.settings.measures:
                    record["epsilon"] = self._epsilon(checkpoint, name)
        record["seconds"] = round(time.perf_counter() - started, 3)
        record["settings"] = asdict(self.settings) | {"audit": self.audit.scoring(),
                                                      "exposure_candidates": self.exposure_candidates}
        RowStore(self.audit_dir / CALLBACK_LOG, key="checkpoint").append([record])
        if self.trainer is not None and "deferred" not in record:
            log_to_trackers(self.trainer, tracker_metrics(record), step=int(step))
        self.log(f"[memlens] {name}/{checkpoint.name}: scored in {record['seconds']:.1f} s"
                 + "".join(f"; {k} {v}" for k, v in _headline(record).items()))
        return record

    def _dataset_hash(self) -> dict[str, str]:
        """The trained dataset's sha256 as the manifest recorded it (a hand-built manifest may not have one)."""
        sha = (self.manifest.get("dataset") or {}).get("sha256_after")
        return {CANARIES: sha} if sha else {}

    def _extraction(self, checkpoint: Path, name: str, control_dir: Path) -> dict:
        out = {}
        for dataset, examples in ((CANARIES, self.planted), (heldout_dataset(CANARIES), self.heldout)):
            job = AuditJob(model_dir=checkpoint, model_name=name, control_dir=control_dir, examples=examples,
                           dataset=dataset, all_checkpoints=False, out_dir=self.audit_dir,
                           cache_dir=self.audit_dir / "cache", settings=self.audit)
            state = AuditState.open(job, checkpoints=[(checkpoint.name, checkpoint)])
            (label, audited), = state.models
            audit_checkpoint(state, label, audited, log=lambda _: None)
            audited.cache.release()
            state.control.cache.release()
            rows = RowStore(self.audit_dir / name / label / f"{dataset}.jsonl", key="id").rows()
            out[dataset] = {k: v for k, v in summarize_rows(rows).items() if k in ("n_scored", "n_memorized", "rate",
                                                                                   "ci95")}
            scored = [r for r in rows if r["excluded"] is None]
            out[dataset]["control_rate"] = (sum(r["control_ned"] <= self.audit.k for r in scored) / len(scored)
                                            if scored else None)     # the control within k: the target is guessable
        write_summary(self.audit_dir, provenance(datasets=self._dataset_hash(),
                                                 audit=asdict(self.audit), control_dir=str(control_dir),
                                                 examples=str(self.planted), writer="memlens.AuditCallback"))
        return out

    def _mia(self, checkpoint: Path, name: str, control_dir: Path) -> dict:
        summary = audit_mia(checkpoint.parent, name, {CANARIES: (self.planted, self.heldout)},
                            mia_dir(self.audit_dir, name), MiaSettings(scoring=self.audit), control_dir=control_dir,
                            cache_dir=self.audit_dir / "cache", checkpoints=[(checkpoint.name, checkpoint)],
                            reference=self.reference, reference_name=REFERENCE_NAME if isinstance(
                                self.reference, TokenFrequency) else "AuditCallback(reference)", log=self.log)
        collect_summaries(self.audit_dir)
        spans = summary["results"][checkpoint.name][CANARIES]["spans"]
        return _tracked(spans.get("target") or {})

    def _pairs_scorable(self) -> bool:
        """Whether this run's canaries have preference pairs and PREMIA a reference; where a preference manifest's
        pairs cannot be scored, say why once."""
        if has_pairs(self.manifest) and self.pair_reference is not None:
            return True
        if self.manifest.get("format") == "preference" and not self._told_pairs:
            self._told_pairs = True
            why = ("its canaries carry no pairs (a conversational preference set, a masked field, no held-out canary, "
                   "or a manifest of an older memlens)" if not has_pairs(self.manifest) else
                   "the model the run started from is not a local model directory: pass pair_reference=<it>")
            self.log(f"[memlens] AuditCallback: preference-pair membership is not scored: {why}")
        return False

    def _pair_mia(self, checkpoint: Path, name: str) -> dict:
        """PREMIA's pair attacks on the planted canaries' preference pairs against the held-out ones, the model the
        run started from the reference of the ratios (the paper's), each pair's prompt left to right as a preference
        trainer reads it; each attack's AUC, TPR at FPR < 1 % and why it is degenerate, where it is."""
        pairs = {CANARIES: pair_files(self.out_dir / CANARIES / "manifest.json")}
        summary = audit_pair_mia(checkpoint.parent, name, pairs, self.pair_reference,
                                 pair_mia_dir(self.audit_dir, name), cache_dir=self.audit_dir / "cache",
                                 batch_size=self.audit.batch_size, device=self.audit.device, fim_family="prefix",
                                 checkpoints=[(checkpoint.name, checkpoint)], log=self.log)
        collect_pair_summaries(self.audit_dir)
        attacks = summary["results"][checkpoint.name][CANARIES]["attacks"]
        return _tracked(attacks)

    def _prompts_scorable(self) -> bool:
        """Whether this run's canaries sit in a prompt-only dataset (an RL trainer's), with planted and held-out ones,
        and the run's initial model is known; where a prompt-only manifest's prompts cannot be scored, say why once."""
        if self.manifest.get("format") != "prompt_only":
            return False
        if self.manifest["heldout"] and self.pair_reference is not None:
            return True
        if not self._told_prompts:
            self._told_prompts = True
            why = ("no canary was held out" if not self.manifest["heldout"] else
                   "the model the run started from is not a local model directory: pass pair_reference=<it>")
            self.log(f"[memlens] AuditCallback: RL-prompt membership is not scored: {why}")
        return False

    def _prompt_mia(self, checkpoint: Path, name: str) -> dict:
        """Min-kNN distance of each canary prompt's sampled completions, this checkpoint's beside the initial model's,
        planted vs held out (harness/audit/prompt_mia.py with the canaries as prompts); each attack's AUC, TPR at
        FPR < 1 % and why it is degenerate, where it is."""
        model = RLModel(name, checkpoint.parent, False, Path(self.pair_reference),
                        {CANARIES: (self.planted, self.heldout)}, seed=0, context_chars=0, canaries=True)
        # the prompt as an RL trainer holds it, left to right, whatever prompt_format the targets are asked in; every
        # canary (no cap), so that TPR at low FPR is measured wherever enough canaries are held out
        settings = PromptMiaSettings(prompts=max(2, len(self.manifest["canaries"]), len(self.manifest["heldout"])),
                                     max_new_tokens=self.audit.max_new_tokens, diba=False,
                                     scoring=replace(self.audit, fim_family="prefix"))
        summary = audit_prompt_mia(model, settings, prompt_mia_dir(self.audit_dir, name), self.audit_dir / "cache",
                                   checkpoints=[(checkpoint.name, checkpoint)], log=lambda _: None)
        collect_prompt_summaries(self.audit_dir)
        return _tracked(summary["results"][checkpoint.name][CANARIES]["attacks"])

    def _epsilon(self, checkpoint: Path, name: str) -> dict:
        """The one-run ε lower bounds (Steinke et al. 2023; Xiang et al. 2025, memlens.harness.measures.epsilon) from
        this checkpoint's MIA rows: every canary, planted or held out by memlens.inject's fair coin, ranked by the LOSS
        attack on the target, with the audit's default guess counts and δ. Refused (the record says why) when the
        manifest's held-out coin was not fair."""
        fraction = self.manifest.get("heldout_fraction")
        if fraction != FAIR_COIN:
            return {"skipped": f"the manifest's held-out rule is {self.manifest.get('heldout_rule')!r}: the one-run "
                               f"bound needs each canary held out by a fair coin (memlens.inject(..., "
                               f"heldout_fraction={FAIR_COIN}), the default)"}
        rows = read_jsonl(mia_dir(self.audit_dir, name) / checkpoint.name / f"{CANARIES}.jsonl")
        scores = [r["score"]["target"]["loss"] for r in rows]
        bound = audit_epsilon([str(r["id"]) for r in rows], scores, [int(r["member"]) for r in rows],
                              guess_counts(len(rows), DEFAULT_GUESSES), EPSILON_DELTA)
        path = epsilon_dir(self.audit_dir, name) / "summary.json"      # the layout `memlens audit` writes
        record = read_json(path) if path.is_file() else {"model": name, "results": {}}
        record["results"][checkpoint.name] = {CANARIES: bound}
        record["checkpoints"] = sorted(record["results"], key=lambda c: int(c.rsplit("-", 1)[-1]))
        record.update(attack="loss", span="target", provenance=provenance(datasets=self._dataset_hash(),
                                                                          measure="epsilon_one_run"))
        atomic_write_json(path, record)
        return {"m": bound["m"], "bounds": bound["bounds"]}

    def _exposure(self, checkpoint: Path, name: str) -> dict:
        """Each planted canary's exposure among the candidate pool of held-out targets, and each pooled held-out
        canary's among the rest of the pool (module docstring)."""
        planted, heldout = read_jsonl(self.planted), self._exposure_pool()
        if len(heldout) < 2:
            return {"skipped": f"{len(heldout)} held-out canaries: exposure ranks a canary among held-out ones; give "
                               "more canaries (inject's heldout_fraction holds half out)"}
        scorer = CausalLMScorer.load(checkpoint, self.audit.device, batch_size=self.audit.batch_size, lazy=True)
        sentinels = model_sentinels(checkpoint, self.audit.fim_family)
        rows = []
        for member, group in ((1, planted), (0, heldout)):
            for row in group:
                others = [h["target"] for h in heldout if h["id"] != row["id"]]
                rank, value = exposure_from_losses(scorer.candidate_losses(row, [row["target"], *others], sentinels), 0)
                rows.append({"id": row["id"], "member": member, "rank": rank, "n_candidates": 1 + len(others),
                             "exposure": value})
        scorer.release()
        out = exposure_dir(self.audit_dir, name)
        atomic_write_jsonl(out / f"{checkpoint.name}.jsonl", rows)
        summary = {group: exposure_summary([r["exposure"] for r in rows if r["member"] == member],
                                           len(heldout) + member)   # a planted canary also ranks among all held out
                   for group, member in (("planted", 1), ("heldout", 0))}
        path = out / "summary.json"
        record = read_json(path) if path.is_file() else {"model": name, "results": {}}
        record["results"][checkpoint.name] = summary
        record["rule"] = ("rank among the held-out canaries' targets in the same prompt, by summed NLL, ties against "
                          "the canary; exposure = log2(candidates) - log2(rank) (Carlini et al. 2019, Sec. 4)")
        record["provenance"] = provenance(datasets=self._dataset_hash(), measure="exposure among held-out twins")
        atomic_write_json(path, record)
        return summary

    def _exposure_pool(self) -> list[dict]:
        """The held-out canaries whose targets are the exposure candidates: at most `exposure_candidates` of them, a
        seeded draw fixed for the whole run (every checkpoint ranks against the same pool). The cost is one target
        pass per (canary, candidate) pair, so the pool bounds it; the resolution is log2(pool + 1) bits."""
        heldout = read_jsonl(self.heldout)
        random.Random(f"exposure-pool:{self.manifest.get('seed', 0)}").shuffle(heldout)
        return heldout[:self.exposure_candidates]

    def _reward(self, checkpoint: Path, name: str, model, tokenizer) -> dict:
        """The reward of each canary's full text (prompt + completion as the trainer joins them) from the model in
        memory (eval mode, no gradient, its training mode restored: memlens.harness.model.rewards), planted vs held
        out."""
        if tokenizer is None:
            raise UserError("AuditCallback: the trainer passed no processing_class (tokenizer) to score the reward "
                            "model with; give the trainer its tokenizer (processing_class=...)")
        planted, heldout = read_jsonl(self.planted), read_jsonl(self.heldout)
        texts = [self._reward_text(r, tokenizer) for r in planted + heldout]
        scores = score_texts(model, tokenizer, texts, batch_size=self.audit.batch_size)
        members, nonmembers = scores[:len(planted)], scores[len(planted):]
        metrics = attack_metrics(members, nonmembers, n_boot=BOOTSTRAP_N, seed=BOOTSTRAP_SEED) if nonmembers else None
        path = require_inside(self.audit_dir / REWARD_RANKING_SUBDIR / name / "summary.json", self.audit_dir,
                              "AuditCallback(model_name)")
        record = read_json(path) if path.is_file() else {"model": name, "results": {}}
        record["results"][checkpoint.name] = {
            "n_members": len(members), "n_nonmembers": len(nonmembers),
            "mean_reward_members": sum(members) / len(members),
            "mean_reward_nonmembers": sum(nonmembers) / len(nonmembers) if nonmembers else None, "metrics": metrics}
        record["score_convention"] = "the reward of prompt + completion as a membership score; AUC 0.5 = chance"
        record["provenance"] = provenance(datasets=self._dataset_hash(),
                                          measure="reward ranking of planted vs held-out canaries")
        atomic_write_json(path, record)
        return {"auc": metrics["auc"] if metrics else None}

    def _reward_text(self, row: dict, tokenizer) -> str:
        """A canary as the reward trainer reads a chosen row: prompt then completion, or the chat of the two."""
        if self.audit.fim_family == "chat":
            return tokenizer.apply_chat_template([{"role": "user", "content": row["prefix"]},
                                                  {"role": "assistant", "content": row["target"] + row["suffix"]}],
                                                 tokenize=False)
        return row["prefix"] + row["target"] + row["suffix"]


AuditCallback.__init__.__signature__ = _init_signature()   # help(AuditCallback) lists every keyword


def exposure_dir(audit_dir: Path, model_name: str) -> Path:
    """<audit dir>/exposure/<model>/, proven to lie inside the audit dir (the model name becomes a path part)."""
    return require_inside(Path(audit_dir) / CANARY_EXPOSURE_SUBDIR / model_name, audit_dir, "AuditCallback(model_name)")


def _tracked(attacks: dict[str, dict]) -> dict[str, dict]:
    """What callback.jsonl keeps of each attack's metrics at a checkpoint (tracker_metrics and the headline read it):
    its AUC, TPR at FPR < 1 % and why it is degenerate, where it is."""
    return {attack: {k: m[k] for k in ("auc", "tpr_at_fpr<1%", "degenerate") if m.get(k)} for attack, m in
            attacks.items()}


def tracker_metrics(record: dict) -> dict[str, float]:
    """A scored checkpoint's figures under `memlens/` keys, as the trainer's trackers receive them: extraction rates
    (planted, held out) and the control's rate, each attack's AUC and TPR at FPR < 1 % (only where that FPR exists at
    this many held-out canaries: target attacks under memlens/mia/, preference-pair attacks under memlens/pair_mia/,
    RL-prompt attacks under memlens/prompt_mia/),
    the planted canaries' mean exposure in bits, a reward model's ranking AUC, and the one-run ε bounds."""
    out: dict[str, float] = {}
    extraction = record.get("extraction") or {}
    for dataset, key in ((CANARIES, "extraction_rate"), (heldout_dataset(CANARIES), "extraction_rate_heldout")):
        if (extraction.get(dataset) or {}).get("rate") is not None:
            out[f"memlens/{key}"] = extraction[dataset]["rate"]
    if (extraction.get(CANARIES) or {}).get("control_rate") is not None:
        out["memlens/control_rate"] = extraction[CANARIES]["control_rate"]
    for kind in ("mia", "pair_mia", "prompt_mia"):
        for attack, m in (record.get(kind) or {}).items():
            out[f"memlens/{kind}/{attack}/auc"] = m["auc"]["value"]
            tpr = m.get("tpr_at_fpr<1%") or {}
            if tpr.get("measurable"):
                out[f"memlens/{kind}/{attack}/tpr_at_1pct_fpr"] = tpr["value"]
    planted = (record.get("exposure") or {}).get("planted") or {}
    if planted.get("mean") is not None:
        out["memlens/exposure_bits"] = planted["mean"]
    if ((record.get(REWARD) or {}).get("auc") or {}).get("value") is not None:
        out["memlens/reward_auc"] = record[REWARD]["auc"]["value"]
    for key, b in ((record.get("epsilon") or {}).get("bounds") or {}).items():
        if b.get("epsilon_lower_bound") is not None:
            out[f"memlens/epsilon/{key}"] = b["epsilon_lower_bound"]
    return out


def _headline(record: dict) -> dict[str, str]:
    out = {}
    for dataset, s in (record.get("extraction") or {}).items():
        out[f"extraction {dataset}"] = f"{s['n_memorized']}/{s['n_scored']}"
    for attack, m in (record.get("mia") or {}).items():
        # a degenerate attack's AUC says nothing about the model (memlens.harness.measures.mia.degenerate_reasons)
        out[f"MIA {attack} AUC"] = f"{m['auc']['value']:.2f}" + (" (degenerate)" if m.get("degenerate") else "")
    pair = (record.get("pair_mia") or {}).get(PRIMARY_PAIR_ATTACK)
    if pair:
        out[f"pair MIA {PRIMARY_PAIR_ATTACK} AUC"] = f"{pair['auc']['value']:.2f}" + (
            " (degenerate)" if pair.get("degenerate") else "")
    prompt = (record.get("prompt_mia") or {}).get(PRIMARY_PROMPT_ATTACK)
    if prompt:
        out[f"prompt MIA {PRIMARY_PROMPT_ATTACK} AUC"] = f"{prompt['auc']['value']:.2f}" + (
            " (degenerate)" if prompt.get("degenerate") else "")
    exposure = record.get("exposure") or {}
    if "planted" in exposure and exposure["planted"]["mean"] is not None:
        out["exposure planted/held out"] = f"{exposure['planted']['mean']:.2f}/{exposure['heldout']['mean']:.2f} bits"
    for b in ((record.get("epsilon") or {}).get("bounds") or {}).values():
        if b.get("epsilon_lower_bound") is not None:
            out[f"ε >= ({b['label']})"] = f"{b['epsilon_lower_bound']:.2f}"
    if (record.get(REWARD) or {}).get("auc"):
        out["reward AUC"] = f"{record[REWARD]['auc']['value']:.2f}"
    return out


if __name__ == "__main__":
    background_worker()
