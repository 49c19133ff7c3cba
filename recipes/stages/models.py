"""Model presets (conf/model/*.yaml) and the few model operations the pipeline's recipes share.

A preset names either the embedded default (a small Llama that the PT stage trains from scratch,
sized by `hidden_size`, `num_layers`, ...) or a public FIM code model (`pretrained: <hub id or path>`,
then PT only imports it). Loading is safetensors-only with trust_remote_code off unless the user sets
it (a checkpoint from elsewhere never executes code or unpickles); LoRA goes through PEFT; bf16 is used on
CUDA only (bf16 on CPU measured ~1.8x slower).

These are plain functions, not a base class: each recipe stays a short script that calls them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlens.harness.core.config import check_dataclass_values
from memlens.harness.core.errors import UserError
from memlens.harness.core.shipped import shipped_path
from memlens.harness.model.load import not_local_error, safe_from_pretrained
from memlens.harness.text.fim import detect_sentinels, stop_token_ids

DTYPES = ("auto", "float32", "bfloat16", "float16")
PROJECT_ROOT = Path(__file__).resolve().parents[2]   # recipes/stages/models.py -> the checkout


def resolve_pretrained(name: str | None) -> str | None:
    """A hub id or a path; a relative path that exists under the project root, or among the files a
    non-editable install ships (the shipped base, conf/model/tiny_base.yaml; memlens.harness.core.shipped), is made
    absolute, so that the preset works from any working directory."""
    if name is None or Path(name).is_absolute():
        return name
    local = PROJECT_ROOT / name
    if local.exists():
        return str(local)
    installed = shipped_path(name)
    return str(installed) if installed is not None else name


def settings_from_dict(cls, settings: dict[str, Any], where: str):
    """Build dataclass `cls` from a config dict; unknown keys and a non-boolean for a bool field are a
    UserError naming `<where>.<key>` (memlens.harness.core.config.check_dataclass_values)."""
    check_dataclass_values(cls, settings, where)
    return cls(**settings, where=where)


def require(ok: bool, where: str, key: str, value: Any, fix: str) -> None:
    """Raise a UserError naming the config key, its bad value and the fix."""
    if not ok:
        raise UserError(f"{where}.{key}={value!r}: {fix}")


@dataclass
class LoraSettings:
    """PEFT LoRA adapters (conf/model/<preset>.yaml `lora:`); off for the embedded tiny model."""

    enabled: bool = False          # true: train only low-rank adapters (GPU presets); merged at save
    r: int = 16                    # adapter rank; ↑ more capacity (and memorization), more memory
    alpha: int = 32                # scaling = alpha / r; ↑ larger adapter updates
    dropout: float = 0.05          # adapter dropout; ↑ regularizes
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    where: dataclasses.InitVar[str] = "model.lora"

    def __post_init__(self, where: str) -> None:
        require(self.r >= 1, where, "r", self.r, "use a rank >= 1, e.g. 16")
        require(self.alpha > 0, where, "alpha", self.alpha, "use a positive alpha, e.g. 2 * r")
        require(0 <= self.dropout < 1, where, "dropout", self.dropout, "use a value in [0, 1)")
        require(bool(self.target_modules), where, "target_modules", self.target_modules,
                "list the projection modules to adapt, e.g. [q_proj, v_proj]")


@dataclass
class ModelSettings:
    """One conf/model/<preset>.yaml. Size keys apply only to the embedded model (pretrained: null)."""

    name: str = "tiny"
    pretrained: str | None = None  # hub id or local dir of a FIM code model; PT then only imports it
    fim_family: str | None = None  # memlens.harness.text.fim family (memlens, starcoder2, qwen2.5-coder, ...); null: detect
    dtype: str = "auto"            # auto: bf16 on CUDA, fp32 on CPU
    trust_remote_code: bool = False  # never on by default: loading must not run a checkpoint's code
    vocab_size: int = 4096         # BPE vocabulary of the embedded tokenizer; ↑ shorter sequences, more params
    hidden_size: int = 256         # ↑ capacity (memorizes more), slower
    num_layers: int = 5
    num_heads: int = 4
    intermediate_size: int = 688   # MLP width, ~2.7 x hidden as in Llama
    max_position_embeddings: int = 1024
    tie_embeddings: bool = True    # share input/output embeddings (saves vocab x hidden params)
    lora: dict[str, Any] = field(default_factory=dict)
    where: dataclasses.InitVar[str] = "model"

    def __post_init__(self, where: str) -> None:
        require(self.dtype in DTYPES, where, "dtype", self.dtype, f"use one of {DTYPES}")
        for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                    "max_position_embeddings"):
            require(int(getattr(self, key)) >= 1, where, key, getattr(self, key), "use a positive integer")
        require(self.hidden_size % self.num_heads == 0, where, "hidden_size", self.hidden_size,
                f"must be divisible by num_heads={self.num_heads}")
        require(self.vocab_size >= 300, where, "vocab_size", self.vocab_size,
                "byte-level BPE needs >= 256 byte tokens + specials; use e.g. 1024 or 4096")
        self.lora_settings = settings_from_dict(LoraSettings, dict(self.lora or {}), f"{where}.lora")
        self.pretrained = resolve_pretrained(self.pretrained)


def parse_model(preset: dict[str, Any] | None, where: str) -> ModelSettings:
    return settings_from_dict(ModelSettings, dict(preset or {}), where)


def torch_dtype(model: ModelSettings, device: str):
    """bf16 on CUDA (the paper's hardware trains in bf16), fp32 on CPU unless the preset says otherwise."""
    import torch  # torch (~1 s): the CLI imports models.py to check every config

    if model.dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return getattr(torch, model.dtype)


def build_llama(model: ModelSettings, tokenizer):
    """The embedded default: a LlamaForCausalLM from config (weights from the global torch seed)."""
    # transformers (~1.5 s): the CLI imports models.py to check every config
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=model.hidden_size, num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_heads, num_key_value_heads=model.num_heads,
        intermediate_size=model.intermediate_size, max_position_embeddings=model.max_position_embeddings,
        tie_word_embeddings=model.tie_embeddings, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def _from_pretrained(auto_class, path: str | Path, model: ModelSettings, device: str, **kwargs):
    """`auto_class.from_pretrained` in the preset's dtype: safetensors only, remote code only if allowed,
    local files only (a hub id resolves from the HF cache or fails with how to fetch it)."""
    return safe_from_pretrained(auto_class, path, dtype=torch_dtype(model, device),
                                trust_remote_code=model.trust_remote_code, **kwargs)


def load_stage_model(path: str | Path, model: ModelSettings, device: str):
    """A stage's causal LM from its directory or hub id, loaded as its model preset says (the policy of FT, RL and
    IPO). The audit loads checkpoints with memlens.harness.model.load.load_causal_lm instead."""
    # transformers (~1.5 s): the CLI imports models.py to check every config
    from transformers import AutoModelForCausalLM

    return _from_pretrained(AutoModelForCausalLM, path, model, device)


def load_sequence_classifier(path: str | Path, model: ModelSettings, device: str, pad_token_id: int):
    """A one-unit sequence classifier (a reward or value model) from a stage directory: the LM backbone
    with a `score` head, new (drawn from the global torch RNG) unless the directory is a reward model."""
    # transformers (~1.5 s): the CLI imports models.py to check every config
    from transformers import AutoModelForSequenceClassification

    classifier = _from_pretrained(AutoModelForSequenceClassification, path, model, device, num_labels=1)
    # The head scores the last non-pad token; it finds it through pad_token_id.
    classifier.config.pad_token_id = pad_token_id
    return classifier


def load_tokenizer(path: str | Path, model: ModelSettings):
    """The tokenizer of a model directory (or cached hub id), with a padding token distinct from EOS.

    StarCoder2 ships no pad, Qwen2.5-Coder and DeepSeek-Coder pad with EOS. With PAD = EOS a sequence
    classifier (the reward and value models) scores the last non-pad token, i.e. the token *before* a
    completion's final EOS, so a finished and a truncated completion would look the same to the reward
    model; the family's own pad token (memlens.harness.text.fim.FimSentinels.pad, a token the vocabulary already has,
    so no embedding is added) replaces it. Every stage saves this tokenizer, so later stages and the audit
    load the same pad."""
    from transformers import AutoTokenizer  # transformers (~1.5 s): the CLI imports models.py to check every config

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=model.trust_remote_code,
                                                  local_files_only=True)
    except (OSError, ValueError) as e:
        raise not_local_error(path, "tokenizer", e) from None
    use_distinct_pad(tokenizer, detect_sentinels(tokenizer, model.fim_family, model_name=str(path)), str(path))
    return tokenizer


