"""The one cache of what a model computed: {example id: value} per identity, keyed one way.

An identity is everything a value depends on — the kind of value (greedy completions, mean target losses,
summed candidate losses, ...), the model's fingerprint (weights, config and tokenizer files:
memlens.harness.model.load.model_fingerprint), the examples' hash and the settings that change the numbers —
and its key is `cache_key(kind, **covers)`. Each identity is one append-only RowStore
(memlens.harness.core.io): rows are appended, fsync'd, batch by batch, so a killed job loses at most one batch and
a rerun neither recomputes nor duplicates. Completions live at `<cache_dir>/<key>.jsonl` (beside a
`<key>.json` that says what they cover, for a reader of the directory); every loss at
`<cache_dir>/losses/<key>.jsonl`, so paper 004's losses, the exposure test and the utility's held-out loss
share an entry whenever they ask for the same numbers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from memlens.harness.core.io import RowStore, atomic_write_json, sha256_json
from memlens.harness.model.logprobs import CONTEXT_RULE, TOKEN_FIELDS
from memlens.harness.model.prompts import prompt_format_name

CACHE_VERSION = 1          # bump when a cached computation changes, so values of older code are not reused
COMPLETIONS = "greedy_completions"
TARGET_LOSS_MEAN = "target_loss_mean"
TOKEN_LOGPROBS = "token_logprobs"       # per token: id, logp, and mu / var of the next-token log-prob (Min-K%++)
SCHEME_LOGPROBS = "scheme_target_logprobs"  # per example and decoding scheme: log p(exact target) (discoverable)
SPANS = ("target", "program")           # the FIM target given its prompt; the whole program as plain text
LOSSES_SUBDIR = "losses"
BLIND_SUBDIR = "blind_baseline"        # the blind MIA baseline (reads no model, only texts): harness/audit/mia.py


def cache_key(kind: str, **covers: Any) -> str:
    """The key of one identity (32 hex digits)."""
    return sha256_json({"cache_version": CACHE_VERSION, "kind": kind, **covers})[:32]


def examples_fingerprint(rows: Sequence[dict], fields: Sequence[str] = ("id", "prefix", "target", "suffix")) -> str:
    """sha256 of what of each row a model is shown (ids included, in order)."""
    payload = json.dumps([[r.get(f) for f in fields] for r in rows], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class ScoreCache:
    """{id: value} of one identity, stored at `path`; `get` computes only the ids not stored yet.

    `compute(rows)` yields (indices into rows, values) one batch at a time; each batch is appended before
    the next is computed. `n_computed` / `n_cached` count what this object did (a rerun computes nothing).
    """

    def __init__(self, path: Path, field: str = "value"):
        self.path, self.field = Path(path), field
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.store = RowStore(self.path, key="id")
        self.values: dict[Any, Any] = {r["id"]: r[field] for r in self.store.rows()}
        self.n_computed = 0
        self.n_cached = 0

    def get(self, rows: Sequence[dict], compute: Callable[[list[dict]], Iterable[tuple[list[int], list]]]
            ) -> dict[Any, Any]:
        missing = [r for r in rows if r["id"] not in self.values]
        self.n_cached += len(rows) - len(missing)
        if missing:
            for idx, values in compute(missing):
                fresh = [{"id": missing[i]["id"], self.field: v} for i, v in zip(idx, values)]
                self.store.append(fresh)
                self.values.update((r["id"], r[self.field]) for r in fresh)
                self.n_computed += len(fresh)
        return {r["id"]: self.values[r["id"]] for r in rows}


def completion_fingerprint(model_fp: str, examples_sha256: str, *, fim_family: str, dtype: str,
                           max_new_tokens: int, target_tokens: int, stop_tokens: Sequence[str]) -> tuple[str, dict]:
    """(key, what it covers) of greedy completions: same key <=> the cached completions can be reused. The
    stop tokens are part of it: a completion is cut where the first of them appears (memlens.harness.text.fim)."""
    covers = {"model": model_fp, "examples_sha256": examples_sha256, "fim_family": fim_family,
              "prompt_format": prompt_format_name(fim_family), "dtype": dtype, "decoding": "greedy", "max_new_tokens": max_new_tokens,
              "target_tokens": target_tokens, "stop_tokens": list(stop_tokens)}
    return cache_key(COMPLETIONS, **covers), covers


class CompletionCache(ScoreCache):
    """Greedy completions of one model on one example set, `<cache_dir>/<key>.jsonl`.

    `get(examples)` returns {id: completion}, decoding only the ids not stored yet through the scorer that
    `load_scorer()` returns, called on the first miss only (a fully cached rerun loads no weights). The
    examples' targets are offered to the decoder as drafts (memlens.harness.model.draft): the same completions,
    faster when a model follows them."""

    def __init__(self, cache_dir: str | Path, key: str, covers: dict, load_scorer: Callable[[], Any],
                 format_prompt: Callable[[dict], str], label: str = "", use_target_drafts: bool = True):
        super().__init__(Path(cache_dir) / f"{key}.jsonl", field="completion")
        self.fingerprint, self.label = key, label
        self._load_scorer, self._scorer = load_scorer, None
        self._format_prompt, self._use_target_drafts = format_prompt, use_target_drafts
        describe = self.path.with_suffix(".json")
        if not describe.exists():
            atomic_write_json(describe, {"fingerprint": key, "label": label, **covers})

    @property
    def completions(self) -> dict[Any, str]:
        return self.values

    @property
    def n_generated(self) -> int:
        return self.n_computed

    def get(self, examples: Sequence[dict]) -> dict[Any, str]:   # type: ignore[override]
        return super().get(examples, self._decode)

    def _decode(self, missing: list[dict]):
        if self._scorer is None:
            self._scorer = self._load_scorer()
        prompts = [self._format_prompt(ex) for ex in missing]
        drafts = [ex["target"] for ex in missing] if self._use_target_drafts else None
        yield from self._scorer.iter_complete(prompts, drafts)

    def release(self) -> None:
        """Drop the loaded model (the cache itself stays usable from disk)."""
        self._scorer = None


def loss_cache(cache_dir: str | Path, kind: str, **covers: Any) -> ScoreCache:
    """The losses of one identity, `<cache_dir>/losses/<key>.jsonl`."""
    return ScoreCache(Path(cache_dir) / LOSSES_SUBDIR / f"{cache_key(kind, **covers)}.jsonl")


def in_chunks(compute: Callable[[list[dict]], Sequence], chunk: int = 256):
    """A `ScoreCache.get` compute from a function of a list of rows (appended every `chunk` rows)."""
    def batches(missing: list[dict]):
        for start in range(0, len(missing), chunk):
            part = missing[start:start + chunk]
            yield list(range(start, start + len(part))), list(compute(part))
    return batches


def cached_target_losses(scorer, rows: Sequence[dict], sentinels, cache_dir: str | Path) -> dict[Any, float]:
    """{id: mean target loss} of `rows` under `scorer`'s model, computed only for ids missing from the cache.
    Batching does not change a loss (tested), so the batch size is not part of the key; the device is (CPU
    and CUDA kernels differ in the last bits)."""
    cache = loss_cache(cache_dir, TARGET_LOSS_MEAN, model=scorer.fingerprint, examples=examples_fingerprint(rows),
                       sentinels=sentinels.family, device=scorer.device)
    return cache.get(rows, in_chunks(lambda part: scorer.target_losses(part, sentinels)))


def program_text(row: dict) -> str:
    """The whole program of a FIM row: its `code` when it has one (SD), else prefix + target + suffix."""
    return row["code"] if isinstance(row.get("code"), str) else row["prefix"] + row["target"] + row["suffix"]


def cached_token_logprobs(scorer, rows: Sequence[dict], sentinels, cache_dir: str | Path, span: str = "target",
                          context: str | None = None) -> dict[Any, dict[str, list]]:
    """{id: {"ids", "logp", "mu", "var"} per token} of `rows` under `scorer`'s model, on `span` ("target": the FIM
    target given its prompt, the extraction audit's inputs; "program": the whole program), computed only for ids
    missing from the cache (keyed like `cached_target_losses`, plus the stored fields and the `context` text put
    before each prompt, so that a conditioned pass is its own entry)."""
    if span not in SPANS:
        raise ValueError(f"span={span!r}: use one of {SPANS}")
    fields = ("id", "prefix", "target", "suffix") if span == "target" else ("id", "prefix", "target", "suffix", "code")
    covers: dict[str, Any] = {"fields": list(TOKEN_FIELDS)}
    if context:
        covers["context_sha256"] = hashlib.sha256(context.encode("utf-8")).hexdigest()
        covers["context_rule"] = CONTEXT_RULE
    cache = loss_cache(cache_dir, TOKEN_LOGPROBS, model=scorer.fingerprint, examples=examples_fingerprint(rows, fields),
                       sentinels=sentinels.family if span == "target" else None, device=scorer.device, span=span,
                       **covers)
    if span == "target":
        return cache.get(rows, in_chunks(lambda part: scorer.target_token_logprobs(part, sentinels, context=context),
                                         chunk=64))
    return cache.get(rows, in_chunks(lambda part: scorer.program_token_logprobs([program_text(r) for r in part],
                                                                                context=context), chunk=64))


def cached_scheme_logprobs(scorer, rows: Sequence[dict], sentinels, cache_dir: str | Path, schemes
                           ) -> dict[Any, list[float]]:
    """{id: [log-probability of the exact target under each scheme]} of `rows` (their `target` as given: the
    caller passes the compared target), computed only for ids missing from the cache. The schemes are part of
    the key, in order, so a changed temperature or top-k is a new entry, never a stale one."""
    cache = loss_cache(cache_dir, SCHEME_LOGPROBS, model=scorer.fingerprint, examples=examples_fingerprint(rows),
                       sentinels=sentinels.family, device=scorer.device,
                       schemes=[[s.name, s.temperature, s.top_k] for s in schemes])
    return cache.get(rows, in_chunks(lambda part: scorer.scheme_logprobs(part, sentinels, schemes), chunk=64))
