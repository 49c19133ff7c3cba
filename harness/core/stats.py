"""The one definition of a rate's interval and of the tests that decide whether a difference is noise.

Every rate the audit or the report prints carries its n and a 95 % Wilson score interval (Wilson 1927:
unlike the normal approximation it stays inside [0, 1] and is sensible at 0 % and 100 % with small n,
which is where the embedded default lives). A comparison of two rates "holds" only when an exact test
says the difference is not noise: McNemar's exact test when both rates are over the same examples
(paired memorized flags, e.g. a model and its RL descendant on SD.Base), Fisher's exact test when the
examples differ. Both are two-sided; a finding also checks the direction separately.
Pure Python, exact binomial / hypergeometric sums (n here is at most a few thousand). Membership-inference
metrics (ROC AUC, TPR at a low FPR: Carlini et al. 2022, "Membership inference attacks from first principles",
on why the low-FPR end matters) carry a seeded, stratified bootstrap 95 % interval, in numpy.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def wilson_interval(successes: int, n: int, z: float = Z95) -> list[float] | None:
    """95 % Wilson score interval [low, high] of successes / n (a list: it is stored as JSON); None when n = 0."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return None
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # Clamp rounding noise only: at 0 and n the bound is exactly 0 or 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return [low, high]


def rate_with_interval(successes: int, n: int) -> dict:
    """{"k", "n", "rate", "ci95"}: the form every reported rate takes (rate and ci95 None when n = 0)."""
    return {"k": successes, "n": n, "rate": successes / n if n else None, "ci95": wilson_interval(successes, n)}


def _binomial_tail_two_sided(b: int, c: int) -> float:
    """Two-sided exact binomial test of b successes in b + c trials at p = 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def sign_test(diffs) -> dict:
    """Exact two-sided sign test of paired differences (zeros dropped): {"up", "down", "p_value"}."""
    up, down = sum(1 for d in diffs if d > 0), sum(1 for d in diffs if d < 0)
    return {"test": "sign_exact", "up": up, "down": down, "p_value": _binomial_tail_two_sided(up, down)}


def mcnemar_exact(flags_a: Mapping, flags_b: Mapping) -> dict:
    """McNemar's exact test on the examples both sides scored (paired by id).

    b = examples flagged by A only, c = by B only; under H0 (same rate) b ~ Binomial(b + c, 1/2).
    Returns {"n_pairs", "a_only", "b_only", "p_value"}.
    """
    common = sorted(set(flags_a) & set(flags_b), key=str)
    a_only = sum(1 for i in common if flags_a[i] and not flags_b[i])
    b_only = sum(1 for i in common if flags_b[i] and not flags_a[i])
    return {"test": "mcnemar_exact", "n_pairs": len(common), "a_only": a_only, "b_only": b_only,
            "p_value": _binomial_tail_two_sided(a_only, b_only)}


def _hypergeometric(k: int, row_a: int, row_b: int, col: int) -> float:
    """P(X = k) for X = successes in group A, given group sizes and the total successes `col`."""
    return math.comb(row_a, k) * math.comb(row_b, col - k) / math.comb(row_a + row_b, col)


def fisher_exact(k_a: int, n_a: int, k_b: int, n_b: int) -> dict:
    """Fisher's exact test (two-sided: every table at most as likely as the observed one) of k_a/n_a vs
    k_b/n_b. Returns {"test", "p_value"}."""
    for k, n in ((k_a, n_a), (k_b, n_b)):
        if not 0 <= k <= n:
            raise ValueError(f"fisher_exact: need 0 <= k <= n, got {k} of {n}")
    col = k_a + k_b
    low, high = max(0, col - n_b), min(col, n_a)
    observed = _hypergeometric(k_a, n_a, n_b, col)
    # Relative tolerance as in R's fisher.test: tables equally likely up to rounding count as extreme.
    p = sum(q for q in (_hypergeometric(k, n_a, n_b, col) for k in range(low, high + 1))
            if q <= observed * (1 + 1e-7))
    return {"test": "fisher_exact", "p_value": min(1.0, p)}


def roc_auc(scores: list[float], labels: list[int]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count 1/2); None if one class is empty.

    Computed from ranks (Mann-Whitney U) in O(n log n); tests check it against the O(n^2) pair count.
    """
    pos = sum(1 for y in labels if y == 1)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):              # average ranks over ties
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    rank_sum_pos = sum(r for r, y in zip(ranks, labels) if y == 1)
    return (rank_sum_pos - pos * (pos + 1) / 2) / (pos * neg)


