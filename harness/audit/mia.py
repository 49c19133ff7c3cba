"""Membership inference over a run: for every checkpoint of an audited model, how well each attack of
memlens.harness.measures.mia tells the canaries it trained on (a planned dataset, e.g. sd_base) from held-out ones of
the same generator that no stage saw (`<dataset>_heldout`, synthetic_data), on two spans: the target given its
FIM prompt (the extraction audit's inputs) and the whole program (`audit_mia`; `audit.measures=[...,mia]`).

The per-token log-probs come from the model layer's one teacher-forced pass through its cache
(memlens.harness.model.cache.cached_token_logprobs), so a killed audit resumes where it stopped and a rerun loads no
weights; everything else is recomputed from the cache and written atomically, summary last (as the loss audit,
harness/audit/losses.py). The reference-calibrated attack uses the control's final model (the fixed control of
the extraction audit, paper 003 Appendix B); RMIA also reads the held-out set's values as its population.

On disk, below the run's audit dir (memlens.harness.core.layout.mia_dir):
    mia/<model>/<checkpoint>/<dataset>.jsonl   one row per example: id, member (1/0), score[span][attack], blind[span]
                                               (the blind baseline's out-of-fold score), fallback[span][attack] (why,
                                               where the authors' fallback branch scored it)
    mia/<model>/summary.json                   AUC and TPR at FPR < 1 % / < 0.1 % with bootstrap 95 % intervals, each
                                               attack's `degenerate` reasons and `vs_blind`; `blind`: {dataset:
                                               the blind baseline (no model; once per dataset, not per checkpoint)}
    mia/summary.json                           every model's summary (the report reads this one)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import ClassVar

from memlens.harness.audit.losses import load_fim_examples
from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.plan import plan_audits
from memlens.harness.audit.settings import AuditSettings, list_checkpoints, setting
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, read_json, read_jsonl
from memlens.harness.core.layout import MIA_SUMMARY, checkpoint_step, data_dir, heldout_dataset, mia_dir, require_inside
from memlens.harness.core.provenance import provenance
from memlens.harness.core.stats import (
    BOOTSTRAP_N,
    BOOTSTRAP_SEED,
    MIA_FPRS,
    TPR_AT_FPR_RULE,
    paired_auc_difference,
)
from memlens.harness.core.user_data import DOSE_IF_MEMBER
from memlens.harness.measures.blind_mia import (
    BLIND,
    BLIND_LABEL,
    BLIND_RULE,
    baseline_of_scores,
    blind_scores,
    distinguishable_without_model,
)
from memlens.harness.measures.mia import (
    ATTACKS,
    BASELINE_ATTACK,
    MEMBER_PREFIX,
    MIN_K_FRACTION,
    NONMEMBER_PREFIX,
    POPULATION,
    PREFIX_RULE,
    TRAJECTORY,
    AttackInputs,
    Population,
    TokenFrequency,
    attack_fallbacks,
    attack_metrics,
    attack_scores,
    best_attack,
    degenerate_reasons,
    inputs_needed,
    prefix_text,
    split_shots,
)
from memlens.harness.model.cache import (
    BLIND_SUBDIR,
    CACHE_VERSION,
    SPANS,
    cache_key,
    cached_token_logprobs,
    program_text,
)
from memlens.harness.model.load import load_tokenizer, model_sentinels, pick_device, set_threads
from memlens.harness.model.scorer import CausalLMScorer

PLAIN = "values"        # the plain teacher-forced pass, beside the conditioned ones (memlens.harness.measures.mia INPUTS)


def _check_spans(spans) -> tuple[str, ...]:
    spans = (spans,) if isinstance(spans, str) else tuple(spans)
    bad = [s for s in spans if s not in SPANS]
    if not spans or bad:
        raise UserError(f"audit.mia_spans={list(spans)}: use a non-empty list of {list(SPANS)} (target: the FIM "
                        "target given its prompt, as the extraction audit; program: the whole program)")
    return spans


def _token_values(model_dir: Path, sets: dict[str, list[dict]], spans, cache_dir: Path, device: str,
                  batch_size: int, fim_family: str | None, prefixes: dict[str, Prefixes] | None = None
                  ) -> dict[str, dict[str, dict[str, dict]]]:
    """{set name: {span: {pass: {id: per-token values}}}} of one model directory, weights loaded on a cache miss
    only. Pass "values" is the plain teacher-forced pass over every row; each prefix text of `prefixes[set name]` is
    the same pass after that text over the rows that are not shots (memlens.harness.measures.mia: NONMEMBER_PREFIX,
    MEMBER_PREFIX), computed once here for every attack that reads it."""
    scorer = CausalLMScorer.load(model_dir, device, batch_size=batch_size, lazy=True)
    sentinels = model_sentinels(model_dir, fim_family)
    out: dict = {}
    for name, rows in sets.items():
        prefix = (prefixes or {}).get(name)
        scored = [r for r in rows if prefix is None or r["id"] not in prefix.shot_ids]
        out[name] = {span: {PLAIN: cached_token_logprobs(scorer, rows, sentinels, cache_dir, span),
                            **{kind: cached_token_logprobs(scorer, scored, sentinels, cache_dir, span, context=text)
                               for kind, text in (prefix.texts.items() if prefix else ())}}
                     for span in spans}
    scorer.release()
    return out


@dataclass(frozen=True)
class Prefixes:
    """One dataset's prefix shots (their ids, members' and non-members') and the prefix texts made of them."""

    shot_ids: frozenset
    texts: dict[str, str]


