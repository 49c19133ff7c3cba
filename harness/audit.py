"""`memaudit audit`: score a model's checkpoints against a fixed control with the k-approximate
counterfactual memorization test (paper 003 Definition 3.1, Sec. 4.2, Appendices B-D).

For every example (prefix, target, suffix) the audited model and the control complete the PSM prompt
greedily; the target compared is the first `target_tokens` tokens of the target (audited model's
tokenizer); `ned` / `control_ned` are sliding-window NEDs between that target and each completion;
the example is memorized when ned <= k < control_ned, unless it is excluded (short target, target
recoverable from the prompt).

Layout (the audit's part of a run; harness/layout.py has the whole run):
    <out_dir>/<model>/<checkpoint>/<dataset>.jsonl       one row per example (RowStore: resumable)
    <out_dir>/<model>/<checkpoint>/<dataset>.meta.json   what those rows were computed with
    <out_dir>/summary.json                               rebuilt from every stored row at the end
    <cache_dir>/<fingerprint>.jsonl + .json              completions of one model on one example set

Work proceeds in length-sorted batches of examples; after each batch its completions (cache) and rows
are appended with fsync, so a kill loses at most one batch and a rerun continues where it stopped.

The functions below are the pieces a whole-run audit reuses: `load_examples`, `list_checkpoints`,
`model_fingerprint`, `CompletionCache`, `audit_checkpoint`, `write_summary`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.config import require_bool
from harness.encode import encode_texts
from harness.errors import NothingScored, UserError
from harness.io import RowStore, atomic_write_json, file_sha256, read_json, require_creatable_dir, sha256_json
from harness.layout import check_name, checkpoint_dirs, require_inside

EXAMPLE_FIELDS = ("id", "prefix", "target", "suffix")
FINAL = "final"            # checkpoint name of the model at the root of its directory
CACHE_VERSION = 1          # bump when decoding changes, so completions of older code are not reused
SUMMARY_FILE = "summary.json"
META_SUFFIX = ".meta.json"

# Files that decide what a model directory computes: weights, architecture, tokenizer.
MODEL_FILE_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json",
                       "adapter_config.json",   # a LoRA checkpoint: adapters + which base they apply to
                       "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                       "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "*.model",
                       "chat_template.*")


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------

DRAFT_CHOICES = ("target", "none")


@dataclass(frozen=True)
class AuditSettings:
    """The knobs that decide every number of the audit (recorded in each .meta.json and the summary)."""

    k: float = 0.1
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
    draft: str = "target"          # verify the target as a speculative draft first (harness/draft.py)
    sanity_baseline: bool = False  # accept an audited model identical to its control (every rate 0)

    def __post_init__(self):
        if not isinstance(self.k, (int, float)) or not 0.0 <= float(self.k) <= 1.0:
            raise UserError(f"audit.k={self.k!r}: must be a number in [0, 1] (the paper uses 0.1)")
        if not isinstance(self.prompt_ned_threshold, (int, float)) or not 0.0 <= self.prompt_ned_threshold <= 1.0:
            raise UserError(f"audit.prompt_ned_threshold={self.prompt_ned_threshold!r}: must be in [0, 1] "
                            "(the paper uses 0.5)")
        for key in ("max_new_tokens", "target_tokens", "batch_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise UserError(f"audit.{key}={value!r}: must be a positive integer")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise UserError(f"audit.threads={self.threads!r}: must be null (torch default) or a positive integer")
        if self.draft not in DRAFT_CHOICES:
            raise UserError(f"audit.draft={self.draft!r}: use one of {', '.join(DRAFT_CHOICES)} (target: verify "
                            "the target as a draft first, same completions, faster; none: plain greedy decoding)")
        if not isinstance(self.min_target_tokens, int) or self.min_target_tokens < 0:
            raise UserError(f"audit.min_target_tokens={self.min_target_tokens!r}: must be an integer >= 0")

    def scoring(self) -> dict[str, Any]:
        """The settings rows depend on (batch size, device and progress bars do not change a row)."""
        d = asdict(self)
        # The draft changes how fast, not what, greedy decoding outputs (harness/draft.py).
        for key in ("batch_size", "device", "progress", "trust_remote_code", "threads", "allow_empty", "draft",
                    "sanity_baseline"):
            d.pop(key)
        return d


@dataclass(frozen=True)
class AuditJob:
    """One `memaudit audit` invocation, validated: paths exist, model dirs hold safetensors weights."""

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
    from harness.generation import has_weights

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
    """The `audit` config group's scoring knobs, validated (AuditSettings.__post_init__)."""
    return AuditSettings(
        k=float(a.k) if isinstance(a.k, (int, float)) and not isinstance(a.k, bool) else a.k,
        max_new_tokens=a.max_new_tokens, target_tokens=a.target_tokens,
        min_target_tokens=a.min_target_tokens, prompt_ned_threshold=float(a.prompt_ned_threshold),
        batch_size=a.batch_size, fim_family=a.get("fim_family"), device=str(a.get("device") or "auto"),
        trust_remote_code=require_bool(a.get("trust_remote_code", False), "audit.trust_remote_code"),
        progress=require_bool(a.get("progress"), "audit.progress", allow_none=True),
        threads=a.get("threads"), allow_empty=require_bool(a.get("allow_empty", False), "audit.allow_empty"),
        draft=str(a.get("draft", "target")),
        sanity_baseline=require_bool(a.get("sanity_baseline", False), "audit.sanity_baseline"),
    )


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

