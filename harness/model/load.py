"""Loading a model directory, safely, and naming what it computes.

Safetensors only (no pickle: a directory without them is not a model to us), `trust_remote_code=False`
unless the caller sets it, local files only (nothing is fetched). A LoRA checkpoint (adapters over a base)
loads merged onto its base, so every checkpoint of a LoRA run is audited like any model. A model's
fingerprint is one sha256 over its weights, config and tokenizer files: the key of every cached result
(memlens.harness.model.cache). Before an audit writes anything, `check_model_files` reads the config and the
safetensors headers, so a damaged model is refused naming the file.
"""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path

from memlens.harness.core.errors import UserError, first_line
from memlens.harness.core.io import file_sha256, read_json, sha256_json
from memlens.harness.model.prompts import prompt_format

# Weights are loaded from safetensors only (no pickle): a directory without them is not a model to us.
WEIGHT_GLOB = "*.safetensors"


def pick_device(device: str = "auto") -> str:
    """'auto' -> 'cuda' when a CUDA device is visible, else 'cpu'. (The harness never imports recipes/.)"""
    import torch  # heavy: torch loads on first use, in the model layer only

    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"device={device!r}: use auto, cpu or cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda but no CUDA device is visible; use device=auto or device=cpu")
    return device


def default_dtype(device: str):
    """fp32 on CPU (bf16 matmuls measured ~1.8x slower than fp32 on CPU), bf16 on CUDA."""
    import torch  # heavy: torch loads on first use, in the model layer only

    return torch.bfloat16 if device == "cuda" else torch.float32


def has_weights(model_dir: str | Path) -> bool:
    return any(Path(model_dir).glob(WEIGHT_GLOB))


def _check_model_dir(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: model directory not found; point the model path at a saved HF model")
    if not has_weights(path):
        others = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt"))
        hint = (f" (found {', '.join(others)}: only safetensors are loaded, for safety; re-save the model "
                "with save_pretrained(..., safe_serialization=True))") if others else ""
        raise UserError(f"{path}: no *.safetensors weights in this directory{hint}")
    return path


def not_local_error(path: str | Path, what: str, error: Exception) -> UserError:
    """The error for a model or tokenizer that is not on this machine: nothing is ever downloaded at run
    time (`local_files_only=True` everywhere), so a hub id must be fetched once by the user."""
    if Path(str(path)).exists():
        return UserError(f"cannot load the {what} of {path}: {str(error).strip().splitlines()[0]}\nfix: point "
                         "init/model.pretrained at a complete model directory (config.json, *.safetensors, "
                         "tokenizer files)")
    return UserError(f"{path}: no local copy of this {what} (memlens never downloads at run time). Fetch it once "
                     f"with `huggingface-cli download {path}` (or `hf download {path}`), then rerun; or set "
                     "model.pretrained to a local directory holding the model")


def safe_from_pretrained(auto_class, path: str | Path, *, dtype, trust_remote_code: bool, **kwargs):
    """The one `from_pretrained` of a model, for the stages and the audit alike: safetensors only (no pickle),
    local files only (nothing is downloaded at run time; a hub id resolves from the HF cache or fails saying how to
    fetch it), remote code only when the user allowed it."""
    try:
        return auto_class.from_pretrained(str(path), dtype=dtype, use_safetensors=True, local_files_only=True,
                                          trust_remote_code=trust_remote_code, **kwargs)
    except OSError as e:
        raise not_local_error(path, "model", e) from None


ADAPTER_CONFIG = "adapter_config.json"


def _load_lora_checkpoint(path: Path, trust_remote_code: bool, dtype):
    """A PEFT LoRA checkpoint (adapter_config.json + adapter_model.safetensors, as intermediate
    checkpoints of LoRA fine-tuning are saved): its base model with the adapters merged in, so every
    checkpoint of a LoRA run is audited like any model."""
    from peft import AutoPeftModelForCausalLM  # heavy: loaded only for a LoRA checkpoint

    model = AutoPeftModelForCausalLM.from_pretrained(str(path), use_safetensors=True, dtype=dtype,
                                                     local_files_only=True, trust_remote_code=trust_remote_code)
    return model.merge_and_unload()


@contextlib.contextmanager
def quiet_weight_loading():
    """No "Loading weights" bar per model: an audit loads dozens of checkpoints, and a bar each would
    bury the audit's own progress lines. Trainer progress bars are not affected."""
    # heavy: transformers loads on first use, in the model layer only
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _load(auto_cls_name: str, path: str | Path, device: str, trust_remote_code: bool, dtype):
    import transformers  # heavy: the model layer loads transformers on first use
    from transformers import AutoTokenizer  # heavy: transformers loads on first use, in the model layer only

    path = _check_model_dir(path)
    device = pick_device(device)
    dtype = dtype or default_dtype(device)
    with quiet_weight_loading():
        if (path / ADAPTER_CONFIG).is_file() and auto_cls_name == "AutoModelForCausalLM":
            model = _load_lora_checkpoint(path, trust_remote_code, dtype)
        else:
            model = safe_from_pretrained(getattr(transformers, auto_cls_name), path, dtype=dtype,
                                         trust_remote_code=trust_remote_code)
    model.to(device).eval()
    check_finite_weights(model, path)
    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code, local_files_only=True)
    return model, tokenizer