def _choose_shots(data: dict[str, list[dict]], pairs) -> dict[str, Prefixes]:
    """Each dataset's prefix shots among its members and non-members (memlens.harness.measures.mia.split_shots) and the
    prefix texts the conditioned passes put before its other texts: {set name: Prefixes}. The shots stay in the rows
    (every attack that reads no prefix scores them, so the one-run ε audit still ranks every canary) but are left
    out of every attack's metrics, so all attacks are compared on the same texts. None are chosen when no
    registered attack reads a prefix, or where a side is too small."""
    needs = inputs_needed() & {NONMEMBER_PREFIX, MEMBER_PREFIX}
    out: dict[str, Prefixes] = {}
    if not needs:
        return out
    for dataset in pairs:
        members, nonmembers = f"{dataset}:members", f"{dataset}:nonmembers"
        split = {MEMBER_PREFIX: split_shots(data[members]), NONMEMBER_PREFIX: split_shots(data[nonmembers])}
        if any(s is None for s in split.values()):
            continue
        ids = frozenset(r["id"] for shots, _ in split.values() for r in shots)
        texts = {role: prefix_text(shots) for role, (shots, _) in split.items() if role in needs}
        out[members] = out[nonmembers] = Prefixes(ids, texts)
    return out


def _reference_frequency(model_dir: Path, reference: TokenFrequency | Sequence[str] | None) -> TokenFrequency | None:
    """DC-PDD's reference distribution: as given, or the token ids of reference texts under the model's own
    tokenizer (None without either: the attacks that need it are then not scored)."""
    if reference is None or isinstance(reference, TokenFrequency):
        return reference
    if not reference:
        return None
    tokenizer = load_tokenizer(model_dir)
    ids = tokenizer(list(reference), add_special_tokens=False)["input_ids"]
    return TokenFrequency.of(ids, len(tokenizer))


def _earlier_scores(out_dir: Path, dataset: str, checkpoint: str, fresh: dict[Path, list[dict]]
                    ) -> list[dict[str, dict]]:
    """{id: {span: {attack: score}}} of every checkpoint of this model scored before `checkpoint` (step order), from
    this call's rows or from disk: the TRAJECTORY input of the sequence attack."""
    names = {p.parent.name for p in fresh} | {p.parent.name for p in out_dir.glob(f"*/{dataset}.jsonl")}
    out = []
    for name in sorted(names, key=_checkpoint_order):
        if _checkpoint_order(name) >= _checkpoint_order(checkpoint):
            continue
        path = out_dir / name / f"{dataset}.jsonl"
        rows = fresh[path] if path in fresh else read_jsonl(path)
        out.append({r["id"]: r["score"] for r in rows})
    return out


def _span_text(row: dict, span: str) -> str:
    """The text of one span of an example, as the attacks score it (and the blind baseline reads it)."""
    return row["target"] if span == "target" else program_text(row)


def _populations(values: dict, control: dict | None, spans, shots: frozenset) -> dict[str, Population] | None:
    """RMIA's population z on each span ({span: Population}): the held-out texts of the dataset that the metrics
    count (its `values` and `control` passes, the prefix `shots` left out), under this checkpoint and the control, so
    the population is exactly the evaluated non-members (docs/methods.md, "RMIA"). None where no registered attack
    reads it, without a control, or with fewer than two such texts (a text is never its own z,
    memlens.harness.measures.mia.rmia_score)."""
    if POPULATION not in inputs_needed() or control is None:
        return None
    out = {}
    for span in spans:
        keep = [i for i in values[span][PLAIN] if i not in shots]
        out[span] = Population.of({i: values[span][PLAIN][i] for i in keep}, {i: control[span][PLAIN][i] for i in keep})
    return out if all(len(p.ids) >= 2 for p in out.values()) else None


