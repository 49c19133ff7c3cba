"""Findings L1-L7 of paper 004's formal-language study, decided on the study's own run (harness/audit/formal.py).

A registry of its own (`FORMAL_FINDINGS`; the run's findings table, harness/report/findings/, is for code-model
runs): each finding is one small function from the study's results to a row built by `verdict.finding_result`, so it
reads like every other row: claim, rule, evidence, rates with their 95 % Wilson interval and n, the test and its
p-value, status. The project's rules apply: a comparison holds only at p < 0.05 (`P_MAX`), in the claimed
direction; rates pool the three seeds; every finding gates on the evidence that the models learned their language
(test loss at e* within `formal.learned_gap` nats per token of the test strings' entropy, each seed and variant
it reads). Where the paper's claim is qualitative, the rule that makes it refutable is written in the row and in
docs/methods.md ("Paper 004's formal languages").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from memlens.harness.core.formal_study import BASE, DEDUP, FormalSettings, size_variant
from memlens.harness.core.registry import Registry
from memlens.harness.core.stats import (
    binomial_test_greater,
    fisher_exact,
    permutation_test,
    rate_with_interval,
    sign_test,
)
from memlens.harness.report.findings.verdict import P_MAX, FindingResult, _check, _pct, finding_result

CTX, CF, REC = "contextual", "counterfactual", "recollection"
BAND_PERMUTATIONS = 9999


@dataclass(frozen=True)
class FormalResults:
    """What the findings read: the study's settings, its summary entries and its per-string rows."""

    settings: FormalSettings
    entries: list[dict]
    strings: list[dict]

    def entries_of(self, language: str, variant: str) -> list[dict]:
        return [e for e in self.entries if e["language"] == language and e["variant"] == variant]

    def strings_of(self, language: str, variant: str) -> list[dict]:
        return [s for s in self.strings if s["language"] == language and s["variant"] == variant]

    @property
    def high_entropy(self) -> str | None:
        """The study's other language (Fig. 3's high-entropy side), when it has one."""
        others = [lang for lang in self.settings.languages if lang != self.settings.low_entropy]
        return others[0] if others else None


@dataclass(frozen=True)
class FormalFinding:
    id: str
    source: str
    title: str
    check: Callable[[FormalResults], FindingResult]


FORMAL_FINDINGS: Registry[FormalFinding] = Registry("formal-language finding", "id")


def register(*entries: FormalFinding) -> None:
    for entry in entries:
        FORMAL_FINDINGS.register(entry.id, entry)


def formal_findings(results: FormalResults) -> list[FindingResult]:
    return [finding.check(results) for finding in FORMAL_FINDINGS.values()]


def findings_per_seed(results: FormalResults) -> dict[int, list[FindingResult]]:
    """Every finding on each seed's strings alone (the table's pooled verdict beside how each seed decides)."""
    return {seed: formal_findings(FormalResults(results.settings,
                                                [e for e in results.entries if e["seed"] == seed],
                                                [s for s in results.strings if s["seed"] == seed]))
            for seed in results.settings.seeds}


# ---------------------------------------------------------------- shared pieces
def learned_checks(results: FormalResults, pairs: list[tuple[str, str]]) -> list[dict]:
    """The evidence gate: every seed's model of each (language, variant) learned its language."""
    checks = []
    for language, variant in pairs:
        entries = results.entries_of(language, variant)
        if not entries:
            checks.append(_check(f"{language}/{variant} trained", None, "a finished run", False))
            continue
        worst = max(e["learned_gap"] for e in entries)
        checks.append(_check(f"{language}/{variant} learned gap (worst seed, nats/token)", round(worst, 4),
                             f"<= {results.settings.learned_gap}",
                             worst <= results.settings.learned_gap))
    return checks


def pooled_rate(entries: list[dict], measure: str, side: str = "measures", name: str = "") -> dict:
    """k/n memorized at each entry's e*, pooled over seeds."""
    k = sum(e[side][measure]["k_at_e_star"] for e in entries)
    n = sum(e[side][measure]["n"] for e in entries)
    return {"name": name or measure, **rate_with_interval(k, n)}


def greater(a: dict, b: dict) -> dict:
    """Fisher's exact test of rate a vs rate b, with a's direction (the finding checks `a_greater`)."""
    test = fisher_exact(a["k"], a["n"], b["k"], b["n"])
    return {**test, "a_greater": (a["rate"] or 0) > (b["rate"] or 0)}


def _not_measured(fid: str, claim: str, paper: str, rule: str) -> FindingResult:
    return finding_result(fid, claim, paper, rule, ["formal"], measured=False)


