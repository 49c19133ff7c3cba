"""The papers' findings, checked against one run's stored results — only where the run can show them.

A finding holds only when three things are true, and each is written beside the verdict:
1. **evidence**: the stages it depends on demonstrably trained (harness/report/evidence.py: the reward
   model's AUC on SD, each RL point's reward rise and KL to its reference, and that its policy did not
   collapse to get there (held-out code loss, distinct greedy completions), IPO's preference accuracy,
   the fine-tuned model's own memorization). A failed or missing check makes the finding
   `inconclusive` with the reason — a persistence of 100 % through an RL stage that did not move is no
   evidence of persistence.
2. **the rule**: the paper's claim turned into a stated margin (e.g. F2: RLFT.2 <= FT.3 / 5).
3. **not noise**: a comparison of two rates passes an exact test at p < 0.05 (McNemar on the same
   examples, Fisher on different ones; harness/core/stats.py). Right direction but p >= 0.05: `inconclusive`.
Statuses: `holds`, `not reproduced` (the rule fails with the evidence in place), `inconclusive`,
`not measured` (the run has no models or data for it). Every rate carries n and a 95 % Wilson interval.

Findings F1-F8 follow paper 003 Sec. 5 (5.1: FT.1 -> RLFT.1 persistence, Fig. 1; 5.2: SD only in the
reward model's data, FT.3 vs RLFT.2; 5.3 and App. E: RL-prompt memorization, RLFT.4; 5.4: IPO vs RLHF);
N1-N3 the NMT run's (paper 002 Table 1, its neighbourhood columns, and Algorithm 3 in Sec. 5); C1-C2
paper 004 (Lemma 1's premise, Sec. 3; recollection vs contextual memorization, Sec. 5); M1-M3 membership
inference (harness/measures/mia.py: is a stage's SD detectable, whether or not it is extractable).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from memlens.harness.audit.losses import VARIANT_CONTROL
from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_jsonl
from memlens.harness.core.objectives import DEFAULT_OBJECTIVE, OBJECTIVES, PREFERENCE_STAGE
from memlens.harness.core.stats import fisher_exact, mcnemar_exact, rate_with_interval, sign_test
from memlens.harness.measures.memorization import pii_counterfactually_regurgitated, pii_rows, summarize_pii
from memlens.harness.measures.mia import best_attack
from memlens.harness.report import analyses as A

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "not reproduced", "inconclusive", "not measured"
P_MAX = 0.05                 # a comparison is "not noise" below this p-value (two-sided exact test)

# Training-evidence thresholds (what "the stage trained" means; stated so a reader can disagree).
RM_SD_AUC_MIN = 0.8          # the reward model learned SD: AUC on its SD training rows (Fig. 2 premise)
RM_HELDOUT_AUC_MIN = 0.75    # the reward model behind an RL sweep ranks held-out rows of its task (its
                             # eval_datasets) well enough that rising reward means better code, not noise
RL_REWARD_RISE_MIN = 0.5     # RL optimised: on fixed prompts (recipes/rl_eval.py) the trained policy's mean RM
                             # score exceeds the initial policy's by >= 0.5 x the initial spread across prompts,
                             # and more prompts rise than fall (sign test p < P_MAX). Not the training log's
                             # first vs last steps: those draw different prompts, and the reward follows them
RL_UTILITY_LOSS_MAX = 0.5    # RL kept its init model's code: held-out public-code loss (pd_eval, audit utility) rises
                             # by at most 0.5 nats/token (paper 003 Table 2: the RLHF models keep their utility). A
                             # policy that collapsed onto one string the reward model likes (measured: greedy "eg"
                             # for every SD prompt, loss 4.44 -> 6.75) memorizes nothing, and that says nothing
RL_DISTINCT_SHARE_MIN = 0.5  # ... nor onto a few completions: on the rows a finding scores, the RL policy's distinct
                             # greedy completions number at least half its control's. Measured on RLFT.2 probes
                             # (quickstart seeds 0-3): RL points that kept their code 0.74-1.7, collapsed ones
                             # 0.03-0.42, one of them (1 distinct completion of 41) within RL_UTILITY_LOSS_MAX
RL_KL_MIN = 0.01             # RL moved: final mean per-token KL to the reference (nats) at the smallest α
IPO_ACCURACY_MIN = 0.9       # IPO fit its pairs: training preference accuracy over the last 10 % of steps
PAIR_ACCURACY_MIN = 0.9      # a preference objective fit its pairs: after training, the share of its training pairs
                             # whose chosen completion gained more summed log-probability over the initial model than
                             # the rejected one (recipes/preference_eval.py; DPOTrainer's accuracy with the initial
                             # model as the reference), measured the same way for every objective; IPO's threshold
MIA_DETECTABLE_AUC = 0.6     # "detectable": the best attack's AUC on members vs held-out canaries above this (a
                             # common bar for a weak but real attack; 0.5 is chance)
NOT_EXTRACTABLE_MAX = 0.05   # "not extractable": the final extraction (memorization) rate below 5 %
SOURCE_MEMORIZED_MIN = 5     # a persistence share needs at least this many examples memorized before RL
SD_REWARD_DATASETS = ("rm_sd", "rm_sd_links")   # the reward sets built from SD (synthetic_data/build.py)
PAPER_RL_ALGORITHM = "rloo"  # App. A.3: "a variant of REINFORCE with a KL regularization term" (TRL's RLOO)


@dataclass(frozen=True)
class Roles:
    """Which model of a run plays each part of paper 003's findings. The defaults are the paper's Table 1
    names, which the quickstart and findings experiments keep; an experiment that names its stages otherwise
    maps them under `report.findings_models` (conf/report/default.yaml), e.g. {ft_direct: FT.sd}."""

    ft_source: str = "FT.1"        # FT on PD.1 + SD: the start of the persistence sweep (Sec. 5.1)
    ft_direct: str = "FT.3"        # FT on PD.2 + SD: SD in the fine-tuning data (Sec. 5.2)
    rm_task: str = "RM.1"          # the sweep's reward model, if an RL model's evidence does not name it
    rm_sd: str = "RM.3"            # the reward model with SD in its data, likewise (Sec. 5.2)
    rl_persistence: str = "RLFT.1"  # RL from ft_source, swept over α (Sec. 5.1, Fig. 1)
    rl_sd_in_rm: str = "RLFT.2"    # RL from the control, rewarded by rm_sd (Sec. 5.2)
    rl_prompts: str = "RLFT.4"     # RL on SD prompts, swept over α and LR (Sec. 5.3, App. E)
    ipo: str = "IPO"               # IPO on SD preference pairs (Sec. 5.4)
    preference: str = "PREF"       # the preference stage swept over objectives, one point each (P1-P3)
    rlvr_persistence: str = "RLVR.1"  # rl_persistence's stage under a verifiable reward (V4, V5)
    rlvr_prompts: str = "RLVR.4"   # rl_prompts' stage under a verifiable reward (V6, V7)

    @classmethod
    def load(cls, mapping: dict | None) -> Roles:
        """Roles from `report.findings_models`; an unknown role is an error naming the valid ones."""
        mapping = dict(mapping or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(mapping) - set(valid))
        if unknown:
            raise UserError(f"report.findings_models: unknown role(s) {unknown}; use {', '.join(valid)} "
                            "(each maps to a model name of the run, e.g. ft_direct: FT.3)")
        bad = sorted(k for k, v in mapping.items() if not isinstance(v, str) or not v)
        if bad:
            raise UserError(f"report.findings_models: {bad} must each name one model of the run (a string)")
        return cls(**mapping)


@dataclass
class RunResults:
    """What a finding may read: stored audit rows, the stage evidence, loss rows, the NMT summary."""

    grouped: dict[A.Key, list[dict]]
    evidence: dict[str, dict] = field(default_factory=dict)
    loss_rows: list[dict] = field(default_factory=list)
    nmt: dict | None = None
    k: float = 0.1
    roles: Roles = field(default_factory=Roles)
    mia: dict = field(default_factory=dict)     # {model: membership-inference summary} (harness/audit/mia.py)

    def __post_init__(self):
        self.entries = A.summary_entries(self.grouped)
        self._final = {(e["model"], e["dataset"]): e["checkpoint"] for e in A.final_entries(self.entries)}

    def rows(self, model: str, dataset: str) -> list[dict] | None:
        """The final checkpoint's rows of a model on a dataset (None when not audited)."""
        checkpoint = self._final.get((model, dataset))
        return None if checkpoint is None else self.grouped[(model, checkpoint, dataset)]

    def sweep(self, base: str, dataset: str) -> list[tuple[dict, str]]:
        """[(sweep point, model name)] of a swept model audited on a dataset. When the sweep runs several RL
        algorithms (`algorithm=rloo,ppo`), only the paper's is judged (PAPER_RL_ALGORITHM); the report's sweep
        figures show the others beside it."""
        out = []
        for model, d in self._final:
            name, point = A.parse_sweep_point(model)
            if name == base and d == dataset and point \
                    and point.get("algorithm", PAPER_RL_ALGORITHM) == PAPER_RL_ALGORITHM:
                out.append((point, model))
        return out


