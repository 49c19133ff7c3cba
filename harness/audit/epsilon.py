"""The one-run ε lower bound over a run (`audit.measures=[..., mia, epsilon]`): for every planned model, checkpoint and
canary dataset whose membership was decided by fair coins (`data.sd.membership=coins`), the ε that the MIA audit's
scores prove at `audit.epsilon_confidence` (memlens.harness.measures.epsilon): Steinke, Nasr & Jagielski 2023's bound,
and beside it Xiang et al. 2025's order-statistics (ε, δ) bound and their μ-GDP bound (with the ε it implies at δ), each
labelled and each its own statement.

It scores nothing itself: it reads the rows the `mia` measure wrote (harness/audit/mia.py,
mia/<model>/<checkpoint>/<dataset>.jsonl: id, member, score[span][attack]), so `mia` must run first
(registration order does that) and be asked for. The attack and span are settings fixed before any score is seen
(`audit.epsilon_attack`, `audit.epsilon_span`): picking the attack that scored best on the same canaries would be a
multiple comparison the bound does not pay for.

On disk, below the run's audit dir (memlens.harness.core.layout.epsilon_dir), written atomically after everything of the
model is computed (a killed run rewrites the same file when rerun):
    epsilon/<model>/summary.json   per checkpoint and dataset: m, r, v, k+, k-, Steinke et al.'s bound, `bounds`
                                   (every method's, labelled, with its own k+, k-, r, v), `doses` (the same per dose
                                   tier, where data.sd.doses dealt each canary a tier before its coin), δ, the rule,
                                   the assumptions, the datasets refused and why, provenance
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.mia import mia_spans
from memlens.harness.audit.plan import plan_audits
from memlens.harness.audit.settings import setting
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, file_sha256, read_json, read_jsonl
from memlens.harness.core.layout import epsilon_dir, mia_dir, require_inside
from memlens.harness.core.provenance import provenance
from memlens.harness.core.user_data import DOSE_IF_MEMBER
from memlens.harness.measures.epsilon import CONFIDENCE, audit_epsilon, guess_counts
from memlens.harness.measures.mia import ATTACKS, MEMBER_PREFIX, NONMEMBER_PREFIX, POPULATION

# The attack inputs made of canaries whose membership the coins decided (an epsilon attack must read none of them).
COIN_CHOSEN_INPUTS = frozenset({POPULATION, NONMEMBER_PREFIX, MEMBER_PREFIX})

TITLE = "Privacy auditing in one run: ε lower bounds (Steinke et al. 2023; Xiang et al. 2025)"
SUMMARY_FILE = "summary.json"
DEFAULT_GUESSES = ((0.05, 0.05), (0.1, 0.1), (0.25, 0.25), (0.5, 0.5))
ASSUMPTIONS = (
    "membership of every canary was decided by an independent fair coin (data.sd.membership=coins), and the "
    "training pipeline saw the canaries only through that decision (Steinke et al. 2023, Algorithm 1)",
    "the guesses depend only on the audited model's scores of the canaries (attack and span fixed in the config "
    "before any score was seen), never on the coins; ties are broken by id",
    "one run: the bound is about this one training pipeline and seed, the privacy unit is one SD.Base program "
    "wherever the pipeline uses it (SFT rows, reward and preference rows, RL prompts built from it)",
    "each (model, checkpoint, dataset) bound is a separate statement at the stated confidence, not a simultaneous "
    "one over checkpoints or models; the guess counts are chosen by the stated rule",
    "where `doses` is given, each dose's bound is one more separate statement over that dose's canaries alone "
    "(their tier dealt before their coins), not corrected for the other doses or the dataset's own bound",
    "a lower bound on ε of the training algorithm at the stated δ: training without differential privacy has no "
    "finite ε, so the number measures how much membership the fixed attack reveals, not a guarantee",
    "three bounds from the same guesses, each a separate statement at the stated confidence (none is the largest "
    "of the others): Steinke et al. 2023; Xiang et al. 2025 order statistics (any (ε, δ)-DP algorithm); Xiang et "
    "al. 2025 μ-GDP: the μ is a lower bound on the pipeline's μ-GDP parameter, the ε beside it (at δ > 0) holds "
    "only if the pipeline's privacy curve is Gaussian (μ-GDP for some μ, as DP-SGD's is nearly); none at δ = 0",
)


@dataclass(frozen=True)
class EpsilonSettings:
    """The audit.epsilon_* keys (KEYS) with their defaults (recorded in every summary: asdict, KEYS is no field);
    parsed and checked when the audit is planned (harness/audit/command.py), before any model is scored."""

    KEYS: ClassVar[dict[str, str]] = {"attack": "epsilon_attack", "span": "epsilon_span", "delta": "epsilon_delta",
                                      "confidence": "epsilon_confidence", "guesses": "epsilon_guesses"}

    attack: str = "loss"
    span: str = "target"
    delta: float = 1e-5
    confidence: float = CONFIDENCE
    guesses: tuple[tuple[float, float], ...] = DEFAULT_GUESSES

    @classmethod
    def from_config(cls, a) -> EpsilonSettings:
        """The audit group's epsilon_* keys (a missing key takes its default), checked; each error names the key and
        the fix."""
        attack = epsilon_attack(a)
        span = setting(a, cls, "span")
        spans = list(mia_spans(a))
        if span not in spans:
            raise UserError(f"audit.epsilon_span={span!r}: use a span the MIA audit scores (audit.mia_spans={spans}), "
                            "or add it to audit.mia_spans")
        delta = _number(a, "delta", 0.0, 1.0, closed_low=True,
                        why="must be a number in [0, 1) (δ of the (ε, δ)-DP claim tested; 1e-5 is the default, "
                            "0 pure DP)")
        confidence = _number(a, "confidence", 0.0, 1.0, closed_low=False, why="must be a number in (0, 1), e.g. 0.95")
        return cls(attack, span, delta, confidence, _guesses(setting(a, cls, "guesses")))


def _number(a, name: str, low: float, high: float, *, closed_low: bool, why: str) -> float:
    value = setting(a, EpsilonSettings, name)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (low <= value if closed_low else low < value) or not value < high:
        raise UserError(f"audit.{EpsilonSettings.KEYS[name]}={value!r}: {why}")
    return float(value)


def _guesses(raw) -> tuple[tuple[float, float], ...]:
    try:
        guesses = tuple((float(p), float(n)) for p, n in raw)
        guess_counts(1, guesses)
        if not guesses:
            raise ValueError
    except (TypeError, ValueError):
        raise UserError(f"audit.epsilon_guesses={raw!r}: give a non-empty list of [k+ share, k- share] pairs of the "
                        "canaries (each in [0, 1], their sum at most 1), e.g. [[0.1, 0.1]] for one fixed choice "
                        "or several for a Bonferroni-corrected choice") from None
    return guesses


def epsilon_attack(a) -> str:
    """audit.epsilon_attack, a registered MIA attack (plugins included); checked even when epsilon is not asked for,
    so that a misspelt name never waits for the run that needs it."""
    attack = setting(a, EpsilonSettings, "attack")
    if attack not in ATTACKS:
        raise UserError(f"audit.epsilon_attack={attack!r}: use one registered MIA attack, fixed before the scores "
                        f"are seen: {', '.join(ATTACKS)}")
    if ATTACKS[attack].needs & COIN_CHOSEN_INPUTS:
        # RMIA's population is the held-out canaries, ReCaLL's and Con-ReCall's prefixes are held-out / planted
        # canaries: the coins chose them, and the bound's guesses must not read the coins (ASSUMPTIONS; Steinke et al.
        # 2023, Algorithm 1). Their shots also get no score of their own, so the bound would fail after the MIA run.
        raise UserError(f"audit.epsilon_attack={attack!r}: its score reads canaries the membership coins chose (a "
                        "population or prefix of held-out or planted canaries), so its guesses would depend on the "
                        "coins and the one-run bound would not hold; use an attack of the model's scores alone, e.g. "
                        "loss or reference")
    return attack


def epsilon_settings(a) -> EpsilonSettings:
    """The audit group's epsilon_* keys, checked (EpsilonSettings.from_config)."""
    return EpsilonSettings.from_config(a)


