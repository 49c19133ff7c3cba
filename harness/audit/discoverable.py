"""Probabilistic discoverable extraction over a run (`audit.measures=[ned, ..., discoverable]`): for every
checkpoint the extraction audit scored, the probability that each decoding scheme completes each example's
prompt with exactly its compared target, for the audited model and the plan's control, and the rates of
(n, p)-discoverable targets (Hayes et al. 2024; memlens.harness.measures.discoverable) beside the greedy NED rate.

It reads the extraction audit's rows (memlens.harness.audit.run): the same examples, the same exclusions (short
target, target in prompt, prompt too long) and the same compared target (its first audit.target_tokens
tokens), so the two rates are over the same n. The log-probabilities come from one teacher-forced pass per
model through the model layer's cache (memlens.harness.model.cache.cached_scheme_logprobs): a killed audit resumes,
a rerun loads no weights. Everything else is recomputed and written atomically, summary last.

On disk, below the run's audit dir (memlens.harness.core.layout.discoverable_dir):
    discoverable/<model>/<checkpoint>/<dataset>.jsonl   per scored example: id, logp and control_logp per
                                                        scheme (null = probability 0: JSON has no -inf)
    discoverable/summary.json                           every model's rates, the settings and provenance
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.plan import plan_audits
from memlens.harness.audit.run import META_SUFFIX, rows_path
from memlens.harness.audit.settings import AuditSettings, list_checkpoints, setting
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import RowStore, atomic_write_json, atomic_write_jsonl, read_json
from memlens.harness.core.layout import discoverable_dir, require_inside
from memlens.harness.core.provenance import provenance
from memlens.harness.core.stats import rate_with_interval
from memlens.harness.measures.discoverable import discoverable_rates, stored_logp
from memlens.harness.model.cache import CACHE_VERSION, cached_scheme_logprobs, examples_fingerprint
from memlens.harness.model.load import model_sentinels, pick_device, set_threads
from memlens.harness.model.logprobs import SamplingScheme
from memlens.harness.model.scorer import CausalLMScorer

SUMMARY = "summary.json"
RULE = ("(n, p)-discoverable: 1 - (1 - p_z)^n >= p, p_z = the probability that one query under the scheme "
        "produces the compared target exactly (Hayes et al. 2024); counterfactual: the audited model's p_z "
        "clears (n, p) and the control's does not (after paper 003 Definition 3.1)")


@dataclass(frozen=True)
class DiscoverableSettings:
    """The audit.discoverable_* keys (KEYS) with their defaults, and the scoring knobs the measure shares with the
    others; parsed and checked when the audit is planned (harness/audit/command.py), before any model is scored."""

    KEYS: ClassVar[dict[str, str]] = {"schemes": "discoverable_schemes", "queries": "discoverable_queries",
                                      "probabilities": "discoverable_p"}

    schemes: tuple[SamplingScheme, ...] = (SamplingScheme("greedy", 0), SamplingScheme("top_k40", 1.0, 40))
    queries: tuple[int, ...] = (1, 10, 100, 1000, 10000)   # n of each (n, p) point: the curve's x-axis
    probabilities: tuple[float, ...] = (0.5, 0.9)          # p of each (n, p) point
    scoring: AuditSettings = field(default_factory=AuditSettings)

    @classmethod
    def from_config(cls, a) -> DiscoverableSettings:
        """audit.discoverable_schemes / _queries / _p (a missing key takes its default), checked; errors name the
        key and the fix."""
        schemes = _schemes(setting(a, cls, "schemes"))
        queries = _numbers(setting(a, cls, "queries"), "audit.discoverable_queries", int)
        probabilities = _numbers(setting(a, cls, "probabilities"), "audit.discoverable_p", float)
        if any(n < 1 for n in queries):
            raise UserError(f"audit.discoverable_queries={list(queries)}: each number of queries must be >= 1")
        if any(not (0 < p <= 1) for p in probabilities):
            raise UserError(f"audit.discoverable_p={list(probabilities)}: each probability must be in (0, 1]")
        return cls(schemes, queries, probabilities, AuditSettings.from_config(a))


def settings_from_audit(a) -> DiscoverableSettings:
    """audit.discoverable_schemes / _queries / _p, checked (DiscoverableSettings.from_config)."""
    return DiscoverableSettings.from_config(a)


def _schemes(raw) -> tuple[SamplingScheme, ...]:
    """The decoding schemes of audit.discoverable_schemes (plain values), checked."""
    if not raw or not isinstance(raw, (list, tuple)):
        raise UserError(f"audit.discoverable_schemes={raw!r}: give a list of decoding schemes, e.g. [{{name: greedy, "
                        "temperature: 0}, {name: top_k40, temperature: 1.0, top_k: 40}]")
    if all(isinstance(entry, SamplingScheme) for entry in raw):      # the dataclass's own default
        return tuple(raw)
    schemes = []
    for i, entry in enumerate(raw):
        where = f"audit.discoverable_schemes[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise UserError(f"{where}={entry!r}: each scheme is {{name, temperature, top_k}} with a name")
        unknown = set(entry) - {"name", "temperature", "top_k"}
        if unknown:
            raise UserError(f"{where}: unknown key(s) {sorted(unknown)}; a scheme has name, temperature (0 = "
                            "greedy) and top_k (null = every token)")
        try:
            schemes.append(SamplingScheme(entry["name"], entry.get("temperature", 1.0), entry.get("top_k")))
        except ValueError as e:
            raise UserError(f"{where}: {e}") from None
    names = [s.name for s in schemes]
    if len(set(names)) != len(names):
        raise UserError(f"audit.discoverable_schemes: names {names} repeat; give each scheme its own name")
    return tuple(schemes)


def _numbers(raw, key: str, kind) -> tuple:
    raw = [raw] if isinstance(raw, (int, float)) and not isinstance(raw, bool) else raw
    ok = isinstance(raw, (list, tuple)) and raw and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and (kind is float or float(x).is_integer())
        for x in raw)
    if not ok:
        raise UserError(f"{key}={raw!r}: give a non-empty list of numbers, e.g. "
                        + ("[1, 10, 100, 1000]" if kind is int else "[0.5, 0.9]"))
    return tuple(sorted({kind(x) for x in raw}))


def _ned_rows(out_dir: Path, model: str, checkpoint: str, dataset: str) -> tuple[list[dict], dict]:
    """The extraction audit's rows of one checkpoint and dataset, and their meta; refused when absent."""
    path = rows_path(out_dir, model, checkpoint, dataset)
    meta_path = path.with_name(path.stem + META_SUFFIX)
    if not (path.is_file() and meta_path.is_file()):
        raise UserError(f"{path}: no extraction-audit rows for {model}/{checkpoint} on {dataset}; the discoverable "
                        "measure scores the examples the NED audit scored: put ned before discoverable in "
                        "audit.measures (e.g. [ned, discoverable]) and rerun")
    return RowStore(path, key="id").rows(), read_json(meta_path)


