"""`memlens check`: a preflight of the model preset against the experiment, before anything trains.

    memlens check model=qwen2.5_coder_1.5b                          # the hub id, from the local HF cache
    memlens check model=codegemma_2b model.pretrained=/data/codegemma-2b experiment=ft_persistence

It reads only config and tokenizer files — no weights — and prints one line per check: the offline copy,
the architecture, the LoRA target modules (found on a weightless meta-device copy of the model), the FIM
sentinels (each one token), BOS / EOS / PAD as the stages will use them, the stop tokens, the context
against every stage's lengths, and the dtype on the device. A failed check exits 2 with its fix.
`memlens run` runs it first (quietly unless something fails). The embedded model (`model=tiny`), which
this run's PT trains, has no files yet: only its stage lengths are checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from memlens.harness.core.errors import UserError
from memlens.harness.model.encode import adds_bos
from memlens.harness.text.fim import detect_sentinels, stop_token_ids
from memlens.recipes.orchestration.stage_plan import PlannedStage, plan
from memlens.recipes.stages.devices import resolve_device
from memlens.recipes.stages.models import parse_model, torch_dtype, use_distinct_pad

LENGTH_KEYS = ("max_seq_len", "max_length")     # stage settings bounded by the model's context


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def local_model_dir(pretrained: str) -> Path | None:
    """The directory `pretrained` loads from: itself, or its snapshot in the local HF cache (no network)."""
    path = Path(pretrained)
    if path.is_dir():
        return path
    # huggingface_hub (~0.1 s, reads HF_HUB_OFFLINE at import): a hub id only
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(pretrained, "config.json")
    return Path(cached).parent if isinstance(cached, str) else None


def stage_lengths(cfg, planned: list[PlannedStage] | None = None) -> dict[str, int]:
    """{"<stage>.<key>": tokens} of every planned stage's sequence-length settings (and the audit's budget); a run
    that has planned already passes its plan, so that the stages' settings are parsed once."""
    planned = plan(cfg) if planned is None else planned
    lengths = {f"{stage.model_name}.{key}": int(stage.given[key])
               for stage in planned for key in LENGTH_KEYS if stage.given.get(key) is not None}
    if cfg.get("audit") is not None and cfg.audit.get("max_new_tokens"):
        lengths["audit.max_new_tokens"] = int(cfg.audit.max_new_tokens)
    return lengths


def check_context(context: int | None, lengths: dict[str, int]) -> Check:
    if not lengths:
        return Check("context", True, f"{context} tokens (no stage sets a length)")
    longest = max(lengths, key=lengths.get)
    too_long = {k: v for k, v in lengths.items() if context is not None and v > context}
    detail = f"{context} tokens; longest stage length {lengths[longest]} ({longest})"
    if too_long:
        return Check("context", False, detail, f"lower {', '.join(sorted(too_long))} to at most {context}")
    return Check("context", context is not None, detail,
                 "" if context is not None else "the config states no context length; set the stage lengths by hand")


def check_dtype(dtype_name: str, device: str) -> Check:
    import torch  # torch (~1 s): pipeline.py imports check.py for every run

    if device == "cuda":
        ok = dtype_name != "bfloat16" or torch.cuda.is_bf16_supported()
        fix = "" if ok else "this GPU has no bf16: set model.dtype=float16 or float32"
        return Check("dtype", ok, f"{dtype_name} on cuda", fix)
    if dtype_name == "float16":
        return Check("dtype", False, "float16 on cpu", "train on CPU in float32 (model.dtype=auto) or bfloat16")
    note = " (runs, ~1.8x slower than float32 here)" if dtype_name == "bfloat16" else ""
    return Check("dtype", True, f"{dtype_name} on cpu{note}")


def lora_modules(config, target_modules: list[str]) -> Check:
    """Which LoRA targets exist, on a meta-device copy of the architecture (no weights read or allocated)."""
    import torch  # torch (~1 s): pipeline.py imports check.py for every run
    from transformers import AutoModelForCausalLM  # transformers (~1.5 s): pipeline.py imports check.py for every run

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    leaves = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    counts = {t: sum(1 for name, _ in model.named_modules() if name.rsplit(".", 1)[-1] == t) for t in target_modules}
    missing = [t for t in target_modules if t not in leaves]
    detail = " ".join(f"{t} ({counts[t]})" for t in target_modules)
    linear = sorted({n for n in leaves if n.endswith(("proj", "fc", "_c"))})
    fix = f"{missing} not in {type(model).__name__}; set model.lora.target_modules from {linear}" if missing else ""
    return Check("LoRA targets", not missing, detail, fix)


def tokenizer_checks(tokenizer, preset) -> list[Check]:
    """Sentinels, BOS, EOS/PAD and stop tokens as every stage will use them (memlens.recipes.stages.models.load_tokenizer)."""
    try:
        s = detect_sentinels(tokenizer, preset.fim_family, model_name=str(preset.pretrained))
    except UserError as e:
        return [Check("FIM sentinels", False, str(e), "set model.fim_family to the model's family")]
    split = {t: len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in (s.prefix, s.suffix, s.middle)}
    vocab = tokenizer.get_vocab()
    out = [Check("FIM sentinels", all(n == 1 for n in split.values()),
                 f"{s.family}: " + " ".join(f"{t}={vocab.get(t)}" for t in split) + " (one token each)",
                 "a sentinel splits into several tokens; the tokenizer is not this family's")]
    out.append(Check("BOS", True, f"{tokenizer.bos_token}={tokenizer.bos_token_id} added to every text"
                     if adds_bos(tokenizer) else "none added"))
    original_pad = tokenizer.pad_token
    try:
        use_distinct_pad(tokenizer, s, str(preset.pretrained))
        note = "" if tokenizer.pad_token == original_pad else f" (the tokenizer's own: {original_pad}; replaced)"
        out.append(Check("EOS / PAD", True, f"{tokenizer.eos_token}={tokenizer.eos_token_id} / "
                         f"{tokenizer.pad_token}={tokenizer.pad_token_id}{note}"))
    except UserError as e:
        out.append(Check("EOS / PAD", False, str(e), "give the tokenizer a pad token distinct from EOS"))
    stops = stop_token_ids(tokenizer, s)
    out.append(Check("stop tokens", bool(stops), " ".join(f"{t}={vocab[t]}" for t in s.stop_tokens() if t in vocab),
                     "the tokenizer has none of the family's stop tokens"))
    return out


