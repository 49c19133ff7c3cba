"""Membership of preference pairs (`audit.measures=[...,pair_mia]`): for every checkpoint of each planned model that a
preference stage trained (IPO, DPO and the other objectives of memlens.harness.core.objectives), how well PREMIA
(memlens.harness.measures.preference_mia; Feng et al. 2024, arXiv 2407.06443, Sec. 4) tells the pairs the stage
trained on (its provenance's pair datasets, e.g. pairs_sd_base) from pairs built the same way from the held-out
programs (`<dataset>_heldout`, synthetic_data/build.py `heldout_pairs`), which no stage saw.

The reference of PREMIA's ratios is the stage's initial model (provenance.json `init_model`: the checkpoint the stage
started from and regularised towards). Each model's per-token log-probs of every chosen and rejected completion given
its PSM prompt come from the model layer's one teacher-forced pass through its cache (cached_token_logprobs, span
"target": the extraction audit's encoding), so the reference is scored once per run and a rerun loads no weights.
The blind baseline (memlens.harness.measures.blind_mia) reads the pair texts alone, once per dataset.

On disk, below the run's audit dir (memlens.harness.core.layout.pair_mia_dir):
    pair_mia/<model>/<checkpoint>/<dataset>.jsonl   one row per pair: id, member (1/0), score {attack: value},
                                                    logp {chosen, rejected, ref_chosen, ref_rejected} (summed), blind
    pair_mia/<model>/summary.json                   per checkpoint and dataset: each attack's AUC and TPR at FPR < 1 % /
                                                    < 0.1 % with bootstrap 95 % intervals, `degenerate`, `vs_blind`;
                                                    with pairs planted at several doses, `tiers` (the same per dose)
                                                    and `dose_trend` (per attack, scores against dose);
                                                    `blind`: {dataset: the blind baseline's metrics}
    pair_mia/summary.json                           every model's summary (the report reads this one)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.mia import _checkpoint_order, cached_blind_baseline
from memlens.harness.audit.plan import PROVENANCE_FILE, plan_audits
from memlens.harness.audit.settings import AuditSettings, list_checkpoints, setting
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256, read_json, read_jsonl
from memlens.harness.core.layout import (
    MIA_SUMMARY,
    PAIR_HELDOUT_BUILT,
    data_dir,
    heldout_dataset,
    models_dir,
    pair_mia_dir,
    require_inside,
)
from memlens.harness.core.objectives import is_preference_stage, recorded_objective
from memlens.harness.core.provenance import provenance
from memlens.harness.core.stats import (
    BOOTSTRAP_N,
    BOOTSTRAP_SEED,
    MIA_FPRS,
    TPR_AT_FPR_RULE,
    fpr_key,
    jonckheere_trend_test,
    min_nonmembers,
    paired_auc_difference,
)
from memlens.harness.measures.blind_mia import BLIND, BLIND_LABEL, BLIND_RULE
from memlens.harness.measures.mia import attack_metrics, degenerate_reasons, is_degenerate
from memlens.harness.measures.preference_mia import (
    PAIR_ATTACKS,
    PAIR_TEXT_RULE,
    PRIMARY_PAIR_ATTACK,
    PairLogprobs,
    pair_attack_label,
    pair_scores,
    pair_text,
)
from memlens.harness.model.cache import CACHE_VERSION, cached_token_logprobs
from memlens.harness.model.load import model_sentinels, pick_device, set_threads
from memlens.harness.model.scorer import CausalLMScorer

NAME = "pair_mia"
TITLE = "Membership of preference pairs (PREMIA)"
PAIR_FIELDS = ("id", "prefix", "suffix", "chosen", "rejected")
SIDES = ("chosen", "rejected")


def completion_rows(pairs: list[dict], side: str) -> list[dict]:
    """The pairs as FIM rows whose target is one side's completion: what the one teacher-forced pass scores (the
    preference stage's prompt is the same PSM prompt of prefix and suffix; recipes/stages/preference.py)."""
    return [{"id": r["id"], "prefix": r["prefix"], "suffix": r["suffix"], "target": r[side]} for r in pairs]