def _logps(model_dir: Path, rows: list[dict], settings: DiscoverableSettings, cache_dir: Path, device: str,
           batch_size: int, fim_family: str | None) -> dict:
    """{id: [log p_z per scheme]} of one model directory (weights loaded on a cache miss only)."""
    scorer = CausalLMScorer.load(model_dir, device, batch_size=batch_size, lazy=True)
    out = cached_scheme_logprobs(scorer, rows, model_sentinels(model_dir, fim_family), cache_dir, settings.schemes)
    scorer.release()
    return out


def _entry(scored: list[dict], logps: dict, control: dict, ned_rows: list[dict],
           settings: DiscoverableSettings) -> dict:
    """Rates of one checkpoint and dataset: per scheme every (n, p) point, beside the greedy NED rate."""
    greedy = rate_with_interval(sum(1 for r in ned_rows if r["excluded"] is None and r["memorized"]), len(scored))
    schemes = {}
    for j, scheme in enumerate(settings.schemes):
        audited = [logps[r["id"]][j] for r in scored]
        reference = [control[r["id"]][j] for r in scored]
        schemes[scheme.name] = [discoverable_rates(audited, reference, n, p)
                                for p in settings.probabilities for n in settings.queries]
    return {"n_scored": len(scored), "greedy_ned": greedy, "schemes": schemes}


def audit_discoverable(cfg, planned, log=print, settings: DiscoverableSettings | None = None) -> dict:
    """Score every planned (model, dataset) at every checkpoint the extraction audit scored; write rows and
    `discoverable/summary.json`; return the summary. `settings`: parsed when the audit was planned (None: here)."""
    a = cfg.audit
    settings = settings or DiscoverableSettings.from_config(a)
    out_dir = Path(a.out_dir)
    root = require_inside(discoverable_dir(out_dir), out_dir, "audit.out_dir")
    device = pick_device(settings.scoring.device)
    cache_dir, batch_size, fim_family = Path(str(a.cache_dir)), settings.scoring.batch_size, settings.scoring.fim_family
    outputs: dict[Path, list[dict]] = {}
    results: dict = {}
    controls: dict[tuple[str, str], dict] = {}      # a control is scored once per example set, not per checkpoint
    for item in planned:
        log(f"[audit] discoverable extraction for {item.model_name} on {item.dataset} "
            f"({', '.join(s.name for s in settings.schemes)}; control {item.control_name})")
        for checkpoint, path in list_checkpoints(item.model_dir, item.all_checkpoints):
            ned_rows, meta = _ned_rows(out_dir, item.model_name, checkpoint, item.dataset)
            scored = [{"id": r["id"], "prefix": r["prefix"], "target": r["target"], "suffix": r["suffix"]}
                      for r in ned_rows if r["excluded"] is None]
            logps = _logps(path, scored, settings, cache_dir, device, batch_size, fim_family)
            key = (meta["control_dir"], examples_fingerprint(scored))
            if key not in controls:
                controls[key] = _logps(Path(meta["control_dir"]), scored, settings, cache_dir, device, batch_size,
                                       fim_family)
            control = controls[key]
            rows_file = require_inside(discoverable_dir(out_dir, item.model_name) / checkpoint / f"{item.dataset}.jsonl",
                                       out_dir, "audit.out_dir")
            outputs[rows_file] = [
                {"id": r["id"], "logp": {s.name: stored_logp(logps[r["id"]][j]) for j, s in enumerate(settings.schemes)},
                 "control_logp": {s.name: stored_logp(control[r["id"]][j]) for j, s in enumerate(settings.schemes)}}
                for r in scored]
            results.setdefault(item.model_name, {}).setdefault(checkpoint, {})[item.dataset] = {
                **_entry(scored, logps, control, ned_rows, settings), "control": item.control_name}
    summary = {
        "rule": RULE,
        "schemes": [{"name": s.name, "temperature": s.temperature, "top_k": s.top_k} for s in settings.schemes],
        "queries": list(settings.queries), "p": list(settings.probabilities),
        "results": results,
        "provenance": provenance(seed=cfg.get("seed"), datasets={}, measure="discoverable_extraction",
                                 cache_version=CACHE_VERSION),
    }
    # Everything computed first: a failure above leaves the previous outputs whole; the summary marks a finish.
    for path, rows in outputs.items():
        atomic_write_jsonl(path, rows)
    atomic_write_json(root / SUMMARY, summary)
    return summary