def _score_rows(rows: list[dict], member: int, values: dict, control: dict | None, spans,
                frequency: TokenFrequency | None, earlier: list[dict[str, dict]], shots: frozenset,
                blind: dict[str, dict] | None = None, population: dict[str, Population] | None = None) -> list[dict]:
    out = []
    for r in rows:
        scores, fallbacks = {}, {}
        for span in spans:
            passes = values[span]
            history = [e[r["id"]][span] for e in earlier if r["id"] in e and span in e[r["id"]]]
            inputs = AttackInputs(
                values=passes[PLAIN][r["id"]], text=_span_text(r, span),
                control=control[span][PLAIN][r["id"]] if control is not None else None,
                nonmember_prefix=passes.get(NONMEMBER_PREFIX, {}).get(r["id"]),
                member_prefix=passes.get(MEMBER_PREFIX, {}).get(r["id"]),
                token_frequency=frequency, trajectory=history or None,
                population=population[span] if population else None, text_id=r["id"])
            scores[span] = attack_scores(inputs)
            if fallback := attack_fallbacks(inputs):
                fallbacks[span] = fallback
        row = {"id": r["id"], "member": member, "score": scores}
        if fallbacks:
            row["fallback"] = fallbacks        # {span: {attack: why}}: scored by the authors' fallback branch
        if r["id"] in shots:
            row["prefix_shot"] = True          # scored, but in no attack's metrics (a prefix is made of it)
        elif blind and any(r["id"] in b for b in blind.values()):
            row[BLIND] = {span: b[r["id"]] for span, b in blind.items() if r["id"] in b}   # the blind baseline's score
        if "repeat" in r:
            row["repeat"] = int(r["repeat"])
        if isinstance(r.get(DOSE_IF_MEMBER), int) and not isinstance(r[DOSE_IF_MEMBER], bool):
            row[DOSE_IF_MEMBER] = r[DOSE_IF_MEMBER]       # a held-out SD canary's would-be dose: the ε audit's tiers
        out.append(row)
    return out


def _metrics_of(rows: list[dict], spans, n_boot: int, seed: int) -> dict:
    """{span: {attack: metrics}} (attacks without a score, e.g. the reference without a control, left out). Each
    attack's metrics carry `vs_loss`: its AUC minus LOSS's on the same texts, paired bootstrap (the comparison the
    newer attacks are judged by, harness/report/findings/membership.py); a checkpoint-sequence attack's also carry
    `vs_best_single`: its gain over the best single-checkpoint attack here, on the same texts; `vs_blind`: its AUC minus
    the blind baseline's on the same texts (memlens.harness.measures.blind_mia), where every text has a blind score.
    `degenerate` lists why an attack's numbers say nothing about the model here ([] where they do;
    memlens.harness.measures.mia.degenerate_reasons), `fallback` how many texts its fallback branch scored."""
    out: dict = {}
    for span in spans:
        scores = {}
        for attack in ATTACKS:
            members = [r["score"][span].get(attack) for r in rows if r["member"] == 1]
            nonmembers = [r["score"][span].get(attack) for r in rows if r["member"] == 0]
            if not members or not nonmembers or None in members or None in nonmembers:
                continue
            scores[attack] = (members, nonmembers)
            out.setdefault(span, {})[attack] = _attack_entry(rows, span, attack, members, nonmembers, n_boot, seed)
        blind = _blind_of(rows, span)
        for attack, (members, nonmembers) in scores.items():
            if attack != BASELINE_ATTACK and BASELINE_ATTACK in scores:
                out[span][attack]["vs_loss"] = paired_auc_difference(members, nonmembers, *scores[BASELINE_ATTACK],
                                                                     n_boot=n_boot, seed=seed)
            if blind is not None:
                out[span][attack]["vs_blind"] = paired_auc_difference(members, nonmembers, *blind, n_boot=n_boot,
                                                                      seed=seed)
        single = [a for a in scores if TRAJECTORY not in ATTACKS[a].needs]
        best = (best_attack({a: out[span][a] for a in single}) or (None,))[0]
        for attack in scores:
            if best is not None and attack not in single:
                out[span][attack]["vs_best_single"] = {"attack": best, **paired_auc_difference(
                    *scores[attack], *scores[best], n_boot=n_boot, seed=seed)}
    return out