# ---------------------------------------------------------------- L1 Lemma 1
def l1(results: FormalResults) -> FindingResult:
    claim = "Lemma 1: contextual onset never precedes counterfactual onset; contextual score <= counterfactual score"
    paper, rule = "Lemma 1 (Sec. 3, App. D)", "0 violations over every trained string of every model"
    entries = results.entries
    if not entries:
        return _not_measured("L1", claim, paper, rule)
    n = sum(e["lemma1"]["n"] for e in entries)
    bad = sum(e["lemma1"]["onset_violations"] + e["lemma1"]["score_violations"] for e in entries)
    premise = rate_with_interval(sum(e["lemma1"]["premise_holds"] for e in entries), n)
    ok = rate_with_interval(n - sum(max(e["lemma1"]["onset_violations"], e["lemma1"]["score_violations"])
                                    for e in entries), n)
    return finding_result("L1", claim, paper, rule, ["formal"], measured=True, rule_ok=bad == 0,
                          rates=[{"name": "strings obeying Lemma 1", **ok},
                          {"name": "strings where the proof's premise (train <= counterfactual loss) holds",
                           **premise}],
                          ours=f"{bad} violations in {n} strings; premise {_pct(premise)}",
                          note="the lemma follows from the measures' definitions (harness/measures/losses.py), so "
                               "this row checks the implementation on real losses; its premise is an empirical question")


# ---------------------------------------------------------------- L2
def l2(results: FormalResults) -> FindingResult:
    claim = "Most strings recollection calls memorized are not contextually memorized"
    paper = "Sec. 3 (Fig. 2), Sec. 4 (Fig. 3)"
    rule = ("at e*, over both languages' base D and seeds, of the strings with loss < tau, > 50 % have contextual "
            "score 0 (exact one-sided binomial test vs 50 %, p < 0.05)")
    strings = [s for s in results.strings if s["variant"] == BASE]
    if not strings:
        return _not_measured("L2", claim, paper, rule)
    pairs = [(lang, BASE) for lang in results.settings.languages]
    recollected = [s for s in strings if s["score_at_e_star"][REC] > 0]
    not_ctx = sum(1 for s in recollected if s["score_at_e_star"][CTX] == 0)
    rate = {"name": "recollected but not contextually memorized", **rate_with_interval(not_ctx, len(recollected))}
    evidence = [*learned_checks(results, pairs), _check("strings recollection calls memorized at e*",
                                                        len(recollected), ">= 1", len(recollected) >= 1)]
    test = binomial_test_greater(not_ctx, len(recollected), 0.5)
    per_language = "; ".join(
        f"{lang}: {sum(1 for s in recollected if s['language'] == lang and s['score_at_e_star'][CTX] == 0)}"
        f"/{sum(1 for s in recollected if s['language'] == lang)}" for lang in results.settings.languages)
    return finding_result("L2", claim, paper, rule, ["formal"], measured=True, evidence=evidence,
                          rule_ok=(rate["rate"] or 0) > 0.5, rates=[rate], test=test, needs_test=True,
                          ours=_pct(rate), note=per_language)


# ---------------------------------------------------------------- L3
def l3(results: FormalResults) -> FindingResult:
    claim = "Memorization is non-zero at the optimal-learning epoch e*, in a high- and a low-entropy language"
    paper = "RQ3 (Sec. 4, Fig. 3)"
    rule = ("in each language, the contextual rate at e* of D's strings exceeds that of the test strings scored the "
            "same way (the null), Fisher p < 0.05")
    languages = results.settings.languages
    if not results.entries_of(languages[0], BASE):
        return _not_measured("L3", claim, paper, rule)
    rates, tests, ok = [], [], True
    for lang in languages:
        entries = results.entries_of(lang, BASE)
        member = pooled_rate(entries, CTX, name=f"{lang} D, contextual at e*")
        null = pooled_rate(entries, CTX, side="null", name=f"{lang} test strings (null), contextual at e*")
        test = greater(member, null)
        rates += [member, null]
        tests.append((lang, test))
        ok = ok and test["a_greater"]
    worst = max(tests, key=lambda t: t[1]["p_value"])
    return finding_result("L3", claim, paper, rule, ["formal"], measured=True,
                          evidence=learned_checks(results, [(lang, BASE) for lang in languages]), rule_ok=ok,
                          rates=rates,
                          test={**worst[1], "language": worst[0]}, needs_test=True,
                          ours="; ".join(f"{r['name'].split(',')[0]} {_pct(r)}" for r in rates),
                          note="p is the larger of the languages' p-values")


# ---------------------------------------------------------------- L4
def _onsets(strings: list[dict], measure: str) -> list[int]:
    return [s["onset"][measure] for s in strings if s["onset"][measure] is not None]