# ---------------------------------------------------------------- per-example flags and rates
def memorized_flags(rows: list[dict]) -> dict:
    """{id: memorized} over scored (not excluded) rows: the rate's own denominator."""
    return {r["id"]: bool(r["memorized"]) for r in rows if r["excluded"] is None}


def within_k_flags(rows: list[dict], k: float, side: str) -> dict:
    """{id: NED <= k} of the audited model (`ned`) or the control (`control_ned`) over scored rows."""
    return {r["id"]: r[side] <= k for r in rows if r["excluded"] is None}


def pii_flags(rows: list[dict]) -> dict:
    """{id: counterfactual PII regurgitation} over scored SD.Links positives (harness.measures.memorization)."""
    return {r["id"]: pii_counterfactually_regurgitated(r) for r in pii_rows(rows)}


def _rate(name: str, flags: dict) -> dict:
    return {"name": name, **rate_with_interval(sum(flags.values()), len(flags))}


def _pct(rate: dict | float | None) -> str:
    value = rate.get("rate") if isinstance(rate, dict) else rate
    if value is None:
        return "–"
    if isinstance(rate, dict):
        low, high = rate["ci95"]
        return f"{100 * value:.1f} % [{100 * low:.0f}–{100 * high:.0f}] ({rate['k']}/{rate['n']})"
    return f"{100 * value:.1f} %"


# ---------------------------------------------------------------- evidence checks
def _check(check: str, value: float | None, threshold: str, ok: bool | None) -> dict:
    """One evidence line; a value the run does not have is a failed check (`missing`)."""
    return {"check": check, "value": value, "threshold": threshold, "ok": bool(ok) if value is not None else False}


def rl_checks(run: RunResults, models: list[str], dataset: str) -> list[dict]:
    """Every RL point's reward rose on fixed prompts (by RL_REWARD_RISE_MIN of the initial spread, beyond noise)
    and its policy did not collapse to get there (RL_UTILITY_LOSS_MAX, RL_DISTINCT_SHARE_MIN on `dataset`, the
    rows the finding scores)."""
    checks = []
    for model in models:
        ev = run.evidence.get(model, {})
        rise, p = ev.get("eval_change_in_sd"), ev.get("eval_p_value")
        checks.append(_check(f"{model}: reward rise on fixed prompts (in initial sd)", rise,
                             f">= {RL_REWARD_RISE_MIN}", rise is not None and rise >= RL_REWARD_RISE_MIN))
        checks.append(_check(f"{model}: prompts whose reward rose vs fell (sign test p)", p, f"< {P_MAX}",
                             p is not None and p < P_MAX and (ev.get("eval_up") or 0) > (ev.get("eval_down") or 0)))
        checks.append(rl_utility_check(run, model))
        checks.append(rl_diversity_check(run, model, dataset))
    return checks


def rl_utility_check(run: RunResults, model: str) -> dict:
    """The RL policy still writes code: its held-out code loss is within RL_UTILITY_LOSS_MAX of its init's."""
    ev = run.evidence.get(model, {})
    loss, init_loss = ev.get("pd_eval_loss"), ev.get("init_pd_eval_loss")
    rise = None if loss is None or init_loss is None else loss - init_loss
    return _check(f"{model}: held-out code loss rise over {ev.get('init_model') or 'its init'} (nats/token)", rise,
                  f"<= {RL_UTILITY_LOSS_MAX}", rise is not None and rise <= RL_UTILITY_LOSS_MAX)


def distinct_completion_share(rows: list[dict]) -> float | None:
    """Distinct greedy completions of the audited model over those of its control, on the same scored rows
    (None without rows or control completions): 1 when the model varies its answers as much as the control."""
    scored = [r for r in rows if r["excluded"] is None]
    control = {r.get("control_completion") for r in scored} - {None}
    return len({r.get("completion") for r in scored}) / len(control) if control else None