def check_finite_weights(model, path: str | Path) -> None:
    """A UserError when any weight is NaN or infinite: such a model decodes no text (argmax over NaN logits), so
    an audit of it would report a confident 0 % memorized. It is the mark of a stage whose training diverged
    (memlens.recipes.stages.divergence stops new ones; this catches models trained elsewhere or before)."""
    import torch  # heavy: the model layer loads torch on first use

    tensors = [(name, t) for name, t in model.state_dict().items() if t.is_floating_point()]
    if not tensors or bool(torch.stack([torch.isfinite(t).all() for _, t in tensors]).all()):
        return                   # one reduction and one device sync for the whole model, not one per tensor
    bad = [name for name, t in tensors if not bool(torch.isfinite(t).all())]
    if bad:
        raise UserError(f"model {path}: {len(bad)} weight tensor(s) hold NaN or infinite values (first: {bad[0]}); "
                        "its training diverged and it cannot be scored. Fix: retrain it at a lower learning rate "
                        "(`stages.<NAME>.lr=...`), or audit another checkpoint")


def load_causal_lm(path: str | Path, device: str = "auto", *, trust_remote_code: bool = False, dtype=None):
    """(model, tokenizer) of a decoder-only LM directory, eval mode, on `device` (fp32 CPU / bf16 CUDA)."""
    model, tokenizer = _load("AutoModelForCausalLM", path, device, trust_remote_code, dtype)
    # Decoder-only batches are padded on the left so that every row's next token sits in the last column.
    tokenizer.padding_side = "left"
    return model, tokenizer


def load_reward_model(path: str | Path, device: str = "auto", *, trust_remote_code: bool = False, dtype=None):
    """(model, tokenizer) of a reward model directory (a one-unit sequence classifier), eval mode, on `device`."""
    return _load("AutoModelForSequenceClassification", path, device, trust_remote_code, dtype)


def load_seq2seq(path: str | Path, device: str = "auto", *, trust_remote_code: bool = False, dtype=None):
    """(model, tokenizer) of an encoder-decoder model directory (Marian, T5, BART), eval mode."""
    return _load("AutoModelForSeq2SeqLM", path, device, trust_remote_code, dtype)



# Files that decide what a model directory computes: weights, architecture, tokenizer.
MODEL_FILE_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json",
                       "adapter_config.json",   # a LoRA checkpoint: adapters + which base they apply to
                       "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                       "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "*.model",
                       "chat_template.*")



_FILE_HASHES: dict[tuple[str, int, int], str] = {}