def _attack_entry(rows: list[dict], span: str, attack: str, members: list[float], nonmembers: list[float],
                  n_boot: int, seed: int) -> dict:
    """One attack's metrics on one span, with how many texts its fallback branch scored (attacks that have one) and
    why it is degenerate here, if it is."""
    metrics = attack_metrics(members, nonmembers, n_boot=n_boot, seed=seed)
    took = {m: sum(attack in (r.get("fallback") or {}).get(span, {}) for r in rows if r["member"] == m) for m in (1, 0)}
    if ATTACKS[attack].fallback is not None:
        metrics["fallback"] = {"members": took[1], "nonmembers": took[0]}
    metrics["degenerate"] = degenerate_reasons(members, nonmembers, metrics, took[1], took[0])
    return metrics


def _blind_of(rows: list[dict], span: str) -> tuple[list[float], list[float]] | None:
    """(members', non-members') blind-baseline scores of these rows on `span`, in the rows' order (the attacks'
    order: paired), or None where a row has none (no baseline: a side too small)."""
    if not rows or any(span not in (r.get(BLIND) or {}) for r in rows):
        return None
    return ([r[BLIND][span] for r in rows if r["member"] == 1], [r[BLIND][span] for r in rows if r["member"] == 0])


_BLIND_SCORES: dict[str, list[float] | None] = {}   # this process's blind-baseline scores, by _blind_key
BLIND_CACHE_VERSION = 1       # bump when the classifier or its folds change in a way its rule text does not show


def _blind_key(members: list[str], nonmembers: list[str], seed: int) -> str:
    """What the blind baseline's out-of-fold scores depend on: the texts of each side, the seed, the classifier (its
    rule text, BLIND_CACHE_VERSION) and the scikit-learn that fits it."""
    return cache_key("blind_baseline", texts=hashlib.sha256(json.dumps([members, nonmembers]).encode()).hexdigest(),
                     seed=seed, rule=BLIND_RULE, version=BLIND_CACHE_VERSION, sklearn=version("scikit-learn"))


def cached_blind_baseline(members: list[str], nonmembers: list[str], n_boot: int, seed: int,
                          cache_dir: Path | None = None) -> dict | None:
    """blind_baseline, its classifier fitted once for the same texts: it reads no model, the callback audits the same
    member / held-out sets at every checkpoint, and a rerun (a resumed callback, `memlens audit` again) the same sets
    as the run before (their classifier costs seconds per call). Every membership measure's baseline comes from here:
    targets (this module), pairs (preference_mia.py), prompts (prompt_mia.py). Only the out-of-fold scores are kept,
    in this process and, with `cache_dir`, at `<cache_dir>/blind_baseline/<key>.json` (written whole or not at all);
    the metrics are computed from them on every call, so a change to the metrics never meets a stale entry."""
    key = _blind_key(members, nonmembers, seed)
    stored = Path(cache_dir) / BLIND_SUBDIR / f"{key}.json" if cache_dir is not None else None
    if key not in _BLIND_SCORES:
        if stored is not None and stored.is_file():
            _BLIND_SCORES[key] = read_json(stored)["scores"]
        else:
            _BLIND_SCORES[key] = blind_scores([*members, *nonmembers], [1] * len(members) + [0] * len(nonmembers), seed)
    if stored is not None and not stored.is_file():
        # allow_nan=False: a score JSON cannot hold exactly fails here instead of coming back changed
        atomic_write_text(stored, json.dumps({"key": key, "scores": _BLIND_SCORES[key]}, allow_nan=False) + "\n")
    return baseline_of_scores(_BLIND_SCORES[key], len(members), n_boot, seed)


