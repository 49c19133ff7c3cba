"""Paper 004's measures over a run: every checkpoint of an audited run against a control run (or a fixed
reference model), on every example set, with the exposure of SD.Links PII paths (`audit_losses`).

The losses come from memlens.harness.model (the scorer's teacher-forced passes) through its one cache, so a killed
audit resumes where it stopped and the utility's held-out loss reuses these entries; the measures
themselves are memlens.harness.measures.losses and memlens.harness.measures.exposure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.plan import plan_audits
from memlens.harness.audit.settings import AuditSettings, setting
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256, read_json
from memlens.harness.core.layout import checkpoint_dirs, data_dir, require_inside
from memlens.harness.core.provenance import provenance
from memlens.harness.core.user_data import read_fim_examples
from memlens.harness.measures import exposure as exp
from memlens.harness.measures.losses import LOSS_MEASURES, memorization_measures
from memlens.harness.model.cache import CACHE_VERSION, cached_target_losses, examples_fingerprint, in_chunks, loss_cache
from memlens.harness.model.load import model_sentinels, pick_device
from memlens.harness.model.scorer import CausalLMScorer

EXPOSURE_SUM = "exposure_sum"      # cache kind: summed target NLL of each candidate path substituted

FIM_FIELDS = ("id", "prefix", "target", "suffix")
VARIANT_CONTROL = "control_run"
VARIANT_REFERENCE = "reference_upper_bound"
CONTROL_LOSS_FLOOR = 1e-12
DEFAULT_TAU = 0.2                  # audit.tau (LossSettings): recollection threshold, paper 004 Sec. 3


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

    `path` is a rows.jsonl file or a dataset directory holding one. The rows are read and checked by the one reader of
    FIM examples (memlens.harness.core.user_data.read_fim_examples, as the NED audit reads them): the same rules and
    the same errors (file:line, non-string field, empty target, duplicate id) whichever measure reads the set.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "rows.jsonl"
    rows = [row for _, row in read_fim_examples(path)]
    if not rows:
        raise UserError(f"{path}: no rows; the loss measures need at least one example")
    return rows, file_sha256(path)


def _jsonable(a: np.ndarray) -> list:
    return [float(round(x, 8)) for x in np.asarray(a, dtype=np.float64).ravel()]


def audit_losses(audited_dir: str | Path, example_sets: dict[str, str | Path], out_dir: str | Path,
                 settings: LossSettings, *, control_dir: str | Path | None = None,
                 reference_model: str | Path | None = None, cache_dir: str | Path | None = None,
                 pii_candidates: str | Path | None = None, exposure: bool = True, seed: int | None = None) -> dict:
    """Paper 004's three measures (and SD.Links exposure) at every checkpoint of an audited run.

    audited_dir: <run_dir>/models/<NAME> (e.g. FT.1) with checkpoint-<step>/ dirs.
    example_sets: {dataset name: rows.jsonl or dataset dir} of FIM rows (id, prefix, target, suffix).
    settings: tau; heldout, the name of an example set the audited run did not train on (its lowest mean loss marks
        the "optimal learning" epoch e* of paper 004 Fig. 3; None: none); and the scoring knobs (batch size, device,
        FIM family) in settings.scoring.
    control_dir: the control run (e.g. FT.2: same stage and schedule, trained without the audited
        strings), with checkpoints at the same steps. Exact paper 004 Sec. 3 setting.
    reference_model: used when there is no control run: one fixed model directory whose loss is the
        control loss at every epoch (paper 004 Sec. 5 proxy). Its recollection is only an upper bound
        of the optimal contextual recollection, so the output is labelled `reference_upper_bound`;
        counterfactual and contextual then coincide (the threshold no longer depends on the epoch).
    exposure: rank-based exposure (harness/measures/exposure.py) for rows with `pii_path` (SD.Links positives).

    Writes into out_dir, atomically: <set>.jsonl (per string: losses, onsets, per-epoch scores),
    <set>.exposure.jsonl (per positive: rank and exposure per checkpoint) and summary.json
    (per-epoch frac/weighted per measure, exposure distribution, provenance). Losses are cached under
    <cache_dir>/losses/ (cache_dir: the audit's cache, default out_dir/cache) per (weights, examples,
    settings) fingerprint, so a killed run resumes where it stopped. Returns the summary.
    """
    out_dir = Path(out_dir)
    _check_loss_inputs(example_sets, control_dir, reference_model, settings.heldout)
    device = pick_device(settings.scoring.device)
    compared = _Comparison(Path(audited_dir), control_dir, reference_model,
                           _match_checkpoints(Path(audited_dir), Path(control_dir) if control_dir else None))
    passes = _LossPasses.prepare(example_sets, compared.checkpoints[0]["audited"], settings.scoring, device,
                                 Path(cache_dir) if cache_dir is not None else out_dir / "cache",
                                 pii_candidates, exposure)
    train, control, cand = _checkpoint_losses(passes, compared)
    # Everything is computed before anything is written, so a bad input (UserError below) leaves no
    # half-updated output directory; summary.json is written last and marks a finished audit.
    summary_sets, outputs, n_floored = {}, {}, 0
    for name, (rows, sha) in passes.data.items():
        floored, out_rows, entry = _dataset_result(name, rows, sha, train[name], control[name], settings.tau,
                                                   compared.variant)
        n_floored += floored
        outputs[f"{name}.jsonl"] = out_rows
        if name in cand:
            exp_rows, entry["exposure"] = _exposure_result(cand[name], passes.pii_rows[name], passes.candidates)
            outputs[f"{name}.exposure.jsonl"] = exp_rows
        summary_sets[name] = entry
    summary = _loss_summary(passes, settings, compared, train, summary_sets, n_floored, seed)
    for file_name, rows in outputs.items():
        atomic_write_jsonl(out_dir / file_name, rows)
    atomic_write_json(out_dir / "summary.json", summary)
    return summary


def _check_loss_inputs(example_sets: dict, control_dir, reference_model, heldout: str | None) -> None:
    if control_dir is None and reference_model is None:
        raise UserError("audit_losses needs a control run (control_dir, e.g. models/FT.2) or a fixed "
                        "reference model (reference_model) to compare the audited checkpoints against")
    if control_dir is not None and reference_model is not None:
        raise UserError("give either control_dir or reference_model, not both")
    if not example_sets:
        raise UserError("no example sets given; pass e.g. {'sd_base': <run_dir>/data/sd_base}")
    if heldout is not None and heldout not in example_sets:
        raise UserError(f"heldout={heldout!r} is not one of the example sets {sorted(example_sets)}")


@dataclass(frozen=True)
class _Comparison:
    """What a loss audit compares: the audited run's checkpoints against the control run's at the same steps
    (control_dir), or against one fixed reference model at every checkpoint (reference_model)."""

    audited_dir: Path
    control_dir: str | Path | None
    reference_model: str | Path | None
    checkpoints: list[dict]                     # _match_checkpoints: step, epoch, audited, control (dirs)

    @property
    def variant(self) -> str:
        return VARIANT_CONTROL if self.control_dir is not None else VARIANT_REFERENCE


@dataclass(frozen=True)
class _LossPasses:
    """What every model's loss pass reads: the example sets, their SD.Links positives and the candidate paths their
    exposure ranks against (none when exposure is off), the FIM sentinels, the scoring knobs and the cache."""

    data: dict[str, tuple[list[dict], str]]     # set name -> (rows, sha256)
    pii_rows: dict[str, list[dict]]
    candidates: list[str]
    sentinels: Any                              # the audited model's prompt format (model_sentinels)
    scoring: AuditSettings
    device: str
    cache_dir: Path
    candidates_file: str | Path | None          # where the candidates came from (None: the shipped file)

    @property
    def exposed(self) -> bool:
        """Whether any set has SD.Links positives whose exposure is measured."""
        return any(self.pii_rows.values())

    @classmethod
    def prepare(cls, example_sets: dict[str, str | Path], first_checkpoint: Path, scoring: AuditSettings,
                device: str, cache_dir: Path, pii_candidates: str | Path | None, exposure: bool) -> _LossPasses:
        """`pii_candidates`: the candidate paths' file (None: the shipped one), read only with `exposure`."""
        data = {name: load_fim_examples(path) for name, path in example_sets.items()}
        sentinels = model_sentinels(first_checkpoint, scoring.fim_family)
        candidates = exp.load_candidates(pii_candidates or exp.PII_PATHS_FILE) if exposure else []
        pii_rows = {name: exp.exposure_rows(rows) for name, (rows, _) in data.items()} if exposure else {}
        return cls(data, pii_rows, candidates, sentinels, scoring, device, cache_dir, pii_candidates)

    def losses_of(self, model_dir: Path, with_exposure: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Mean target loss per set, and (rows, candidates) exposure losses per set, of one model dir."""
        scorer = CausalLMScorer.load(model_dir, self.device, batch_size=self.scoring.batch_size, lazy=True)
        target, cands = {}, {}
        for name, (rows, _) in self.data.items():
            got = cached_target_losses(scorer, rows, self.sentinels, self.cache_dir)
            target[name] = np.array([got[r["id"]] for r in rows])
            if with_exposure and self.pii_rows.get(name):
                cands[name] = self._exposure_losses(scorer, self.pii_rows[name])
        scorer.release()
        return target, cands

    def _exposure_losses(self, scorer: CausalLMScorer, rows: list[dict]) -> np.ndarray:
        def cand_loss(chunk):
            return exp.candidate_losses(scorer, chunk, self.candidates, self.sentinels).tolist()

        cache = loss_cache(self.cache_dir, EXPOSURE_SUM, model=scorer.fingerprint, candidates=self.candidates,
                           examples=examples_fingerprint(rows, FIM_FIELDS + ("pii_path",)),
                           sentinels=self.sentinels.family, device=self.device, prompt_pass="shared")
        got = cache.get(rows, in_chunks(cand_loss, chunk=max(1, 2048 // len(self.candidates))))
        return np.array([got[r["id"]] for r in rows])


def _checkpoint_losses(passes: _LossPasses, compared: _Comparison):
    """(train, control, exposure candidates): per set, one array per checkpoint; the control's loss is its
    checkpoint's at the same step, else the fixed reference model's at every checkpoint."""
    train = {name: [] for name in passes.data}
    control = {name: [] for name in passes.data}
    cand = {name: [] for name in passes.pii_rows if passes.pii_rows[name]}
    reference = (passes.losses_of(Path(compared.reference_model), False)[0]
                 if compared.reference_model is not None else None)
    for ck in compared.checkpoints:
        t, c = passes.losses_of(ck["audited"], True)
        ctrl = passes.losses_of(ck["control"], False)[0] if ck["control"] is not None else reference
        for name in passes.data:
            train[name].append(t[name])
            control[name].append(ctrl[name])
        for name in cand:
            cand[name].append(c[name])
    return train, control, cand


def _dataset_result(name: str, rows: list[dict], sha: str, train: list[np.ndarray], control: list[np.ndarray],
                    tau: float, variant: str) -> tuple[int, list[dict], dict]:
    """(control losses floored, the set's per-string rows, its summary entry) from its losses at every checkpoint."""
    tr, co = np.stack(train), np.stack(control)
    # A control loss can underflow to exactly 0 in float32 (every target token predicted with
    # probability 1.0); Eq. 1-2 divide by it. Raise it to CONTROL_LOSS_FLOOR, where the limit of
    # Eq. 1-2 is the same (memorized only if the audited loss is lower still); counted in the summary.
    n_floored = int(np.sum(co < CONTROL_LOSS_FLOOR))
    co = np.maximum(co, CONTROL_LOSS_FLOOR)
    try:
        m = memorization_measures(tr, co, tau)
    except ValueError as e:
        raise UserError(f"dataset {name}: {e}") from None
    out_rows = [{
        "id": r["id"], "variant": variant,
        "train_loss": _jsonable(tr[:, j]), "control_loss": _jsonable(co[:, j]),
        "optimal_contextual_loss": float(m["optimal_contextual_loss"][j]),
        "onset": {k: int(m[k]["onset"][j]) for k in LOSS_MEASURES},
        "score": {k: _jsonable(m[k]["score"][:, j]) for k in LOSS_MEASURES},
    } for j, r in enumerate(rows)]
    entry = {
        "count": len(rows), "sha256": sha,
        "mean_train_loss": _jsonable(tr.mean(axis=1)), "mean_control_loss": _jsonable(co.mean(axis=1)),
        "measures": {k: {"frac": _jsonable(m[k]["frac"]), "weighted": _jsonable(m[k]["weighted"]),
                         "memorized_ever": int(np.sum(m[k]["onset"] >= 0))} for k in LOSS_MEASURES},
    }
    return n_floored, out_rows, entry


def _exposure_result(cand: list[np.ndarray], pii_rows: list[dict], candidates: list[str]) -> tuple[list[dict], list]:
    """(per positive: its rank and exposure at each checkpoint, the exposure summary per checkpoint)."""
    per_ck = [exp.exposures(L, pii_rows, candidates) for L in cand]
    rows = [{"id": r["id"], "pii_path": r["pii_path"],
             "rank": [per_ck[e][i]["rank"] for e in range(len(cand))],
             "exposure": [per_ck[e][i]["exposure"] for e in range(len(cand))]}
            for i, r in enumerate(pii_rows)]
    return rows, [exp.exposure_summary([x["exposure"] for x in ck_rows], len(candidates)) for ck_rows in per_ck]


def _loss_summary(passes: _LossPasses, settings: LossSettings, compared: _Comparison, train: dict,
                  summary_sets: dict, n_floored: int, seed: int | None) -> dict:
    """summary.json of a loss audit: what was compared, e*, the sets' entries and the provenance."""
    heldout, variant, control_dir, reference_model = (settings.heldout, compared.variant, compared.control_dir,
                                                      compared.reference_model)
    best_epoch = int(np.argmin(np.stack(train[heldout]).mean(axis=1))) if heldout is not None else None
    return {
        "variant": variant,
        "variant_note": (
            "control = the control run's checkpoint at the same step (paper 004 Sec. 3)"
            if variant == VARIANT_CONTROL else
            "control = one fixed reference model at every epoch (paper 004 Sec. 5 proxy): its loss upper-"
            "bounds the optimal contextual recollection only if it never trained on these strings; "
            "counterfactual == contextual here"),
        "audited": str(compared.audited_dir), "control": str(control_dir) if control_dir else None,
        "reference_model": str(reference_model) if reference_model else None,
        "tau": settings.tau, "heldout": heldout, "best_epoch": best_epoch, "control_losses_floored": n_floored,
        "checkpoints": [{"index": i, "step": ck["step"], "epoch": ck["epoch"], "control_step": ck.get("control_step")}
                        for i, ck in enumerate(compared.checkpoints)],
        "n_candidates": len(passes.candidates) if passes.exposed else None,
        "datasets": summary_sets,
        "provenance": provenance(seed=seed, datasets={n: sha for n, (_, sha) in passes.data.items()},
                                 measure="paper004_loss_measures", tau=settings.tau, variant=variant,
                                 fim_family=passes.sentinels.family, cache_version=CACHE_VERSION,
                                 pii_candidates_sha256=(file_sha256(passes.candidates_file or exp.PII_PATHS_FILE)
                                                        if passes.exposed else None)),
    }


@dataclass(frozen=True)
class LossSettings:
    """The loss measures' keys (KEYS) with their defaults, and the scoring knobs they share with the other measures;
    parsed and checked when the audit is planned (harness/audit/command.py), before any model is scored."""

    KEYS: ClassVar[dict[str, str]] = {"tau": "tau", "heldout": "loss_heldout"}

    tau: float = DEFAULT_TAU             # recollection threshold on a string's loss (paper 004 Sec. 3)
    heldout: str | None = "pd_eval"      # held-out set whose lowest mean loss marks e* (paper 004 Fig. 3); None: none
    scoring: AuditSettings = field(default_factory=AuditSettings)

    def __post_init__(self):
        if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)) or not math.isfinite(self.tau) \
                or self.tau <= 0:
            raise UserError(f"audit.tau={self.tau!r}: must be a positive number (the loss below which a string counts "
                            "as recollected; 0.2 is the default)")
        if self.heldout is not None and not isinstance(self.heldout, str):
            raise UserError(f"audit.loss_heldout={self.heldout!r}: name one of the run's datasets (e.g. pd_eval), or "
                            "null")
        object.__setattr__(self, "tau", float(self.tau))     # audit.tau=1 is 1.0, as the summaries record it

    @classmethod
    def from_config(cls, a) -> LossSettings:
        """audit.tau and audit.loss_heldout (a missing key takes its default), checked; errors name the key."""
        return cls(setting(a, cls, "tau"), setting(a, cls, "heldout"), AuditSettings.from_config(a))