def require_mia(measures) -> None:
    """`epsilon` reads the rows `mia` writes: it must be asked for with it."""
    measures = [measures] if isinstance(measures, str) else list(measures or [])
    if "mia" not in measures:
        raise UserError(f"audit.measures={measures}: epsilon reads the membership-inference scores; add mia "
                        "(e.g. audit.measures=[ned,mia,epsilon])")


def _refusal(entry: dict, mia_sha: dict, dataset: str) -> str | None:
    """Why a dataset's MIA scores cannot give a bound (None when they can): its membership was not decided by coins,
    or its rows changed after `mia` scored them."""
    for role, key in (("members", "members_file"), ("nonmembers", "nonmembers_file")):
        manifest_path = Path(entry[key]).parent / "manifest.json"
        manifest = read_json(manifest_path) if manifest_path.is_file() else {}
        membership = manifest.get("membership", "split")
        if membership != "coins":
            return (f"{manifest_path.parent.name}: membership {membership}, not decided by fair coins; build SD with "
                    "data.sd.membership=coins (SD.Links keeps its split and is never audited for ε)")
        if manifest.get("sha256") != mia_sha.get(f"{dataset}:{role}"):
            return (f"{manifest_path.parent.name}: rebuilt after the MIA audit scored it; rerun "
                    "audit.measures=[mia,epsilon]")
    return None