def load_examples(path: str | Path, allow_empty: bool = False) -> list[dict]:
    """FIM examples (`id, prefix, target, suffix` + metadata) from JSONL, validated.

    A malformed line raises UserError naming file:line; so do a non-string field, an empty target
    (nothing to memorize) and a duplicated id (with both line numbers). `suffix` may be empty. A user's
    canary file reads as it is: `{id, text, target}` rows are split around the target, `repeat` and `group`
    ride along as metadata (the one reader of these rows: harness/user_data.py).
    """
    from harness.user_data import read_fim_examples

    path = Path(path)
    examples = [row for _, row in read_fim_examples(path)]
    if not examples and not allow_empty:
        raise UserError(f"{path}: no examples (the file is empty); point audit.examples at a JSONL file "
                        "with one {id, prefix, target, suffix} object per line")
    return examples


def list_checkpoints(model_dir: str | Path, all_checkpoints: bool) -> list[tuple[str, Path]]:
    """(checkpoint name, directory) to audit: the `checkpoint-<step>` dirs in step order, then "final".

    With all_checkpoints=False only the model at the root ("final"). A checkpoint dir without
    safetensors weights (e.g. a trainer state being written) is an error, not silently skipped.
    """
    from harness.generation import has_weights

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


# --------------------------------------------------------------------------------------------------
# Fingerprints and the completion cache
# --------------------------------------------------------------------------------------------------

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
    from safetensors import safe_open
    from transformers import AutoConfig

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
            raise UserError(f"{config}: not a readable model config ({_first_line(e)}); restore the config.json "
                            "the model was saved with") from None
    for weights in sorted(model_dir.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt") as f:
                f.keys()
        except Exception as e:   # safetensors raises its own SafetensorError (and OSError)
            raise UserError(f"{weights}: not a readable safetensors file ({_first_line(e)}); it is damaged or "
                            "was cut off while being written: restore it (or save the model again) and rerun "
                            "the same command") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def model_fingerprint(model_dir: str | Path) -> str:
    """One sha256 over what a model directory computes (weights + config + tokenizer files)."""
    files = model_files(model_dir)
    if not any(name.endswith(".safetensors") for name in files):
        raise UserError(f"{model_dir}: no *.safetensors weights; point at a saved HF model or checkpoint dir")
    return sha256_json(files)


def completion_fingerprint(model_fp: str, examples_sha256: str, *, fim_family: str, dtype: str,
                           max_new_tokens: int, target_tokens: int, stop_tokens: Sequence[str]) -> tuple[str, dict]:
    """(fingerprint, what it covers): same fingerprint <=> the cached completions can be reused. The stop
    tokens are part of it: a completion is cut where the first of them appears (harness.fim)."""
    covers = {"cache_version": CACHE_VERSION, "model": model_fp, "examples_sha256": examples_sha256,
              "fim_family": fim_family, "prompt_format": "psm", "dtype": dtype, "decoding": "greedy",
              "max_new_tokens": max_new_tokens, "target_tokens": target_tokens, "stop_tokens": list(stop_tokens)}
    return sha256_json(covers)[:32], covers


class CompletionCache:
    """Greedy completions of one model on one example set, stored as `<cache_dir>/<fingerprint>.jsonl`.

    `get(examples)` returns {id: completion}, decoding only the ids not stored yet (the scorer is
    loaded lazily on the first miss, so a fully cached rerun does not even load the weights). Each
    decoded batch is appended with fsync before the next starts. `n_generated` / `n_cached` count
    what this object did — the log line tests check that a rerun generated nothing.
    """

    def __init__(self, cache_dir: str | Path, fingerprint: str, covers: dict,
                 load_scorer: Callable[[], Any], format_prompt: Callable[[dict], str], label: str = "",
                 use_target_drafts: bool = True):
        self.path = Path(cache_dir) / f"{fingerprint}.jsonl"
        self.fingerprint = fingerprint
        self.label = label
        self._load_scorer = load_scorer
        self._scorer = None
        self._format_prompt = format_prompt
        self._use_target_drafts = use_target_drafts
        self.path.parent.mkdir(parents=True, exist_ok=True)
        describe = self.path.with_suffix(".json")
        if not describe.exists():
            atomic_write_json(describe, {"fingerprint": fingerprint, "label": label, **covers})
        self.store = RowStore(self.path, key="id")
        self.completions: dict[Any, str] = {r["id"]: r["completion"] for r in self.store.rows()}
        self.n_generated = 0
        self.n_cached = 0

    def get(self, examples: Sequence[dict]) -> dict[Any, str]:
        missing = [ex for ex in examples if ex["id"] not in self.completions]
        self.n_cached += len(examples) - len(missing)
        if missing:
            if self._scorer is None:
                self._scorer = self._load_scorer()
            prompts = [self._format_prompt(ex) for ex in missing]
            drafts = [ex["target"] for ex in missing] if self._use_target_drafts else None
            for idx, texts in self._scorer.iter_complete(prompts, drafts):
                fresh = [{"id": missing[i]["id"], "completion": t} for i, t in zip(idx, texts)]
                self.store.append(fresh)
                self.completions.update((r["id"], r["completion"]) for r in fresh)
                self.n_generated += len(fresh)
        return {ex["id"]: self.completions[ex["id"]] for ex in examples}

    def release(self) -> None:
        """Drop the loaded model (the cache itself stays usable from disk)."""
        self._scorer = None


# --------------------------------------------------------------------------------------------------
# One model (the audited checkpoint or the control) as the audit uses it
# --------------------------------------------------------------------------------------------------

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


class AuditedModel:
    """A model directory: tokenizer, sentinels, fingerprint and context (read now, writing nothing),
    a completion cache opened on first use, and a lazily loaded scorer."""

    def __init__(self, path: Path, settings: AuditSettings, examples_sha256: str, cache_dir: Path, label: str,
                 caches: dict[str, CompletionCache] | None = None):
        from transformers import AutoTokenizer

        from harness.fim import detect_sentinels
        from harness.generation import default_dtype, pick_device

        self.path = Path(path)
        self.settings = settings
        self.device = pick_device(settings.device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True,
                                                           trust_remote_code=settings.trust_remote_code)
        except (OSError, ValueError) as e:
            reason = (str(e).strip().split("\n") or [""])[0] or type(e).__name__
            raise UserError(f"{self.path}: cannot load its tokenizer ({reason}); save the tokenizer beside the "
                            "weights (tokenizer.save_pretrained) or point the audit at a complete model "
                            "directory") from None
        self.sentinels = detect_sentinels(self.tokenizer, family=settings.fim_family, model_name=str(self.path),
                                          config_key="audit.fim_family")
        check_model_files(self.path, settings.trust_remote_code)
        self.fingerprint = model_fingerprint(self.path)
        dtype = str(default_dtype(self.device)).replace("torch.", "")
        self.context = context_length(self.path)
        self._prompt_lengths: dict[Any, int] = {}
        self._cache_args = (cache_dir, label, {} if caches is None else caches,
                            *completion_fingerprint(self.fingerprint, examples_sha256,
                                                    fim_family=self.sentinels.family, dtype=dtype,
                                                    max_new_tokens=settings.max_new_tokens,
                                                    target_tokens=settings.target_tokens,
                                                    stop_tokens=self.sentinels.stop_tokens()))

    @property
    def cache(self) -> CompletionCache:
        """The completion cache, created (on disk) at first use: constructing and validating every model
        of an audit writes nothing, so a refused audited model leaves no orphan control-cache entry."""
        cache_dir, label, caches, fp, covers = self._cache_args
        # Models with identical files share one cache object (e.g. a control audited against itself),
        # so one never regenerates what the other just stored.
        if fp not in caches:
            caches[fp] = CompletionCache(cache_dir, fp, {**covers, "model_dir": str(self.path)},
                                         self._load_scorer, self.format_prompt, label=label,
                                         use_target_drafts=self.settings.draft == "target")
        return caches[fp]

    def too_long(self, examples: Sequence[dict]) -> set:
        """Ids of the examples whose PSM prompt has more tokens than the model's context."""

        missing = [ex for ex in examples if ex["id"] not in self._prompt_lengths]
        if missing:
            encoded = encode_texts(self.tokenizer, [self.format_prompt(ex) for ex in missing])
            self._prompt_lengths.update((ex["id"], len(ids)) for ex, ids in zip(missing, encoded))
        if self.context is None:
            return set()
        return {ex["id"] for ex in examples if self._prompt_lengths[ex["id"]] > self.context}

    def format_prompt(self, example: dict) -> str:
        from harness.fim import format_psm_prompt

        return format_psm_prompt(example["prefix"], example["suffix"], self.sentinels)

    def _load_scorer(self):
        from harness.generation import CausalLMScorer

        s = self.settings
        try:
            return CausalLMScorer.load(self.path, self.device, trust_remote_code=s.trust_remote_code,
                                       batch_size=s.batch_size, max_new_tokens=s.max_new_tokens, progress=False,
                                       sentinels=self.sentinels)
        except UserError:
            raise
        except Exception as e:   # weights that do not fit the config, a broken LoRA base, ...
            raise UserError(f"{self.path}: cannot load the model ({_first_line(e)}); restore the directory as it "
                            "was saved (config.json, *.safetensors, tokenizer) and rerun the same command") from None

    def truncate_target(self, target: str) -> tuple[str, int]:
        """(the first `target_tokens` tokens of `target` as text, the full target's token count).

        Cut at a character offset (fast tokenizers) so the compared text is an exact prefix of the
        target, never a re-decoding that could differ in whitespace or split a UTF-8 character.
        """
        cap = self.settings.target_tokens
        tok = self.tokenizer
        if getattr(tok, "is_fast", False):
            enc = tok(target, add_special_tokens=False, return_offsets_mapping=True)
            n = len(enc["input_ids"])
            return (target if n <= cap else target[:enc["offset_mapping"][cap - 1][1]]), n
        ids = tok(target, add_special_tokens=False)["input_ids"]
        return (target if len(ids) <= cap else tok.decode(ids[:cap])), len(ids)


# --------------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------------

ROW_FIELDS = ("id", "dataset", "model", "checkpoint", "prefix", "suffix", "target", "target_token_count",
              "target_truncated", "completion", "ned", "control_completion", "control_ned", "memorized",
              "excluded")


def score_rows(examples: Sequence[dict], completions: dict, control_completions: dict,
               targets: dict[Any, tuple[str, int]], *, dataset: str, model: str, checkpoint: str,
               settings: AuditSettings, too_long: set | frozenset = frozenset()) -> list[dict]:
    """One result row per example (paper 003 Definition 3.1 + the Appendix B exclusions).

    Ids in `too_long` (prompt longer than a model's context) were not decoded: their completions are
    empty and they are excluded as PROMPT_TOO_LONG, before the other exclusion rules.
    """
    from harness.distance import sliding_window_ned_batch
    from harness.memorization import PROMPT_TOO_LONG, counterfactually_memorized, exclusion_reason, pii_regurgitated

    completions = {ex["id"]: "" if ex["id"] in too_long else completions[ex["id"]] for ex in examples}
    control_completions = {ex["id"]: "" if ex["id"] in too_long else control_completions[ex["id"]]
                           for ex in examples}
    compared = [targets[ex["id"]][0] for ex in examples]
    neds = sliding_window_ned_batch(compared, [completions[ex["id"]] for ex in examples])
    control_neds = sliding_window_ned_batch(compared, [control_completions[ex["id"]] for ex in examples])
    rows = []
    for ex, target, ned, control_ned in zip(examples, compared, neds, control_neds):
        full_count = targets[ex["id"]][1]
        excluded = PROMPT_TOO_LONG if ex["id"] in too_long else exclusion_reason(
            ex["prefix"], target, ex["suffix"], min(full_count, settings.target_tokens),
            min_target_tokens=settings.min_target_tokens, prompt_ned_threshold=settings.prompt_ned_threshold)
        row = {
            "id": ex["id"], "dataset": dataset, "model": model, "checkpoint": checkpoint,
            "prefix": ex["prefix"], "suffix": ex["suffix"], "target": target,
            "target_token_count": full_count, "target_truncated": target != ex["target"],
            "completion": completions[ex["id"]], "ned": ned,
            "control_completion": control_completions[ex["id"]], "control_ned": control_ned,
            # Excluded rows keep their completions (for inspection) but never count as memorized.
            "memorized": excluded is None and counterfactually_memorized(ned, control_ned, settings.k),
            "excluded": excluded,
        }
        if ex.get("pii_path"):
            row["pii_regurgitated"] = pii_regurgitated(row["completion"], ex["pii_path"])
            row["control_pii_regurgitated"] = pii_regurgitated(row["control_completion"], ex["pii_path"])
        # Metadata rides along; a metadata key that clashes with a result field is kept as example_<key>.
        for key, value in ex.items():
            if key in EXAMPLE_FIELDS:
                continue
            row[f"example_{key}" if key in row else key] = value
        rows.append(row)
    return rows


def rows_path(out_dir: str | Path, model: str, checkpoint: str, dataset: str) -> Path:
    """<out_dir>/<model>/<checkpoint>/<dataset>.jsonl, proven to lie inside out_dir (the names were checked
    where they entered; this is the proof)."""
    return require_inside(Path(out_dir) / model / checkpoint / f"{dataset}.jsonl", out_dir, "audit.out_dir")


def _check_or_write_meta(path: Path, meta: dict, out_dir: Path, stale_dir: Path | None = None,
                         log: Callable[[str], None] = print) -> None:
    """Rows of one file must all come from the same settings, model, control and examples: refuse to mix.

    A rows file without rows holds nothing to mix (a crash before the first row), so its meta is rewritten.
    With `stale_dir` (a whole-run audit, whose models and data are the run's own), rows computed for a model,
    control or example set that has been replaced since are moved there and recomputed; other settings
    than the stored rows' are refused, since the user chose them for this out_dir.
    """
    if path.exists():
        old = read_json(path)
        keys = ("settings", "model_fingerprint", "control_fingerprint", "examples_sha256")
        diff = [k for k in keys if json.dumps(old.get(k), sort_keys=True) != json.dumps(meta[k], sort_keys=True)]
        if not diff:
            return
        rows_file = path.with_name(path.name[:-len(META_SUFFIX)] + ".jsonl")
        if rows_file.exists() and rows_file.stat().st_size > 0:
            if stale_dir is None or "settings" in diff:
                raise UserError(f"{rows_file} holds rows computed with a different {', '.join(diff)}; delete that "
                                "directory to recompute it, or set audit.out_dir to a new directory")
            target = stale_dir / rows_file.relative_to(out_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(rows_file), str(target))
            shutil.move(str(path), str(target.with_name(path.name)))
            log(f"[audit] {rows_file}: computed with another {', '.join(diff)} (replaced since); moved to "
                f"{target.parent} and recomputed")
    atomic_write_json(path, meta)


def plan_batches(examples: Sequence[dict], tokenizer, format_prompt, batch_size: int) -> list[list[dict]]:
    """The examples in length-sorted batches (audited model's tokens): the units of resumable work.

    Fixed by the example set alone, so a rerun after a kill decodes the same batches as an
    uninterrupted run (padding changes fp results in the last bits; same batches, same bits).
    """
    from harness.generation import length_sorted_batches

    if not examples:
        return []
    lengths = [len(ids) for ids in encode_texts(tokenizer, [format_prompt(ex) for ex in examples])]
    return [[examples[i] for i in idx] for idx in length_sorted_batches(lengths, batch_size)]


def _context_words(context: int | None) -> str:
    return f"{context} tokens" if context is not None else "no context length in its config.json"


def audit_checkpoint(model: AuditedModel, control: AuditedModel, examples: Sequence[dict], *, dataset: str,
                     model_name: str, checkpoint: str, out_dir: str | Path, examples_sha256: str,
                     log: Callable[[str], None] = print, stale_dir: Path | None = None) -> dict[str, int]:
    """Score one checkpoint on one example set; resumable. Returns counts of what it did."""
    from tqdm.auto import tqdm

    s = model.settings
    path = rows_path(out_dir, model_name, checkpoint, dataset)
    # Distances are in characters, so a control with another tokenizer is valid; say so once.
    tokenizer_differs = tokenizers_differ(model.tokenizer, control.tokenizer)
    if tokenizer_differs:
        log(f"[audit] note: the control's tokenizer ({control.path}) differs from {model_name}/{checkpoint}'s; "
            "NEDs are over characters, so rows stay comparable (summary: control_tokenizer_differs)")
    # Paper 003 decodes prompts that fit the model; a longer one would be read past the positions the
    # model was trained on, so it is excluded before decoding (either model's context counts).
    too_long = model.too_long(examples) | control.too_long(examples)
    if too_long:
        log(f"[audit] warning: {len(too_long)} of {len(examples)} prompts of {dataset} are longer than the "
            f"context of {model_name}/{checkpoint} ({_context_words(model.context)}) or of the control "
            f"({_context_words(control.context)}); excluded as prompt_too_long, not decoded")
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_or_write_meta(path.with_name(path.stem + META_SUFFIX), {
        "model": model_name, "checkpoint": checkpoint, "dataset": dataset, "model_dir": str(model.path),
        "control_dir": str(control.path), "model_fingerprint": model.fingerprint,
        "control_fingerprint": control.fingerprint, "examples_sha256": examples_sha256,
        "settings": s.scoring(), "model_completion_cache": model.cache.fingerprint,
        "control_completion_cache": control.cache.fingerprint,
        "control_tokenizer_differs": tokenizer_differs,
    }, Path(out_dir), stale_dir, log)
    if not path.exists():
        path.touch()   # an empty example set still has its (empty) rows file, so the summary counts it
    store = RowStore(path, key="id")
    counts = dict.fromkeys(("model_generated", "control_generated", "model_cached", "control_cached"), 0)

    def completions(who: str, cache: CompletionCache, batch: list[dict]) -> dict:
        # Counted per call, so a cache that serves both models (the control audited against itself)
        # counts each completion once: generated by the first call, a cache hit of the second.
        generated, cached = cache.n_generated, cache.n_cached
        out = cache.get(batch)
        counts[f"{who}_generated"] += cache.n_generated - generated
        counts[f"{who}_cached"] += cache.n_cached - cached
        return out

    batches = plan_batches(examples, model.tokenizer, model.format_prompt, s.batch_size)
    todo = [[ex for ex in b if ex["id"] not in store.done] for b in batches]
    todo = [b for b in todo if b]
    n_new = 0
    bar = tqdm(total=sum(map(len, todo)), desc=f"audit {model_name}/{checkpoint}", unit="ex", leave=False,
               disable=(not s.progress) if s.progress is not None else None)
    for batch in todo:
        decode = [ex for ex in batch if ex["id"] not in too_long]
        control_out = completions("control", control.cache, decode)
        model_out = completions("model", model.cache, decode)
        targets = {ex["id"]: model.truncate_target(ex["target"]) for ex in batch}
        rows = score_rows(batch, model_out, control_out, targets, dataset=dataset, model=model_name,
                          checkpoint=checkpoint, settings=s, too_long=too_long)
        store.append(rows)
        n_new += len(rows)
        bar.update(len(batch))
    bar.close()
    stats = {"rows_total": len(store.done), "rows_new": n_new, **counts}
    log(f"[audit] {model_name}/{checkpoint} {dataset}: {stats['rows_total']} rows ({n_new} new); "
        f"control completions: {stats['control_generated']} generated, {stats['control_cached']} cached; "
        f"model completions: {stats['model_generated']} generated, {stats['model_cached']} cached")
    return stats


# --------------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------------

def stored_results(out_dir: str | Path) -> Iterable[tuple[dict, list[dict]]]:
    """(meta, rows) of every rows file under `out_dir` (those with a .meta.json beside them)."""
    for meta_path in sorted(Path(out_dir).rglob(f"*{META_SUFFIX}")):
        rows_file = meta_path.with_name(meta_path.name[:-len(META_SUFFIX)] + ".jsonl")
        if rows_file.is_file():
            yield read_json(meta_path), RowStore(rows_file, key="id").rows()


def build_summary(out_dir: str | Path) -> dict[str, dict[str, dict[str, dict]]]:
    """{model: {checkpoint: {dataset: counts + rate + what they were computed with}}} from the rows."""
    from harness.memorization import summarize_rows

    results: dict[str, dict[str, dict[str, dict]]] = {}
    for meta, rows in stored_results(out_dir):
        entry = {**summarize_rows(rows), "examples_sha256": meta["examples_sha256"],
                 "model_fingerprint": meta["model_fingerprint"],
                 "control_fingerprint": meta["control_fingerprint"], "control_dir": meta["control_dir"],
                 "control_tokenizer_differs": meta.get("control_tokenizer_differs"),
                 "settings": meta["settings"]}
        results.setdefault(meta["model"], {}).setdefault(meta["checkpoint"], {})[meta["dataset"]] = entry
    return results


def check_scored(results: dict, audited: Iterable[tuple[str, str]], allow_empty: bool,
                 log: Callable[[str], None] = print) -> None:
    """Say so when an audited (model, dataset) scored no example at some checkpoint, with the
    exclusion counts by reason; raise NothingScored (exit 3) unless `allow_empty`.

    Called after the summary is written, so its `n_scored: 0` entries stay for inspection.
    """
    empty = []
    for model, dataset in dict.fromkeys(audited):
        for checkpoint, datasets in (results.get(model) or {}).items():
            entry = datasets.get(dataset)
            if entry is None or entry["n_scored"] > 0:
                continue
            reasons = ", ".join(f"{n} {reason}" for reason, n in entry["excluded_by_reason"].items() if n)
            empty.append(f"{model}/{checkpoint} on {dataset}: 0 of {entry['n_total']} examples scored"
                         + (f" (excluded: {reasons})" if reasons else " (no examples)"))
    if not empty:
        return
    text = "the audit measured nothing: " + "; ".join(empty)
    if allow_empty:
        log(f"[audit] note: {text} (accepted: audit.allow_empty=true)")
        return
    log(f"[audit] {text}")
    raise NothingScored(f"{text}. The rows and summary.json (n_scored: 0) are kept. Fix: give examples whose "
                        "target has at least audit.min_target_tokens tokens, is not in its prompt and whose "
                        "prompt fits the model's context (or lower audit.min_target_tokens / raise "
                        "audit.prompt_ned_threshold); pass audit.allow_empty=true to accept an empty result")


def write_summary(out_dir: str | Path, provenance_record: dict) -> Path:
    """Rebuild `<out_dir>/summary.json` from every stored row (so it always equals the rows); atomic."""
    path = Path(out_dir) / SUMMARY_FILE
    atomic_write_json(path, {"provenance": provenance_record, "results": build_summary(out_dir)})
    return path


# --------------------------------------------------------------------------------------------------
# CLI entry point
# --------------------------------------------------------------------------------------------------

def run_audit(job: AuditJob, seed: int | None = None, log: Callable[[str], None] = print,
              check_empty: bool = True) -> dict:
    """Audit every requested checkpoint of `job.model_dir` against `job.control_dir`; write the summary.

    Every model (control and checkpoints) is loaded and validated before anything is written. With
    `check_empty`, an audit that scored nothing ends in `check_scored` (the whole-run audit checks
    once, at its end).
    """
    from harness.provenance import provenance

    if job.settings.threads:
        import torch

        torch.set_num_threads(job.settings.threads)
    examples = load_examples(job.examples, allow_empty=True)
    examples_sha = file_sha256(job.examples)
    checkpoints = list_checkpoints(job.model_dir, job.all_checkpoints)
    caches: dict[str, CompletionCache] = {}
    control = AuditedModel(job.control_dir, job.settings, examples_sha, job.cache_dir, label="control",
                           caches=caches)
    models = [(checkpoint, AuditedModel(path, job.settings, examples_sha, job.cache_dir,
                                        label=f"{job.model_name}/{checkpoint}", caches=caches))
              for checkpoint, path in checkpoints]
    check_not_the_control(job, models, control)
    log(f"[audit] {len(examples)} examples from {job.examples}; {len(checkpoints)} checkpoint(s) of "
        f"{job.model_name} against control {job.control_dir}")
    all_stats = {}
    for checkpoint, model in models:
        all_stats[checkpoint] = audit_checkpoint(model, control, examples, dataset=job.dataset,
                                                 model_name=job.model_name, checkpoint=checkpoint,
                                                 out_dir=job.out_dir, examples_sha256=examples_sha, log=log,
                                                 stale_dir=job.stale_dir)
        if model.cache is not control.cache:
            model.cache.release()  # free the checkpoint's weights; the control stays loaded
    record = provenance(seed=seed, datasets={job.dataset: examples_sha}, audit=asdict(job.settings),
                        model_dir=str(job.model_dir), control_dir=str(job.control_dir),
                        control_fingerprint=control.fingerprint, examples=str(job.examples),
                        checkpoints=[c for c, _ in checkpoints])
    path = write_summary(job.out_dir, record)
    log(f"[audit] summary: {path}")
    if check_empty:
        check_scored(read_json(path)["results"], [(job.model_name, job.dataset)], job.settings.allow_empty, log)
    return all_stats


def check_not_the_control(job: AuditJob, models: list[tuple[str, AuditedModel]], control: AuditedModel) -> None:
    """Refuse an audited checkpoint identical to the control (same weights, config and tokenizer files):
    paper 003 Def. 3.1 counts what the model completes and a model never trained on the examples does not,
    so against itself every rate is 0 by construction. audit.sanity_baseline=true runs it on purpose."""
    same = [(checkpoint, model) for checkpoint, model in models if model.fingerprint == control.fingerprint]
    if not same or job.settings.sanity_baseline:
        return
    checkpoint, model = same[0]
    raise UserError(f"the audited model {job.model_name}/{checkpoint} ({model.path}) is the control "
                    f"{job.control_dir}: the same weights, config and tokenizer (fingerprint {control.fingerprint[:12]}),"
                    " so nothing can count as memorized against it. Point audit.control_dir (or the audit_plan "
                    "entry's control) at a model trained the same way without the examples (paper 003's FT.2 for "
                    "FT.1), or pass "
                    "audit.sanity_baseline=true to run it as a sanity baseline (every rate is 0)")


def main(cfg) -> int:
    job = job_from_config(cfg)
    run_audit(job, seed=cfg.get("seed"))
    return 0
