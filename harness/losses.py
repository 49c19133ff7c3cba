"""Loss-based memorization: recollection, counterfactual and contextual measures (paper 004, Sec. 3).

Two layers live here:

* `memorization_measures(train_loss, control_loss, tau)` — pure numpy on (epochs, strings) loss
  arrays; the one definition of the three measures in the project (DESIGN: one metric, one place).
* the model side — `target_losses(...)` (per-example loss of a FIM target given its prompt, beside
  generation as the second half of the model interface, like lm-eval's loglikelihood/generate), a
  fingerprinted loss cache, and `audit_losses(...)`, which scores every checkpoint of an audited
  run against a control run (or a fixed reference model) and writes rows + a summary.

Canary exposure (Carlini et al. 2019) is in harness/exposure.py; it ranks candidates with
`target_losses` from this file.

Where the task text and paper 004 differ (we follow the task text):

1. Clipping. The paper states Eq. 1-2 are "in [0, 1]" and proves Lemma 1 under the assumption that the
   training loss is never above the counterfactual loss (Appendix D). Real runs break that assumption
   (the audited model can forget a string again after onset), so the raw Eq. 1/2 can go negative.
   The task says to clip to [0, 1]; we clip both Eq. 1 and Eq. 2. The upper clip never binds because
   we require losses >= 0 (cross-entropy), which also makes Lemma 1 hold without the paper's
   assumption (see `_validate`; tests/unit/test_losses.py checks it by property tests).
2. "From onset on". The paper: mem(s, e) = Eq. for e >= e_s, 0 before (Sec. 2, RQ2). We apply the
   formula for every e >= onset and clip, exactly so. Because the raw Eq. 1 (Eq. 2) is > 0 exactly
   when the onset condition holds at that epoch, clipped scores after onset are 0 at epochs where
   the string is (temporarily) not memorized; "from onset on" therefore does not keep a string
   "memorized forever" once it started — `frac` counts strings with score > 0 at that epoch, as the
   paper's mem_frac(D, e) = E_s[1(mem(s, e) > 0)] (Sec. 4) does.
3. Recollection score is the paper's per-epoch indicator 1(loss(M_e, s) < tau), not "1 from the
   onset on": a string whose loss rises above tau again scores 0 at that epoch.
4. The paper's E_{D ~ L} expectation over resampled datasets (Eq. 1-2, "expected" memorization) is
   one sample here: one audited run and one control run.
5. Reference-model proxy (Sec. 5): the paper compares recollection *accuracy* of M and M_ref; we
   use M_ref's *loss* as an epoch-constant control loss in Eq. 1-2 (so counterfactual == contextual),
   labelled `reference_upper_bound` in every output.
6. e* (Fig. 3, "test loss is the lowest") is the checkpoint with the lowest mean audited-model loss
   on an example set named as held-out by the caller (e.g. pd_eval).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.encode import encode_texts
from harness.errors import UserError
from harness.io import RowStore, atomic_write_json, atomic_write_jsonl, file_sha256, read_json, read_jsonl
from harness.layout import checkpoint_dirs
from harness.provenance import provenance

MEASURES = ("recollection", "counterfactual", "contextual")


# ---------------------------------------------------------------------------------------------
# The three measures (paper 004 Sec. 3, Eq. 1-2; dataset level Sec. 4)
# ---------------------------------------------------------------------------------------------

def _as_loss_array(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (epochs, strings); got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one epoch and one string; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} has a non-finite value at (epoch {bad[0]}, string {bad[1]}); "
                         "drop that string or recompute its loss")
    return arr


def _validate(train_loss: Any, control_loss: Any, tau: float) -> tuple[np.ndarray, np.ndarray]:
    train = _as_loss_array("train_loss", train_loss)
    control = _as_loss_array("control_loss", control_loss)
    if train.shape != control.shape:
        raise ValueError(f"train_loss shape {train.shape} != control_loss shape {control.shape}; both are "
                         "(epochs, strings) at the same checkpoints for the same strings")
    if np.any(control <= 0):
        bad = np.argwhere(control <= 0)[0]
        raise ValueError(f"control_loss must be > 0 (it divides Eq. 1-2); got {control[tuple(bad)]} at "
                         f"(epoch {bad[0]}, string {bad[1]})")
    # Cross-entropy is >= 0. A negative training loss is a bug upstream, and it would break Lemma 1's
    # score inequality (t/min_c >= t/c_e needs t >= 0).
    if np.any(train < 0):
        bad = np.argwhere(train < 0)[0]
        raise ValueError(f"train_loss must be >= 0 (a cross-entropy); got {train[tuple(bad)]} at "
                         f"(epoch {bad[0]}, string {bad[1]})")
    if not (isinstance(tau, (int, float, np.floating)) and np.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be a positive finite loss threshold; got {tau!r}")
    return train, control


def first_true(mask: np.ndarray) -> np.ndarray:
    """Per column of an (epochs, strings) bool array: the first epoch index that is True, else -1."""
    any_true = mask.any(axis=0)
    return np.where(any_true, mask.argmax(axis=0), -1)


def _from_onset(onset: np.ndarray, epochs: int) -> np.ndarray:
    """(epochs, strings) mask: epoch index >= the string's onset (never for onset -1)."""
    e = np.arange(epochs)[:, None]
    return (onset[None, :] >= 0) & (e >= onset[None, :])