def _blind_baselines(data: dict[str, list[dict]], pairs, prefixes: dict[str, Prefixes], spans, n_boot: int,
                     seed: int, cache_dir: Path | None = None) -> dict[str, dict]:
    """{dataset: {"spans": {span: metrics}, "scores": {span: {id: score}}, "n_members", "n_nonmembers"}} of the blind
    baseline (memlens.harness.measures.blind_mia): once per member / held-out pair, since it reads no model, on the
    texts every attack's metrics are over (prefix shots left out); a dataset with too few texts has spans {}."""
    out: dict[str, dict] = {}
    for dataset in pairs:
        sides = {}
        for role in ("members", "nonmembers"):
            key = f"{dataset}:{role}"
            shots = prefixes[key].shot_ids if key in prefixes else frozenset()
            sides[role] = [r for r in data[key] if r["id"] not in shots]
        entry: dict = {"n_members": len(sides["members"]), "n_nonmembers": len(sides["nonmembers"]),
                       "spans": {}, "scores": {}}
        for span in spans:
            found = cached_blind_baseline([_span_text(r, span) for r in sides["members"]],
                                           [_span_text(r, span) for r in sides["nonmembers"]], n_boot, seed,
                                           cache_dir)
            if found is None:
                continue
            entry["spans"][span] = found["metrics"]
            ids = [r["id"] for r in sides["members"] + sides["nonmembers"]]
            entry["scores"][span] = dict(zip(ids, [*found["scores"][0], *found["scores"][1]]))
        out[dataset] = entry
    return out


def warn_if_distinguishable(blind: dict[str, dict], log=print) -> None:
    """Warn, before any attack result, where the blind baseline tells members from non-members above chance: the split
    differs in distribution, so an attack's AUC on it measures the split as well as the model (Das et al. 2024)."""
    for dataset, entry in blind.items():
        for span, m in entry["spans"].items():
            if distinguishable_without_model(m):
                lo, hi = m["auc"]["ci95"]
                log(f"[audit] WARNING: {dataset} ({span} span): the {BLIND_LABEL} tells its {entry['n_members']} "
                    f"members from its {entry['n_nonmembers']} non-members with AUC {m['auc']['value']:.2f} "
                    f"[{lo:.2f}, {hi:.2f}] from the texts alone, without the model: members and non-members differ in "
                    "distribution, so every attack's AUC below is read against it, not against 0.5. Fix: draw members "
                    "and non-members from one distribution, each example's side by a fair coin, as memlens.inject "
                    "does (docs/own-data.md)")


def _metrics(rows: list[dict], spans, n_boot: int, seed: int) -> tuple[dict, dict]:
    """(metrics of all members, {repeat: metrics of the members planted that many times}) against every
    non-member, prefix shots left out; tiers only where the members' `repeat` differs (a user's canaries:
    synthetic_data.inject)."""
    rows = [r for r in rows if not r.get("prefix_shot")]
    tiers = sorted({r["repeat"] for r in rows if r["member"] == 1 and "repeat" in r})
    by_tier = {} if len(tiers) < 2 else {
        str(t): _metrics_of([r for r in rows if r["member"] == 0 or r.get("repeat") == t], spans, n_boot, seed)
        for t in tiers}
    return _metrics_of(rows, spans, n_boot, seed), by_tier


