"""The blind baseline of membership inference: how well the *texts alone* tell members from non-members, no model read.

Das, Zhang and Tramèr 2024 ("Blind baselines beat membership inference attacks for foundation models", arXiv
2406.16201, Sec. 3) show that on the benchmarks MIAs were judged by, members and non-members differ in distribution
(dates, words), so a classifier that never queries the model separates them as well as, or better than, the attacks.
An attack's AUC means something about the *model* only where it beats this baseline on the same examples; memlens's own
splits (held-out canaries of one generator, memlens.inject's fair coin) should leave it at chance, a user's own member /
non-member files need not (harness/audit/mia.py warns then).

Their bag-of-words attack (their code: ethz-spylab/Blind-MIA, bag_of_words.py), as built here:
- features: the word counts of each text (scikit-learn's CountVectorizer over words);
- classifier: a random forest (scikit-learn's RandomForestClassifier), as we read their Sec. 3's description of the
  bag-of-words attack (not checked against bag_of_words.py, which was not at hand: see hyper-parameters below);
- score: the forest's P(member | text) of each text, higher = member, read by the same AUC / TPR helpers as the attacks.

Departures, each deliberate:
- Out-of-fold scores from a seeded, stratified k-fold split (BLIND_FOLDS) instead of their single train / test split:
  every example then gets a score from a forest that never saw it, so the baseline's AUC is over *the same examples*
  the attacks are scored on, and the findings can compare the two paired (memlens.harness.core.stats
  .paired_auc_difference). The price is that the k AUCs' folds are pooled into one ranking (a forest's probabilities
  are comparable across folds only roughly); at the sizes of an audit this is the usual reading of a cross-validated AUC.
- Hyper-parameters: bag_of_words.py was not at hand when this was written. CountVectorizer(min_df=1) and a
  100-tree forest are scikit-learn's defaults, "as in bag_of_words.py, read from the paper's description" (Sec. 3:
  word counts into a random forest); they are recorded in every summary (BLIND_RULE) so that a rerun with theirs
  shows whether it matters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.harness.measures.mia import attack_metrics

BLIND = "blind"                           # its key in an MIA summary (beside the attacks, never one of them)
BLIND_LABEL = "blind baseline (no model)"
BLIND_FOLDS = 5                           # k of the stratified k-fold (fewer where a class has fewer examples)
BLIND_TREES = 100                         # scikit-learn's default n_estimators (module docstring: hyper-parameters)
BLIND_MIN_DF = 1                          # CountVectorizer's default: every word seen in a training fold is a feature
BLIND_RULE = (f"Das et al. 2024 Sec. 3 bag of words: CountVectorizer(min_df={BLIND_MIN_DF}) word counts, "
              f"RandomForestClassifier(n_estimators={BLIND_TREES}, random_state=seed), out-of-fold P(member) from a "
              f"seeded stratified {BLIND_FOLDS}-fold split, on the texts the attacks score (prefix shots left out)")


def blind_scores(texts: Sequence[str], labels: Sequence[int], seed: int, folds: int = BLIND_FOLDS
                 ) -> list[float] | None:
    """Each text's out-of-fold P(member | its word counts) (labels 1 = member), from a forest trained on the other
    folds only; None when a class has fewer than 2 examples (no fold split leaves it on both sides).
    Deterministic for a seed: the fold split and each forest are seeded, the forest runs on one thread."""
    # scikit-learn costs about a second to import; the report reads this module's labels and never fits a forest.
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.feature_extraction.text import CountVectorizer  # deferred: scikit-learn (above)
    from sklearn.model_selection import StratifiedKFold  # deferred: scikit-learn (above)

    y = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(y) or not set(y.tolist()) <= {0, 1}:
        raise ValueError(f"blind_scores: {len(texts)} texts and {len(y)} labels; labels must be 1 (member) or 0")
    k = min(folds, int((y == 1).sum()), int((y == 0).sum()))
    if k < 2:
        return None
    out = np.empty(len(y), dtype=np.float64)
    split = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for train, test in split.split(np.zeros(len(y)), y):
        vectorizer = CountVectorizer(min_df=BLIND_MIN_DF)
        try:
            features = vectorizer.fit_transform([texts[i] for i in train])
        except ValueError:       # its one ValueError at these settings: no word of 2+ characters in any training text
            out[test] = y[train].mean()     # no feature: every held-out text gets the training fold's member share
            continue
        forest = RandomForestClassifier(n_estimators=BLIND_TREES, random_state=seed, n_jobs=1)
        forest.fit(features, y[train])
        member_column = list(forest.classes_).index(1)
        out[test] = forest.predict_proba(vectorizer.transform([texts[i] for i in test]))[:, member_column]
    return out.tolist()


def blind_baseline(member_texts: Sequence[str], nonmember_texts: Sequence[str], n_boot: int, seed: int) -> dict | None:
    """{"scores": (members' scores, non-members' scores), "metrics": AUC and TPR at low FPR with their bootstrap
    intervals, exactly as an attack's (memlens.harness.measures.mia.attack_metrics: the n/m rule included)}, or None
    when a side has fewer than 2 texts."""
    scores = blind_scores([*member_texts, *nonmember_texts], [1] * len(member_texts) + [0] * len(nonmember_texts),
                          seed)
    if scores is None:
        return None
    members, nonmembers = scores[:len(member_texts)], scores[len(member_texts):]
    return {"scores": (members, nonmembers), "metrics": attack_metrics(members, nonmembers, n_boot=n_boot, seed=seed)}


def distinguishable_without_model(metrics: dict) -> bool:
    """Whether the blind baseline's AUC interval lies above chance: the split itself, not the model, tells members
    from non-members (Das et al. 2024 Sec. 3), and every attack's AUC on it is read against this one."""
    return metrics["auc"]["ci95"][0] > 0.5
