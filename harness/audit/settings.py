"""What one `memlens audit` job is: its settings (every knob that decides a number), the job's paths,
the examples it scores and the checkpoints it scores them on; validated from the `audit` config group,
each error naming the key and the fix (memlens.harness.audit.run runs the job).
"""

from __future__ import annotations

import functools
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from memlens.harness.core.config import require_bool
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import require_creatable_dir
from memlens.harness.core.layout import check_name, checkpoint_dirs
from memlens.harness.measures.memorization import DEFAULT_K
from memlens.harness.model.load import has_weights

FINAL = "final"            # checkpoint name of the model at the root of its directory

# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------

DRAFT_CHOICES = ("target", "none")
DEVICE_CHOICES = ("auto", "cpu", "cuda")     # as memlens.harness.model.load.pick_device takes them


def setting(a, cls, name: str) -> Any:
    """The audit group's value for field `name` of the settings dataclass `cls` (its key: `cls.KEYS[name]`, else the
    field's own name), a plain value (a list, not a ListConfig); the field's default where the group has no such key
    (a config built in code). So a measure's defaults are written once, in its dataclass: conf/audit/default.yaml
    repeats them only so that Hydra accepts `audit.<key>=...` overrides, and
    tests/unit/harness/audit/test_measure_settings.py asserts the two agree."""
    key = getattr(cls, "KEYS", {}).get(name, name)
    if a is None or key not in a:
        field = next(f for f in fields(cls) if f.name == name)
        return field.default_factory() if field.default is MISSING else field.default
    value = a.get(key)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _number_or_as_given(value: Any) -> Any:
    """float(value) for a number; anything else as given, for __post_init__ to refuse by its key."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


@dataclass(frozen=True)
class AuditSettings:
    """The knobs that decide every number of the audit (recorded in each .meta.json and the summary), the scoring
    knobs every measure shares (batch size, device, FIM family, threads). Its keys are `audit.<field>`."""

    k: float = DEFAULT_K
    max_new_tokens: int = 64
    target_tokens: int = 64
    min_target_tokens: int = 10
    prompt_ned_threshold: float = 0.5
    batch_size: int = 32
    fim_family: str | None = None
    device: str = "auto"
    trust_remote_code: bool = False
    progress: bool | None = None
    threads: int | None = None
    allow_empty: bool = False      # exit 0 even when no example is scored (see check_scored)
    draft: str = "target"          # verify the target as a speculative draft first (harness/model/draft.py)
    sanity_baseline: bool = False  # accept an audited model identical to its control (every rate 0)

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, (int, float)) or not 0.0 <= float(self.k) <= 1.0:
            raise UserError(f"audit.k={self.k!r}: must be a number in [0, 1] (the paper uses 0.1)")
        threshold = self.prompt_ned_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise UserError(f"audit.prompt_ned_threshold={self.prompt_ned_threshold!r}: must be in [0, 1] "
                            "(the paper uses 0.5)")
        for key in ("max_new_tokens", "target_tokens", "batch_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"audit.{key}={value!r}: must be a positive integer")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise UserError(f"audit.threads={self.threads!r}: must be null (torch default) or a positive integer")
        if self.draft not in DRAFT_CHOICES:
            raise UserError(f"audit.draft={self.draft!r}: use one of {', '.join(DRAFT_CHOICES)} (target: verify "
                            "the target as a draft first, same completions, faster; none: plain greedy decoding)")
        if isinstance(self.min_target_tokens, bool) or not isinstance(self.min_target_tokens, int) \
                or self.min_target_tokens < 0:
            raise UserError(f"audit.min_target_tokens={self.min_target_tokens!r}: must be an integer >= 0")
        if self.device not in DEVICE_CHOICES:
            raise UserError(f"audit.device={self.device!r}: use one of {', '.join(DEVICE_CHOICES)} (auto: cuda when a "
                            "CUDA device is visible, else cpu); device=... sets it for every command")
        if self.fim_family is not None and not isinstance(self.fim_family, str):
            raise UserError(f"audit.fim_family={self.fim_family!r}: name a FIM family (e.g. starcoder, memlens) or "
                            "null to detect it from the tokenizer")

    @classmethod
    def from_config(cls, a) -> AuditSettings:
        """The `audit` config group's scoring knobs, validated (__post_init__); a missing key takes its default."""
        get = functools.partial(setting, a, cls)
        return cls(k=_number_or_as_given(get("k")), max_new_tokens=get("max_new_tokens"),
                   target_tokens=get("target_tokens"), min_target_tokens=get("min_target_tokens"),
                   prompt_ned_threshold=_number_or_as_given(get("prompt_ned_threshold")),
                   batch_size=get("batch_size"), fim_family=get("fim_family"), device=str(get("device") or "auto"),
                   trust_remote_code=require_bool(get("trust_remote_code"), "audit.trust_remote_code"),
                   progress=require_bool(get("progress"), "audit.progress", allow_none=True),
                   threads=get("threads"), allow_empty=require_bool(get("allow_empty"), "audit.allow_empty"),
                   draft=str(get("draft")),
                   sanity_baseline=require_bool(get("sanity_baseline"), "audit.sanity_baseline"))

    def scoring(self) -> dict[str, Any]:
        """The settings rows depend on (batch size, device and progress bars do not change a row)."""
        d = asdict(self)
        # The draft changes how fast, not what, greedy decoding outputs (harness/model/draft.py).
        for key in ("batch_size", "device", "progress", "trust_remote_code", "threads", "allow_empty", "draft",
                    "sanity_baseline"):
            d.pop(key)
        return d


