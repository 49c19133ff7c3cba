"""Findings F1-F8 of paper 003 Sec. 5 (5.1: FT.1 -> RLFT.1 persistence, Fig. 1; 5.2: SD only in the reward
model's data, FT.3 vs RLFT.2; 5.3 and App. E: RL-prompt memorization, RLFT.4; 5.4: IPO vs RLHF), and V4-V7:
F4-F7 on the RL stages trained against a verifiable reward."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace

from memlens.harness.core.stats import mcnemar_exact
from memlens.harness.measures.memorization import pii_rows, summarize_pii
from memlens.harness.report.findings.comparisons import _times_higher
from memlens.harness.report.findings.evidence_gates import (
    SOURCE_MEMORIZED_MIN,
    _rlft2_evidence,
    count_check,
    ipo_check,
    kl_check,
    rl_checks,
    rm_heldout_check,
)
from memlens.harness.report.findings.registry import Finding, register
from memlens.harness.report.findings.run import RunResults, _rate, memorized_flags, pii_flags, within_k_flags
from memlens.harness.report.findings.verdict import P_MAX, FindingResult, _check, _pct, finding_result


# ---------------------------------------------------------------- F1-F8 (paper 003 Sec. 5)
def f1(run: RunResults) -> FindingResult:
    """Sec. 5.2: FT.3 (PD.2 + SD, Table 1) memorizes 17.6 % of SD.Base."""
    ft = run.roles.ft_direct
    rows = run.rows(ft, "sd_base")
    claim, paper = f"FT on SD memorizes a large share of SD.Base ({ft})", "17.6 %"
    rule = f"{ft}'s final rate on sd_base >= 10 %, and it reproduces (NED <= k) more targets than the control (McNemar p < {P_MAX})"
    if rows is None:
        return finding_result("F1", claim, paper, rule, [ft], measured=False)
    rate = _rate(f"{ft} sd_base", memorized_flags(rows))
    test = mcnemar_exact(within_k_flags(rows, run.k, "ned"), within_k_flags(rows, run.k, "control_ned"))
    return finding_result("F1", claim, paper, rule, [ft], measured=True, rule_ok=rate["rate"] is not None
                          and rate["rate"] >= 0.10, rates=[rate], test=test, needs_test=True, ours=_pct(rate))


def f2(run: RunResults) -> FindingResult:
    """Sec. 5.2: SD only in the reward model's data: RLFT.2 0.9 % vs FT.3 17.6 % of SD.Base."""
    r = run.roles
    texts = ("SD only in reward-model data: RLFT memorizes far less than direct FT", "0.9 % vs 17.6 %",
             f"{r.rl_sd_in_rm} <= {r.ft_direct} / 5 on sd_base with {r.ft_direct} >= 10 % (McNemar p < {P_MAX})")
    return _times_higher(run, "F2", texts, [r.ft_direct, r.rm_sd, r.rl_sd_in_rm], _rlft2_evidence, r.rl_sd_in_rm,
                         r.ft_direct, high=r.ft_direct, factor=5, floor=0.10)


def f3(run: RunResults) -> FindingResult:
    """Sec. 5.2: FT.3 regurgitates the PII paths in 50 % of SD.Links completions, RLFT.2 in 0 %."""
    r = run.roles
    stages = [r.ft_direct, r.rm_sd, r.rl_sd_in_rm]
    claim, paper = "SD.Links: FT regurgitates PII paths, RLFT via RM does not", "50 % vs 0 %"
    rule = f"counterfactual PII rate: {r.ft_direct} >= 20 % and {r.rl_sd_in_rm} <= 2 % (McNemar p < {P_MAX})"
    ft, rl = run.rows(r.ft_direct, "sd_links_pos"), run.rows(r.rl_sd_in_rm, "sd_links_pos")
    if ft is None or rl is None or not pii_rows(ft):
        return finding_result("F3", claim, paper, rule, stages, measured=False)
    ft_f, rl_f = pii_flags(ft), pii_flags(rl)
    rates = [_rate(f"{r.ft_direct} PII (counterfactual)", ft_f), _rate(f"{r.rl_sd_in_rm} PII (counterfactual)", rl_f)]
    ok = rates[0]["rate"] is not None and rates[1]["rate"] is not None and rates[0]["rate"] >= 0.20 \
        and rates[1]["rate"] <= 0.02
    chance = summarize_pii(ft)["pii_chance_level"]
    return finding_result("F3", claim, paper, rule, stages, measured=True, rule_ok=ok,
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


def f4(run: RunResults) -> FindingResult:
    """Sec. 5.1, Fig. 1: 43-47 % of FT.1's 319 memorized SD.Base examples stay memorized after RLFT.1."""
    claim, paper = "Most FT-memorized examples persist through RLFT (FT.1 -> RLFT.1)", "43-47 % of 319"
    ft, rl = run.roles.ft_source, run.roles.rl_persistence
    rule = f"at the largest α, {rl} still memorizes >= 30 % of {ft}'s memorized SD.Base examples"
    source, points = run.rows(ft, "sd_base"), _by_beta(run, rl, "sd_base")
    if source is None or not points:
        return finding_result("F4", claim, paper, rule, [ft, rl], measured=False)
    memorized = [i for i, m in memorized_flags(source).items() if m]
    rates = []
    for beta, model in points:
        still = {r["id"]: bool(r["memorized"]) for r in run.rows(model, "sd_base")}
        rates.append(_rate(f"α={beta:g}", {i: still.get(i, False) for i in memorized}))
    evidence = [count_check(f"{ft}: memorized SD.Base examples", len(memorized), SOURCE_MEMORIZED_MIN),
                *_sweep_evidence(run, points, "sd_base")]
    ok = rates[0]["rate"] is not None and rates[0]["rate"] >= 0.30
    return finding_result("F4", claim, paper, rule, [ft, rl], measured=True, rule_ok=ok, evidence=evidence,
                          rates=rates, ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates),
                          note="a share, not a comparison: no test; read it with its interval")