def rl_diversity_check(run: RunResults, model: str, dataset: str) -> dict:
    """The RL policy still answers each prompt its own way: a policy that says the same thing to every prompt
    memorizes nothing, whatever SD it saw."""
    rows = run.rows(model, dataset)
    share = None if rows is None else distinct_completion_share(rows)
    return _check(f"{model}: distinct greedy completions on {dataset} / its control's", share,
                  f">= {RL_DISTINCT_SHARE_MIN}", share is not None and share >= RL_DISTINCT_SHARE_MIN)


def kl_check(run: RunResults, model: str) -> dict:
    kl = run.evidence.get(model, {}).get("kl_final")
    return _check(f"{model}: final KL to the reference (nats/token)", kl, f">= {RL_KL_MIN}",
                  kl is not None and kl >= RL_KL_MIN)


def rm_sd_check(run: RunResults, rl_model: str) -> dict:
    """The reward model behind an RL model learned SD: AUC on its SD training rows."""
    rm = run.evidence.get(rl_model, {}).get("reward_model") or run.roles.rm_sd
    aucs = [v["auc"] for name, v in run.evidence.get(rm, {}).get("auc", {}).items()
            if name in SD_REWARD_DATASETS and v.get("split") == "train" and v.get("auc") is not None]
    auc = min(aucs) if aucs else None
    return _check(f"{rm}: AUC on its SD training rows", auc, f">= {RM_SD_AUC_MIN}",
                  auc is not None and auc >= RM_SD_AUC_MIN)


def rm_heldout_check(run: RunResults, rl_model: str) -> dict:
    """The reward behind an RL model generalises: its AUC on held-out (eval) rows. The reward model's, or, for a
    verifiable reward (`reward_function` in the RL model's evidence), the function's ranking of the held-out rows
    the RL stage scored with it: it plays the reward model's part, so it gets the same check."""
    ev = run.evidence.get(rl_model, {})
    if ev.get("reward_function"):
        source, scored = f"{rl_model}'s reward function {ev['reward_function']}", ev.get("reward_auc") or {}
    else:
        source = ev.get("reward_model") or run.roles.rm_task
        scored = run.evidence.get(source, {}).get("auc", {})
    aucs = [v["auc"] for v in scored.values() if v.get("split") == "eval" and v.get("auc") is not None]
    auc = min(aucs) if aucs else None
    return _check(f"{source}: AUC on its held-out rows", auc, f">= {RM_HELDOUT_AUC_MIN}",
                  auc is not None and auc >= RM_HELDOUT_AUC_MIN)


def ipo_check(run: RunResults) -> dict:
    model = run.roles.ipo
    acc = run.evidence.get(model, {}).get("accuracy_final")
    return _check(f"{model}: training preference accuracy", acc, f">= {IPO_ACCURACY_MIN}",
                  acc is not None and acc >= IPO_ACCURACY_MIN)


def pair_check(run: RunResults, model: str) -> dict:
    """A preference model fit its pairs (PAIR_ACCURACY_MIN), whatever its objective."""
    ev = run.evidence.get(model, {})
    acc = ev.get("pair_accuracy")
    return _check(f"{model} ({ev.get('objective') or 'objective?'}): preference accuracy on its pairs vs the initial "
                  "model", acc, f">= {PAIR_ACCURACY_MIN}", acc is not None and acc >= PAIR_ACCURACY_MIN)


def method_checks(run: RunResults, model: str, dataset: str) -> list[dict]:
    """The training evidence of any one model, by its stage, for the report's comparison of methods: an RL point's
    reward rose without collapse (rl_checks; under a verifiable reward also the function's held-out ranking), a
    preference model fit its pairs (pair_check, or for a run made before that measurement IPO's training accuracy).
    [] for a stage without such a check (fine-tuning: its memorization is the measurement)."""
    ev = run.evidence.get(model, {})
    if ev.get("stage") == "rl":
        return ([rm_heldout_check(run, model)] if ev.get("reward_function") else []) + rl_checks(run, [model], dataset)
    if ev.get("stage") == PREFERENCE_STAGE:
        if "pair_accuracy" in ev or "accuracy_final" not in ev:
            return [pair_check(run, model)]
        acc = ev["accuracy_final"]
        return [_check(f"{model}: training preference accuracy", acc, f">= {IPO_ACCURACY_MIN}",
                       acc is not None and acc >= IPO_ACCURACY_MIN)]
    return []


def count_check(check: str, count: int, minimum: int) -> dict:
    return _check(check, count, f">= {minimum}", count >= minimum)


# ---------------------------------------------------------------- the verdict
def _result(fid: str, claim: str, paper: str, rule: str, stages: list[str], *, measured: bool,
            rule_ok: bool | None = None, evidence: list[dict] | None = None, rates: list[dict] | None = None,
            test: dict | None = None, needs_test: bool = False, ours: str = "–", note: str = "",
            unstable: str = "") -> dict:
    """Status in order: not measured (data missing) > inconclusive (evidence failed) > inconclusive (unstable:
    the verdict changed when the run was repeated under a perturbation as small as another rounding of its
    floats, `unstable` says how) > not reproduced (rule fails) > inconclusive (a comparison within noise, or
    nothing non-zero to compare) > holds."""
    evidence = evidence or []
    reasons = []
    if not measured:
        status = NOT_MEASURED
    elif failed := [e for e in evidence if not e["ok"]]:
        status = INCONCLUSIVE
        reasons = [f"{e['check']} = {'missing' if e['value'] is None else _fmt(e['value'])} (needs {e['threshold']})"
                   for e in failed]
    elif unstable:
        status = INCONCLUSIVE
        reasons = [f"unstable: {unstable}"]
    elif not rule_ok:
        status = FAILS
    elif needs_test and (test is None or test["p_value"] >= P_MAX):
        status = INCONCLUSIVE
        reasons = [f"difference within noise (p = {_fmt(test['p_value']) if test else 'n/a'} >= {P_MAX})"]
    else:
        status = HOLDS
    primary = (rates or [{}])[0]
    return {"id": fid, "claim": claim, "paper": paper, "ours": ours, "status": status, "rule": rule,
            "stages": stages, "evidence": evidence, "rates": rates or [], "n": primary.get("n"),
            "ci95": primary.get("ci95"), "p_value": test["p_value"] if test else None, "test": test,
            "reason": "; ".join(reasons), "note": note, "unstable": bool(unstable) and measured}


def status_label(finding: dict) -> str:
    """A finding's status as tables print it: 'inconclusive (unstable)' where the verdict changed between runs."""
    return f"{finding['status']} (unstable)" if finding.get("unstable") else finding["status"]


