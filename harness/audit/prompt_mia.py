"""Membership of RL prompts (`audit.measures=[...,prompt_mia]`): for every checkpoint of each planned model that an RL
stage trained (recipes/stages/rl.py: RLFT.* with a reward model, RLVR.* with a verifiable reward), how well Min-kNN
distance (memlens.harness.measures.prompt_mia; Zhang et al. 2026, arXiv 2602.11792) tells the prompts the stage
trained on (its provenance's `prompts` datasets: sd_base, sd_links, pd_3, sd_rl_prompts) from held-out prompts of the
same source that no stage saw (memlens.harness.core.layout.PROMPT_HELDOUT: sd_base_heldout, sd_links_heldout,
pd_3_val, sd_rl_prompts_heldout), both
turned into the stage's own FIM contexts (memlens.harness.text.rl_contexts.prompt_contexts with the stage's seed and
context_chars, from provenance.json).

A member is a prompt of the stage's prompt datasets, the set its sampler drew from, whether or not a short run
(max_steps) reached it: the claim tested is "this prompt was in the RL training set". At most
`audit.prompt_mia_prompts` prompts per side are audited (a seeded sample, the same for every model of the run).

Each prompt's m completions are sampled once per model (memlens.harness.model.sampling.cached_samples: seeded by
(seed, prompt id), cached under the audit cache), from the audited checkpoint and from the stage's initial model
(provenance `init_model`), and every attack reads the same samples. The blind baseline
(memlens.harness.measures.blind_mia) reads the prompt texts alone, once per dataset.

On disk, below the run's audit dir (memlens.harness.core.layout.prompt_mia_dir):
    prompt_mia/<model>/<checkpoint>/<dataset>.jsonl   one row per prompt: id, member (1/0), score {attack: value},
                                                      min_knn {policy, initial}, blind
    prompt_mia/<model>/summary.json                   per checkpoint and dataset: each attack's AUC and TPR at FPR
                                                      < 1 % / < 0.1 % with bootstrap intervals, `degenerate`,
                                                      `vs_blind`; with prompts planted at several doses, `tiers`
                                                      and `dose_trend` (as pair_mia's); `blind`: {dataset: the
                                                      blind baseline's metrics}
    prompt_mia/summary.json                           every model's summary (the report reads this one)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from memlens.harness.audit.measure_registry import MEASURES, Measure
from memlens.harness.audit.mia import _checkpoint_order
from memlens.harness.audit.plan import PROVENANCE_FILE, plan_audits
from memlens.harness.audit.preference_mia import (
    blind_of,
    collect_summaries,
    dose_tiers,
    final_checkpoint_rows,
    init_model_dir,
    membership_metrics,
)
from memlens.harness.audit.settings import AuditSettings, list_checkpoints, setting
from memlens.harness.core.errors import UserError
from memlens.harness.core.injected import prompt_only_text
from memlens.harness.core.io import atomic_write_json, atomic_write_jsonl, file_sha256, read_json, read_jsonl
from memlens.harness.core.layout import MIA_SUMMARY, PROMPT_HELDOUT, data_dir, prompt_mia_dir, require_inside
from memlens.harness.core.provenance import provenance
from memlens.harness.core.stats import BOOTSTRAP_N, BOOTSTRAP_SEED, MIA_FPRS, TPR_AT_FPR_RULE
from memlens.harness.measures.blind_mia import BLIND, BLIND_RULE
from memlens.harness.measures.prompt_mia import (
    DIBA,
    PRIMARY_PROMPT_ATTACK,
    PROMPT_ATTACKS,
    PROMPT_TEXT_RULE,
    PromptSamples,
    diba_combined,
    min_knn_distance,
    prompt_attack_label,
    prompt_scores,
    prompt_text,
)
from memlens.harness.model.load import model_sentinels, pick_device, set_threads
from memlens.harness.model.sampling import (
    SAMPLING,
    cached_sample_logprobs,
    cached_sample_rewards,
    cached_samples,
    sample_rows,
)
from memlens.harness.text.rl_contexts import prompt_contexts

NAME = "prompt_mia"
TITLE = "Membership of RL prompts (Min-kNN distance)"
RL_STAGE = "rl"                     # provenance.json `stage` of recipes/stages/rl.py
DEFAULT_CONTEXT_CHARS = 2000        # recipes/stages/rl.py RLSettings.context_chars, for a provenance without it
ALL_CHECKPOINTS, FINAL_ONLY = "all", "final"     # audit.prompt_mia_checkpoints
CHECKPOINT_CHOICES = (ALL_CHECKPOINTS, FINAL_ONLY)


def capped(rows: list[dict], n: int, seed: int, dataset: str) -> list[dict]:
    """At most `n` rows: a seeded sample (by dataset name and seed, so every model of a run audits the same
    prompts), in their file order."""
    if len(rows) <= n:
        return list(rows)
    keep = set(random.Random(f"{seed}:prompt-mia:{dataset}").sample(range(len(rows)), n))
    return [r for i, r in enumerate(rows) if i in keep]


def score_prompts(rows: list[dict], member: int, samples: dict, k: int, blind: dict | None) -> list[dict]:
    """One output row per prompt: every prompt attack's score (those whose inputs were computed), both models' Min-kNN,
    the DIBA features' inputs where computed, the blind baseline's score. `samples`: {id: PromptSamples}."""
    out = []
    for r in rows:
        s = samples[r["id"]]
        row = {"id": r["id"], "member": member, "score": prompt_scores(s, k),
               "min_knn": {"policy": min_knn_distance(s.policy, k), "initial": min_knn_distance(s.initial, k)}}
        if s.policy_rewards is not None and s.initial_rewards is not None:
            row["reward"] = {"policy": sum(s.policy_rewards) / len(s.policy_rewards),
                             "initial": sum(s.initial_rewards) / len(s.initial_rewards)}
        if blind is not None:
            row[BLIND] = blind[r["id"]]
        if "repeat" in r:
            row["repeat"] = int(r["repeat"])
        out.append(row)
    return out


def add_diba(rows: list[dict]) -> None:
    """DIBA's combined score on every row of one checkpoint and dataset (members and held-out pooled), where every row
    has both features (memlens.harness.measures.prompt_mia.diba_combined)."""
    if rows and all("reward_gain" in r["score"] and "policy_drift" in r["score"] for r in rows):
        combined = diba_combined([r["score"]["reward_gain"] for r in rows], [r["score"]["policy_drift"] for r in rows])
        for r, value in zip(rows, combined):
            r["score"][DIBA] = value


def scored_attacks(rows: list[dict]) -> list[str]:
    """The attacks every row was scored by, in table order (the registry's, then DIBA's combination)."""
    names = [*PROMPT_ATTACKS, DIBA]
    return [a for a in names if rows and all(a in r["score"] for r in rows)]


def prompt_metrics(rows: list[dict], n_boot: int, seed: int) -> dict:
    """membership_metrics (harness/audit/preference_mia.py) of every attack the rows were scored by."""
    return membership_metrics(rows, scored_attacks(rows), n_boot, seed)


def _blind_of(members: list[dict], nonmembers: list[dict], n_boot: int, seed: int,
              cache_dir: Path | None = None) -> tuple[dict | None, dict | None]:
    """The blind baseline on the prompt texts (prompt_text)."""
    return blind_of(members, nonmembers, prompt_text, n_boot, seed, cache_dir)


@dataclass(frozen=True)
class PromptMiaSettings:
    """prompt_mia's settings (audit.prompt_mia_*; its bootstrap is the target MIA's key, audit.mia_bootstrap), parsed
    when the audit is planned (harness/audit/command.py). Cost grows with prompts x samples x max_new_tokens per model
    and checkpoint (benchmarks/README.md "Membership of RL prompts: cost")."""

    KEYS: ClassVar[dict[str, str]] = {"bootstrap": "mia_bootstrap", "prompts": "prompt_mia_prompts",
                                      "samples": "prompt_mia_samples", "k": "prompt_mia_k",
                                      "temperature": "prompt_mia_temperature",
                                      "max_new_tokens": "prompt_mia_max_new_tokens", "diba": "prompt_mia_diba",
                                      "checkpoints": "prompt_mia_checkpoints"}

    bootstrap: int = BOOTSTRAP_N      # resamples of each AUC / TPR interval
    prompts: int = 48                 # at most this many prompts per side (members, held out) and dataset
    samples: int = 8                  # m: completions sampled per prompt and model
    k: int = 4                        # Min-kNN: the mean of the k smallest nearest-neighbour distances (k <= m)
    temperature: float = 1.0          # sampling temperature (the RL stage's default)
    max_new_tokens: int = 48          # tokens per sampled completion (the quickstart RLFT.2's max_completion_length)
    diba: bool = True                 # DIBA's features too: the reward model scores both models' samples, both models
                                      # score the audited model's samples (a stage with a verifiable reward: drift only)
    checkpoints: str = ALL_CHECKPOINTS  # "all": every checkpoint the audit plan names; "final": the final model alone
    scoring: AuditSettings = field(default_factory=AuditSettings)

    def __post_init__(self):
        if self.checkpoints not in CHECKPOINT_CHOICES:
            raise UserError(f"audit.prompt_mia_checkpoints={self.checkpoints!r}: use {ALL_CHECKPOINTS} (every "
                            f"checkpoint the audit plan names) or {FINAL_ONLY} (the final model alone, cheaper)")
        for name, low, hint in (("bootstrap", 1, f"{BOOTSTRAP_N} is the default"), ("prompts", 2, "e.g. 48"),
                                ("samples", 2, "a nearest neighbour needs 2; e.g. 8"), ("k", 1, "e.g. 4"),
                                ("max_new_tokens", 1, "e.g. 48")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UserError(f"audit.{self.KEYS[name]}={value!r}: must be an integer >= {low} ({hint})")
        if self.k > self.samples:
            raise UserError(f"audit.prompt_mia_k={self.k}: at most audit.prompt_mia_samples={self.samples} (the "
                            "k smallest of m nearest-neighbour distances)")
        if not isinstance(self.diba, bool):
            raise UserError(f"audit.prompt_mia_diba={self.diba!r}: use true (DIBA's reward gain and drift beside "
                            "Min-kNN) or false (Min-kNN alone, cheaper)")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 10:
            raise UserError(f"audit.prompt_mia_temperature={t!r}: must be a number in (0, 10] (1.0: the RL stage's)")

    @classmethod
    def from_config(cls, a) -> PromptMiaSettings:
        return cls(*(setting(a, cls, name) for name in ("bootstrap", "prompts", "samples", "k", "temperature",
                                                        "max_new_tokens", "diba", "checkpoints")),
                   AuditSettings.from_config(a))


@dataclass(frozen=True)
class RLModel:
    """A planned model an RL stage trained, with what the prompt audit needs from its provenance."""

    name: str
    model_dir: Path
    all_checkpoints: bool
    initial_dir: Path
    prompts: dict[str, tuple[Path, Path]]     # {prompt dataset: (its rows, its held-out twin's rows)}
    seed: int
    context_chars: int
    reward_model_dir: Path | None = None       # the stage's reward model (None: a verifiable reward)
    rm_max_length: int = 1024                  # the RM's training max_length (recipes/stages/rl.py rm_max_length)
    canaries: bool = False                     # the rows are memlens.inject canaries of a prompt-only dataset (each
                                               # prompt the whole canary), not programs cut into FIM contexts


def rl_models(cfg, log=print) -> list[RLModel]:
    """The planned models an RL stage trained on prompt datasets whose held-out twins are built in the run."""
    run_dir = Path(cfg.run_dir)
    seen: dict[str, RLModel] = {}
    for item in plan_audits(cfg):
        prov_path = item.model_dir / PROVENANCE_FILE
        if item.model_name in seen or not prov_path.is_file():
            continue
        prov = read_json(prov_path)
        if prov.get("stage") != RL_STAGE:
            continue
        hyper = prov.get("hyperparameters") or {}
        prompts = {}
        for dataset in hyper.get("prompts") or []:
            held = PROMPT_HELDOUT.get(dataset)
            rows = data_dir(run_dir, held) / "rows.jsonl" if held else None
            if rows is not None and rows.is_file():
                prompts[dataset] = (data_dir(run_dir, dataset) / "rows.jsonl", rows)
        initial = init_model_dir(run_dir, str(prov.get("init_model") or ""))
        if not prompts or initial is None:
            log(f"[audit] note: RL-prompt membership skips {item.model_name}: "
                + ("its initial model's directory is gone" if prompts else
                   "none of its prompt datasets has a held-out twin built (" +
                   ", ".join(f"{a} -> {b}" for a, b in PROMPT_HELDOUT.items()) + ")"))
            continue
        rm_dir = init_model_dir(run_dir, str(prov.get("reward_model") or ""))
        rm_prov = rm_dir / PROVENANCE_FILE if rm_dir is not None else None
        rm_max = int(((read_json(rm_prov).get("hyperparameters") or {}).get("max_length") or 1024)
                     if rm_prov is not None and rm_prov.is_file() else 1024)
        seen[item.model_name] = RLModel(item.model_name, item.model_dir, item.all_checkpoints, initial, prompts,
                                        int(prov.get("seed") or 0),
                                        int(hyper.get("context_chars") or DEFAULT_CONTEXT_CHARS), rm_dir, rm_max)
    return list(seen.values())


def load_prompts(m: RLModel, cap: int, seed: int) -> tuple[dict[str, list[dict]], dict[str, str]]:
    data, sha = {}, {}
    for dataset, (members_path, nonmembers_path) in m.prompts.items():
        for role, path in (("members", members_path), ("nonmembers", nonmembers_path)):
            rows = read_jsonl(path, required=("id",))
            rows = canary_prompts(rows) if m.canaries else prompt_contexts(rows, dataset, m.seed, m.context_chars)
            data[f"{dataset}:{role}"] = capped(rows, cap, seed, f"{dataset}:{role}")
            sha[f"{dataset}:{role}"] = file_sha256(path)
        clash = {r["id"] for r in data[f"{dataset}:members"]} & {r["id"] for r in data[f"{dataset}:nonmembers"]}
        if clash:
            raise UserError(f"{nonmembers_path}: ids {sorted(clash)[:3]} are also member prompts ({members_path}); "
                            "held-out prompts must be prompts no stage trained on")
    return data, sha


def canary_prompts(rows: list[dict]) -> list[dict]:
    """Canaries (memlens.inject's planted or held-out rows) as the prompts a prompt-only dataset holds them: the whole
    canary as the prompt, read left to right (prefix = it, no suffix), with a planted canary's `repeat`."""
    return [{"id": r["id"], "prefix": prompt_only_text(r), "suffix": "",
             **({"repeat": r["repeat"]} if "repeat" in r else {})} for r in rows]


def audit_prompt_mia(m: RLModel, settings: PromptMiaSettings, out_dir: str | Path, cache_dir: str | Path, *,
                     seed: int = BOOTSTRAP_SEED, checkpoints: list[tuple[str, Path]] | None = None,
                     log=print) -> dict:
    """Score every checkpoint of one RL model (then its final model) on each of its prompt datasets against their
    held-out twins; write rows and `<out_dir>/summary.json` (the summary last); return the summary.
    `checkpoints`: (name, directory) to score instead, added to the results the summary already holds when they were
    computed the same way (memlens.AuditCallback scores each checkpoint as the trainer saves it)."""
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    s, scoring = settings, settings.scoring
    device = pick_device(scoring.device)
    data, sha = load_prompts(m, s.prompts, seed)
    everything = [r for rows in data.values() for r in rows]
    sample = dict(samples=s.samples, temperature=s.temperature, max_new_tokens=s.max_new_tokens, seed=seed,
                  device=device)
    blind, blind_scores = {}, {}
    for dataset in m.prompts:
        blind[dataset], blind_scores[dataset] = _blind_of(data[f"{dataset}:members"], data[f"{dataset}:nonmembers"],
                                                          s.bootstrap, seed, cache_dir)
    initial_sentinels = model_sentinels(m.initial_dir, scoring.fim_family)
    initial, _ = cached_samples(m.initial_dir, everything, initial_sentinels, cache_dir, **sample)
    passes = dict(device=device)
    rewards_of = None
    if s.diba and m.reward_model_dir is not None:
        def rewards_of(samples: dict) -> dict:
            scores = cached_sample_rewards(m.reward_model_dir, sample_rows(everything, samples, keep_empty=True),
                                           cache_dir, max_length=m.rm_max_length, **passes)
            return {r["id"]: tuple(scores[f"{r['id']}#{i}"] for i in range(len(samples[r["id"]]))) for r in everything}
    initial_rewards = rewards_of(initial) if rewards_of else None
    outputs: dict[Path, list[dict]] = {}
    results: dict = {}
    earlier = (_earlier_prompt_results(out_dir, m, s, seed, sha, initial_sentinels.family) if checkpoints is not None
               else {})
    for checkpoint, path in checkpoints if checkpoints is not None else list_checkpoints(
            m.model_dir, m.all_checkpoints and s.checkpoints == ALL_CHECKPOINTS):
        sentinels = model_sentinels(path, scoring.fim_family)
        policy, cache = cached_samples(path, everything, sentinels, cache_dir, **sample)
        log(f"[audit]   {m.name} {checkpoint}: {cache.n_computed} prompt(s) sampled, {cache.n_cached} cached")
        drift = None
        if s.diba:
            rows_ = sample_rows(everything, policy)
            own = cached_sample_logprobs(path, rows_, sentinels, cache_dir, batch_size=scoring.batch_size, **passes)
            ref = cached_sample_logprobs(m.initial_dir, rows_, initial_sentinels, cache_dir,
                                         batch_size=scoring.batch_size, **passes)
            drift = {r["id"]: tuple(own[k] - ref[k] for k in (f"{r['id']}#{i}" for i in range(len(policy[r["id"]])))
                                    if k in own) for r in everything}
        policy_rewards = rewards_of(policy) if rewards_of else None
        samples = {r["id"]: PromptSamples(tuple(policy[r["id"]]), tuple(initial[r["id"]]),
                                          policy_rewards[r["id"]] if policy_rewards else None,
                                          initial_rewards[r["id"]] if initial_rewards else None,
                                          drift[r["id"]] if drift is not None else None) for r in everything}
        for dataset in m.prompts:
            rows = []
            for role, member in (("members", 1), ("nonmembers", 0)):
                rows += score_prompts(data[f"{dataset}:{role}"], member, samples, s.k, blind_scores[dataset])
            add_diba(rows)
            outputs[require_inside(out_dir / checkpoint / f"{dataset}.jsonl", out_dir, "audit.out_dir")] = rows
            results.setdefault(checkpoint, {})[dataset] = {
                "n_members": len(data[f"{dataset}:members"]), "n_nonmembers": len(data[f"{dataset}:nonmembers"]),
                "members_file": str(m.prompts[dataset][0]), "nonmembers_file": str(m.prompts[dataset][1]),
                "attacks": prompt_metrics(rows, s.bootstrap, seed),
                **dose_tiers(rows, scored_attacks(rows), s.bootstrap, seed)}
    results = {**{c: r for c, r in earlier.items() if c not in results}, **results}
    summary = {
        "model": m.name, "model_dir": str(m.model_dir), "initial": str(m.initial_dir),
        "reward_model": str(m.reward_model_dir) if m.reward_model_dir else None,
        "checkpoints": sorted(results, key=_checkpoint_order), "attacks": [*PROMPT_ATTACKS, DIBA],
        "attack_labels": {a: prompt_attack_label(a) for a in [*PROMPT_ATTACKS, DIBA]}, "primary_attack": PRIMARY_PROMPT_ATTACK,
        "sampling": _sampling_record(s, seed), "sampler": SAMPLING, "prompt_format": initial_sentinels.family,
        "contexts": "canaries as prompt-only rows" if m.canaries else {"seed": m.seed, "context_chars": m.context_chars},
        "fprs": list(MIA_FPRS), "tpr_at_fpr_rule": TPR_AT_FPR_RULE, "prompt_text_rule": PROMPT_TEXT_RULE,
        "blind_rule": BLIND_RULE, BLIND: blind, "bootstrap": {"n": s.bootstrap, "seed": seed},
        "score_convention": "higher = member; AUC 0.5 = chance", "results": results,
        "provenance": provenance(seed=seed, datasets=sha, measure="rl_prompt_membership_inference",
                                 initial=str(m.initial_dir)),
    }
    for path, rows in outputs.items():
        atomic_write_jsonl(path, rows)
    atomic_write_json(out_dir / "summary.json", summary)
    return summary


def _sampling_record(s: PromptMiaSettings, seed: int) -> dict:
    return {"samples": s.samples, "k": s.k, "diba": s.diba, "temperature": s.temperature,
            "max_new_tokens": s.max_new_tokens, "prompts_per_side": s.prompts, "seed": seed, "checkpoints": s.checkpoints}


def _earlier_prompt_results(out_dir: Path, m: RLModel, s: PromptMiaSettings, seed: int, sha: dict[str, str],
                            prompt_format: str) -> dict:
    """The per-checkpoint results of `<out_dir>/summary.json` when they were computed the same way on the same prompts
    (initial model, sampling settings, the sampler, the prompt format, attacks, bootstrap, prompt texts, blind baseline,
    the prompt files' sha256), else none:
    a summary only ever joins results of one method on one data."""
    path = out_dir / "summary.json"
    if not path.is_file():
        return {}
    old = read_json(path)
    same = (old.get("initial") == str(m.initial_dir) and old.get("sampling") == _sampling_record(s, seed)
            and old.get("sampler") == SAMPLING and old.get("prompt_format") == prompt_format
            and old.get("attacks") == [*PROMPT_ATTACKS, DIBA] and old.get("bootstrap") == {"n": s.bootstrap, "seed": seed}
            and old.get("prompt_text_rule") == PROMPT_TEXT_RULE and old.get("blind_rule") == BLIND_RULE
            and (old.get("provenance") or {}).get("datasets") == sha)
    return dict(old.get("results") or {}) if same else {}


def collect_prompt_summaries(audit_dir: str | Path) -> dict:
    """`<audit dir>/prompt_mia/summary.json`: {"results": {model: its summary}} from every per-model summary."""
    return collect_summaries(prompt_mia_dir(audit_dir))


def audit_run_prompt_mia(cfg, settings: PromptMiaSettings, log=print) -> None:
    """RL-prompt membership for every planned model an RL stage trained (`audit.measures` includes prompt_mia)."""
    a = cfg.audit
    if settings.scoring.threads:
        set_threads(settings.scoring.threads)
    models = rl_models(cfg, log)
    if not models:
        log("[audit] note: RL-prompt membership scored nothing: no planned model was trained by an RL stage on "
            "prompts whose held-out twins are built (" + ", ".join(PROMPT_HELDOUT.values()) + ")")
        return
    for m in models:
        log(f"[audit] RL-prompt membership for {m.name}: {', '.join(m.prompts)} against their held-out prompts, "
            f"initial model {m.initial_dir.name}")
        audit_prompt_mia(m, settings, require_inside(prompt_mia_dir(a.out_dir, m.name), a.out_dir, "audit.out_dir"),
                         Path(str(a.cache_dir)), seed=int(cfg.get("seed") or 0), log=log)
    collect_prompt_summaries(a.out_dir)


def report_rows(audit_dir: Path) -> tuple[list[str], list[dict]] | None:
    """The report's RL-prompt membership table (final_checkpoint_rows of prompt_mia/summary.json)."""
    return final_checkpoint_rows(prompt_mia_dir(audit_dir) / MIA_SUMMARY, prompt_attack_label)


MEASURES.register(NAME, Measure(TITLE, audit_run_prompt_mia, report_rows=report_rows,
                                settings=PromptMiaSettings.from_config,
                                membership_of="RL prompts, what an RL stage samples its completions for"))