def _relative_gap_score(threshold: np.ndarray, train: np.ndarray, onset: np.ndarray) -> np.ndarray:
    """(threshold - train) / threshold from the onset on, 0 before; clipped to [0, 1] (task text)."""
    raw = (threshold - train) / threshold
    return np.clip(np.where(_from_onset(onset, train.shape[0]), raw, 0.0), 0.0, 1.0)


def _dataset_level(score: np.ndarray) -> dict[str, np.ndarray]:
    """Paper 004 Sec. 4: mem_frac(D, e) = E_s[1(mem > 0)], mem_weighted(D, e) = E_s[mem]."""
    return {"frac": (score > 0).mean(axis=1), "weighted": score.mean(axis=1)}


def memorization_measures(train_loss, control_loss, tau: float = 0.2) -> dict:
    """Recollection, counterfactual and contextual memorization of each string at each epoch.

    train_loss, control_loss: (epochs, strings) losses of each string under the audited run's
    checkpoint at each epoch and under the control run (same schedule, trained without the strings).

    Returns {measure: {"onset": (strings,) int, first memorized epoch or -1,
                       "score": (epochs, strings) float in [0, 1],
                       "frac": (epochs,) share of strings with score > 0,
                       "weighted": (epochs,) mean score}}
    for measure in recollection / counterfactual / contextual, plus "tau" and
    "optimal_contextual_loss" (strings,) = min over epochs of control_loss.
    """
    train, control = _validate(train_loss, control_loss, tau)

    # (a) Recollection (Sec. 3a): fixed threshold tau; score is the per-epoch indicator.
    rec_mask = train < tau
    rec_onset = first_true(rec_mask)
    rec_score = rec_mask.astype(np.float64)

    # (b) Counterfactual (Sec. 3b, Eq. 1): string-and-epoch threshold = control loss at the same epoch.
    cf_onset = first_true(train < control)
    cf_score = _relative_gap_score(control, train, cf_onset)

    # (c) Contextual (Sec. 3c, Eq. 2): string-only threshold = optimal contextual loss, the lowest
    # control loss over all epochs.
    optimal = control.min(axis=0)
    ctx_onset = first_true(train < optimal[None, :])
    ctx_score = _relative_gap_score(np.broadcast_to(optimal, train.shape), train, ctx_onset)

    out: dict[str, Any] = {"tau": float(tau), "optimal_contextual_loss": optimal}
    for name, onset, score in (("recollection", rec_onset, rec_score),
                               ("counterfactual", cf_onset, cf_score),
                               ("contextual", ctx_onset, ctx_score)):
        out[name] = {"onset": onset.astype(np.int64), "score": score, **_dataset_level(score)}
    return out


# ---------------------------------------------------------------------------------------------
# Per-example loss of a FIM target given its prompt (the model interface's "loglikelihood" half)
# ---------------------------------------------------------------------------------------------