def drop_discoverable_model(audit_dir: Path, model_name: str) -> None:
    """Take a replaced model's entries out of discoverable/summary.json: those where it is the audited model and
    those where it is the control (computed against weights that are gone); the next run of the measure
    recomputes them from the NED rows."""
    path = discoverable_dir(audit_dir) / SUMMARY
    if not path.is_file():
        return
    summary = read_json(path)
    results = {}
    for model, checkpoints in summary["results"].items():
        if model == model_name:
            continue
        kept = {c: {d: e for d, e in datasets.items() if e.get("control") != model_name}
                for c, datasets in checkpoints.items()}
        kept = {c: datasets for c, datasets in kept.items() if datasets}
        if kept:
            results[model] = kept
    if results != summary["results"]:
        atomic_write_json(path, {**summary, "results": results})


def _percent(rate: dict) -> str:
    """A rate as the report's tables print one: percentage [95 % Wilson interval]."""
    if rate["rate"] is None:
        return "–"
    low, high = rate["ci95"]
    return f"{100 * rate['rate']:.1f} % [{100 * low:.0f}–{100 * high:.0f}]"


def report_rows(audit_dir: Path) -> tuple[list[str], list[dict]] | None:
    """The report's table: per model and dataset (final checkpoint), n, the greedy NED rate, and each scheme's
    counterfactual rate: greedy decoding's exact extraction (p_z is 0 or 1, so n and p do not matter), a sampling
    scheme's at the largest n audited for each p; percentages with 95 % Wilson intervals."""
    path = discoverable_dir(audit_dir) / SUMMARY
    if not path.is_file():
        return None
    summary = read_json(path)
    top_n = max(summary["queries"])
    columns = ["model", "dataset", "n", "greedy NED"]
    for scheme in summary["schemes"]:
        columns += ([f"{scheme['name']} exact"] if scheme["temperature"] == 0 else
                    [f"{scheme['name']} n={top_n}, p={p:g}" for p in summary["p"]])
    rows = []
    for model, checkpoints in sorted(summary["results"].items()):
        for dataset, entry in sorted((checkpoints.get("final") or {}).items()):
            row = {"model": model, "dataset": dataset, "n": entry["n_scored"],
                   "greedy NED": _percent(entry["greedy_ned"])}
            for scheme in summary["schemes"]:
                points = [pt for pt in entry["schemes"][scheme["name"]] if pt["n_queries"] == top_n]
                if scheme["temperature"] == 0:
                    row[f"{scheme['name']} exact"] = _percent(points[0]["counterfactual"])
                else:
                    row.update({f"{scheme['name']} n={top_n}, p={pt['p']:g}": _percent(pt["counterfactual"])
                                for pt in points})
            rows.append(row)
    return columns, rows


def audit_run_discoverable(cfg, settings: DiscoverableSettings, log=print) -> None:
    """(n, p)-discoverable extraction for every planned model and dataset (`audit.measures` includes `discoverable`,
    after `ned`: it scores the examples the extraction audit scored; memlens.harness.audit.discoverable)."""
    if settings.scoring.threads:
        set_threads(settings.scoring.threads)
    audit_discoverable(cfg, plan_audits(cfg), log, settings)


MEASURES.register("discoverable", Measure("Probabilistic discoverable extraction (Hayes et al. 2024)",
                                          audit_run_discoverable, report_rows=report_rows,
                                          settings=DiscoverableSettings.from_config))
