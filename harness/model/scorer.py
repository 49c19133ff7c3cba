"""The one interface through which everything above the model layer sees a causal LM.

Like lm-evaluation-harness's `LM` (`generate_until` / `loglikelihood`, wrapped by `CachingLM`), the audit,
the loss measures, exposure, utility and membership inference talk to a model only through a
`CausalLMScorer`: greedy completions (`iter_complete` / `complete`), teacher-forced target losses
(`target_losses`), and its `fingerprint` (what it computes, memlens.harness.model.load), which keys every cached
result (memlens.harness.model.cache). A scorer made with `load(..., lazy=True)` reads no weights until a value is
actually computed, so a fully cached rerun loads nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlens.harness.core.errors import UserError, first_line
from memlens.harness.model.cache import CompletionCache, completion_fingerprint
from memlens.harness.model.decode import iter_greedy_complete
from memlens.harness.model.encode import encode_texts
from memlens.harness.model.load import (
    check_model_files,
    context_length,
    default_dtype,
    load_causal_lm,
    load_tokenizer,
    model_fingerprint,
    pick_device,
)
from memlens.harness.model.logprobs import (
    fim_scheme_logprobs,
    program_token_logprobs,
    shared_prompt_losses,
    target_losses,
    target_token_logprobs,
)
from memlens.harness.model.prompts import prompt_format


@dataclass
class CausalLMScorer:
    """A decoder-only model as the measures see it. `n_generated` counts prompts this instance decoded, so
    callers (and tests) can check that cached completions were not regenerated."""

    model: Any = None
    tokenizer: Any = None
    path: str = ""
    device: str = "cpu"
    batch_size: int = 32
    max_new_tokens: int = 64
    progress: bool | None = None   # per-call bar; the audit turns it off (it shows its own)
    sentinels: Any = None          # memlens.harness.text.fim family: completions stop at its stop tokens (else at EOS)
    trust_remote_code: bool = False
    n_generated: int = field(default=0, init=False)

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", *, trust_remote_code: bool = False,
             batch_size: int = 32, max_new_tokens: int = 64, progress: bool | None = None,
             sentinels=None, lazy: bool = False) -> CausalLMScorer:
        scorer = cls(None, None, str(path), pick_device(device), batch_size, max_new_tokens, progress, sentinels,
                     trust_remote_code)
        if not lazy:
            scorer.ensure_loaded()
        return scorer

    def ensure_loaded(self) -> None:
        if self.model is None:
            self.model, self.tokenizer = load_causal_lm(self.path, self.device,
                                                        trust_remote_code=self.trust_remote_code)

    def release(self) -> None:
        """Drop the weights of a scorer loaded from a directory (it loads them again when next asked)."""
        if self.path:
            self.model = self.tokenizer = None

    @property
    def fingerprint(self) -> str:
        """What the model directory computes (weights, config, tokenizer files), read without loading it."""
        return model_fingerprint(self.path)

    @property
    def dtype(self) -> str:
        self.ensure_loaded()
        return str(next(self.model.parameters()).dtype).replace("torch.", "")

    def iter_complete(self, prompts: Sequence[str], drafts: Sequence[str] | None = None
                      ) -> Iterator[tuple[list[int], list[str]]]:
        """(indices, completions) per batch; `drafts` (e.g. the targets) only make it faster."""
        self.ensure_loaded()
        for idx, texts in iter_greedy_complete(self.model, self.tokenizer, prompts, self.max_new_tokens,
                                               self.batch_size, progress=self.progress, drafts=drafts,
                                               sentinels=self.sentinels):
            self.n_generated += len(idx)
            yield idx, texts

    def complete(self, prompts: Sequence[str], drafts: Sequence[str] | None = None) -> list[str]:
        out: list[str | None] = [None] * len(prompts)
        for idx, texts in self.iter_complete(prompts, drafts):
            for i, t in zip(idx, texts):
                out[i] = t
        return out  # type: ignore[return-value]

    def target_losses(self, examples: Sequence[dict], sentinels, reduction: str = "mean") -> list[float]:
        """Token cross-entropy of each example's `target` given its PSM prompt (prefix, suffix): the mean
        is paper 004 Sec. 3's loss(M, s), the sum a sequence NLL (the exposure test's ranking)."""
        self.ensure_loaded()
        return target_losses(self.model, self.tokenizer, [e["prefix"] for e in examples],
                             [e["target"] for e in examples], [e["suffix"] for e in examples], sentinels,
                             self.batch_size, reduction=reduction, progress=self.progress).tolist()

    def candidate_losses(self, example: dict, targets: Sequence[str], sentinels) -> list[float]:
        """Summed target NLL of each of `targets` in `example`'s FIM hole (its prefix and suffix), the prompt's
        forward pass shared by all of them (memlens.harness.model.logprobs.shared_prompt_losses)."""
        self.ensure_loaded()
        return shared_prompt_losses(self.model, self.tokenizer, example["prefix"], example["suffix"], targets,
                                    sentinels, self.batch_size).tolist()

    def target_token_logprobs(self, examples: Sequence[dict], sentinels, context: str | None = None
                              ) -> list[dict[str, list]]:
        """Per target token of each example, given its PSM prompt (the inputs of `target_losses`): `ids`, `logp`, and
        the mean `mu` and variance `var` of the next-token log-prob under the model (Min-K%++), one pass.
        `context`: a text before the prompt (ReCaLL's prefix), cut to the model's context from its start."""
        self.ensure_loaded()
        return target_token_logprobs(self.model, self.tokenizer, [e["prefix"] for e in examples],
                                     [e["target"] for e in examples], [e["suffix"] for e in examples], sentinels,
                                     self.batch_size, progress=self.progress, context=context,
                                     max_tokens=context_length(self.path) if self.path else None)

    def scheme_logprobs(self, examples: Sequence[dict], sentinels, schemes) -> list[list[float]]:
        """Per example, the log-probability that each decoding scheme (memlens.harness.model.logprobs.SamplingScheme)
        completes its PSM prompt with exactly its `target`: one teacher-forced pass, no sampling."""
        self.ensure_loaded()
        return fim_scheme_logprobs(self.model, self.tokenizer, [e["prefix"] for e in examples],
                                   [e["target"] for e in examples], [e["suffix"] for e in examples], sentinels,
                                   schemes, self.batch_size, progress=self.progress).tolist()

    def program_token_logprobs(self, texts: Sequence[str], context: str | None = None) -> list[dict[str, list]]:
        """The same per-token values over each whole text as plain causal text (cut at the model's context);
        `context`: a text before it."""
        self.ensure_loaded()
        return program_token_logprobs(self.model, self.tokenizer, texts, self.batch_size, progress=self.progress,
                                      max_tokens=context_length(self.path) if self.path else None, context=context)


class AuditedModel:
    """A model directory as an audit uses it: tokenizer, sentinels, fingerprint and context (read now, writing
    nothing), its completion cache (opened on first use) and a scorer loaded on the first cache miss.

    `settings` carries the decoding knobs (device, fim_family, max_new_tokens, target_tokens, batch_size,
    draft, trust_remote_code): memlens.harness.audit.run.AuditSettings, or any object with those attributes."""

    def __init__(self, path: Path, settings, examples_sha256: str, cache_dir: Path, label: str,
                 caches: dict[str, CompletionCache] | None = None):
        self.path = Path(path)
        self.settings = settings
        self.device = pick_device(settings.device)
        self.tokenizer = load_tokenizer(self.path, settings.trust_remote_code)
        self.sentinels = prompt_format(self.tokenizer, settings.fim_family, str(self.path), "audit.fim_family")
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
        return self.sentinels.prompt(example["prefix"], example["suffix"])

    def _load_scorer(self):
        s = self.settings
        try:
            return CausalLMScorer.load(self.path, self.device, trust_remote_code=s.trust_remote_code,
                                       batch_size=s.batch_size, max_new_tokens=s.max_new_tokens, progress=False,
                                       sentinels=self.sentinels)
        except UserError:
            raise
        except Exception as e:   # weights that do not fit the config, a broken LoRA base, ...
            raise UserError(f"{self.path}: cannot load the model ({first_line(e)}); restore the directory as it "
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