def _pair_values(model_dir: Path, sets: dict[str, list[dict]], cache_dir: Path, device: str, batch_size: int,
                 fim_family: str | None) -> dict[str, dict[str, dict]]:
    """{set: {side: {id: per-token values}}} of one model directory; weights loaded on a cache miss only."""
    scorer = CausalLMScorer.load(model_dir, device, batch_size=batch_size, lazy=True)
    sentinels = model_sentinels(model_dir, fim_family)
    out = {key: {side: cached_token_logprobs(scorer, completion_rows(rows, side), sentinels, cache_dir, "target")
                 for side in SIDES} for key, rows in sets.items()}
    scorer.release()
    return out


def score_pairs(rows: list[dict], member: int, policy: dict, reference: dict, blind: dict | None) -> list[dict]:
    """One output row per pair: every pair attack's score, the four summed log-probs, the blind baseline's score."""
    out = []
    for r in rows:
        p = PairLogprobs.of(policy["chosen"][r["id"]], policy["rejected"][r["id"]], reference["chosen"][r["id"]],
                            reference["rejected"][r["id"]])
        row = {"id": r["id"], "member": member, "score": pair_scores(p),
               "logp": {"chosen": p.chosen, "rejected": p.rejected, "ref_chosen": p.ref_chosen,
                        "ref_rejected": p.ref_rejected}}
        if blind is not None:
            row[BLIND] = blind[r["id"]]
        if "repeat" in r:
            row["repeat"] = int(r["repeat"])
        out.append(row)
    return out


def membership_metrics(rows: list[dict], attacks: list[str], n_boot: int, seed: int) -> dict:
    """{attack: metrics} of one checkpoint and dataset of a membership measure (pairs or prompts): the target MIA's
    metrics (attack_metrics, the n/m rule included), why an attack is degenerate here, and `vs_blind`, its paired AUC
    gain over the blind baseline on the same texts (where every row has a blind score)."""
    blind = None
    if rows and all(BLIND in r for r in rows):
        blind = ([r[BLIND] for r in rows if r["member"] == 1], [r[BLIND] for r in rows if r["member"] == 0])
    out = {}
    for attack in attacks:
        members = [r["score"][attack] for r in rows if r["member"] == 1]
        nonmembers = [r["score"][attack] for r in rows if r["member"] == 0]
        metrics = attack_metrics(members, nonmembers, n_boot=n_boot, seed=seed)
        metrics["degenerate"] = degenerate_reasons(members, nonmembers, metrics)
        if blind is not None:
            metrics["vs_blind"] = paired_auc_difference(members, nonmembers, *blind, n_boot=n_boot, seed=seed)
        out[attack] = metrics
    return out


def pair_metrics(rows: list[dict], n_boot: int, seed: int) -> dict:
    """membership_metrics of every pair attack."""
    return membership_metrics(rows, list(PAIR_ATTACKS), n_boot, seed)


def dose_tiers(rows: list[dict], attacks: list[str], n_boot: int, seed: int) -> dict:
    """Where the member pairs were planted at two or more doses (data.sd.doses: each pair's `repeat`): `tiers`, each
    dose's members against every held-out pair (membership_metrics; as the MIA audit's tiers), and `dose_trend`, per
    attack the one-sided Jonckheere-Terpstra test that the members' scores rise with the dose (finding D4). {} for a
    single dose."""
    doses = sorted({r["repeat"] for r in rows if r["member"] == 1 and "repeat" in r})
    if len(doses) < 2:
        return {}
    tiers = {str(d): membership_metrics([r for r in rows if r["member"] == 0 or r.get("repeat") == d], attacks,
                                        n_boot, seed) for d in doses}
    trend = {a: jonckheere_trend_test({d: [r["score"][a] for r in rows if r["member"] == 1 and r.get("repeat") == d]
                                       for d in doses}) for a in attacks}
    return {"tiers": tiers, "dose_trend": trend}


