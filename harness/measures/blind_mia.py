"""The blind baseline of membership inference: how well the *texts alone* tell members from non-members, no model read.

Das, Zhang and Tramèr 2024 ("Blind baselines beat membership inference attacks for foundation models", arXiv
2406.16201, Sec. 3) show that on the benchmarks MIAs were judged by, members and non-members differ in distribution
(dates, words), so a classifier that never queries the model separates them as well as, or better than, the attacks.
An attack's AUC means something about the *model* only where it beats this baseline on the same examples; memlens's own
splits (held-out canaries of one generator, memlens.inject's fair coin) should leave it at chance, a user's own member /
non-member files need not (harness/audit/mia.py warns then).

Their bag-of-words attack as their code runs it by default (ethz-spylab/Blind-MIA, bag_of_words.py at 853c50e,
`train_classifier`'s default params {'max_features': 30, 'vectorizer': 'tf', 'model_type': 'stack'}; read, not copied:
the repository carries no licence):
- features: tf-idf of the 30 most frequent words of the training texts (scikit-learn's TfidfVectorizer(max_features=30)),
  as dense arrays;
- classifier: their stack: a random forest (50 trees, depth 5), Gaussian and multinomial naive Bayes and gradient
  boosting (50 stumps of depth 5, learning rate 1.0), combined by a logistic regression (scikit-learn's
  StackingClassifier, its own 5-fold fit of the combiner);
- score: the stack's P(member | text), higher = member, read by the same AUC / TPR helpers as the attacks.

Departures, each deliberate:
- Out-of-fold scores from a seeded, stratified k-fold split (BLIND_FOLDS) instead of their ten random 80/20 splits
  whose AUCs they average: every example then gets a score from a classifier that never saw it, so the baseline's AUC
  is over *the same examples* the attacks are scored on, and the findings compare the two paired
  (memlens.harness.core.stats.paired_auc_difference). Within one fold the classifier and its scores are theirs
  (benchmarks/crosscheck_blind_authors.py runs their train_classifier on our folds).
- Their per-dataset settings (features, vectorizer, model) came from a search on each benchmark; a canary set has no
  such search, so their defaults are used, and `random_state` is the audit's seed (theirs: 42).
- The stack fits its combiner on 5 folds of its own (theirs); a training fold with fewer than 5 texts of a side (a
  small canary set) uses as many folds as it has, and one with fewer than 2 gives its test texts the member share.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.harness.measures.mia import attack_metrics

BLIND = "blind"                           # its key in an MIA summary (beside the attacks, never one of them)
BLIND_LABEL = "blind baseline (no model)"
BLIND_FOLDS = 5                           # k of the stratified k-fold (fewer where a class has fewer examples)
BLIND_FEATURES = 30                       # their default max_features (bag_of_words.py train_classifier)
BLIND_RULE = (f"Das et al. 2024 bag of words, their defaults: TfidfVectorizer(max_features={BLIND_FEATURES}), "
              "StackingClassifier(RF(50, depth 5), GaussianNB, MultinomialNB, GB(50, lr 1.0, depth 5) -> "
              f"LogisticRegression), random_state=seed; out-of-fold P(member) from a seeded stratified {BLIND_FOLDS}-fold "
              "split, on the texts the attacks score (prefix shots left out)")


STACK_CV = 5                              # StackingClassifier's own folds for fitting the combiner (their default)


def authors_classifier(seed: int, cv: int = STACK_CV):
    """Their default model (`model_type: 'stack'` in bag_of_words.py train_classifier), seeded with `seed`; `cv`: the
    stack's own folds (theirs: scikit-learn's default, 5)."""
    # scikit-learn costs about a second to import; the report reads this module's labels and never fits a model.
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier, StackingClassifier
    from sklearn.linear_model import LogisticRegression  # deferred: scikit-learn (above)
    from sklearn.naive_bayes import GaussianNB, MultinomialNB  # deferred: scikit-learn (above)

    estimators = [("random", RandomForestClassifier(n_estimators=50, max_depth=5, random_state=seed)),
                  ("gaussian", GaussianNB()), ("multi", MultinomialNB()),
                  ("gradient", GradientBoostingClassifier(n_estimators=50, learning_rate=1.0, max_depth=5,
                                                          random_state=seed))]
    return StackingClassifier(estimators=estimators, final_estimator=LogisticRegression(random_state=seed), cv=cv)


def fold_scores(train_texts: Sequence[str], train_labels: Sequence[int], test_texts: Sequence[str],
                seed: int) -> np.ndarray:
    """P(member) of `test_texts` from their vectorizer and model fitted on the training texts alone (one fold)."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # deferred: scikit-learn (authors_classifier)

    labels = np.asarray(train_labels)
    # The stack fits its combiner on its own stratified folds, which need that many texts of each side: their 5 where
    # the training fold has them (every benchmark of theirs), fewer on a small canary set, and with fewer than 2 of a
    # side no stack can be fitted: each test text then gets the training fold's member share (a departure).
    inner = min(STACK_CV, int(np.bincount(labels, minlength=2).min()))
    if inner < 2:
        return np.full(len(test_texts), labels.mean())
    vectorizer = TfidfVectorizer(max_features=BLIND_FEATURES)
    train = vectorizer.fit_transform(list(train_texts)).toarray()      # dense, as theirs (GaussianNB needs it)
    model = authors_classifier(seed, cv=inner)
    model.fit(train, labels)
    member_column = list(model.classes_).index(1)
    return model.predict_proba(vectorizer.transform(list(test_texts)).toarray())[:, member_column]