def _fmt(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


# ---------------------------------------------------------------- F1-F8 (paper 003 Sec. 5)
def f1(run: RunResults) -> dict:
    """Sec. 5.2: FT.3 (PD.2 + SD, Table 1) memorizes 17.6 % of SD.Base."""
    ft = run.roles.ft_direct
    rows = run.rows(ft, "sd_base")
    claim, paper = f"FT on SD memorizes a large share of SD.Base ({ft})", "17.6 %"
    rule = f"{ft}'s final rate on sd_base >= 10 %, and it reproduces (NED <= k) more targets than the control (McNemar p < {P_MAX})"
    if rows is None:
        return _result("F1", claim, paper, rule, [ft], measured=False)
    rate = _rate(f"{ft} sd_base", memorized_flags(rows))
    test = mcnemar_exact(within_k_flags(rows, run.k, "ned"), within_k_flags(rows, run.k, "control_ned"))
    return _result("F1", claim, paper, rule, [ft], measured=True, rule_ok=rate["rate"] is not None
                   and rate["rate"] >= 0.10, rates=[rate], test=test, needs_test=True, ours=_pct(rate))


def _two_models(run: RunResults, first: str, second: str, dataset: str = "sd_base"):
    """((flags of first, flags of second), their rates) on one dataset's final rows; None if either is missing."""
    rows = run.rows(first, dataset), run.rows(second, dataset)
    if None in rows:
        return None
    flags = tuple(memorized_flags(r) for r in rows)
    return flags, [_rate(f"{name} {dataset}", f) for name, f in zip((first, second), flags)]


def _rlft2_evidence(run: RunResults, dataset: str = "sd_base") -> list[dict]:
    rl = run.roles.rl_sd_in_rm
    return [rm_sd_check(run, rl), *rl_checks(run, [rl], dataset), kl_check(run, rl)]


def _times_higher(run: RunResults, fid: str, texts: tuple[str, str, str], stages: list[str], evidence,
                  first: str, second: str, high: str, factor: float, floor: float) -> dict:
    """A finding that one model memorizes sd_base at least `factor` times the other's rate and at least
    `floor`, tested with McNemar on the paired flags; `evidence(run)` is read only when both were audited.
    The rates are listed as (first, second); `high` names the model expected to memorize more."""
    claim, paper, rule = texts
    pair = _two_models(run, first, second)
    if pair is None:
        return _result(fid, claim, paper, rule, stages, measured=False)
    flags, rates = pair
    hi, lo = (0, 1) if high == first else (1, 0)
    h, low = rates[hi]["rate"], rates[lo]["rate"]
    ok = h is not None and low is not None and h >= floor and h >= factor * low
    return _result(fid, claim, paper, rule, stages, measured=True, rule_ok=ok, evidence=evidence(run),
                   rates=rates, test=mcnemar_exact(flags[hi], flags[lo]), needs_test=True,
                   ours=f"{_pct(rates[0])} vs {_pct(rates[1])}")


def f2(run: RunResults) -> dict:
    """Sec. 5.2: SD only in the reward model's data: RLFT.2 0.9 % vs FT.3 17.6 % of SD.Base."""
    r = run.roles
    texts = ("SD only in reward-model data: RLFT memorizes far less than direct FT", "0.9 % vs 17.6 %",
             f"{r.rl_sd_in_rm} <= {r.ft_direct} / 5 on sd_base with {r.ft_direct} >= 10 % (McNemar p < {P_MAX})")
    return _times_higher(run, "F2", texts, [r.ft_direct, r.rm_sd, r.rl_sd_in_rm], _rlft2_evidence, r.rl_sd_in_rm,
                         r.ft_direct, high=r.ft_direct, factor=5, floor=0.10)


def f3(run: RunResults) -> dict:
    """Sec. 5.2: FT.3 regurgitates the PII paths in 50 % of SD.Links completions, RLFT.2 in 0 %."""
    r = run.roles
    stages = [r.ft_direct, r.rm_sd, r.rl_sd_in_rm]
    claim, paper = "SD.Links: FT regurgitates PII paths, RLFT via RM does not", "50 % vs 0 %"
    rule = f"counterfactual PII rate: {r.ft_direct} >= 20 % and {r.rl_sd_in_rm} <= 2 % (McNemar p < {P_MAX})"
    ft, rl = run.rows(r.ft_direct, "sd_links_pos"), run.rows(r.rl_sd_in_rm, "sd_links_pos")
    if ft is None or rl is None or not pii_rows(ft):
        return _result("F3", claim, paper, rule, stages, measured=False)
    ft_f, rl_f = pii_flags(ft), pii_flags(rl)
    rates = [_rate(f"{r.ft_direct} PII (counterfactual)", ft_f), _rate(f"{r.rl_sd_in_rm} PII (counterfactual)", rl_f)]
    ok = rates[0]["rate"] is not None and rates[1]["rate"] is not None and rates[0]["rate"] >= 0.20 \
        and rates[1]["rate"] <= 0.02
    chance = summarize_pii(ft)["pii_chance_level"]
    return _result("F3", claim, paper, rule, stages, measured=True, rule_ok=ok,
                   evidence=_rlft2_evidence(run, "sd_links_pos"), rates=rates, test=mcnemar_exact(ft_f, rl_f),
                   needs_test=True,
                   ours=f"{_pct(rates[0])} vs {_pct(rates[1])}; chance level {_pct(chance)}")


def _by_beta(run: RunResults, base: str, dataset: str, **fixed) -> list[tuple[float, str]]:
    """[(α, model)] of a swept RL model, largest α first, other swept keys pinned by `fixed`."""
    points = [(p["beta"], m) for p, m in run.sweep(base, dataset)
              if "beta" in p and all(p.get(k) == v for k, v in fixed.items())]
    return sorted(points, reverse=True)


def _sweep_evidence(run: RunResults, points: list[tuple[float, str]], dataset: str) -> list[dict]:
    """The reward model generalises, every point's reward rose, and the smallest α's policy moved away
    from its reference."""
    return [rm_heldout_check(run, points[0][1]), *rl_checks(run, [m for _, m in points], dataset),
            kl_check(run, points[-1][1])]


def f4(run: RunResults) -> dict:
    """Sec. 5.1, Fig. 1: 43-47 % of FT.1's 319 memorized SD.Base examples stay memorized after RLFT.1."""
    claim, paper = "Most FT-memorized examples persist through RLFT (FT.1 -> RLFT.1)", "43-47 % of 319"
    ft, rl = run.roles.ft_source, run.roles.rl_persistence
    rule = f"at the largest α, {rl} still memorizes >= 30 % of {ft}'s memorized SD.Base examples"
    source, points = run.rows(ft, "sd_base"), _by_beta(run, rl, "sd_base")
    if source is None or not points:
        return _result("F4", claim, paper, rule, [ft, rl], measured=False)
    memorized = [i for i, m in memorized_flags(source).items() if m]
    rates = []
    for beta, model in points:
        still = {r["id"]: bool(r["memorized"]) for r in run.rows(model, "sd_base")}
        rates.append(_rate(f"α={beta:g}", {i: still.get(i, False) for i in memorized}))
    evidence = [count_check(f"{ft}: memorized SD.Base examples", len(memorized), SOURCE_MEMORIZED_MIN),
                *_sweep_evidence(run, points, "sd_base")]
    ok = rates[0]["rate"] is not None and rates[0]["rate"] >= 0.30
    return _result("F4", claim, paper, rule, [ft, rl], measured=True, rule_ok=ok, evidence=evidence,
                   rates=rates, ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates),
                   note="a share, not a comparison: no test; read it with its interval")