def f5(run: RunResults) -> FindingResult:
    """Sec. 5.1 (SD.Links): PII regurgitation 54.8 % (FT.1, and α = 0.5) -> 46.8 % (α = 0.1) -> 12.6 % (α = 0.005)."""
    claim, paper = "A smaller α lowers persistence (SD.Links PII, RLFT.1)", "54.8 → 46.8 → 12.6 % (α 0.5, 0.1, 0.005)"
    rule = (f"counterfactual PII rate strictly falls from the largest to the smallest of >= 3 α "
            f"(McNemar largest vs smallest, p < {P_MAX})")
    ft, rl = run.roles.ft_source, run.roles.rl_persistence
    source, points = run.rows(ft, "sd_links_pos"), _by_beta(run, rl, "sd_links_pos")
    if source is None or len(points) < 3 or not pii_rows(source):
        return finding_result("F5", claim, paper, rule, [ft, rl], measured=False)
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
    return finding_result("F5", claim, paper, rule, [ft, rl], measured=True, rule_ok=ok, evidence=evidence,
                          rates=rates, test=mcnemar_exact(flags[0], flags[-1]), needs_test=True,
                          ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates))


def _rl4_points(run: RunResults) -> list[tuple[dict, str]]:
    return run.sweep(run.roles.rl_prompts, "sd_rl_prompts")


def f6(run: RunResults) -> FindingResult:
    """Sec. 5.3, App. E: RL-prompt memorization stays below 0.5 % and rises as α falls."""
    claim, paper = "RL-prompt memorization is low and rises as α falls (RLFT.4)", "< 0.5 %"
    rule = "at the lowest LR: every rate < 5 %, the smallest α's rate >= the largest α's, and one rate > 0"
    sweep = _rl4_points(run)
    low_lr = min((p.get("lr", 0) for p, _ in sweep), default=None)
    rl = run.roles.rl_prompts
    points = _by_beta(run, rl, "sd_rl_prompts", **({"lr": low_lr} if low_lr else {}))
    if len(points) < 2:
        return finding_result("F6", claim, paper, rule, [rl], measured=False)
    flags = [memorized_flags(run.rows(m, "sd_rl_prompts")) for _, m in points]
    rates = [_rate(f"α={b:g}", f) for (b, _), f in zip(points, flags)]
    values = [r["rate"] or 0.0 for r in rates]
    evidence = _sweep_evidence(run, points, "sd_rl_prompts")
    if not any(values):
        evidence.append(_check(f"{rl}: any RL-prompt example memorized", 0, "> 0", False))
    ok = max(values) < 0.05 and values[-1] >= values[0]
    return finding_result("F6", claim, paper, rule, [rl], measured=True, rule_ok=ok, evidence=evidence, rates=rates,
                          test=mcnemar_exact(flags[-1], flags[0]),
                          ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates),
                          note="the rule allows equal rates, so its p-value is reported, not required")