def blind_scores(texts: Sequence[str], labels: Sequence[int], seed: int, folds: int = BLIND_FOLDS
                 ) -> list[float] | None:
    """Each text's out-of-fold P(member | its words) (labels 1 = member), from their classifier trained on the other
    folds only; None when a class has fewer than 2 examples (no fold split leaves it on both sides).
    Deterministic for a seed: the fold split and every model in the stack are seeded."""
    from sklearn.model_selection import StratifiedKFold  # deferred: scikit-learn (authors_classifier)

    y = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(y) or not set(y.tolist()) <= {0, 1}:
        raise ValueError(f"blind_scores: {len(texts)} texts and {len(y)} labels; labels must be 1 (member) or 0")
    k = min(folds, int((y == 1).sum()), int((y == 0).sum()))
    if k < 2:
        return None
    out = np.empty(len(y), dtype=np.float64)
    split = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for train, test in split.split(np.zeros(len(y)), y):
        try:
            out[test] = fold_scores([texts[i] for i in train], y[train], [texts[i] for i in test], seed)
        except ValueError as e:  # the vectorizer's one refusal here: no word of 2+ characters in any training text
            if "empty vocabulary" not in str(e):
                raise
            out[test] = y[train].mean()     # no feature: every held-out text gets the training fold's member share
    return out.tolist()


def blind_baseline(member_texts: Sequence[str], nonmember_texts: Sequence[str], n_boot: int, seed: int) -> dict | None:
    """{"scores": (members' scores, non-members' scores), "metrics": AUC and TPR at low FPR with their bootstrap
    intervals, exactly as an attack's (memlens.harness.measures.mia.attack_metrics: the n/m rule included)}, or None
    when a side has fewer than 2 texts."""
    scores = blind_scores([*member_texts, *nonmember_texts], [1] * len(member_texts) + [0] * len(nonmember_texts),
                          seed)
    return baseline_of_scores(scores, len(member_texts), n_boot, seed)


def baseline_of_scores(scores: list[float] | None, n_members: int, n_boot: int, seed: int) -> dict | None:
    """blind_baseline's result from its out-of-fold scores (members first): the scores per side and their metrics."""
    if scores is None:
        return None
    members, nonmembers = scores[:n_members], scores[n_members:]
    return {"scores": (members, nonmembers), "metrics": attack_metrics(members, nonmembers, n_boot=n_boot, seed=seed)}


def distinguishable_without_model(metrics: dict) -> bool:
    """Whether the blind baseline's AUC interval lies above chance: the split itself, not the model, tells members
    from non-members (Das et al. 2024 Sec. 3), and every attack's AUC on it is read against this one."""
    return metrics["auc"]["ci95"][0] > 0.5