MIA_FPRS = (0.01, 0.001)        # the FPRs TPR is reported at (1 % and 0.1 %)
TPR_AT_FPR_RULE = "fpr < a"     # how a TPR at FPR a is read (`_counts_metrics`); every MIA summary records it
AUC_NULLS = (0.5, 0.6)          # bootstrap one-sided test of H0: AUC <= t (chance; the findings' "detectable" bar)
BOOTSTRAP_N = 1000              # bootstrap resamples of every MIA interval
BOOTSTRAP_SEED = 0


def fpr_key(fpr: float) -> str:
    """`tpr_at_fpr<1%`, `tpr_at_fpr<0.1%`: the name a TPR at FPR < `fpr` is stored and shown under (TPR_AT_FPR_RULE)."""
    return f"tpr_at_fpr<{100 * fpr:g}%"


def _counts_metrics(pos_counts: np.ndarray, neg_counts: np.ndarray, fprs) -> dict[str, np.ndarray]:
    """AUC and TPR at each FPR from (replicates, distinct scores) counts of members / non-members per distinct
    score, scores ascending. The one computation behind `tpr_at_fpr` and the bootstrap.

    AUC counts a tie 1/2 (the Mann-Whitney statistic, as `roc_auc`); TPR at FPR a is the largest share of members
    flagged by a threshold t (member iff score >= t, all tied scores on the same side) whose share of non-members
    flagged is strictly below a (t above every score flags nothing: TPR 0). Strict, as mimir (Duan et al. 2024),
    LiRA (Carlini et al. 2022) and Shi et al. (2024) read `tpr[fpr < a]`: with a held-out count that is a multiple
    of 1/a, FPR <= a would admit one more false positive and read higher."""
    n_pos, n_neg = pos_counts.sum(axis=1), neg_counts.sum(axis=1)
    neg_below = np.cumsum(neg_counts, axis=1) - neg_counts
    auc = (pos_counts * (neg_below + 0.5 * neg_counts)).sum(axis=1) / (n_pos * n_neg)
    tp = np.cumsum(pos_counts[:, ::-1], axis=1)         # flagged at threshold = the k-th largest distinct score
    fp = np.cumsum(neg_counts[:, ::-1], axis=1)
    out = {"auc": auc}
    for a in fprs:
        ok = fp < a * n_neg[:, None] - 1e-9             # FPR < a (a float product such as 0.01 * 300 is not exact)
        out[fpr_key(a)] = np.where(ok, tp, 0).max(axis=1) / n_pos
    return out


def _distinct_index(members: list[float], nonmembers: list[float]) -> tuple[np.ndarray, np.ndarray, int]:
    values = np.unique(np.asarray(members + nonmembers, dtype=np.float64))
    return (np.searchsorted(values, np.asarray(members, dtype=np.float64)),
            np.searchsorted(values, np.asarray(nonmembers, dtype=np.float64)), len(values))


def _check_scores(members: list[float], nonmembers: list[float]) -> None:
    if not members or not nonmembers:
        raise ValueError(f"need members and non-members; got {len(members)} and {len(nonmembers)}")
    if not all(math.isfinite(x) for x in members + nonmembers):
        raise ValueError("membership scores must be finite")


def tpr_at_fpr(scores: list[float], labels: list[int], max_fpr: float) -> float | None:
    """Largest true-positive rate at a false-positive rate strictly below max_fpr (labels 1 = member; the field's
    convention, `_counts_metrics`); None if a class is empty."""
    members = [s for s, y in zip(scores, labels) if y == 1]
    nonmembers = [s for s, y in zip(scores, labels) if y != 1]
    if not members or not nonmembers:
        return None
    _check_scores(members, nonmembers)
    pos, neg, u = _distinct_index(members, nonmembers)
    return float(_counts_metrics(np.bincount(pos, minlength=u)[None], np.bincount(neg, minlength=u)[None],
                                 (max_fpr,))[fpr_key(max_fpr)][0])