def encode_fim_examples(tokenizer, prefixes: Sequence[str], targets: Sequence[str],
                        suffixes: Sequence[str], sentinels) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) per example: the PSM prompt `[PRE]prefix[SUF]suffix[MID]`, then the target.

    The prompt is encoded exactly as greedy decoding encodes it (`harness.encode.encode_texts`, BOS kept
    where the tokenizer adds one), so a loss and a completion condition on the same tokens. The target is
    encoded on its own without special tokens: the `<fim_middle>` sentinel before it is an added token
    (special or not, added tokens are matched before BPE runs), so a tokenizer splits the training text
    `...<fim_middle>middle<eos>` at it and the middle gets the same ids as here. EOS is not part of the
    target: we measure the string, not where it stops.
    """
    from harness.fim import format_psm_prompt

    if not (len(prefixes) == len(targets) == len(suffixes)):
        raise ValueError(f"prefixes/targets/suffixes differ in length: "
                         f"{len(prefixes)}/{len(targets)}/{len(suffixes)}")
    prompts = encode_texts(tokenizer, [format_psm_prompt(p, s, sentinels)
                                         for p, s in zip(prefixes, suffixes)])
    target_ids = tokenizer(list(targets), add_special_tokens=False)["input_ids"]
    for i, ids in enumerate(target_ids):
        if not ids:
            raise ValueError(f"example {i}: empty target has no tokens to score; drop it or fix its `target`")
    return [(list(p), list(t)) for p, t in zip(prompts, target_ids)]


def _accepts_logits_to_keep(model) -> bool:
    import inspect

    return "logits_to_keep" in inspect.signature(model.forward).parameters


def token_losses_batched(model, examples: Sequence[tuple[list[int], list[int]]], batch_size: int = 16,
                         pad_id: int = 0, reduction: str = "mean", progress: bool | None = None) -> np.ndarray:
    """Cross-entropy of each example's target ids given its prompt ids, one forward pass per batch.

    Rows are right-padded under an attention mask (positions 0..n-1 of every real token are then the
    same as unpadded), grouped by length so a batch carries little padding. Only the logits from the
    first target-predicting position onwards are materialised (`logits_to_keep`), which matters for
    49k-token vocabularies and long FIM prompts. reduction: "mean" (per-token average, paper 004's
    string loss) or "sum" (sequence negative log-likelihood, for ranking candidates of different
    length as in the exposure test).
    """
    import torch

    from tqdm.auto import tqdm

    from harness.generation import length_sorted_batches

    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r}: use 'mean' or 'sum'")
    out = np.empty(len(examples), dtype=np.float64)
    device = next(model.parameters()).device
    keep_arg = _accepts_logits_to_keep(model)
    bar = tqdm(total=len(examples), desc="loss", unit="ex", leave=False, dynamic_ncols=True,
               disable=(not progress) if progress is not None else None)   # None: only on a terminal
    try:
        for idx in length_sorted_batches([len(p) + len(t) for p, t in examples], batch_size):
            rows = [examples[i][0] + examples[i][1] for i in idx]
            width = max(len(r) for r in rows)
            input_ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], device=device)
            attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
            # Target token j of a row sits at position len(prompt)+j and is predicted at len(prompt)+j-1.
            first = min(len(examples[i][0]) for i in idx) - 1
            if first < 0:
                raise ValueError("an example has an empty prompt; the PSM prompt always has sentinels, "
                                 "so this means a tokenizer dropped them")
            kwargs = {"logits_to_keep": width - first} if keep_arg else {}
            with torch.inference_mode():
                logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                               **kwargs).logits
            offset = width - logits.shape[1]          # logits column c predicts token c + offset + 1
            for row, i in enumerate(idx):
                n_prompt, target = len(examples[i][0]), examples[i][1]
                cols = torch.arange(n_prompt - 1, n_prompt - 1 + len(target), device=device) - offset
                logp = torch.log_softmax(logits[row, cols].float(), dim=-1)
                nll = -logp.gather(1, torch.tensor(target, device=device)[:, None]).squeeze(1)
                out[i] = float(nll.mean() if reduction == "mean" else nll.sum())
            bar.update(len(idx))
    finally:
        bar.close()
    return out


def target_losses(model, tokenizer, prefixes: Sequence[str], targets: Sequence[str],
                  suffixes: Sequence[str], sentinels, batch_size: int = 16, reduction: str = "mean",
                  progress: bool | None = None) -> np.ndarray:
    """Per-example loss of `target` given the PSM FIM prompt of (prefix, suffix): mean token cross-
    entropy over the target tokens only (prompt tokens masked out), as a float64 array in input order.

    This is the loss of paper 004 Sec. 3 (recollection "loss(M_e, s)") for a FIM example.
    """
    examples = encode_fim_examples(tokenizer, prefixes, targets, suffixes, sentinels)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return token_losses_batched(model, examples, batch_size, pad_id, reduction, progress)


# ---------------------------------------------------------------------------------------------
# Loss cache keyed by a fingerprint (what was scored, by which weights, how)
# ---------------------------------------------------------------------------------------------
# The model fingerprint is the audit's (harness.audit.model_fingerprint: weights + config + tokenizer
# files, hashed once per process); the cache itself is ours because it stores floats per example id,
# not completions: one RowStore per (model, example set, settings) fingerprint.

CACHE_VERSION = 1   # bump when the loss computation changes, so old cached numbers are not reused


def examples_fingerprint(rows: Sequence[dict], fields: Sequence[str] = ("id", "prefix", "target", "suffix")) -> str:
    payload = json.dumps([[r.get(f) for f in fields] for r in rows], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def cache_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps({"v": CACHE_VERSION, **parts}, sort_keys=True,
                                     default=str).encode()).hexdigest()[:32]


class LazyScorer:
    """The audit's model interface (harness.generation.CausalLMScorer) for one checkpoint, loaded only
    when a value is actually missing from the cache (a rerun loads nothing)."""

    def __init__(self, path: Path, device: str, batch_size: int = 16, trust_remote_code: bool = False):
        self.path, self.device, self.batch_size = Path(path), device, batch_size
        self.trust_remote_code = trust_remote_code
        self._scorer = None

    def get(self):
        if self._scorer is None:
            from harness.generation import CausalLMScorer

            self._scorer = CausalLMScorer.load(self.path, self.device, trust_remote_code=self.trust_remote_code,
                                               batch_size=self.batch_size)
        return self._scorer

    def release(self) -> None:
        self._scorer = None


def loss_store(cache_dir: Path, **identity: Any) -> Path:
    """Where the losses of one (kind, weights, examples, settings) identity are cached: every loss the
    audit computes (paper 004's target losses, exposure's candidate losses, the utility's held-out
    loss) lives under <cache_dir>/losses/, so one identity is computed once whoever asks for it."""
    return Path(cache_dir) / "losses" / f"{cache_key(**identity)}.jsonl"


def cached_target_losses(scorer: LazyScorer, fingerprint: str, rows: Sequence[dict], sentinels,
                         cache_dir: Path) -> dict[str, float]:
    """{id: mean target loss} of `rows` under one model (its weights' `fingerprint`), computed only for
    ids missing from the cache. Batching does not change a loss (tested), so the batch size is not
    part of the key; the device is (CPU and CUDA kernels differ in the last bits)."""
    store = loss_store(cache_dir, kind="target_loss_mean", model=fingerprint, examples=examples_fingerprint(rows),
                       sentinels=sentinels.family, device=scorer.device)
    return cached_row_losses(store, rows, lambda part: scorer.get().target_losses(part, sentinels))


def model_sentinels(model_dir: Path, fim_family: str | None):
    """The FIM sentinels of a model directory, from its tokenizer alone (no weights loaded)."""
    from transformers import AutoTokenizer

    from harness.fim import detect_sentinels

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    return detect_sentinels(tokenizer, fim_family, str(model_dir), config_key="audit.fim_family")


def cached_row_losses(store_path: Path, rows: Sequence[dict], compute, chunk: int = 256) -> dict[str, Any]:
    """{id: value} for `rows`, computing only ids missing from the RowStore at `store_path`.

    `compute(rows) -> list of JSON-able values` runs on chunks of missing rows; each chunk is appended
    (fsync'd) as soon as it is done, so a killed job loses at most one chunk and a rerun neither
    recomputes nor duplicates what was stored.
    """
    store = RowStore(store_path, key="id")
    missing = [r for r in rows if r["id"] not in store.done]
    for start in range(0, len(missing), chunk):
        part = missing[start:start + chunk]
        store.append({"id": r["id"], "value": v} for r, v in zip(part, compute(part)))
    values = {row["id"]: row["value"] for row in store.rows()}
    return {r["id"]: values[r["id"]] for r in rows}


# ---------------------------------------------------------------------------------------------
# audit_losses: every checkpoint of an audited run vs a control run (or a fixed reference model)
# ---------------------------------------------------------------------------------------------

FIM_FIELDS = ("id", "prefix", "target", "suffix")
VARIANT_CONTROL = "control_run"
VARIANT_REFERENCE = "reference_upper_bound"
CONTROL_LOSS_FLOOR = 1e-12


def checkpoint_steps(model_dir: str | Path) -> dict[int, Path]:
    """{step: path} of the `checkpoint-<step>` directories of a trained model, by step."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise UserError(f"{model_dir}: model directory not found; point at <run_dir>/models/<NAME>")
    return checkpoint_dirs(model_dir)


def _checkpoint_epoch(path: Path) -> float | None:
    """The epoch a checkpoint was saved at, from the Trainer's trainer_state.json when present."""
    state = path / "trainer_state.json"
    if state.is_file():
        epoch = read_json(state).get("epoch")
        return float(epoch) if epoch is not None else None
    return None


def _match_checkpoints(audited_dir: Path, control_dir: Path | None) -> list[dict]:
    """Pair each audited checkpoint with the control checkpoint of the same epoch (paper 004 compares
    loss(M_e(D), s) with loss(M_e(D'), s) at the same epoch e).

    Same step lists -> paired by step. Otherwise, when every checkpoint of both runs has a
    trainer_state.json epoch and the epoch lists agree (to 1e-3), paired by epoch: a control trained
    on D' (smaller than D) reaches epoch e in fewer steps, so per-epoch saving gives different steps.
    """
    audited = checkpoint_steps(audited_dir)
    if not audited:
        raise UserError(f"{audited_dir}: no checkpoint-<step> directories; the loss measures need the "
                        "checkpoints saved during training (set the stage's save_steps / save_strategy)")
    a_epochs = {s: _checkpoint_epoch(p) for s, p in audited.items()}
    if control_dir is None:
        return [{"step": s, "epoch": a_epochs[s], "audited": p, "control": None} for s, p in audited.items()]
    control = checkpoint_steps(control_dir)
    if list(control) == list(audited):
        return [{"step": s, "epoch": a_epochs[s], "audited": p, "control": control[s], "control_step": s}
                for s, p in audited.items()]
    c_epochs = {s: _checkpoint_epoch(p) for s, p in control.items()}
    if (len(control) == len(audited) and None not in a_epochs.values() and None not in c_epochs.values()
            and all(abs(a - c) < 1e-3 for a, c in zip(a_epochs.values(), c_epochs.values()))):
        return [{"step": s, "epoch": a_epochs[s], "audited": p, "control": control[cs], "control_step": cs}
                for (s, p), cs in zip(audited.items(), control)]
    raise UserError(f"checkpoints do not line up: audited {audited_dir} has steps {list(audited)} (epochs "
                    f"{list(a_epochs.values())}), control {control_dir} has steps {list(control)} (epochs "
                    f"{list(c_epochs.values())}); train the control with the same schedule (same save_steps "
                    "and max_steps, or save once per epoch) so each audited checkpoint has a same-epoch control")


def load_fim_examples(path: str | Path) -> tuple[list[dict], str]:
    """Rows (id, prefix, target, suffix, ...) of a FIM example set and the sha256 of its file.

    `path` is a rows.jsonl file or a dataset directory holding one.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "rows.jsonl"
    rows = read_jsonl(path, required=FIM_FIELDS)
    seen: set = set()
    for n, r in enumerate(rows, start=1):
        for f in ("prefix", "target", "suffix"):
            if not isinstance(r[f], str):
                raise UserError(f"{path}: row {n} (id {r['id']!r}): field {f!r} must be a string")
        if not r["target"]:
            raise UserError(f"{path}: row {n} (id {r['id']!r}): empty target, nothing to score; drop the row")
        if r["id"] in seen:
            raise UserError(f"{path}: row {n}: duplicate id {r['id']!r}; ids must be unique per dataset")
        seen.add(r["id"])
    if not rows:
        raise UserError(f"{path}: no rows; the loss measures need at least one example")
    return rows, file_sha256(path)


def _jsonable(a: np.ndarray) -> list:
    return [float(round(x, 8)) for x in np.asarray(a, dtype=np.float64).ravel()]


def audit_losses(audited_dir: str | Path, example_sets: dict[str, str | Path], out_dir: str | Path, *,
                 control_dir: str | Path | None = None, reference_model: str | Path | None = None,
                 tau: float = 0.2, heldout: str | None = None, batch_size: int = 16,
                 device: str = "auto", fim_family: str | None = None, cache_dir: str | Path | None = None,
                 pii_candidates: str | Path | None = None, exposure: bool = True,
                 seed: int | None = None) -> dict:
    """Paper 004's three measures (and SD.Links exposure) at every checkpoint of an audited run.

    audited_dir: <run_dir>/models/<NAME> (e.g. FT.1) with checkpoint-<step>/ dirs.
    control_dir: the control run (e.g. FT.2: same stage and schedule, trained without the audited
        strings), with checkpoints at the same steps. Exact paper 004 Sec. 3 setting.
    reference_model: used when there is no control run: one fixed model directory whose loss is the
        control loss at every epoch (paper 004 Sec. 5 proxy). Its recollection is only an upper bound
        of the optimal contextual recollection, so the output is labelled `reference_upper_bound`;
        counterfactual and contextual then coincide (the threshold no longer depends on the epoch).
    example_sets: {dataset name: rows.jsonl or dataset dir} of FIM rows (id, prefix, target, suffix).
    heldout: name of an example set the audited run did not train on; the checkpoint with its lowest
        mean loss is the "optimal learning" epoch e* marked in paper 004 Fig. 3.
    exposure: rank-based exposure (harness/exposure.py) for rows with `pii_path` (SD.Links positives).

    Writes into out_dir, atomically: <set>.jsonl (per string: losses, onsets, per-epoch scores),
    <set>.exposure.jsonl (per positive: rank and exposure per checkpoint) and summary.json
    (per-epoch frac/weighted per measure, exposure distribution, provenance). Losses are cached under
    <cache_dir>/losses/ (cache_dir: the audit's cache, default out_dir/cache) per (weights, examples,
    settings) fingerprint, so a killed run resumes where it stopped. Returns the summary.
    """
    from harness import exposure as exp
    from harness.audit import model_fingerprint
    from harness.generation import pick_device

    audited_dir, out_dir = Path(audited_dir), Path(out_dir)
    if control_dir is None and reference_model is None:
        raise UserError("audit_losses needs a control run (control_dir, e.g. models/FT.2) or a fixed "
                        "reference model (reference_model) to compare the audited checkpoints against")
    if control_dir is not None and reference_model is not None:
        raise UserError("give either control_dir or reference_model, not both")
    if not example_sets:
        raise UserError("no example sets given; pass e.g. {'sd_base': <run_dir>/data/sd_base}")
    if heldout is not None and heldout not in example_sets:
        raise UserError(f"heldout={heldout!r} is not one of the example sets {sorted(example_sets)}")
    device = pick_device(device)
    cache_dir = Path(cache_dir) if cache_dir is not None else out_dir / "cache"
    checkpoints = _match_checkpoints(audited_dir, Path(control_dir) if control_dir else None)
    variant = VARIANT_CONTROL if control_dir is not None else VARIANT_REFERENCE
    data = {name: load_fim_examples(path) for name, path in example_sets.items()}

    sentinels = model_sentinels(checkpoints[0]["audited"], fim_family)
    candidates = exp.load_candidates(pii_candidates or exp.PII_PATHS_FILE) if exposure else []
    pii_rows = {name: exp.exposure_rows(rows) for name, (rows, _) in data.items()} if exposure else {}

    def losses_of(model_dir: Path, with_exposure: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Mean target loss per set, and (rows, candidates) exposure losses per set, of one model dir."""
        scorer = LazyScorer(model_dir, device, batch_size)
        fp = model_fingerprint(model_dir)

        def cand_loss(rows):
            s = scorer.get()
            return exp.candidate_losses(s.model, s.tokenizer, rows, candidates, sentinels, batch_size).tolist()

        target, cands = {}, {}
        for name, (rows, _) in data.items():
            got = cached_target_losses(scorer, fp, rows, sentinels, cache_dir)
            target[name] = np.array([got[r["id"]] for r in rows])
            if with_exposure and pii_rows.get(name):
                store = loss_store(cache_dir, kind="exposure_sum", model=fp, candidates=candidates,
                                   examples=examples_fingerprint(pii_rows[name], FIM_FIELDS + ("pii_path",)),
                                   sentinels=sentinels.family, device=device)
                got = cached_row_losses(store, pii_rows[name], cand_loss, chunk=max(1, 2048 // len(candidates)))
                cands[name] = np.array([got[r["id"]] for r in pii_rows[name]])
        scorer.release()
        return target, cands

    train = {name: [] for name in data}
    control = {name: [] for name in data}
    cand = {name: [] for name in pii_rows if pii_rows[name]}
    reference = losses_of(Path(reference_model), False)[0] if reference_model is not None else None
    for ck in checkpoints:
        t, c = losses_of(ck["audited"], True)
        ctrl = losses_of(ck["control"], False)[0] if ck["control"] is not None else reference
        for name in data:
            train[name].append(t[name])
            control[name].append(ctrl[name])
        for name in cand:
            cand[name].append(c[name])

    # Everything is computed before anything is written, so a bad input (UserError below) leaves no
    # half-updated output directory; summary.json is written last and marks a finished audit.
    summary_sets, outputs, n_floored = {}, {}, 0
    for name, (rows, sha) in data.items():
        tr, co = np.stack(train[name]), np.stack(control[name])
        # A control loss can underflow to exactly 0 in float32 (every target token predicted with
        # probability 1.0); Eq. 1-2 divide by it. Raise it to CONTROL_LOSS_FLOOR, where the limit of
        # Eq. 1-2 is the same (memorized only if the audited loss is lower still); counted in the summary.
        n_floored += int(np.sum(co < CONTROL_LOSS_FLOOR))
        co = np.maximum(co, CONTROL_LOSS_FLOOR)
        try:
            m = memorization_measures(tr, co, tau)
        except ValueError as e:
            raise UserError(f"dataset {name}: {e}") from None
        out_rows = []
        for j, r in enumerate(rows):
            out_rows.append({
                "id": r["id"], "variant": variant,
                "train_loss": _jsonable(tr[:, j]), "control_loss": _jsonable(co[:, j]),
                "optimal_contextual_loss": float(m["optimal_contextual_loss"][j]),
                "onset": {k: int(m[k]["onset"][j]) for k in MEASURES},
                "score": {k: _jsonable(m[k]["score"][:, j]) for k in MEASURES},
            })
        outputs[f"{name}.jsonl"] = out_rows
        entry = {
            "count": len(rows), "sha256": sha,
            "mean_train_loss": _jsonable(tr.mean(axis=1)), "mean_control_loss": _jsonable(co.mean(axis=1)),
            "measures": {k: {"frac": _jsonable(m[k]["frac"]), "weighted": _jsonable(m[k]["weighted"]),
                             "memorized_ever": int(np.sum(m[k]["onset"] >= 0))} for k in MEASURES},
        }
        if name in cand:
            per_ck = [exp.exposures(L, pii_rows[name], candidates) for L in cand[name]]
            exp_rows = [{"id": r["id"], "pii_path": r["pii_path"],
                         "rank": [per_ck[e][i]["rank"] for e in range(len(checkpoints))],
                         "exposure": [per_ck[e][i]["exposure"] for e in range(len(checkpoints))]}
                        for i, r in enumerate(pii_rows[name])]
            outputs[f"{name}.exposure.jsonl"] = exp_rows
            entry["exposure"] = [exp.exposure_summary([x["exposure"] for x in ck_rows], len(candidates))
                                 for ck_rows in per_ck]
        summary_sets[name] = entry

    best_epoch = None
    if heldout is not None:
        best_epoch = int(np.argmin(np.stack(train[heldout]).mean(axis=1)))
    summary = {
        "variant": variant,
        "variant_note": (
            "control = the control run's checkpoint at the same step (paper 004 Sec. 3)"
            if variant == VARIANT_CONTROL else
            "control = one fixed reference model at every epoch (paper 004 Sec. 5 proxy): its loss upper-"
            "bounds the optimal contextual recollection only if it never trained on these strings; "
            "counterfactual == contextual here"),
        "audited": str(audited_dir), "control": str(control_dir) if control_dir else None,
        "reference_model": str(reference_model) if reference_model else None,
        "tau": tau, "heldout": heldout, "best_epoch": best_epoch, "control_losses_floored": n_floored,
        "checkpoints": [{"index": i, "step": ck["step"], "epoch": ck["epoch"], "control_step": ck.get("control_step")}
                        for i, ck in enumerate(checkpoints)],
        "n_candidates": len(candidates) if cand else None,
        "datasets": summary_sets,
        "provenance": provenance(seed=seed, datasets={n: sha for n, (_, sha) in data.items()},
                                 measure="paper004_loss_measures", tau=tau, variant=variant,
                                 fim_family=sentinels.family, cache_version=CACHE_VERSION,
                                 pii_candidates_sha256=(file_sha256(pii_candidates or exp.PII_PATHS_FILE)
                                                        if cand else None)),
    }
    for file_name, rows in outputs.items():
        atomic_write_jsonl(out_dir / file_name, rows)
    atomic_write_json(out_dir / "summary.json", summary)
    return summary