def bound_of_rows(rows: list[dict], s: EpsilonSettings, where: Path) -> dict:
    """The ε lower bounds (audit_epsilon) of MIA rows whose membership coins decided: each row's `s.span` / `s.attack`
    score, every row counted; `where` names the rows' file in the error when a score is missing."""
    scores = []
    for r in rows:
        value = ((r.get("score") or {}).get(s.span) or {}).get(s.attack)
        if value is None:
            raise UserError(f"{where}: no {s.span}/{s.attack} score (row {r.get('id')!r}); the attack needs a control "
                            "or was not registered when mia ran: rerun mia, or pick another audit.epsilon_attack")
        scores.append(float(value))
    ids, members = [str(r["id"]) for r in rows], [int(r["member"]) for r in rows]
    return audit_epsilon(ids, scores, members, guess_counts(len(rows), s.guesses), s.delta, s.confidence)


def dose_of_row(row: dict) -> int | None:
    """A canary's dose tier: a member's `repeat`, a held-out canary's DOSE_IF_MEMBER (None where it has neither)."""
    value = row.get("repeat", row.get(DOSE_IF_MEMBER))
    return None if value is None else int(value)


def bounds_by_dose(rows: list[dict], s: EpsilonSettings, where: Path) -> dict[str, dict]:
    """{dose: the bounds of that tier's canaries} where every canary carries a tier dealt before its coin
    (data.sd.doses under coins: members and held-out canaries alike) and there are two tiers or more; {} otherwise.
    A tier's canaries are split by the coins alone, so each tier's bound is its own one-run statement (Steinke et al.
    2023, Algorithm 1, on that subset of canaries); tiers known for the members only (doses under split) would let
    the coins choose which canaries are counted, and get none."""
    doses = [dose_of_row(r) for r in rows]
    if None in doses or len(set(doses)) < 2:
        return {}
    return {str(t): bound_of_rows([r for r, d in zip(rows, doses) if d == t], s, where) for t in sorted(set(doses))}