def blind_of(members: list[dict], nonmembers: list[dict], text_of, n_boot: int, seed: int,
             cache_dir: Path | None = None) -> tuple[dict | None, dict | None]:
    """(the blind baseline's metrics, {id: its out-of-fold score}) on the texts `text_of(row)` gives, or (None, None)
    where a side is too small for it; stored in `cache_dir` (harness/audit/mia.py cached_blind_baseline)."""
    found = cached_blind_baseline([text_of(r) for r in members], [text_of(r) for r in nonmembers], n_boot, seed,
                                  cache_dir)
    if found is None:
        return None, None
    ids = [r["id"] for r in members + nonmembers]
    return found["metrics"], dict(zip(ids, [*found["scores"][0], *found["scores"][1]]))


def _blind_of(members: list[dict], nonmembers: list[dict], n_boot: int, seed: int,
              cache_dir: Path | None = None) -> tuple[dict | None, dict | None]:
    """The blind baseline on the pair texts (pair_text)."""
    return blind_of(members, nonmembers, pair_text, n_boot, seed, cache_dir)


def _load_pairs(pairs: dict[str, tuple[Path, Path]]) -> tuple[dict[str, list[dict]], dict[str, str]]:
    data, sha = {}, {}
    for dataset, (members_path, nonmembers_path) in pairs.items():
        for role, path in (("members", members_path), ("nonmembers", nonmembers_path)):
            data[f"{dataset}:{role}"] = read_jsonl(path, required=PAIR_FIELDS)
            sha[f"{dataset}:{role}"] = file_sha256(path)
        clash = {r["id"] for r in data[f"{dataset}:members"]} & {r["id"] for r in data[f"{dataset}:nonmembers"]}
        if clash:
            raise UserError(f"{nonmembers_path}: ids {sorted(clash)[:3]} are also member pairs ({members_path}); "
                            "held-out pairs must be pairs no stage trained on")
    return data, sha


def audit_pair_mia(model_dir: str | Path, model_name: str, pairs: dict[str, tuple[Path, Path]],
                   reference_dir: str | Path, out_dir: str | Path, *, cache_dir: str | Path | None = None,
                   all_checkpoints: bool = True, n_boot: int = BOOTSTRAP_N, seed: int = BOOTSTRAP_SEED,
                   batch_size: int = 16, device: str = "auto", fim_family: str | None = None,
                   objective: str | None = None, checkpoints: list[tuple[str, Path]] | None = None,
                   log=print) -> dict:
    """Score every checkpoint of `model_dir` (then its final model) on each dataset of `pairs` ({dataset: (member
    pairs, held-out pairs)}) against `reference_dir`, the stage's initial model; write rows and
    `<out_dir>/summary.json` (everything computed first, the summary last); return the summary.
    `checkpoints`: (name, directory) to score instead, added to the results the summary already holds when they were
    computed the same way (memlens.AuditCallback scores each checkpoint as the trainer saves it)."""
    out_dir = Path(out_dir)
    device = pick_device(device)
    cache_dir = Path(cache_dir) if cache_dir is not None else out_dir / "cache"
    data, sha = _load_pairs(pairs)
    blind, blind_scores = {}, {}
    for dataset in pairs:
        blind[dataset], blind_scores[dataset] = _blind_of(data[f"{dataset}:members"], data[f"{dataset}:nonmembers"],
                                                          n_boot, seed, cache_dir)
    reference = _pair_values(Path(reference_dir), data, cache_dir, device, batch_size, fim_family)
    outputs: dict[Path, list[dict]] = {}
    results: dict = {}
    earlier = _earlier_pair_results(out_dir, reference_dir, n_boot, seed, sha) if checkpoints is not None else {}
    for checkpoint, path in checkpoints if checkpoints is not None else list_checkpoints(model_dir, all_checkpoints):
        policy = _pair_values(path, data, cache_dir, device, batch_size, fim_family)
        for dataset in pairs:
            rows = []
            for role, member in (("members", 1), ("nonmembers", 0)):
                key = f"{dataset}:{role}"
                rows += score_pairs(data[key], member, policy[key], reference[key], blind_scores[dataset])
            outputs[require_inside(out_dir / checkpoint / f"{dataset}.jsonl", out_dir, "audit.out_dir")] = rows
            results.setdefault(checkpoint, {})[dataset] = {
                "n_members": len(data[f"{dataset}:members"]), "n_nonmembers": len(data[f"{dataset}:nonmembers"]),
                "members_file": str(pairs[dataset][0]), "nonmembers_file": str(pairs[dataset][1]),
                "attacks": pair_metrics(rows, n_boot, seed), **dose_tiers(rows, list(PAIR_ATTACKS), n_boot, seed)}
    results = {**{c: r for c, r in earlier.items() if c not in results}, **results}
    summary = {
        "model": model_name, "model_dir": str(model_dir), "reference": str(reference_dir), "objective": objective,
        "checkpoints": sorted(results, key=_checkpoint_order), "attacks": list(PAIR_ATTACKS),
        "attack_labels": {a: pair_attack_label(a) for a in PAIR_ATTACKS}, "primary_attack": PRIMARY_PAIR_ATTACK,
        "fprs": list(MIA_FPRS), "tpr_at_fpr_rule": TPR_AT_FPR_RULE, "pair_text_rule": PAIR_TEXT_RULE,
        "blind_rule": BLIND_RULE, BLIND: blind, "bootstrap": {"n": n_boot, "seed": seed},
        "score_convention": "higher = member; AUC 0.5 = chance", "results": results,
        "provenance": provenance(seed=seed, datasets=sha, measure="preference_pair_membership_inference",
                                 cache_version=CACHE_VERSION, reference=str(reference_dir)),
    }
    for path, rows in outputs.items():
        atomic_write_jsonl(path, rows)
    atomic_write_json(out_dir / "summary.json", summary)
    return summary