def bootstrap_mia_metrics(members: list[float], nonmembers: list[float], n_boot: int = BOOTSTRAP_N,
                          seed: int = BOOTSTRAP_SEED, fprs=MIA_FPRS) -> dict:
    """{"auc": {"value", "ci95"}, "tpr_at_fpr<1%": ..., "tpr_at_fpr<0.1%": ..., "n_members", "n_nonmembers",
    "bootstrap": {"n", "seed", "method"}} of one attack's scores (higher = member).

    The interval is the 2.5 / 97.5 percentile of `n_boot` stratified resamples (members and non-members each
    drawn with replacement to their own count, so every resample has both classes), seeded: the same scores give
    the same interval. At n non-members a TPR at an FPR below 1/n is the TPR at FPR 0 (stated by n_nonmembers)."""
    _check_scores(members, nonmembers)
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot}: need at least one bootstrap resample")
    pos, neg, u = _distinct_index(members, nonmembers)
    point = _counts_metrics(np.bincount(pos, minlength=u)[None], np.bincount(neg, minlength=u)[None], fprs)
    rng = np.random.default_rng(seed)

    def resampled(idx: np.ndarray) -> np.ndarray:
        draws = idx[rng.integers(0, len(idx), size=(n_boot, len(idx)))]
        flat = (np.arange(n_boot)[:, None] * u + draws).ravel()
        return np.bincount(flat, minlength=n_boot * u).reshape(n_boot, u)

    boot = _counts_metrics(resampled(pos), resampled(neg), fprs)
    out: dict[str, Any] = {name: {"value": float(point[name][0]),
                                  "ci95": [float(v) for v in np.percentile(boot[name], [2.5, 97.5])]}
                           for name in point}
    # The percentile bootstrap's one-sided test of H0: AUC <= t: the share of resamples at or below t (Efron &
    # Tibshirani 1993 Ch. 16); the findings use it as their test of "detectable" (AUC above t).
    out["auc"]["p_at_most"] = {f"{t:g}": float(np.mean(boot["auc"] <= t)) for t in AUC_NULLS}
    # Beside the bootstrap, the exact interval of the TPR as a share of the members (the threshold taken as fixed),
    # and whether that FPR exists at this many non-members at all (`fpr_measurable`).
    for a in fprs:
        entry = out[fpr_key(a)]
        entry["clopper_pearson95"] = clopper_pearson(round(entry["value"] * len(members)), len(members))
        entry["measurable"] = fpr_measurable(len(nonmembers), a)
    out.update(n_members=len(members), n_nonmembers=len(nonmembers),
               bootstrap={"n": n_boot, "seed": seed, "method": "stratified percentile"})
    return out


def _log_binomial_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
            + (n - k) * math.log1p(-p))


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P[Binomial(n, p) <= k], summed exactly in log space."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    logs = [_log_binomial_pmf(j, n, p) for j in range(k + 1)]
    top = max(logs)
    return 0.0 if top == -math.inf else min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