def audit_mia(model_dir: str | Path, model_name: str, pairs: dict[str, tuple[Path, Path]], out_dir: str | Path,
              settings: MiaSettings, *, control_dir: str | Path | None = None, cache_dir: str | Path | None = None,
              all_checkpoints: bool = True, seed: int = BOOTSTRAP_SEED,
              checkpoints: list[tuple[str, Path]] | None = None,
              reference: TokenFrequency | Sequence[str] | None = None, reference_name: str | None = None,
              log=print) -> dict:
    """Score every checkpoint of `model_dir` (then its final model) on each dataset of `pairs`
    ({dataset: (members rows, non-members rows)}); write rows and `<out_dir>/summary.json`; return the summary.

    `settings`: the spans, the bootstrap resamples and the scoring knobs (batch size, device, FIM family in
    settings.scoring); its `reference` (a dataset name) is the caller's to read into `reference`.
    `checkpoints`: (name, directory) to score instead, added to the checkpoints the summary already holds (the
    training callback scores each checkpoint as it is saved, and the trainer may delete older ones).
    `reference` (named `reference_name` in the summary): DC-PDD's token frequencies, or texts to count them in.
    The blind baseline (no model) is computed first, once per dataset pair, and `log` warns before any checkpoint is
    scored where it tells the sets apart (`warn_if_distinguishable`)."""
    out_dir = Path(out_dir)
    spans, n_boot, scoring = _check_spans(settings.spans), settings.bootstrap, settings.scoring
    if not pairs:
        raise UserError(f"{model_name}: no (members, held-out) dataset pair to score; build the held-out sets "
                        "(memlens data: sd_base_heldout, sd_links_heldout) or drop mia from audit.measures")
    device = pick_device(scoring.device)
    cache_dir = Path(cache_dir) if cache_dir is not None else out_dir / "cache"
    data, sha = _load_pairs(pairs)
    prefixes = _choose_shots(data, pairs)
    blind = _blind_baselines(data, pairs, prefixes, spans, n_boot, seed, cache_dir)
    warn_if_distinguishable(blind, log)
    control = (_token_values(Path(control_dir), data, spans, cache_dir, device, scoring.batch_size,
                             scoring.fim_family) if control_dir is not None else None)
    frequency = _reference_frequency(Path(model_dir), reference)
    inputs = _MiaInputs(pairs, data, prefixes, blind, control, frequency, spans, n_boot, seed)

    outputs: dict[Path, list[dict]] = {}
    results: dict = {}
    earlier = _earlier_results(out_dir, control_dir, spans, n_boot, seed, sha) if checkpoints is not None else {}
    if checkpoints is None:
        checkpoints = list_checkpoints(model_dir, all_checkpoints)
    for checkpoint, path in checkpoints:
        values = _token_values(path, data, spans, cache_dir, device, scoring.batch_size, scoring.fim_family, prefixes)
        for dataset in pairs:
            target = require_inside(out_dir / checkpoint / f"{dataset}.jsonl", out_dir, "audit.out_dir")
            history = _earlier_scores(out_dir, dataset, checkpoint, outputs)
            rows, entry = inputs.score(dataset, values, history)
            outputs[target] = rows
            results.setdefault(checkpoint, {})[dataset] = entry
    results = {**{c: r for c, r in earlier.items() if c not in results}, **results}
    summary = _mia_summary(model_name, model_dir, control_dir, inputs, results, sha, reference_name)
    # Everything computed first: a failure above leaves the previous outputs whole; the summary marks a finish.
    for path, rows in outputs.items():
        atomic_write_jsonl(path, rows)
    atomic_write_json(out_dir / "summary.json", summary)
    return summary


def _load_pairs(pairs: dict[str, tuple[Path, Path]]) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """({"<dataset>:members" / ":nonmembers": rows}, {the same keys: sha256}); a held-out id that is also a member is
    an error naming both files."""
    data: dict[str, list[dict]] = {}
    sha: dict[str, str] = {}
    for dataset, (members_path, nonmembers_path) in pairs.items():
        for role, path in (("members", members_path), ("nonmembers", nonmembers_path)):
            data[f"{dataset}:{role}"], sha[f"{dataset}:{role}"] = load_fim_examples(path)
        clash = {r["id"] for r in data[f"{dataset}:members"]} & {r["id"] for r in data[f"{dataset}:nonmembers"]}
        if clash:
            raise UserError(f"{nonmembers_path}: ids {sorted(clash)[:3]} are also members ({members_path}); "
                            "held-out examples must be examples no stage trained on")
    return data, sha


@dataclass(frozen=True)
class _MiaInputs:
    """What scoring each checkpoint reads besides its own token values: the dataset pairs and their rows, the prefix
    shots, the blind baseline, the control's values, DC-PDD's reference frequencies, the spans and the bootstrap."""

    pairs: dict[str, tuple[Path, Path]]
    data: dict[str, list[dict]]
    prefixes: dict[str, Prefixes]
    blind: dict[str, dict]
    control: dict | None
    frequency: TokenFrequency | None
    spans: tuple[str, ...]
    n_boot: int
    seed: int

    def score(self, dataset: str, values: dict, history: list[dict]) -> tuple[list[dict], dict]:
        """(one checkpoint's rows on one dataset pair, its result entry)."""
        held = f"{dataset}:nonmembers"
        population = _populations(values[held], self.control[held] if self.control else None, self.spans,
                                  self.prefixes[held].shot_ids if held in self.prefixes else frozenset())
        rows = []
        for role, member in (("members", 1), ("nonmembers", 0)):
            key = f"{dataset}:{role}"
            shots = self.prefixes[key].shot_ids if key in self.prefixes else frozenset()
            rows += _score_rows(self.data[key], member, values[key], self.control[key] if self.control else None,
                                self.spans, self.frequency, history, shots, self.blind[dataset]["scores"], population)
        overall, tiers = _metrics(rows, self.spans, self.n_boot, self.seed)
        return rows, {
            "n_members": sum(r["member"] == 1 and not r.get("prefix_shot") for r in rows),
            "n_nonmembers": sum(r["member"] == 0 and not r.get("prefix_shot") for r in rows),
            "members_file": str(self.pairs[dataset][0]), "nonmembers_file": str(self.pairs[dataset][1]),
            "prefix_shots": {role: [r["id"] for r in rows if r.get("prefix_shot") and r["member"] == member]
                             for role, member in (("members", 1), ("nonmembers", 0))},
            "earlier_checkpoints": len(history),
            "spans": overall, **({"tiers": tiers} if tiers else {})}