def _cached_file_sha256(path: Path) -> str:
    """sha256 of a file, memoised per (path, size, mtime): weights are hashed once per process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _FILE_HASHES:
        _FILE_HASHES[key] = file_sha256(path)
    return _FILE_HASHES[key]


def model_files(model_dir: str | Path) -> dict[str, str]:
    """{file name: sha256} of the weights, config and tokenizer files at the root of `model_dir`."""
    model_dir = Path(model_dir)
    files = sorted({p for pat in MODEL_FILE_PATTERNS for p in model_dir.glob(pat) if p.is_file()})
    return {p.name: _cached_file_sha256(p) for p in files}


def check_model_files(model_dir: str | Path, trust_remote_code: bool = False) -> None:
    """Read what loading the model needs — its config and the headers of its safetensors files — so that a
    damaged model is refused (naming the file) before the audit writes anything: a meta file written for
    weights that then fail to load would refuse the rerun with the restored weights."""
    from safetensors import safe_open  # heavy: reads the weights' headers on first use
    from transformers import AutoConfig  # heavy: transformers loads on first use, in the model layer only

    model_dir = Path(model_dir)
    config = model_dir / "config.json"
    adapter = model_dir / "adapter_config.json"
    if adapter.is_file():                 # a LoRA checkpoint: its base model's config (when it is local)
        base = read_json(adapter).get("base_model_name_or_path")
        config = Path(str(base)) / "config.json" if base and Path(str(base)).is_dir() else None
    if config is not None:
        if not config.is_file():
            raise UserError(f"{config}: missing; a model directory needs the config.json its weights were saved "
                            "with (model.save_pretrained writes it): restore it, or point the audit at a complete "
                            "model directory")
        try:
            AutoConfig.from_pretrained(str(config.parent), trust_remote_code=trust_remote_code, local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{config}: not a readable model config ({first_line(e)}); restore the config.json "
                            "the model was saved with") from None
    for weights in sorted(model_dir.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt") as f:
                f.keys()
        except Exception as e:   # safetensors raises its own SafetensorError (and OSError)
            raise UserError(f"{weights}: not a readable safetensors file ({first_line(e)}); it is damaged or "
                            "was cut off while being written: restore it (or save the model again) and rerun "
                            "the same command") from None


def model_fingerprint(model_dir: str | Path) -> str:
    """One sha256 over what a model directory computes (weights + config + tokenizer files)."""
    files = model_files(model_dir)
    if not any(name.endswith(".safetensors") for name in files):
        raise UserError(f"{model_dir}: no *.safetensors weights; point at a saved HF model or checkpoint dir")
    return sha256_json(files)



CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(model_dir: str | Path) -> int | None:
    """The model's context in tokens from its config.json (a LoRA checkpoint: its local base model's),
    read as JSON so that no model code runs; None when the config states none."""
    model_dir = Path(model_dir)
    config = model_dir / "config.json"
    adapter = model_dir / "adapter_config.json"
    if not config.is_file() and adapter.is_file():
        base = read_json(adapter).get("base_model_name_or_path")
        config = Path(str(base)) / "config.json" if base else config
    if not config.is_file():
        return None
    data = read_json(config)
    for section in (data, data.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            if isinstance(section.get(key), int) and not isinstance(section.get(key), bool):
                return section[key]
    return None


def tokenizers_differ(a, b) -> bool:
    """True when two tokenizers map text to different ids (compared by vocabulary and class)."""
    return type(a).__name__ != type(b).__name__ or a.get_vocab() != b.get_vocab()


def load_tokenizer(path: str | Path, trust_remote_code: bool = False):
    """The tokenizer of a model directory, from its files alone (no weights are read)."""
    from transformers import AutoTokenizer  # heavy: transformers is loaded only by the model layer, on use

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot load its tokenizer ({first_line(e)}); save the tokenizer beside the "
                        "weights (tokenizer.save_pretrained) or point the audit at a complete model "
                        "directory") from None


def model_sentinels(model_dir: str | Path, fim_family: str | None, trust_remote_code: bool = False):
    """The prompt format of a model directory (its FIM sentinels, or `prefix` / `chat`: memlens.harness.model.prompts),
    from its tokenizer alone."""
    return prompt_format(load_tokenizer(model_dir, trust_remote_code), fim_family, str(model_dir),
                         config_key="audit.fim_family")


def accepts_logits_to_keep(model) -> bool:
    """Whether the model's forward can materialise only its last logits (most transformers models can)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def set_threads(n: int) -> None:
    """torch's intra-op threads for this process (audit.threads)."""
    import torch  # heavy: the model layer loads torch on first use

    torch.set_num_threads(n)


def distributed_barrier() -> None:
    """Wait for every process of a launch (gloo works on CPU and GPU alike; the audit moves no tensors)."""
    import torch.distributed as dist  # heavy: the model layer loads torch on first use

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    dist.barrier()


def load_fill_mask(model_dir: str | Path, top_k: int, device: str):
    """(predict(text) -> the top_k token strings for its mask, the mask token, the special tokens) of a local
    fill-mask model directory (Finding Memo's substitutes, paper 002 Sec. 4); safetensors only."""
    from transformers import pipeline  # heavy: the model layer loads transformers on first use

    fill = pipeline("fill-mask", model=str(model_dir), tokenizer=str(model_dir), device=device, top_k=top_k,
                    model_kwargs={"use_safetensors": True})

    def predict(text: str) -> list[str]:
        return [p["token_str"] for p in fill(text)]

    return predict, fill.tokenizer.mask_token, set(fill.tokenizer.all_special_tokens)


def cpu_kernel_level() -> str:
    """torch's CPU kernel level in this process ('AVX2', 'AVX512', 'DEFAULT'), loading torch if it was not: the
    level a child must differ from (the NMT stability rerun) is known before this process computes anything."""
    import torch  # heavy: the model layer loads torch on first use

    return torch.backends.cpu.get_cpu_capability()


@contextlib.contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to `n` inside the block (None: unchanged), restored after it."""
    import torch  # heavy: the model layer loads torch on first use

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def filter_transformers_records(record_filter) -> None:
    """Install a logging filter on transformers' own handler, once. The handler sits on the library's root
    logger: records of its child loggers reach it by propagation, where a handler filter (unlike a logger
    filter) sees them."""
    from transformers.utils import logging as hf_logging  # heavy: transformers loads on first use

    for handler in hf_logging.get_logger("transformers").handlers:
        if not any(type(f) is type(record_filter) for f in handler.filters):
            handler.addFilter(record_filter)