def _bisect(f, lo: float, hi: float, iterations: int = 80) -> float:
    """The root of a function that is increasing on [lo, hi] (f(lo) <= 0 <= f(hi))."""
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> list[float]:
    """The exact (Clopper & Pearson 1934) two-sided interval of a binomial share k / n: the p whose upper tail
    P[X >= k] is (1 - confidence) / 2 and the p whose lower tail P[X <= k] is. It never collapses to a point the way
    a bootstrap of a perfectly separated sample does (every resample then reads TPR 1)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"k={k}, n={n}: need 0 <= k <= n and n >= 1")
    tail = (1 - confidence) / 2
    low = 0.0 if k == 0 else _bisect(lambda p: (1 - _binomial_cdf(k - 1, n, p)) - tail, 0.0, 1.0)
    high = 1.0 if k == n else _bisect(lambda p: tail - _binomial_cdf(k, n, p), 0.0, 1.0)
    return [low, high]


def fpr_measurable(n_nonmembers: int, fpr: float) -> bool:
    """Whether a TPR at FPR `fpr` exists with this many non-members: at least 1 / fpr of them, so that one false
    positive is a share at most `fpr` (fewer, and `fpr < a` only ever reads the TPR at FPR 0)."""
    return n_nonmembers * fpr >= 1 - 1e-9


def min_nonmembers(fpr: float) -> int:
    """The fewest non-members at which a TPR at FPR `fpr` is measurable (`fpr_measurable`)."""
    return math.ceil(1 / fpr - 1e-9)


def _pairwise_wins(members: np.ndarray, nonmembers: np.ndarray) -> np.ndarray:
    """(members, non-members) matrix of 1 where the member outscores the non-member, 1/2 on a tie, else 0."""
    diff = members[:, None] - nonmembers[None, :]
    return (diff > 0) + 0.5 * (diff == 0)


def paired_auc_difference(members_a: list[float], nonmembers_a: list[float], members_b: list[float],
                          nonmembers_b: list[float], n_boot: int = BOOTSTRAP_N, seed: int = BOOTSTRAP_SEED) -> dict:
    """AUC(a) - AUC(b) of two attacks' scores of the *same* texts (index i is one text in both), with the stratified
    bootstrap resampling the texts once for both attacks, so the interval and the one-sided p (the share of
    resamples where a does not beat b) account for the two being scored on one sample (DeLong et al. 1988 compare
    correlated AUCs the same way, in closed form)."""
    if len(members_a) != len(members_b) or len(nonmembers_a) != len(nonmembers_b):
        raise ValueError("paired AUCs need both attacks' scores of the same members and non-members")
    for m, n in ((members_a, nonmembers_a), (members_b, nonmembers_b)):
        _check_scores(list(m), list(n))
    n_m, n_n = len(members_a), len(nonmembers_a)
    wins = [_pairwise_wins(np.asarray(m, dtype=np.float64), np.asarray(n, dtype=np.float64))
            for m, n in ((members_a, nonmembers_a), (members_b, nonmembers_b))]
    delta = wins[0] - wins[1]
    rng = np.random.default_rng(seed)
    weights_m = np.stack([np.bincount(rng.integers(0, n_m, n_m), minlength=n_m) for _ in range(n_boot)])
    weights_n = np.stack([np.bincount(rng.integers(0, n_n, n_n), minlength=n_n) for _ in range(n_boot)])
    boot = ((weights_m @ delta) * weights_n).sum(axis=1) / (n_m * n_n)
    return {"value": float(delta.mean()), "ci95": [float(v) for v in np.percentile(boot, [2.5, 97.5])],
            "p_at_most_0": float(np.mean(boot <= 0)), "bootstrap": {"n": n_boot, "seed": seed,
                                                                  "method": "paired stratified percentile"}}


def reward_score_stats(score_rows: list[dict]) -> dict[str, Any]:
    """Fig. 2: reward-score distribution by label (rows: id, label, score)."""
    by_label: dict[int, list[float]] = defaultdict(list)
    for r in score_rows:
        by_label[int(r["label"])].append(float(r["score"]))
    stats = {}
    for label, scores in sorted(by_label.items()):
        mean = sum(scores) / len(scores)
        stats[str(label)] = {"n": len(scores), "mean": mean,
                             "std": math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))}
    return {"by_label": stats, "auc": roc_auc([float(r["score"]) for r in score_rows],
                                              [int(r["label"]) for r in score_rows])}


def binomial_test_greater(k: int, n: int, p0: float = 0.5) -> dict:
    """Exact one-sided binomial test of H0: rate <= p0 against rate > p0, for k successes in n trials."""
    if not 0 <= k <= n:
        raise ValueError(f"binomial_test_greater: need 0 <= k <= n, got {k} of {n}")
    p = sum(math.comb(n, i) * p0 ** i * (1 - p0) ** (n - i) for i in range(k, n + 1)) if n else 1.0
    return {"test": "binomial_exact_greater", "p0": p0, "p_value": min(1.0, p)}


def permutation_test(a, b, statistic, n_permutations: int = 9999, seed: int = 0) -> dict:
    """Two-sided Monte Carlo permutation test of statistic(a) - statistic(b) (seeded): p = (1 + #{|T*| >= |T|}) /
    (1 + permutations), the exact-size form (Phipson & Smyth 2010), never 0. `statistic(values, axis=...)` is
    vectorised over rows (np.mean, np.median, ...), so the permutations run as matrices, a thousand at a time."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) == 0 or len(b) == 0:
        return {"test": "permutation", "difference": None, "p_value": 1.0, "permutations": 0}
    observed = float(statistic(a, axis=-1) - statistic(b, axis=-1))
    pooled = np.concatenate([a, b])
    rng = np.random.default_rng(seed)
    extreme, done = 0, 0
    while done < n_permutations:
        rows = min(1000, n_permutations - done)
        shuffled = rng.permuted(np.broadcast_to(pooled, (rows, len(pooled))), axis=1)
        diffs = statistic(shuffled[:, :len(a)], axis=1) - statistic(shuffled[:, len(a):], axis=1)
        extreme += int((np.abs(diffs) >= abs(observed) - 1e-12).sum())
        done += rows
    return {"test": "permutation", "difference": observed, "p_value": (1 + extreme) / (1 + n_permutations),
            "permutations": n_permutations}


def jonckheere_trend_test(values_by_dose: Mapping[int, Sequence[float]], n_permutations: int = 9999,
                          seed: int = 0) -> dict:
    """One-sided Jonckheere-Terpstra test (Terpstra 1952; Jonckheere 1954): do the values rise with the dose? J = over
    every pair of doses d < e, the number of (x from d, y from e) with x < y, a tie counting 1/2; under H0 the dose
    labels are exchangeable, so p = (1 + #{J* >= J}) / (1 + permutations) over seeded permutations of the labels (the
    exact-size Monte Carlo form, Phipson & Smyth 2010, never 0). Fewer than two doses with values: p = 1."""
    doses = sorted(d for d in values_by_dose if len(values_by_dose[d]) > 0)
    result = {"test": "jonckheere_terpstra_permutation_greater", "doses": doses}
    if len(doses) < 2:
        return {**result, "statistic": None, "p_value": 1.0, "permutations": 0}
    values = np.concatenate([np.asarray(values_by_dose[d], dtype=np.float64) for d in doses])
    labels = np.concatenate([np.full(len(values_by_dose[d]), rank) for rank, d in enumerate(doses)])
    # below[i, j]: 1 where value i < value j, 1/2 on a tie; J sums it over the pairs whose labels rise
    below = (values[:, None] < values[None, :]) + 0.5 * (values[:, None] == values[None, :])

    def statistic(label_rows: np.ndarray) -> np.ndarray:
        return ((label_rows[:, :, None] < label_rows[:, None, :]) * below).sum(axis=(1, 2))

    observed = float(statistic(labels[None, :])[0])
    rng = np.random.default_rng(seed)
    extreme, done = 0, 0
    while done < n_permutations:
        rows = min(1000, n_permutations - done)
        shuffled = rng.permuted(np.broadcast_to(labels, (rows, len(labels))), axis=1)
        extreme += int((statistic(shuffled) >= observed - 1e-9).sum())
        done += rows
    return {**result, "statistic": observed, "p_value": (1 + extreme) / (1 + n_permutations),
            "permutations": n_permutations, "seed": seed}


def dose_trend_test(successes_by_dose: Mapping[int, tuple[int, int]]) -> dict:
    """Exact one-sided Cochran-Armitage trend test (Armitage 1955; exact conditional form, Agresti 2002 Sec. 5.8):
    does the rate rise with the dose? `successes_by_dose` = {dose: (k, n)}. Doses are scored by rank (0, 1, 2, ...:
    equal steps for a geometric series such as 1 / 4 / 16). Under H0 every row is equally likely to be a success, so
    given the total K the successes fall on a uniformly random K-subset of the rows; p = P(T >= t) with T = the sum of
    the successes' scores, summed exactly over that multivariate hypergeometric law (a small dynamic programme:
    tiers x successes x score). One tier, or no success or no failure anywhere: p = 1 (nothing can rise)."""
    doses = sorted(successes_by_dose)
    counts = [successes_by_dose[d] for d in doses]
    if any(not 0 <= k <= n for k, n in counts):
        raise ValueError(f"dose_trend_test: need 0 <= k <= n per dose, got {dict(zip(doses, counts))}")
    total_k, total_n = sum(k for k, _ in counts), sum(n for _, n in counts)
    observed = sum(rank * k for rank, (k, _) in enumerate(counts))
    result = {"test": "cochran_armitage_exact_greater", "doses": doses, "statistic": observed}
    if len(doses) < 2 or total_k in (0, total_n):
        return {**result, "p_value": 1.0}
    # ways[(successes so far, score so far)] = number of row subsets of the tiers seen so far
    ways: dict[tuple[int, int], int] = {(0, 0): 1}
    for rank, (_, n) in enumerate(counts):
        nxt: dict[tuple[int, int], int] = defaultdict(int)
        for (used, score), w in ways.items():
            for j in range(min(n, total_k - used) + 1):
                nxt[(used + j, score + rank * j)] += w * math.comb(n, j)
        ways = nxt
    at_total = {score: w for (used, score), w in ways.items() if used == total_k}
    p = sum(w for score, w in at_total.items() if score >= observed) / math.comb(total_n, total_k)
    return {**result, "p_value": min(1.0, p)}