def _mia_summary(model_name: str, model_dir, control_dir, inputs: _MiaInputs, results: dict, sha: dict[str, str],
                 reference_name: str | None) -> dict:
    """summary.json of one model's membership inference: the method (spans, attacks, rules, bootstrap), the blind
    baseline, every checkpoint's results and the provenance."""
    spans = inputs.spans
    return {
        "model": model_name, "model_dir": str(model_dir), "control": str(control_dir) if control_dir else None,
        "checkpoints": sorted(results, key=_checkpoint_order), "spans": list(spans), "attacks": list(ATTACKS),
        "attack_inputs": {name: sorted(attack.needs) for name, attack in ATTACKS.items()},
        "min_k_fraction": MIN_K_FRACTION, "fprs": list(MIA_FPRS), "tpr_at_fpr_rule": TPR_AT_FPR_RULE,
        "prefix_rule": PREFIX_RULE, "reference_corpus": reference_name if inputs.frequency is not None else None,
        "blind_rule": BLIND_RULE,
        # The blind baseline reads no model: one entry per dataset, not per checkpoint (its per-text scores are in
        # the rows, `blind`, and every attack's `vs_blind` compares with it on the same texts).
        BLIND: {d: {k: v for k, v in entry.items() if k != "scores"} for d, entry in inputs.blind.items()},
        "bootstrap": {"n": inputs.n_boot, "seed": inputs.seed},
        "score_convention": "higher = member; AUC 0.5 = chance",
        "results": results,
        "provenance": provenance(seed=inputs.seed, datasets=sha, measure="membership_inference",
                                 cache_version=CACHE_VERSION, spans=list(spans)),
    }


def _checkpoint_order(name: str) -> tuple[int, int]:
    """checkpoint-<step> in step order, then the final model."""
    step = checkpoint_step(name)
    return (1, 0) if step is None else (0, step)


def _earlier_results(out_dir: Path, control_dir, spans, n_boot: int, seed: int, sha: dict[str, str]) -> dict:
    """The per-checkpoint results of `<out_dir>/summary.json` when they were computed the same way (control,
    spans, attacks, bootstrap) on the same member and held-out files (their sha256), else none: a summary only ever
    joins results of one method on one data (an out_dir reused with other canaries starts afresh)."""
    path = out_dir / "summary.json"
    if not path.is_file():
        return {}
    old = read_json(path)
    same = (old.get("control") == (str(control_dir) if control_dir else None) and old.get("spans") == list(spans)
            and old.get("attacks") == list(ATTACKS) and old.get("bootstrap") == {"n": n_boot, "seed": seed}
            and old.get("prefix_rule") == PREFIX_RULE and old.get("blind_rule") == BLIND_RULE
            and (old.get("provenance") or {}).get("datasets") == sha)
    return dict(old.get("results") or {}) if same else {}


def collect_summaries(audit_dir: str | Path) -> dict:
    """`<audit dir>/mia/summary.json`: {"results": {model: its summary}} from every per-model summary."""
    root = mia_dir(audit_dir)
    models = {}
    for path in sorted(root.rglob("summary.json")):
        if path == root / MIA_SUMMARY:
            continue
        record = read_json(path)
        models[record.get("model") or str(path.parent.relative_to(root))] = record
    record = {"results": models}
    atomic_write_json(root / MIA_SUMMARY, record)
    return record


def mia_reference_texts(run_dir: Path, name: str | None, log=print) -> list[str] | None:
    """The texts of the run's dataset `audit.mia_reference` (each row's `text`, else its whole program): DC-PDD's
    reference corpus of token frequencies. None (and a note) when it is unset or not built in this run."""
    if not name:
        return None
    path = data_dir(run_dir, str(name)) / "rows.jsonl"
    if not path.is_file():
        log(f"[audit] note: audit.mia_reference={name}: {path} is not built in this run, so DC-PDD is not scored; "
            "name a dataset of the run that no audited set is part of (pd_eval: held-out public code)")
        return None
    return [r["text"] if isinstance(r.get("text"), str) else program_text(r) for r in read_jsonl(path)]