def epsilon_of_model(audit_dir: Path, model_name: str, s: EpsilonSettings, log=print) -> dict | None:
    """Bounds of every checkpoint and dataset the MIA audit scored for one model; written to
    epsilon/<model>/summary.json. None (nothing written) when mia left no summary for the model."""
    mia_summary_path = mia_dir(audit_dir, model_name) / "summary.json"
    if not mia_summary_path.is_file():
        log(f"[audit] note: epsilon for {model_name}: no MIA summary ({mia_summary_path}); nothing to bound")
        return None
    mia = read_json(mia_summary_path)
    mia_sha = (mia.get("provenance") or {}).get("datasets") or {}
    results: dict = {}
    refused: dict[str, str] = {}
    rows_sha: dict[str, str] = {}
    for checkpoint in mia["checkpoints"]:
        for dataset, entry in (mia["results"].get(checkpoint) or {}).items():
            reason = refused.get(dataset) or _refusal(entry, mia_sha, dataset)
            if reason:
                refused[dataset] = reason
                continue
            path = mia_dir(audit_dir, model_name) / checkpoint / f"{dataset}.jsonl"
            rows = read_jsonl(path)
            bound = bound_of_rows(rows, s, path)
            if by_dose := bounds_by_dose(rows, s, path):
                bound["doses"] = by_dose
            results.setdefault(checkpoint, {})[dataset] = bound
            rows_sha[f"{checkpoint}/{dataset}"] = file_sha256(path)
    for dataset, reason in refused.items():
        log(f"[audit] note: epsilon for {model_name} refuses {dataset}: {reason}")
    summary = {"model": model_name, "checkpoints": [c for c in mia["checkpoints"] if c in results],
               "settings": {**asdict(s), "guesses": [list(g) for g in s.guesses]},
               "score_source": f"mia/{model_name}/<checkpoint>/<dataset>.jsonl: score[{s.span}][{s.attack}]",
               "assumptions": list(ASSUMPTIONS), "results": results, "refused": refused,
               "provenance": provenance(datasets=mia_sha, mia_rows=rows_sha, measure="epsilon_one_run",
                                        method="Steinke, Nasr & Jagielski 2023, arXiv 2305.08846; Xiang, Wang, "
                                               "Xiao, Tian & Wang 2025, arXiv 2509.08704")}
    out = require_inside(epsilon_dir(audit_dir, model_name) / SUMMARY_FILE, audit_dir, "audit.out_dir")
    atomic_write_json(out, summary)
    return summary


def audit_epsilon_models(cfg, models: list[str], log=print, settings: EpsilonSettings | None = None) -> None:
    """The measure's body for the run's planned `models` (audit_run_epsilon below hands them over with the settings
    parsed when the audit was planned; None parses them here)."""
    a = cfg.audit
    require_mia(a.get("measures"))
    s = settings or EpsilonSettings.from_config(a)
    audit_dir = Path(str(a.out_dir))
    bounded = 0
    for name in models:
        summary = epsilon_of_model(audit_dir, name, s, log)
        if summary is None:
            continue
        for checkpoint, by_dataset in summary["results"].items():
            for dataset, r in by_dataset.items():
                bounded += 1
                if checkpoint == summary["checkpoints"][-1]:
                    log(f"[audit] epsilon {name} {checkpoint} on {dataset}: {r['v']}/{r['r']} right guesses of "
                        f"m={r['m']} -> ε >= {r['epsilon_lower_bound']:.3f} (δ={s.delta:g}, "
                        f"{100 * s.confidence:g} %) by Steinke 2023{_xiang_note(r)}")
                    for dose, d in (r.get("doses") or {}).items():
                        log(f"[audit] epsilon {name} {checkpoint} on {dataset}, dose {dose}: {d['v']}/{d['r']} of "
                            f"m={d['m']} -> ε >= {d['epsilon_lower_bound']:.3f} by Steinke 2023")
    if not bounded:
        raise UserError("audit.measures includes epsilon but every planned dataset was refused (the notes above say "
                        "why): build SD with data.sd.membership=coins and rerun the pipeline and mia, or drop epsilon "
                        "from audit.measures")


def _xiang_note(r: dict) -> str:
    """The Xiang et al. 2025 bounds for the log line ('' for a summary written before they were computed)."""
    b = r.get("bounds")
    if not b:
        return ""
    gdp = b["xiang2025_gdp"]
    eps = "no ε at δ=0" if gdp["epsilon_lower_bound"] is None else f"ε >= {gdp['epsilon_lower_bound']:.3f}"
    return (f"; ε >= {b['xiang2025_order_statistics']['epsilon_lower_bound']:.3f} by Xiang 2025 order statistics; "
            f"μ >= {gdp['mu_lower_bound']:.3f}, {eps} by Xiang 2025 μ-GDP")


