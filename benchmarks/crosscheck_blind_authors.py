"""The blind baseline (harness/measures/blind_mia.py) against its authors' code, on the same folds.

Das, Zhang and Tramèr's bag-of-words attack (ethz-spylab/Blind-MIA, bag_of_words.py `train_classifier`) carries no
licence, so their code is not part of this project: give the folder of a checkout of their repository (it needs their
bag_of_words.py and utils.py, whose imports — datasets, scikit-learn, matplotlib — memlens's environment has):

    .venv/bin/python benchmarks/crosscheck_blind_authors.py --authors DIR

For each split below (texts of one distribution split by fair coins; the same with a word only members carry; SD
canaries and their held-out twins from a run's data, with --run RUN_DIR), it takes memlens's seeded stratified folds and
runs, on each fold, their `train_classifier(X_train, X_test, y_train, y_test, fpr_budget=1, plot_roc=False)` with its
default params ({'max_features': 30, 'vectorizer': 'tf', 'model_type': 'stack'}, random_state 42 in their code) and
memlens's `fold_scores` with seed 42; prints each fold's AUC from both and exits 1 if any differs by more than 1e-12.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memlens.harness.measures.blind_mia import BLIND_FOLDS, fold_scores  # noqa: E402

TOLERANCE = 1e-12
THEIR_SEED = 42                    # hard-coded in their train_classifier's models
WORDS = [f"w{i}" for i in range(50)]


def synthetic(seed: int, n: int, shifted: bool) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        member = int(rng.random() < 0.5)
        text = " ".join(rng.choice(WORDS) for _ in range(20))
        texts.append(text + (" memberonly memberonly" if shifted and member else ""))
        labels.append(member)
    return texts, labels


def run_split(run_dir: Path, dataset: str) -> tuple[list[str], list[int]]:
    """A run's members (`<dataset>/rows.jsonl`) and held-out twins (`<dataset>_heldout`), as the MIA audit pairs them;
    the whole program text."""
    texts, labels = [], []
    for name, label in ((dataset, 1), (f"{dataset}_heldout", 0)):
        for line in (run_dir / "data" / name / "rows.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts.append(row.get("text") or row["prefix"] + row["target"] + row["suffix"])
            labels.append(label)
    return texts, labels


def compare(name: str, texts: list[str], labels: list[int], theirs) -> float:
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels)
    worst = 0.0
    split = StratifiedKFold(n_splits=BLIND_FOLDS, shuffle=True, random_state=0)
    for k, (train, test) in enumerate(split.split(np.zeros(len(y)), y)):
        x_train, x_test = [texts[i] for i in train], [texts[i] for i in test]
        their_auc, _ = theirs.train_classifier(x_train, x_test, y[train], y[test], 1, False)
        our_auc = roc_auc_score(y[test], fold_scores(x_train, y[train], x_test, THEIR_SEED))
        worst = max(worst, abs(their_auc - our_auc))
        print(f"{name:<28} fold {k}: theirs {their_auc:.6f}  ours {our_auc:.6f}  |diff| {abs(their_auc - our_auc):.1e}")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors", type=Path, required=True, help="a checkout of ethz-spylab/Blind-MIA")
    parser.add_argument("--run", type=Path, help="a run whose data holds sd_base and sd_base_heldout")
    args = parser.parse_args()
    sys.path.insert(0, str(args.authors))         # their bag_of_words.py does `from utils import *`
    import bag_of_words as theirs

    splits = {"coin split, one distribution": synthetic(1, 200, shifted=False),
              "coin split, a members' word": synthetic(2, 200, shifted=True)}
    if args.run is not None:
        splits["sd_base vs sd_base_heldout"] = run_split(args.run, "sd_base")
    worst = max(compare(name, *split, theirs) for name, split in splits.items())
    print(f"largest |AUC difference| over every fold: {worst:.1e} (tolerance {TOLERANCE:.0e})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