def use_distinct_pad(tokenizer, sentinels, where: str) -> None:
    """Set the family's pad when the tokenizer has none or pads with EOS (see load_tokenizer)."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    if pad is not None and pad != eos:
        return
    if sentinels.pad is None or sentinels.pad not in tokenizer.get_vocab():
        raise UserError(f"{where}: the tokenizer pads with its EOS {tokenizer.eos_token!r} (or not at all) and "
                        f"FIM family {sentinels.family!r} names no other pad token in its vocabulary; a reward "
                        "model could not see where a completion ends. Give the tokenizer a pad token distinct "
                        "from EOS (tokenizer.pad_token = ...; save_pretrained) or set model.fim_family")
    tokenizer.pad_token = sentinels.pad


def stop_generation_at_family_stops(model, tokenizer, sentinels) -> None:
    """Make `generate` (and TRL's RLOO/GRPO, which read generation_config.eos_token_id for both sampling
    and the completion mask) end a completion at any of the family's stop tokens, EOS first."""
    model.generation_config.eos_token_id = stop_token_ids(tokenizer, sentinels)
    model.generation_config.pad_token_id = tokenizer.pad_token_id


def lora_config(model: ModelSettings, task_type: str = "CAUSAL_LM"):
    """The preset's PEFT LoraConfig, or None when LoRA is off. With task_type SEQ_CLS, PEFT also trains
    (and saves) the classifier's `score` head in full (modules_to_save): a new head must learn."""
    lora = model.lora_settings
    if not lora.enabled:
        return None
    from peft import LoraConfig  # peft (~3 s): a LoRA stage only

    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.target_modules), task_type=task_type)