def _earlier_pair_results(out_dir: Path, reference_dir, n_boot: int, seed: int, sha: dict[str, str]) -> dict:
    """The per-checkpoint results of `<out_dir>/summary.json` when they were computed the same way on the same pairs
    (reference, attacks, bootstrap, pair texts, blind baseline, the pair files' sha256), else none: a summary only
    ever joins results of one method on one data."""
    path = out_dir / "summary.json"
    if not path.is_file():
        return {}
    old = read_json(path)
    same = (old.get("reference") == str(reference_dir) and old.get("attacks") == list(PAIR_ATTACKS)
            and old.get("bootstrap") == {"n": n_boot, "seed": seed} and old.get("pair_text_rule") == PAIR_TEXT_RULE
            and old.get("blind_rule") == BLIND_RULE and (old.get("provenance") or {}).get("datasets") == sha)
    return dict(old.get("results") or {}) if same else {}


def collect_summaries(root: Path) -> dict:
    """`<root>/summary.json`: {"results": {model: its summary}} from every per-model summary below `root` (the pair and
    the prompt membership measures alike)."""
    models = {}
    for path in sorted(root.rglob("summary.json")):
        if path != root / MIA_SUMMARY:
            record = read_json(path)
            models[record.get("model") or str(path.parent.relative_to(root))] = record
    record = {"results": models}
    atomic_write_json(root / MIA_SUMMARY, record)
    return record


def collect_pair_summaries(audit_dir: str | Path) -> dict:
    """`<audit dir>/pair_mia/summary.json`: {"results": {model: its summary}} from every per-model summary."""
    return collect_summaries(pair_mia_dir(audit_dir))


@dataclass(frozen=True)
class PreferenceModel:
    """A planned model a preference stage trained, with what the pair audit needs from its provenance."""

    name: str
    model_dir: Path
    all_checkpoints: bool
    reference_dir: Path          # the stage's initial model
    pairs: dict[str, tuple[Path, Path]]
    objective: str