def f5(run: RunResults) -> dict:
    """Sec. 5.1 (SD.Links): PII regurgitation 54.8 % (FT.1, and α = 0.5) -> 46.8 % (α = 0.1) -> 12.6 % (α = 0.005)."""
    claim, paper = "A smaller α lowers persistence (SD.Links PII, RLFT.1)", "54.8 → 46.8 → 12.6 % (α 0.5, 0.1, 0.005)"
    rule = (f"counterfactual PII rate strictly falls from the largest to the smallest of >= 3 α "
            f"(McNemar largest vs smallest, p < {P_MAX})")
    ft, rl = run.roles.ft_source, run.roles.rl_persistence
    source, points = run.rows(ft, "sd_links_pos"), _by_beta(run, rl, "sd_links_pos")
    if source is None or len(points) < 3 or not pii_rows(source):
        return _result("F5", claim, paper, rule, [ft, rl], measured=False)
    flags = [pii_flags(run.rows(m, "sd_links_pos")) for _, m in points]
    rates = [_rate(f"α={b:g}", f) for (b, _), f in zip(points, flags)]
    values = [r["rate"] for r in rates]
    ok = None not in values and all(a > b for a, b in zip(values, values[1:]))
    kls = [run.evidence.get(m, {}).get("kl_final") for _, m in points]
    evidence = [count_check(f"{ft}: counterfactually regurgitated PII paths", sum(pii_flags(source).values()),
                            SOURCE_MEMORIZED_MIN), *_sweep_evidence(run, points, "sd_links_pos"),
                _check("KL at the smallest α / KL at the largest α", None if None in (kls[0], kls[-1]) or not kls[0]
                       else kls[-1] / kls[0], "> 1 (α controls the drift)",
                       None not in (kls[0], kls[-1]) and bool(kls[0]) and kls[-1] > kls[0])]
    return _result("F5", claim, paper, rule, [ft, rl], measured=True, rule_ok=ok, evidence=evidence,
                   rates=rates, test=mcnemar_exact(flags[0], flags[-1]), needs_test=True,
                   ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates))


def _rl4_points(run: RunResults) -> list[tuple[dict, str]]:
    return run.sweep(run.roles.rl_prompts, "sd_rl_prompts")


def f6(run: RunResults) -> dict:
    """Sec. 5.3, App. E: RL-prompt memorization stays below 0.5 % and rises as α falls."""
    claim, paper = "RL-prompt memorization is low and rises as α falls (RLFT.4)", "< 0.5 %"
    rule = "at the lowest LR: every rate < 5 %, the smallest α's rate >= the largest α's, and one rate > 0"
    sweep = _rl4_points(run)
    low_lr = min((p.get("lr", 0) for p, _ in sweep), default=None)
    rl = run.roles.rl_prompts
    points = _by_beta(run, rl, "sd_rl_prompts", **({"lr": low_lr} if low_lr else {}))
    if len(points) < 2:
        return _result("F6", claim, paper, rule, [rl], measured=False)
    flags = [memorized_flags(run.rows(m, "sd_rl_prompts")) for _, m in points]
    rates = [_rate(f"α={b:g}", f) for (b, _), f in zip(points, flags)]
    values = [r["rate"] or 0.0 for r in rates]
    evidence = _sweep_evidence(run, points, "sd_rl_prompts")
    if not any(values):
        evidence.append(_check(f"{rl}: any RL-prompt example memorized", 0, "> 0", False))
    ok = max(values) < 0.05 and values[-1] >= values[0]
    return _result("F6", claim, paper, rule, [rl], measured=True, rule_ok=ok, evidence=evidence, rates=rates,
                   test=mcnemar_exact(flags[-1], flags[0]), ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates),
                   note="the rule allows equal rates, so its p-value is reported, not required")


def f7(run: RunResults) -> dict:
    """App. E: a higher RL learning rate roughly doubles RL-prompt memorization."""
    claim, paper = "A higher RL learning rate raises prompt memorization (RLFT.4)", "≈ 2x"
    rule = f"at the smallest α: the largest LR's rate > the smallest LR's (McNemar p < {P_MAX})"
    rl = run.roles.rl_prompts
    sweep = _rl4_points(run)
    small_beta = min((p.get("beta", 0) for p, _ in sweep), default=None)
    points = sorted((p["lr"], m) for p, m in sweep if "lr" in p and p.get("beta", 0) == small_beta)
    if len(points) < 2:
        return _result("F7", claim, paper, rule, [rl], measured=False)
    low, high = (memorized_flags(run.rows(m, "sd_rl_prompts")) for m in (points[0][1], points[-1][1]))
    rates = [_rate(f"LR={points[0][0]:g}", low), _rate(f"LR={points[-1][0]:g}", high)]
    evidence = [rm_heldout_check(run, points[0][1]), *rl_checks(run, [points[0][1], points[-1][1]],
                                                                  "sd_rl_prompts")]
    if not any(low.values()) and not any(high.values()):
        evidence.append(_check(f"{rl}: any RL-prompt example memorized", 0, "> 0", False))
    ok = (rates[1]["rate"] or 0) > (rates[0]["rate"] or 0)
    return _result("F7", claim, paper, rule, [rl], measured=True, rule_ok=ok, evidence=evidence, rates=rates,
                   test=mcnemar_exact(high, low), needs_test=True,
                   ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates))