@dataclass(frozen=True)
class AuditJob:
    """One `memlens audit` invocation, validated: paths exist, model dirs hold safetensors weights."""

    model_dir: Path
    model_name: str
    control_dir: Path
    examples: Path
    dataset: str
    all_checkpoints: bool
    out_dir: Path
    cache_dir: Path
    settings: AuditSettings
    # Whole-run audits: where rows of a model (or control, or dataset) replaced since they were computed
    # are moved, so that they are recomputed; None (an audit of one model) refuses to touch them.
    stale_dir: Path | None = None


def _require_path(key: str, value: Any, kind: str) -> Path:
    if value in (None, ""):
        raise UserError(f"audit.{key} is not set; pass audit.{key}=<path to the {kind}>")
    path = Path(str(value))
    if not path.exists():
        raise UserError(f"audit.{key}={path}: not found; set audit.{key} to an existing {kind}")
    return path


def _require_model_dir(key: str, value: Any) -> Path:
    path = _require_path(key, value, "model directory")
    if not path.is_dir():
        raise UserError(f"audit.{key}={path}: not a directory; point it at a saved HF model directory")
    if not has_weights(path):
        raise UserError(f"audit.{key}={path}: no *.safetensors weights at its root; point it at a "
                        "finished model directory (only safetensors are loaded)")
    return path


def default_dataset_name(examples: Path) -> str:
    """The examples file's stem; for the team layout `<run_dir>/data/<name>/rows.jsonl`, <name>."""
    if examples.name == "rows.jsonl" and (examples.parent / "manifest.json").is_file():
        return examples.parent.name
    return examples.stem


def settings_from_config(a) -> AuditSettings:
    """The `audit` config group's scoring knobs, validated (AuditSettings.from_config)."""
    return AuditSettings.from_config(a)


def job_from_config(cfg) -> AuditJob:
    """Validate the `audit` config group; every error names the key and the fix."""
    a = cfg.audit
    model_dir = _require_model_dir("model_dir", a.model_dir)
    control_dir = _require_model_dir("control_dir", a.control_dir)
    examples = _require_path("examples", a.examples, "examples JSONL file")
    if not examples.is_file():
        raise UserError(f"audit.examples={examples}: not a file; point it at a JSONL file of examples")
    try:
        examples.open("rb").close()
    except OSError as e:
        raise UserError(f"audit.examples={examples}: cannot be read ({e.strerror}); fix its permissions") from None
    if a.out_dir in (None, ""):
        raise UserError("audit.out_dir is not set; pass audit.out_dir=<directory for the results>")
    out_dir = require_creatable_dir("audit.out_dir", Path(str(a.out_dir)))
    cache_dir = require_creatable_dir("audit.cache_dir",
                                      Path(str(a.cache_dir)) if a.get("cache_dir") else out_dir / "cache")
    settings = settings_from_config(a)
    # Both become path parts below out_dir: <out_dir>/<model_name>/<checkpoint>/<dataset>.jsonl
    model_name = check_name(a.get("model_name") or model_dir.resolve().name, "audit.model_name")
    dataset = check_name(a.get("dataset") or default_dataset_name(examples), "audit.dataset")
    return AuditJob(model_dir=model_dir, model_name=model_name, control_dir=control_dir, examples=examples,
                    dataset=dataset, all_checkpoints=require_bool(a.all_checkpoints, "audit.all_checkpoints"),
                    out_dir=out_dir, cache_dir=cache_dir, settings=settings)


# --------------------------------------------------------------------------------------------------
# Examples and checkpoints
# --------------------------------------------------------------------------------------------------

def list_checkpoints(model_dir: str | Path, all_checkpoints: bool) -> list[tuple[str, Path]]:
    """(checkpoint name, directory) to audit: the `checkpoint-<step>` dirs in step order, then "final".

    With all_checkpoints=False only the model at the root ("final"). A checkpoint dir without
    safetensors weights (e.g. a trainer state being written) is an error, not silently skipped.
    """
    model_dir = Path(model_dir)
    out: list[tuple[str, Path]] = []
    if all_checkpoints:
        for path in checkpoint_dirs(model_dir).values():
            if not has_weights(path):
                raise UserError(f"{path}: checkpoint without *.safetensors weights; remove it or rerun the "
                                "training stage so it finishes, or set audit.all_checkpoints=false")
            out.append((path.name, path))
    out.append((FINAL, model_dir))
    return out