def init_model_dir(run_dir: Path, recorded: str) -> Path | None:
    """The directory of a stage's initial model as provenance.json recorded it: the path itself, or, for a run that
    was moved or recorded a relative path, the same model below this run's models/ (None where neither exists)."""
    if not recorded:
        return None
    path = Path(recorded)
    if path.is_dir():
        return path
    parts = path.parts
    if "models" in parts:
        moved = models_dir(run_dir).joinpath(*parts[len(parts) - parts[::-1].index("models"):])
        if moved.is_dir():
            return moved
    return None


def preference_models(cfg, log=print) -> list[PreferenceModel]:
    """The planned models a preference stage trained on SD pairs whose held-out twins are built in the run."""
    run_dir = Path(cfg.run_dir)
    seen: dict[str, PreferenceModel] = {}
    for item in plan_audits(cfg):
        prov_path = item.model_dir / PROVENANCE_FILE
        if item.model_name in seen or not prov_path.is_file():
            continue
        prov = read_json(prov_path)
        if not is_preference_stage(prov.get("stage")):
            continue
        pairs = {}
        for dataset in prov.get("datasets") or {}:
            held = heldout_dataset(dataset)
            rows = data_dir(run_dir, held) / "rows.jsonl"
            if held in PAIR_HELDOUT_BUILT and rows.is_file():
                pairs[dataset] = (data_dir(run_dir, dataset) / "rows.jsonl", rows)
        reference = init_model_dir(run_dir, str(prov.get("init_model") or ""))
        if not pairs or reference is None:
            log(f"[audit] note: pair membership skips {item.model_name}: "
                + ("its initial model's directory is gone" if pairs else
                   f"none of its pair datasets has a held-out twin built ({', '.join(PAIR_HELDOUT_BUILT)})"))
            continue
        hyper = prov.get("hyperparameters") or {}
        seen[item.model_name] = PreferenceModel(item.model_name, item.model_dir, item.all_checkpoints, reference,
                                                pairs, recorded_objective(hyper))
    return list(seen.values())


@dataclass(frozen=True)
class PairMiaSettings:
    """pair_mia's settings: its bootstrap is the target MIA's key (audit.mia_bootstrap: one interval method for both
    tables), and the scoring knobs every measure shares; parsed when the audit is planned (harness/audit/command.py)."""

    KEYS: ClassVar[dict[str, str]] = {"bootstrap": "mia_bootstrap"}

    bootstrap: int = BOOTSTRAP_N             # resamples of each AUC / TPR interval
    scoring: AuditSettings = field(default_factory=AuditSettings)

    def __post_init__(self):
        if isinstance(self.bootstrap, bool) or not isinstance(self.bootstrap, int) or self.bootstrap < 1:
            raise UserError(f"audit.mia_bootstrap={self.bootstrap!r}: must be a positive integer (bootstrap resamples "
                            f"of each interval; {BOOTSTRAP_N} is the default)")

    @classmethod
    def from_config(cls, a) -> PairMiaSettings:
        return cls(setting(a, cls, "bootstrap"), AuditSettings.from_config(a))


def audit_run_pair_mia(cfg, settings: PairMiaSettings, log=print) -> None:
    """Preference-pair membership for every planned model a preference stage trained (`audit.measures` includes
    pair_mia; `settings` parsed when the audit was planned)."""
    a = cfg.audit
    scoring = settings.scoring
    if scoring.threads:
        set_threads(scoring.threads)
    models = preference_models(cfg, log)
    if not models:
        log("[audit] note: pair membership scored nothing: no planned model was trained by a preference stage on "
            "pairs whose held-out twins are built (pairs_sd_base_heldout, pairs_sd_links_heldout)")
        return
    for m in models:
        log(f"[audit] preference-pair membership for {m.name}: {', '.join(m.pairs)} against their held-out pairs, "
            f"reference {m.reference_dir.name}")
        audit_pair_mia(m.model_dir, m.name, m.pairs, m.reference_dir,
                       require_inside(pair_mia_dir(a.out_dir, m.name), a.out_dir, "audit.out_dir"),
                       cache_dir=Path(str(a.cache_dir)), all_checkpoints=m.all_checkpoints,
                       n_boot=settings.bootstrap, seed=int(cfg.get("seed") or 0), batch_size=scoring.batch_size,
                       device=scoring.device, fim_family=scoring.fim_family, objective=m.objective, log=log)
    collect_pair_summaries(a.out_dir)