def preflight(cfg, planned: list[PlannedStage] | None = None) -> list[Check]:
    """Every check of the preset `cfg.model` against the experiment in `cfg` (files read, none written); `planned`:
    the run's plan when it has one."""
    # transformers (~1.5 s): pipeline.py imports check.py for every run
    from transformers import AutoConfig, AutoTokenizer

    preset = parse_model(OmegaConf.to_container(cfg.model, resolve=True), "model")
    device = resolve_device(cfg.get("device") or "auto")
    lengths = stage_lengths(cfg, planned) if cfg.get("stages") else {}
    dtype_name = str(torch_dtype(preset, device)).replace("torch.", "")
    if preset.pretrained is None:
        return [Check("model", True, f"{preset.name}: the embedded model, trained by this run's PT (no files yet)"),
                check_context(preset.max_position_embeddings, lengths), check_dtype(dtype_name, device)]
    directory = local_model_dir(preset.pretrained)
    if directory is None:
        return [Check("offline copy", False, f"{preset.pretrained}: not in the local HF cache and not a directory",
                      f"fetch it once: huggingface-cli download {preset.pretrained} (or set model.pretrained=DIR)")]
    checks = [Check("offline copy", True, str(directory))]
    try:
        config = AutoConfig.from_pretrained(str(directory), local_files_only=True,
                                            trust_remote_code=preset.trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True,
                                                  trust_remote_code=preset.trust_remote_code)
    except (OSError, ValueError) as e:
        return checks + [Check("files", False, f"{directory}: {str(e).splitlines()[0]}",
                               "the directory needs config.json and the tokenizer files")]
    weights = sorted(p.name for p in directory.glob("*.safetensors"))
    checks.append(Check("weights", bool(weights), f"{len(weights)} safetensors file(s)" if weights else "none",
                        "only *.safetensors weights are loaded; convert the checkpoint with save_pretrained"))
    architecture = (config.architectures or [type(config).__name__])[0]
    layers, hidden = getattr(config, "num_hidden_layers", "?"), getattr(config, "hidden_size", "?")
    checks.append(Check("architecture", True, f"{architecture} ({config.model_type}), {layers} layers, hidden {hidden}"))
    if preset.lora_settings.enabled:
        checks.append(lora_modules(config, list(preset.lora_settings.target_modules)))
    checks += tokenizer_checks(tokenizer, preset)
    checks.append(check_context(getattr(config, "max_position_embeddings", None), lengths))
    checks.append(check_dtype(dtype_name, device))
    return checks


def render(checks: list[Check], title: str) -> str:
    width = max(len(c.name) for c in checks)
    lines = [title]
    for c in checks:
        lines.append(f"  {c.name:<{width}}  {'ok  ' if c.ok else 'FAIL'}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"  {'':<{width}}        fix: {c.fix}")
    return "\n".join(lines)


def title(cfg) -> str:
    model = cfg.model
    source = f" ({model.get('pretrained')})" if model.get("pretrained") else ""
    return f"memlens check: model={model.get('name')}{source}, experiment={cfg.get('experiment_name')}"


def audit_check(cfg, check_audit: Callable[[Any], str]) -> Check:
    """The audit's measure, attack and settings names (check_audit: memlens.harness.audit.command.check_settings,
    handed over by the CLI), so that a typo stops the run before its first stage trains."""
    try:
        return Check("audit", True, check_audit(cfg))
    except UserError as e:
        return Check("audit", False, str(e))     # the message names the key, the choices and the fix


def run_preflight(cfg, quiet: bool | None = False, planned: list[PlannedStage] | None = None,
                  check_audit: Callable[[Any], str] | None = None) -> None:
    """Print the table (quiet: one line; None: nothing, e.g. on the other processes of a launch); raise a
    UserError (exit 2) with the table when any check fails. `check_audit`: also check the audit's settings."""
    checks = preflight(cfg, planned)
    if check_audit is not None and cfg.get("audit") is not None:
        checks.append(audit_check(cfg, check_audit))
    failed = [c for c in checks if not c.ok]
    if failed:
        raise UserError(render(checks, title(cfg)) + f"\n{len(failed)} check(s) failed; fix them and rerun")
    if quiet:
        print(f"[memlens] check: model={cfg.model.get('name')}: {len(checks)} checks ok "
              "(`memlens check` prints them)", flush=True)
    elif quiet is False:
        print(render(checks, title(cfg)), flush=True)


def main(cfg, measurement=None) -> int:
    """`memlens check`: the model preset against the experiment, and the audit's settings (measurement: the CLI's
    link to the measuring side, memlens.recipes.orchestration.pipeline.Measurement)."""
    run_preflight(cfg, check_audit=measurement.check_audit if measurement is not None else None)
    return 0