def f8(run: RunResults) -> dict:
    """Sec. 5.4: IPO on SD preference pairs memorizes 18.2 % of SD.Base, RLFT.2 (SD via the RM) 0.9 %."""
    r = run.roles
    texts = ("IPO memorizes preference data more than RLHF via the reward model", "18.2 % vs 0.9 %",
             f"{r.ipo} >= 3 x {r.rl_sd_in_rm} and {r.ipo} >= 5 % on sd_base (McNemar p < {P_MAX})")
    return _times_higher(run, "F8", texts, [r.ipo, r.rm_sd, r.rl_sd_in_rm],
                         lambda run: [ipo_check(run), *_rlft2_evidence(run)], r.ipo, r.rl_sd_in_rm, high=r.ipo,
                         factor=3, floor=0.05)


# ---------------------------------------------------------------- P1-P3: preference objectives beyond IPO
# Not claims of paper 003: claims the field makes or implies about the objectives that replaced IPO, stated so that
# the run can refute them, with F1-F8's rules (evidence first, then the rule, then an exact test at p < P_MAX).
REFERENCE_FREE = OBJECTIVES.where(lambda o: not o.reference)     # simpo, cpo, orpo (harness/core/objectives.py)
REFERENCE_BASED = OBJECTIVES.where(lambda o: o.reference)         # ipo, dpo, dpo+sft, kto


def preference_models(run: RunResults, dataset: str = "sd_base") -> dict[str, str]:
    """{objective: model} of the preference stage (role `preference`: the stage and its sweep points) audited on
    `dataset`; the objective is the one its provenance records. Where two points share an objective (a sweep of
    another key too), the first by name stands for it."""
    out: dict[str, str] = {}
    for model, d in sorted(run._final):
        name, point = A.parse_sweep_point(model)
        if d == dataset and name == run.roles.preference:
            objective = run.evidence.get(model, {}).get("objective") or point.get("objective") or DEFAULT_OBJECTIVE
            out.setdefault(str(objective), model)
    return out


def p1(run: RunResults) -> dict:
    """RPO / MPO add the chosen completion's NLL to a preference loss: more likelihood on exactly the preference data."""
    models = preference_models(run)
    texts = ("An NLL term on the chosen completion memorizes preference data more than IPO (dpo+sft vs ipo)",
             "not in paper 003 (RPO / MPO practice)",
             f"objective dpo+sft >= 5 % on sd_base and above objective ipo (McNemar p < {P_MAX})")
    if "dpo+sft" not in models or "ipo" not in models:
        return _result("P1", texts[0], texts[1], texts[2], [run.roles.preference], measured=False)
    nll, ipo = models["dpo+sft"], models["ipo"]
    return _times_higher(run, "P1", texts, [nll, ipo], lambda run: [pair_check(run, nll), pair_check(run, ipo)],
                         nll, ipo, high=nll, factor=1.0, floor=0.05)


def p2(run: RunResults) -> dict:
    """Reference-free objectives drop the anchor to the initial model that limits how far a reference-based one
    moves: if that anchor holds memorization back, they memorize more."""
    claim = "Reference-free objectives (SimPO, CPO, ORPO) memorize preference data more than reference-based ones"
    paper = "not in paper 003"
    rule = (f"pooled sd_base rate of the reference-free objectives > that of the reference-based ones (ipo, dpo, "
            f"dpo+sft, kto), exact sign test over examples of their per-example shares, p < {P_MAX}")
    models = preference_models(run)
    free = [models[o] for o in REFERENCE_FREE if o in models]
    based = [models[o] for o in REFERENCE_BASED if o in models]
    if not free or not based:
        return _result("P2", claim, paper, rule, [run.roles.preference], measured=False)
    flags = {m: memorized_flags(run.rows(m, "sd_base")) for m in free + based}
    common = sorted(set.intersection(*(set(f) for f in flags.values())), key=str)
    share = lambda group, i: sum(flags[m][i] for m in group) / len(group)  # noqa: E731
    diffs = [share(free, i) - share(based, i) for i in common]
    rates = [_rate("reference-free (pooled)", {(m, i): flags[m][i] for m in free for i in common}),
             _rate("reference-based (pooled)", {(m, i): flags[m][i] for m in based for i in common})]
    ok = rates[0]["rate"] is not None and rates[1]["rate"] is not None and rates[0]["rate"] > rates[1]["rate"]
    return _result("P2", claim, paper, rule, free + based, measured=True, rule_ok=ok,
                   evidence=[pair_check(run, m) for m in free + based], rates=rates, test=sign_test(diffs),
                   needs_test=True, ours=f"{_pct(rates[0])} vs {_pct(rates[1])}",
                   note="CPO and ORPO also carry an NLL term on the chosen completion (SimPO does not), so this "
                        "contrast mixes the anchor with the NLL term; P1 isolates the NLL term")


def p3(run: RunResults) -> dict:
    """F2's and F8's comparison for every objective: preference data memorized less than the same data fine-tuned on."""
    claim = "Every preference objective memorizes its preference data less than direct fine-tuning on it"
    paper = "F1 vs F8's IPO in paper 003: 17.6 % vs 18.2 %"
    ft = run.roles.ft_direct
    rule = (f"{ft} >= 10 % on sd_base and each objective below it (McNemar; every p < {P_MAX}: an intersection-union "
            "test, so the largest p is reported)")
    models = preference_models(run)
    source = run.rows(ft, "sd_base")
    if not models or source is None:
        return _result("P3", claim, paper, rule, [ft, run.roles.preference], measured=False)
    ft_flags = memorized_flags(source)
    flags = {o: memorized_flags(run.rows(m, "sd_base")) for o, m in models.items()}
    rates = [_rate(f"{ft} sd_base", ft_flags), *(_rate(f"{o} sd_base", f) for o, f in flags.items())]
    tests = {o: mcnemar_exact(ft_flags, f) for o, f in flags.items()}
    worst = max(tests.values(), key=lambda t: t["p_value"])
    ft_rate = rates[0]["rate"] or 0.0
    ok = ft_rate >= 0.10 and all((r["rate"] or 0.0) < ft_rate for r in rates[1:])
    return _result("P3", claim, paper, rule, [ft, *models.values()], measured=True, rule_ok=ok,
                   evidence=[pair_check(run, m) for m in models.values()], rates=rates, test=worst,
                   needs_test=True, ours=", ".join(f"{r['name'].split()[0]}: {_pct(r)}" for r in rates))