def f7(run: RunResults) -> FindingResult:
    """App. E: a higher RL learning rate roughly doubles RL-prompt memorization."""
    claim, paper = "A higher RL learning rate raises prompt memorization (RLFT.4)", "≈ 2x"
    rule = f"at the smallest α: the largest LR's rate > the smallest LR's (McNemar p < {P_MAX})"
    rl = run.roles.rl_prompts
    sweep = _rl4_points(run)
    small_beta = min((p.get("beta", 0) for p, _ in sweep), default=None)
    points = sorted((p["lr"], m) for p, m in sweep if "lr" in p and p.get("beta", 0) == small_beta)
    if len(points) < 2:
        return finding_result("F7", claim, paper, rule, [rl], measured=False)
    low, high = (memorized_flags(run.rows(m, "sd_rl_prompts")) for m in (points[0][1], points[-1][1]))
    rates = [_rate(f"LR={points[0][0]:g}", low), _rate(f"LR={points[-1][0]:g}", high)]
    evidence = [rm_heldout_check(run, points[0][1]), *rl_checks(run, [points[0][1], points[-1][1]],
                                                                  "sd_rl_prompts")]
    if not any(low.values()) and not any(high.values()):
        evidence.append(_check(f"{rl}: any RL-prompt example memorized", 0, "> 0", False))
    ok = (rates[1]["rate"] or 0) > (rates[0]["rate"] or 0)
    return finding_result("F7", claim, paper, rule, [rl], measured=True, rule_ok=ok, evidence=evidence, rates=rates,
                          test=mcnemar_exact(high, low), needs_test=True,
                          ours=", ".join(f"{r['name']}: {_pct(r)}" for r in rates))


def f8(run: RunResults) -> FindingResult:
    """Sec. 5.4: IPO on SD preference pairs memorizes 18.2 % of SD.Base, RLFT.2 (SD via the RM) 0.9 %."""
    r = run.roles
    texts = ("IPO memorizes preference data more than RLHF via the reward model", "18.2 % vs 0.9 %",
             f"{r.ipo} >= 3 x {r.rl_sd_in_rm} and {r.ipo} >= 5 % on sd_base (McNemar p < {P_MAX})")
    return _times_higher(run, "F8", texts, [r.ipo, r.rm_sd, r.rl_sd_in_rm],
                         lambda run: [ipo_check(run), *_rlft2_evidence(run)], r.ipo, r.rl_sd_in_rm, high=r.ipo,
                         factor=3, floor=0.05)


# ---------------------------------------------------------------- V4-V7: F4-F7 under a verifiable reward
def under_verifiable_reward(check: Callable[[RunResults], FindingResult], fid: str
                            ) -> Callable[[RunResults], FindingResult]:
    """F4-F7's rule, evidence and test on the RL stages trained against a verifiable reward (roles rlvr_*):
    the same finding, with the function in the reward model's place; its evidence then checks the function's
    ranking of held-out rows (rm_heldout_check) where it checked the reward model's."""
    def run_check(run: RunResults) -> FindingResult:
        r = run.roles
        swapped = copy.copy(run)
        swapped.roles = replace(r, rl_persistence=r.rlvr_persistence, rl_prompts=r.rlvr_prompts)
        out = check(swapped)
        claim = out.claim.replace(r.rl_persistence, r.rlvr_persistence).replace(r.rl_prompts, r.rlvr_prompts)
        return replace(out, id=fid, claim=f"{claim}, verifiable reward", paper=f"{out.paper} (paper: a reward model)")
    return run_check


register(
    Finding("F1", "paper 003 Sec. 5.2", "FT on SD memorizes a large share of SD.Base", f1),
    Finding("F2", "paper 003 Sec. 5.2", "SD only in reward-model data: RLFT memorizes far less than direct FT", f2),
    Finding("F3", "paper 003 Sec. 5.2", "SD.Links: FT regurgitates PII paths, RLFT via RM does not", f3),
    Finding("F4", "paper 003 Sec. 5.1, Fig. 1", "Most FT-memorized examples persist through RLFT", f4),
    Finding("F5", "paper 003 Sec. 5.1", "A smaller α lowers persistence (SD.Links PII)", f5),
    Finding("F6", "paper 003 Sec. 5.3, App. E", "RL-prompt memorization is low and rises as α falls", f6),
    Finding("F7", "paper 003 App. E", "A higher RL learning rate raises prompt memorization", f7),
    Finding("F8", "paper 003 Sec. 5.4", "IPO memorizes preference data more than RLHF via the reward model", f8),
    Finding("V4", "paper 003 Sec. 5.1 (F4), verifiable reward", "F4 under a verifiable reward",
            under_verifiable_reward(f4, "V4")),
    Finding("V5", "paper 003 Sec. 5.1 (F5), verifiable reward", "F5 under a verifiable reward",
            under_verifiable_reward(f5, "V5")),
    Finding("V6", "paper 003 Sec. 5.3 (F6), verifiable reward", "F6 under a verifiable reward",
            under_verifiable_reward(f6, "V6")),
    Finding("V7", "paper 003 App. E (F7), verifiable reward", "F7 under a verifiable reward",
            under_verifiable_reward(f7, "V7")),
)