def wrap_lora(pretrained, model: ModelSettings, task_type: str = "CAUSAL_LM"):
    """Wrap in PEFT LoRA adapters when the preset enables them (only adapters, and a SEQ_CLS model's
    head, then train); otherwise return the model unchanged."""
    config = lora_config(model, task_type)
    if config is None:
        return pretrained
    from peft import get_peft_model  # peft (~3 s): a LoRA stage only

    return get_peft_model(pretrained, config)


def save_final(pretrained, tokenizer, out_dir: Path):
    """Save a plain HF model (causal LM or sequence classifier) at `out_dir` and return it. LoRA adapters
    are merged first so that every downstream stage and the audit load the final model the same way,
    whatever the training method. Merging changes the PEFT model in place: train no further with it."""
    if hasattr(pretrained, "merge_and_unload"):
        pretrained = pretrained.merge_and_unload()
    pretrained.save_pretrained(str(out_dir))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out_dir))
    return pretrained


def save_lora_stage(trainer, tokenizer, out_dir: Path, rebuild: Callable[[], Any]):
    """Save the LoRA model `trainer` trained as a plain merged model (save_final), written by the main process;
    returns the merged model there and None on the other processes. Every process must call it.

    Without ZeRO-3 the trainer's model is whole in every process: the main process merges and saves it, as always.
    Under DeepSpeed ZeRO-3 each process holds only a partition of every weight (the others are empty tensors, so a
    merge fails with `size of tensor a (0) must match ...`). There every process first takes part in gathering the
    full state dict (DeepSpeed's consolidated 16-bit state dict: one module at a time, collected on the main
    process's CPU; what `stage3_gather_16bit_weights_on_model_save` saves, but gathered whatever that flag says). The
    main process then builds the model again un-partitioned (`rebuild`: the init model wrapped in the same adapters,
    with transformers' ZeRO-3 switch off, since a partitioned from_pretrained there would wait for processes that
    never join it), loads the gathered weights into it (strictly: every base and adapter key), then merges and saves
    it exactly as without ZeRO-3."""
    engine = trainer.model_wrapped
    partitioned = getattr(trainer, "is_deepspeed_enabled", False) and engine.zero_optimization_partition_weights()
    if not partitioned:
        return save_final(trainer.model, tokenizer, out_dir) if trainer.is_world_process_zero() else None
    state = engine._zero3_consolidated_16bit_state_dict()      # a collective: every process takes part
    if not trainer.is_world_process_zero():
        return None
    with zero3_init_off():
        model = rebuild()
    model.load_state_dict(state, strict=True)
    return save_final(model, tokenizer, out_dir)


@contextmanager
def zero3_init_off():
    """transformers' ZeRO-3 switch (the HfDeepSpeedConfig its weak reference points to) off for the block, back on
    after: a from_pretrained in the block builds a whole model in this process alone."""
    # transformers (~1.5 s): the CLI imports models.py to check every config
    from transformers.integrations import deepspeed as hf_deepspeed

    ref = hf_deepspeed._hf_deepspeed_config_weak_ref
    config = ref() if ref is not None else None
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if config is not None:
            hf_deepspeed.set_hf_deepspeed_config(config)