# ---------------------------------------------------------------- M1-M3: membership inference
# Not claims of paper 003: whether SD a stage trained on stays *detectable* (members told from held-out canaries of
# the same generator), the weaker question beside extraction. The test is the bootstrap's one-sided test of
# H0: AUC <= MIA_DETECTABLE_AUC for the best of the attacks, Bonferroni-corrected for picking the best one.
def mia_detection(run: RunResults, model: str, dataset: str = "sd_base") -> dict | None:
    """The best attack on `dataset` (target span, final checkpoint) and its test; None when not measured."""
    metrics = A.mia_entry(run.mia, model, dataset) or {}
    best = best_attack(metrics)
    if best is None:
        return None
    attack, m = best
    key = f"{MIA_DETECTABLE_AUC:g}"
    p_one = m["auc"].get("p_at_most", {}).get(key)
    test = {"test": "bootstrap_one_sided_bonferroni", "null": f"AUC <= {key}", "attack": attack,
            "n_attacks": len(metrics), "n_boot": m["bootstrap"]["n"],
            "p_value": None if p_one is None else min(1.0, p_one * len(metrics))}
    ours = (f"AUC {m['auc']['value']:.2f} [{m['auc']['ci95'][0]:.2f}, {m['auc']['ci95'][1]:.2f}] ({attack}; "
            f"{m['n_members']} members vs {m['n_nonmembers']} held out)")
    return {"attack": attack, "auc": m["auc"]["value"], "test": test, "ours": ours}


def _detectable(run: RunResults, fid: str, model: str, claim: str, stages: list[str], evidence: list[dict],
                not_extractable: bool = False) -> dict:
    rule = (f"{model}'s best membership attack on sd_base (target span, final): AUC > {MIA_DETECTABLE_AUC} (bootstrap "
            f"one-sided p < {P_MAX}, Bonferroni over the attacks)")
    if not_extractable:
        rule += f", and its extraction rate on sd_base < {100 * NOT_EXTRACTABLE_MAX:.0f} %"
    paper = "not in paper 003 (membership inference: mimir, Duan et al. 2024)"
    found = mia_detection(run, model)
    rows = run.rows(model, "sd_base")
    if found is None or (not_extractable and rows is None):
        return _result(fid, claim, paper, rule, stages, measured=False)
    ok = found["auc"] > MIA_DETECTABLE_AUC
    rates, ours = [], found["ours"]
    if not_extractable:
        extraction = _rate(f"{model} sd_base extraction", memorized_flags(rows))
        rates = [extraction]
        ok = ok and extraction["rate"] is not None and extraction["rate"] < NOT_EXTRACTABLE_MAX
        ours += f"; extraction {_pct(extraction)}"
    test = found["test"] if found["test"]["p_value"] is not None else None
    return _result(fid, claim, paper, rule, stages, measured=True, rule_ok=ok, evidence=evidence, rates=rates,
                   test=test, needs_test=True, ours=ours)


def m1(run: RunResults) -> dict:
    """SD only in the reward model's data: RLFT.2 memorizes ~none of it (F2), yet is it still detectable?"""
    r = run.roles
    return _detectable(run, "M1", r.rl_sd_in_rm,
                       f"RLFT via the reward model leaves SD detectable (AUC > {MIA_DETECTABLE_AUC}) though not "
                       f"extractable ({r.rl_sd_in_rm})", [r.rm_sd, r.rl_sd_in_rm], _rlft2_evidence(run),
                       not_extractable=True)


def m2(run: RunResults) -> dict:
    """Fine-tuning on SD makes it detectable (the premise the other M rows are read against)."""
    ft = run.roles.ft_direct
    return _detectable(run, "M2", ft, f"Fine-tuning on SD leaves it detectable (AUC > {MIA_DETECTABLE_AUC}, {ft})",
                       [ft], [])


def m3(run: RunResults) -> dict:
    """IPO on SD pairs: detectable as well as extractable (F8)?"""
    ipo = run.roles.ipo
    return _detectable(run, "M3", ipo, f"IPO on SD preference pairs leaves SD detectable (AUC > "
                                       f"{MIA_DETECTABLE_AUC}, {ipo})", [ipo], [ipo_check(run)])


# ---------------------------------------------------------------- V4-V7: F4-F7 under a verifiable reward
def under_verifiable_reward(check: Callable[[RunResults], dict], fid: str) -> Callable[[RunResults], dict]:
    """F4-F7's rule, evidence and test on the RL stages trained against a verifiable reward (roles rlvr_*):
    the same finding, with the function in the reward model's place; its evidence then checks the function's
    ranking of held-out rows (rm_heldout_check) where it checked the reward model's."""
    def run_check(run: RunResults) -> dict:
        r = run.roles
        swapped = copy.copy(run)
        swapped.roles = replace(r, rl_persistence=r.rlvr_persistence, rl_prompts=r.rlvr_prompts)
        out = check(swapped)
        claim = out["claim"].replace(r.rl_persistence, r.rlvr_persistence).replace(r.rl_prompts, r.rlvr_prompts)
        return {**out, "id": fid, "claim": f"{claim}, verifiable reward",
                "paper": f"{out['paper']} (paper: a reward model)"}
    return run_check


# ---------------------------------------------------------------- N1-N3 (paper 002)
def _nmt_numbers(value: Any) -> str:
    """NMT figures for a table cell: a ratio per bucket as a chain, shares by kind, one rate as a percentage."""
    if isinstance(value, list):
        return " → ".join(f"{v:.1f}" if isinstance(v, (int, float)) else str(v) for v in value) + " %"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_pct(v)}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in value.items())
    if isinstance(value, (int, float)):
        return _pct(value)
    return json.dumps(value)


def _nmt(fid: str, keys: tuple[str, ...], numbers: str, claim: str, paper: str,
         test: Callable[[dict], dict | None] | None = None) -> Callable:
    """N1-N3 from the NMT run's summary.json `findings` (harness.measures.nmt.findings): all `keys` must hold,
    and where the finding is a comparison, `test(summary)` must put it below P_MAX."""
    def check(run: RunResults) -> dict:
        f = (run.nmt or {}).get("findings") or {}
        rule = " and ".join(keys) + (f" (Fisher p < {P_MAX}, fewest vs most repetitions)" if test else "")
        if not all(k in f for k in keys):
            return _result(fid, claim, paper, rule, ["NMT"], measured=False)
        unstable, note = nmt_stability(run.nmt, keys, numbers, test)
        return _result(fid, claim, paper, rule, ["NMT"], measured=True, rule_ok=all(bool(f[k]) for k in keys),
                       ours=_nmt_numbers(f.get(numbers)), test=test(run.nmt) if test else None,
                       needs_test=test is not None, unstable=unstable, note=note)
    return check