STEINKE_COLUMN = "ε lower bound (Steinke 2023)"
XIANG_COLUMNS = {"ε lower bound (Xiang 2025 order statistics)": ("xiang2025_order_statistics", "epsilon_lower_bound"),
                 "μ lower bound (Xiang 2025 μ-GDP)": ("xiang2025_gdp", "mu_lower_bound"),
                 "ε lower bound (Xiang 2025 μ-GDP)": ("xiang2025_gdp", "epsilon_lower_bound")}


def _rounded(value):
    return None if value is None else round(value, 3)


def _report_row(model: str, checkpoint: str, dataset: str, r: dict, dose: str) -> dict:
    """One row of the report's table: a dataset's bounds over all its canaries (dose "all") or one dose tier's."""
    bounds = r.get("bounds") or {}
    return {"model": model, "checkpoint": checkpoint, "dataset": dataset, "dose": dose, "m": r["m"],
            "guesses r": r["r"], "correct v": r["v"], "ε lower bound": round(r["epsilon_lower_bound"], 3),
            **{c: _rounded((bounds.get(method) or {}).get(key)) for c, (method, key) in XIANG_COLUMNS.items()},
            "δ": r["delta"]}


def report_rows(audit_dir: Path) -> tuple[list[str], list[dict]] | None:
    """(columns, rows) of every model's bounds for the report: one row per model, checkpoint and dataset, Steinke et
    al.'s bound (r and v are its guesses) and beside it Xiang et al.'s, each labelled (each method takes its own
    best candidate: summary.json's `bounds` says which). Summaries written before the Xiang bounds were computed
    give the former table (its "ε lower bound" column); mixed with newer ones, their Xiang cells are empty. A model
    whose MIA results were retired (a retrained stage moved them to stale/) is left out: its bounds are stale. Where a
    dataset has bounds per dose (bounds_by_dose), a `dose` column says "all" or the tier, a row each."""
    root = epsilon_dir(audit_dir)
    if not root.is_dir():
        return None
    rows, labelled, dosed = [], False, False
    for path in sorted(root.rglob(SUMMARY_FILE)):
        record = read_json(path)
        model = record["model"]
        if not (mia_dir(audit_dir, model) / "summary.json").is_file():
            continue
        for checkpoint in record["checkpoints"]:
            for dataset, r in sorted(record["results"][checkpoint].items()):
                labelled = labelled or bool(r.get("bounds"))
                by_dose = sorted((r.get("doses") or {}).items(), key=lambda item: int(item[0]))
                dosed = dosed or bool(by_dose)
                rows += [_report_row(model, checkpoint, dataset, entry, dose)
                         for dose, entry in [("all", r), *by_dose]]
    columns = ["model", "checkpoint", "dataset", "m", "guesses r", "correct v", "ε lower bound", "δ"]
    if dosed:
        columns.insert(3, "dose")
    else:
        rows = [{k: v for k, v in row.items() if k != "dose"} for row in rows]
    if labelled:
        at = columns.index("ε lower bound")
        columns[at:at + 1] = [STEINKE_COLUMN, *XIANG_COLUMNS]
        rows = [{(STEINKE_COLUMN if k == "ε lower bound" else k): v for k, v in row.items()} for row in rows]
    else:
        rows = [{k: v for k, v in row.items() if k not in XIANG_COLUMNS} for row in rows]
    return (columns, rows) if rows else None


def audit_run_epsilon(cfg, settings: EpsilonSettings, log=print) -> None:
    """One-run ε lower bounds (harness/audit/epsilon.py) from the MIA rows of every planned model; after mia."""
    audit_epsilon_models(cfg, list(dict.fromkeys(p.model_name for p in plan_audits(cfg))), log, settings)


MEASURES.register("epsilon", Measure(TITLE, audit_run_epsilon, report_rows=report_rows,
                                     settings=EpsilonSettings.from_config,
                                     check=lambda cfg: require_mia(cfg.audit.get("measures"))))