@dataclass(frozen=True)
class MiaSettings:
    """The audit.mia_* keys (KEYS) with their defaults, and the scoring knobs the measure shares with the others;
    parsed and checked when the audit is planned (harness/audit/command.py), before any model is scored."""

    KEYS: ClassVar[dict[str, str]] = {"spans": "mia_spans", "bootstrap": "mia_bootstrap", "reference": "mia_reference"}

    spans: tuple[str, ...] = SPANS           # target: the FIM target given its prompt; program: the whole program
    bootstrap: int = BOOTSTRAP_N             # resamples of each AUC / TPR interval
    reference: str | None = "pd_eval"        # the run's dataset whose token frequencies calibrate DC-PDD; None: none
    scoring: AuditSettings = field(default_factory=AuditSettings)

    def __post_init__(self):
        _check_spans(self.spans)
        if isinstance(self.bootstrap, bool) or not isinstance(self.bootstrap, int) or self.bootstrap < 1:
            raise UserError(f"audit.mia_bootstrap={self.bootstrap!r}: must be a positive integer (bootstrap resamples "
                            f"of each interval; {BOOTSTRAP_N} is the default)")
        if self.reference is not None and not isinstance(self.reference, str):
            raise UserError(f"audit.mia_reference={self.reference!r}: name one of the run's datasets (e.g. pd_eval), "
                            "or null")

    @classmethod
    def from_config(cls, a) -> MiaSettings:
        """The audit group's mia_* keys (a missing key takes its default), checked; each error names the key."""
        return cls(mia_spans(a), setting(a, cls, "bootstrap"), setting(a, cls, "reference"),
                   AuditSettings.from_config(a))


def mia_spans(a) -> tuple[str, ...]:
    """audit.mia_spans, checked (null or empty: the default, both spans); epsilon reads it too."""
    return _check_spans(setting(a, MiaSettings, "spans") or MiaSettings.spans)


def mia_settings(a) -> MiaSettings:
    """The audit group's mia_* keys, checked (MiaSettings.from_config)."""
    return MiaSettings.from_config(a)


def audit_run_mia(cfg, settings: MiaSettings, log=print) -> None:
    """Membership inference for every planned model (`audit.measures` includes `mia`; `settings` parsed when the
    audit was planned): each planned dataset whose held-out partner (`<dataset>_heldout`, e.g. sd_base_heldout) is
    built in the run is scored at every checkpoint, members against held-out non-members
    (memlens.harness.audit.mia), the plan's control as the reference model of the calibrated attack."""
    run_dir = Path(cfg.run_dir)
    a = cfg.audit
    by_model: dict[tuple[str, Path, Path, bool], list[str]] = {}
    for item in plan_audits(cfg):
        by_model.setdefault((item.model_name, item.model_dir, item.control_dir, item.all_checkpoints),
                            []).append(item.dataset)
    scoring = settings.scoring
    if scoring.threads:
        set_threads(scoring.threads)      # as the NED audit does (audit.threads)
    reference = mia_reference_texts(run_dir, settings.reference, log)
    scored = 0
    for (name, model_dir, control_dir, all_checkpoints), datasets in by_model.items():
        pairs = {}
        for d in datasets:
            held = data_dir(run_dir, heldout_dataset(d)) / "rows.jsonl"
            if held.is_file():
                pairs[d] = (data_dir(run_dir, d) / "rows.jsonl", held)
        if not pairs:
            continue
        log(f"[audit] membership inference for {name}: {', '.join(pairs)} against their held-out sets")
        audit_mia(model_dir, name, pairs, require_inside(mia_dir(a.out_dir, name), a.out_dir, "audit.out_dir"),
                  settings, control_dir=control_dir, cache_dir=Path(str(a.cache_dir)), all_checkpoints=all_checkpoints,
                  seed=int(cfg.get("seed") or 0), reference=reference, reference_name=settings.reference, log=log)
        scored += 1
    if not scored:
        log("[audit] note: membership inference scored nothing: no planned dataset has a held-out partner "
            "(<dataset>_heldout) in the run; build sd_base_heldout / sd_links_heldout with `memlens data`")
        return
    collect_summaries(a.out_dir)


MEASURES.register("mia", Measure("Membership inference", audit_run_mia, settings=MiaSettings.from_config))