def _tpr_cell(m: dict, fpr: float) -> object:
    """A TPR at FPR < `fpr` as the target MIA table shows it, or "n/m" where that FPR does not exist at this many
    held-out pairs (memlens.harness.core.stats.fpr_measurable)."""
    entry = m.get(fpr_key(fpr)) or {}
    if not entry.get("measurable", True):
        return f"n/m: needs ≥ {min_nonmembers(fpr):,} held out"
    return round(entry["value"], 3)


def _tpr_ci(m: dict, fpr: float) -> str | None:
    entry = m.get(fpr_key(fpr)) or {}
    return _ci(entry.get("ci95")) if entry.get("measurable", True) else None


def _ci(interval) -> str | None:
    return None if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def _table_row(model: str, dataset: str, checkpoint: str, rank: int | None, label: str, m: dict) -> dict:
    gain = m.get("vs_blind") or {}
    return {"model": model, "dataset": dataset, "checkpoint": checkpoint, "rank": rank, "attack": label,
            "AUC": round(m["auc"]["value"], 3), "AUC 95 % CI": _ci(m["auc"]["ci95"]),
            "TPR at 1 % FPR": _tpr_cell(m, MIA_FPRS[0]), "TPR 95 % CI": _tpr_ci(m, MIA_FPRS[0]),
            "AUC vs blind": None if not gain else round(gain["value"], 3), "vs blind 95 % CI": _ci(gain.get("ci95")),
            "members / held out": f"{m['n_members']} / {m['n_nonmembers']}",
            "degenerate": "; ".join(m.get("degenerate") or []) or None}


COLUMNS = ["model", "dataset", "checkpoint", "rank", "attack", "AUC", "AUC 95 % CI", "TPR at 1 % FPR",
           "TPR 95 % CI", "AUC vs blind", "vs blind 95 % CI", "members / held out", "degenerate"]


def final_checkpoint_rows(summary_path: Path, label_of) -> tuple[list[str], list[dict]] | None:
    """(columns, rows) of a membership measure's summary (pair or prompt): per model and dataset, the final
    checkpoint's rows: the blind baseline's first (no model, unranked), then each attack ranked by AUC (degenerate ones
    unranked, with why); `label_of(attack)` names an attack."""
    if not summary_path.is_file():
        return None
    rows = []
    for model, record in sorted((read_json(summary_path).get("results") or {}).items()):
        last = (record.get("checkpoints") or [None])[-1]
        for dataset, entry in sorted(((record.get("results") or {}).get(last) or {}).items()):
            blind = (record.get(BLIND) or {}).get(dataset)
            if blind:
                rows.append(_table_row(model, dataset, last, None, BLIND_LABEL, blind))
            attacks = entry["attacks"]
            ranked = sorted((a for a in attacks if not is_degenerate(attacks[a])),
                            key=lambda a: -attacks[a]["auc"]["value"])
            rows += [_table_row(model, dataset, last, rank, label_of(a), attacks[a])
                     for rank, a in enumerate(ranked, start=1)]
            rows += [_table_row(model, dataset, last, None, label_of(a), attacks[a])
                     for a in attacks if is_degenerate(attacks[a])]
    return (COLUMNS, rows) if rows else None


def report_rows(audit_dir: Path) -> tuple[list[str], list[dict]] | None:
    """The report's pair-membership table (final_checkpoint_rows of pair_mia/summary.json)."""
    return final_checkpoint_rows(pair_mia_dir(audit_dir) / MIA_SUMMARY, pair_attack_label)


MEASURES.register(NAME, Measure(TITLE, audit_run_pair_mia, report_rows=report_rows,
                                settings=PairMiaSettings.from_config,
                                membership_of="preference pairs, what an IPO / DPO-family stage trains on"))