def iqr(values, axis=-1):
    """Interquartile range (numpy's linear percentiles), over `axis` (the permutation test passes rows)."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape[-1] == 0:
        return float("nan")
    q75, q25 = np.percentile(values, [75, 25], axis=axis)
    return q75 - q25


def l4(results: FormalResults) -> FindingResult:
    claim = "The band of contextual onset epochs is narrow for high entropy and broad for low entropy"
    paper = "RQ3 (Sec. 4, Fig. 3, footnote 2)"
    rule = ("the interquartile range of contextual onset epochs (strings memorized at some epoch, seeds pooled) is "
            "larger in the low-entropy language; permutation test of the difference, p < 0.05")
    low, high = results.settings.low_entropy, results.high_entropy
    if high is None or not results.strings_of(low, BASE):
        return _not_measured("L4", claim, paper, rule)
    on_low, on_high = _onsets(results.strings_of(low, BASE), CTX), _onsets(results.strings_of(high, BASE), CTX)
    evidence = [*learned_checks(results, [(low, BASE), (high, BASE)]),
                _check(f"{high} strings with a contextual onset", len(on_high), ">= 8", len(on_high) >= 8),
                _check(f"{low} strings with a contextual onset", len(on_low), ">= 8", len(on_low) >= 8)]
    test = permutation_test(on_low, on_high, iqr, BAND_PERMUTATIONS, seed=0)

    def band(values):
        return f"[{min(values)}, {max(values)}], IQR {iqr(values):.1f}" if values else "none"

    return finding_result("L4", claim, paper, rule, ["formal"], measured=True, evidence=evidence,
                          rule_ok=bool(on_low and on_high and iqr(on_low) > iqr(on_high)), test=test, needs_test=True,
                          ours=f"{high} band {band(on_high)} (n={len(on_high)}); "
                               f"{low} band {band(on_low)} (n={len(on_low)})")


# ---------------------------------------------------------------- L5
def l5(results: FormalResults) -> FindingResult:
    claim = ("Recollection favours frequent strings; contextual and counterfactual measures rate the top and bottom "
             "10 % alike")
    paper = "RQ4 (Sec. 4, Fig. 4)"
    rule = ("low-entropy base D at e*, seeds pooled: recollection rate of the top 10 % > bottom 10 % (Fisher "
            "p < 0.05) and neither the contextual nor the counterfactual rates differ (Fisher p >= 0.05)")
    low = results.settings.low_entropy
    strings = results.strings_of(low, BASE)
    if not strings:
        return _not_measured("L5", claim, paper, rule)
    rates, tests = [], {}
    for measure in (REC, CTX, CF):
        groups = {}
        for group in ("top", "bottom"):
            chosen = [s for s in strings if s["group"] == group]
            k = sum(1 for s in chosen if s["score_at_e_star"][measure] > 0)
            groups[group] = {"name": f"{measure}, {group} 10 %", **rate_with_interval(k, len(chosen))}
        rates += [groups["top"], groups["bottom"]]
        tests[measure] = greater(groups["top"], groups["bottom"])
    alike = all(tests[m]["p_value"] >= P_MAX for m in (CTX, CF))
    ok = tests[REC]["a_greater"] and alike
    return finding_result("L5", claim, paper, rule, ["formal"], measured=True,
                          evidence=learned_checks(results, [(low, BASE)]), rule_ok=ok, rates=rates,
                          test={**tests[REC], "others": {m: tests[m]["p_value"] for m in (CTX, CF)}}, needs_test=True,
                          ours="; ".join(f"{r['name']} {_pct(r)}" for r in rates),
                          note=("'alike' is no detectable difference at this n (Fisher p >= 0.05), not a proven "
                                "equivalence: "
                                f"contextual p = {tests[CTX]['p_value']:.3g}, counterfactual p = {tests[CF]['p_value']:.3g}"))


# ---------------------------------------------------------------- L6
def l6(results: FormalResults) -> FindingResult:
    claim = "Deduplication delays memorization but does not remove it at e*"
    paper = "RQ4 (Sec. 4, Fig. 5)"
    rule = ("low-entropy language: median contextual onset later with dedup than without (permutation test p < 0.05), "
            "and dedup's contextual rate at e* above its null (Fisher p < 0.05)")
    low = results.settings.low_entropy
    if not results.settings.dedup or not results.entries_of(low, DEDUP):
        return _not_measured("L6", claim, paper, rule)
    on_base, on_dedup = _onsets(results.strings_of(low, BASE), CTX), _onsets(results.strings_of(low, DEDUP), CTX)
    delay = permutation_test(on_dedup, on_base, np.median, BAND_PERMUTATIONS, seed=0)
    entries = results.entries_of(low, DEDUP)
    member = pooled_rate(entries, CTX, name="dedup D, contextual at e*")
    null = pooled_rate(entries, CTX, side="null", name="dedup's test strings (null), contextual at e*")
    kept = greater(member, null)
    later = bool(on_base and on_dedup and np.median(on_dedup) > np.median(on_base))
    worst = max(delay["p_value"], kept["p_value"])
    return finding_result("L6", claim, paper, rule, ["formal"], measured=True,
                          evidence=learned_checks(results, [(low, BASE), (low, DEDUP)]),
                          rule_ok=later and kept["a_greater"], rates=[member, null],
                          test={"test": "permutation (delay) and fisher_exact (kept)", "p_value": worst,
                                "delay_p": delay["p_value"], "kept_p": kept["p_value"]}, needs_test=True,
                          ours=(f"median onset {np.median(on_base) if on_base else '–'} -> "
                                f"{np.median(on_dedup) if on_dedup else '–'} (n={len(on_base)}, {len(on_dedup)}); "
                                f"at e* {_pct(member)} vs null {_pct(null)}"))


# ---------------------------------------------------------------- L7
def l7(results: FormalResults) -> FindingResult:
    claim = ("Larger training sets lower test loss, raise recollection-based and lower contextual and "
             "counterfactual memorization")
    paper = "RQ5 (Sec. 4, Fig. 6)"
    rule = ("low-entropy language, smallest vs largest D (seeds pooled, each at its e*): test loss lower (sign test "
            "over the seeds' test strings, p < 0.05), recollection rate higher, contextual and counterfactual rates "
            "lower (Fisher p < 0.05 each)")
    low, sizes = results.settings.low_entropy, sorted(results.settings.sizes)
    small, large = (BASE if n == results.settings.train_size else size_variant(n) for n in (sizes[0], sizes[-1]))
    if len(sizes) < 2 or not results.entries_of(low, small) or not results.entries_of(low, large):
        return _not_measured("L7", claim, paper, rule)
    e_small, e_large = results.entries_of(low, small), results.entries_of(low, large)
    loss_test = sign_test(_test_string_diffs(results, low, small, large))
    lower_loss = loss_test["down"] > loss_test["up"]
    rates, parts, ok = [], {"test loss": loss_test["p_value"]}, lower_loss
    for measure, want_higher in ((REC, True), (CTX, False), (CF, False)):
        a = pooled_rate(e_small, measure, name=f"{measure}, |D| = {sizes[0]}")
        b = pooled_rate(e_large, measure, name=f"{measure}, |D| = {sizes[-1]}")
        test = greater(b, a)
        rates += [a, b]
        parts[measure] = test["p_value"]
        ok = ok and (test["a_greater"] if want_higher else (b["rate"] or 0) < (a["rate"] or 0))
    losses = ", ".join(f"{e['test_loss_at_e_star']:.3f}" for e in e_small)
    losses_large = ", ".join(f"{e['test_loss_at_e_star']:.3f}" for e in e_large)
    return finding_result("L7", claim, paper, rule, ["formal"], measured=True,
                          evidence=learned_checks(results, [(low, small), (low, large)]), rule_ok=ok, rates=rates,
                          test={"test": "sign (test loss) and fisher_exact (rates)", "p_value": max(parts.values()),
                                **{f"p_{k}": v for k, v in parts.items()}}, needs_test=True,
                          ours=f"test loss at e* {losses} -> {losses_large}; "
                               + "; ".join(f"{r['name']} {_pct(r)}" for r in rates))


def _test_string_diffs(results: FormalResults, language: str, small: str, large: str) -> list[float]:
    """Per seed and test string: loss under the large-D model at its e* minus under the small-D model at its e*
    (the test strings are the same for every size of a seed)."""
    diffs = []
    for a, b in zip(results.entries_of(language, small), results.entries_of(language, large)):
        diffs.extend(float(y - x) for x, y in zip(a["test_string_loss_at_e_star"], b["test_string_loss_at_e_star"]))
    return diffs


register(
    FormalFinding("L1", "paper 004 Lemma 1", "contextual is stricter than counterfactual", l1),
    FormalFinding("L2", "paper 004 Sec. 3-4", "recollection-memorized strings are mostly not contextual", l2),
    FormalFinding("L3", "paper 004 RQ3", "memorization is non-zero at e*", l3),
    FormalFinding("L4", "paper 004 RQ3", "narrow band for high entropy, broad for low", l4),
    FormalFinding("L5", "paper 004 RQ4", "frequency matters to recollection only", l5),
    FormalFinding("L6", "paper 004 RQ4", "dedup delays, does not remove", l6),
    FormalFinding("L7", "paper 004 RQ5", "more data: lower test loss, more recollection, less contextual", l7),
)