def audit_run_losses(cfg, settings: LossSettings, log=print) -> None:
    """Paper 004's loss-based measures for every planned model (`audit.measures` includes `loss`).

    The control run is the plan's control when its checkpoints sit at the same steps as the audited
    model's (paper 004 Sec. 3: same schedule, trained without the strings, e.g. FT.1 vs FT.2);
    otherwise the control's final model serves as the fixed reference of paper 004 Sec. 5, and the
    output is labelled as that upper-bound variant.
    """
    run_dir = Path(cfg.run_dir)
    a = cfg.audit
    by_model: dict[tuple[str, Path, Path], list[str]] = {}
    for item in plan_audits(cfg):
        by_model.setdefault((item.model_name, item.model_dir, item.control_dir), []).append(item.dataset)
    heldout = settings.heldout
    for (name, model_dir, control_dir), datasets in by_model.items():
        sets = {d: data_dir(run_dir, d) for d in datasets}
        if heldout and (data_dir(run_dir, heldout) / "rows.jsonl").is_file():
            sets[heldout] = data_dir(run_dir, heldout)
        steps = list(checkpoint_dirs(model_dir))
        matched = bool(steps) and steps == list(checkpoint_dirs(control_dir))
        log(f"[audit] loss measures for {name}: "
            + (f"control run {control_dir.name} (same checkpoint steps)" if matched
               else f"reference model {control_dir.name} (upper-bound variant: checkpoint steps differ)"))
        audit_losses(model_dir, sets, require_inside(Path(a.out_dir) / "losses" / name, a.out_dir, "audit.out_dir"),
                     replace(settings, heldout=heldout if heldout in sets else None),
                     control_dir=control_dir if matched else None, reference_model=None if matched else control_dir,
                     cache_dir=Path(str(a.cache_dir)), seed=cfg.get("seed"))


MEASURES.register("loss", Measure("Loss measures (paper 004)", audit_run_losses, settings=LossSettings.from_config))