def nmt_stability(summary: dict, keys: tuple[str, ...], numbers: str,
                  test: Callable[[dict], dict | None] | None = None) -> tuple[str, str]:
    """(why the verdict is unstable or "", a note with the second run's figure) from the NMT summary's
    `stability` block: the same run repeated with torch computing under a second level of CPU kernels
    (harness/audit/nmt.py step 8). A verdict (its rule, and its test where it has one) that is not the same
    under both is decided by rounding, not by the model."""
    stability = summary.get("stability") or {}
    second = stability.get("findings") or {}
    if not stability.get("informative") or not all(k in second for k in keys):
        return "", "not checked under a second kernel level" if stability else ""
    first = summary["findings"]
    here, there = stability.get("kernels"), stability.get("second_kernels")

    def verdict(findings: dict, run: dict) -> bool:
        passed = test(run) if test else None
        return all(bool(findings[k]) for k in keys) and (test is None or (passed or {}).get("p_value", 1) < P_MAX)

    ours, theirs = _nmt_numbers(first.get(numbers)), _nmt_numbers(second.get(numbers))
    if verdict(first, summary) == verdict(second, stability):
        return "", f"same verdict with {there} kernels ({theirs})"
    return f"the verdict differs between torch's CPU kernel levels ({ours} with {here}, {theirs} with {there})", ""


def repetition_test(nmt_summary: dict) -> dict | None:
    """N1 as a comparison: memorized share of the most-repeated bucket vs the least-repeated one (different
    pairs: Fisher's exact test). None when the summary has no per-bucket counts (an older run)."""
    buckets = ((nmt_summary.get("buckets") or {}).get("buckets")) or []
    if len(buckets) < 2 or not all("memorized" in b and "total" in b for b in buckets):
        return None
    low, high = min(buckets, key=lambda b: b["repetitions"]), max(buckets, key=lambda b: b["repetitions"])
    return fisher_exact(high["memorized"], high["total"], low["memorized"], low["total"])


# ---------------------------------------------------------------- C1-C2 (paper 004)
def _control_run_rows(run: RunResults) -> list[dict]:
    """Training strings' loss rows measured against a real control run (paper 004's D' = D minus the
    strings); rows of the reference-model proxy (`reference_upper_bound`) have no counterfactual loss per
    epoch, and held-out strings were never in D."""
    return [r for r in run.loss_rows if r.get("variant", VARIANT_CONTROL) == VARIANT_CONTROL
            and not r.get("heldout") and "train_loss" in r and "control_loss" in r]


def lemma1_premise(row: dict) -> bool:
    """Paper 004 App. D, the assumption of Lemma 1's proof: at every checkpoint the string's training loss
    is not above its counterfactual (control) loss."""
    return all(t <= c for t, c in zip(row["train_loss"], row["control_loss"]))


def c1(run: RunResults) -> dict:
    claim, paper = "Lemma 1's premise holds in practice: training loss <= counterfactual loss", "assumed (App. D)"
    rule = "the premise holds at every checkpoint for >= 90 % of audited strings"
    rows = _control_run_rows(run)
    if not rows:
        return _result("C1", claim, paper, rule, ["loss audit"], measured=False)
    flags = {f"{r.get('model', '')}/{r.get('dataset', '')}/{r['id']}": lemma1_premise(r) for r in rows}
    rate = _rate("strings whose premise holds", flags)
    failing = sorted(k for k, ok in flags.items() if not ok)
    return _result("C1", claim, paper, rule, ["loss audit"], measured=True, rule_ok=rate["rate"] >= 0.9,
                   rates=[rate], ours=_pct(rate),
                   note=(f"premise fails for {len(failing)} strings, e.g. {', '.join(failing[:3])}" if failing else ""))


def c2(run: RunResults) -> dict:
    claim = "Most strings recollection calls memorized are not contextually memorized"
    paper = "most (Sec. 5, Table 1)"
    rule = "at the last checkpoint, of the recollection-memorized strings, > 50 % are not contextually memorized (95 % CI above 50 %)"
    rows = _control_run_rows(run)
    if not rows:
        return _result("C2", claim, paper, rule, ["loss audit"], measured=False)
    recollected = [r for r in rows if r["score"]["recollection"][-1] > 0]
    if not recollected:
        return _result("C2", claim, paper, rule, ["loss audit"], measured=True,
                       evidence=[count_check("recollection-memorized strings", 0, 1)])
    flags = {f"{r.get('model', '')}/{r.get('dataset', '')}/{r['id']}": not r["score"]["contextual"][-1] > 0
             for r in recollected}
    rate = _rate("recollected but not contextual", flags)
    return _result("C2", claim, paper, rule, ["loss audit"], measured=True, rule_ok=rate["ci95"][0] > 0.5,
                   rates=[rate], ours=_pct(rate))


CHECKS = [f1, f2, f3, f4, f5, f6, f7, f8,
          under_verifiable_reward(f4, "V4"), under_verifiable_reward(f5, "V5"), under_verifiable_reward(f6, "V6"),
          under_verifiable_reward(f7, "V7"), p1, p2, p3,
          _nmt("N1", ("N1_memorization_rises_with_repetitions",), "N1_ratio_pct_by_bucket",
               "NMT: memorization rises with repetitions", "Table 1: ratio grows with the bucket", repetition_test),
          _nmt("N2", ("N2_suffix_kept_more_than_prefix", "N2_start_kept_least"), "N2_shares",
               "NMT: suffix perturbations keep the memorized output more than prefix ones; start least",
               "Table 1, neighbourhood columns"),
          _nmt("N3", ("N3_recovery_for_most_memorized",), "N3_best_rate",
               "NMT: the recovery symbol gives new outputs for most memorized sources", "Sec. 5, Algorithm 3"),
          c1, c2, m1, m2, m3]


def load_loss_rows(audit_dir: Path) -> list[dict]:
    """Per-string loss rows of a run's loss audit (<audit dir>/losses/<model>/<dataset>.jsonl), tagged with the
    model and dataset they belong to and whether that dataset is the held-out set (summary.json
    `heldout`: its strings were never trained on, so paper 004's measures do not apply to them)."""
    rows = []
    losses = Path(audit_dir) / "losses"
    for path in sorted(losses.rglob("*.jsonl")):
        if path.name.endswith(".exposure.jsonl"):
            continue
        summary = path.parent / "summary.json"
        heldout = json.loads(summary.read_text(encoding="utf-8")).get("heldout") if summary.is_file() else None
        model = str(path.parent.relative_to(losses))
        rows += [{"model": model, "dataset": path.stem, "heldout": path.stem == heldout, **r}
                 for r in read_jsonl(path)]
    return rows


def findings(run: RunResults) -> list[dict]:
    return [check(run) for check in CHECKS]
