"""The newer MIA attacks against their authors' own scoring code, on the same inputs.

ReCaLL and Con-ReCall (Apache-2.0) and mimir's ReCaLL and DC-PDD (MIT) are transcribed in tests/authors_code/ and run
in the unit tests (tests/unit/harness/measures/test_mia_newer_attacks.py), as is RMIA's run_rmia (ml_privacy_meter, MIT;
tests/unit/harness/measures/test_mia_rmia.py). The DC-PDD and EZ-MIA repositories carry no licence, so their code is
not part of this project: give a folder holding a transcription of each, as a reader makes from the repositories
(header: repository, file, commit), and this script runs them beside memlens's attacks; RMIA's file it runs unchanged:

    .venv/bin/python benchmarks/crosscheck_mia_authors.py --authors DIR [--cases 2000]

DIR/authors_dc_pdd.py needs `fre_dis(token_id_lists, counts, max_tok)`, `smooth(counts)` and
`dc_pdd(tar_prob, input_ids, fre_dis, a)` (zhang-wei-chao/DC-PDD, com_fre_dis.py and com_det_sco.py); DIR/authors_ez_mia.py
needs `error_zone_pos_neg_sum_ratio(...)` (JetBrains-Research/ez-mia, mia/ez_score.py); DIR/authors_rmia.py needs
`run_rmia(...)`: the authors' own file unchanged (privacytrustlab/ml_privacy_meter, modules/mia/attacks/rmia.py, MIT;
`git show <commit>:modules/mia/attacks/rmia.py` with a header naming the repository and commit). Each case draws random
per-token values (and, for EZ-MIA, random top-1 tokens with a share of errors; for RMIA, a random population of which
the scored text is one, left out); the authors' DC-PDD returns -score ("larger for non-member"), so it is negated, as
their own evaluation does. A file not in DIR is skipped, said so. Prints the largest absolute difference per attack and
exits 1 above 1e-9.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memlens.harness.measures import mia  # noqa: E402

TOLERANCE = 1e-9


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dc_pdd_cases(authors, rng: np.random.Generator, cases: int) -> float:
    worst = 0.0
    for _ in range(cases):
        vocab = int(rng.integers(4, 60))
        docs = [rng.integers(0, vocab, size=int(rng.integers(1, 40))).tolist() for _ in range(int(rng.integers(1, 8)))]
        ids = rng.integers(0, vocab, size=int(rng.integers(1, 50))).tolist()
        logp = np.log(rng.uniform(1e-6, 1.0, size=len(ids)))
        cap = float(rng.choice([0.01, 0.05, 10.0]))
        table = authors.smooth(authors.fre_dis(docs, [0] * vocab, max_tok=10_000))
        theirs = -authors.dc_pdd(logp.tolist(), ids, table, a=cap)
        ours = mia.dc_pdd_score({"logp": logp.tolist(), "ids": ids}, mia.TokenFrequency.of(docs, vocab), cap=cap)
        worst = max(worst, abs(ours - theirs))
    return worst


def ez_mia_cases(authors, rng: np.random.Generator, cases: int) -> tuple[float, int]:
    worst, nonzero = 0.0, 0
    for _ in range(cases):
        n = int(rng.integers(1, 60))
        ids = rng.integers(0, 50, size=n)
        wrong = rng.uniform() * rng.uniform(size=n) > 0.3
        top1 = np.where(wrong, (ids + 1) % 50, ids)
        logp, ref = np.log(rng.uniform(1e-4, 1, size=n)), np.log(rng.uniform(1e-4, 1, size=n))
        theirs = authors.error_zone_pos_neg_sum_ratio(logp, ref, top1, ids, np.ones(n), ignore_bos=True, min_tokens=2)
        ours = mia.ez_mia_score({"logp": logp.tolist(), "ids": ids.tolist(), "top1": top1.tolist()},
                                {"logp": ref.tolist()})
        worst, nonzero = max(worst, abs(ours - theirs) / max(1.0, abs(theirs))), nonzero + (theirs != 0)
    return worst, nonzero


def rmia_cases(authors, rng: np.random.Generator, cases: int) -> tuple[float, int]:
    """memlens's RMIA against the authors' run_rmia with one OUT reference model (memlens's control, trained on none of
    the texts: memberships all False) on their language-model signal exp(mean LL), at memlens's fixed offline a. The
    scored text is population text 0: memlens leaves it out by id, the authors are handed the population without it."""
    worst, inside = 0.0, 0
    for _ in range(cases):
        n = int(rng.integers(2, 80))
        model_ll = rng.uniform(-6.0, 0.0, size=(n, int(rng.integers(1, 20))))
        ref_ll = model_ll + rng.normal(0.0, 0.5, size=model_ll.shape).clip(max=-model_ll)
        values = {i: {"logp": model_ll[i].tolist()} for i in range(n)}
        control = {i: {"logp": ref_ll[i].tolist()} for i in range(n)}
        ours = mia.rmia_score(values[0], control[0], mia.Population.of(values, control), 0)
        signal = mia.text_probability(model_ll.mean(1)), mia.text_probability(ref_ll.mean(1))
        theirs = authors.run_rmia(signal[0][:1], signal[1][:1, None], np.zeros((1, 1), dtype=bool), signal[0][1:],
                                  signal[1][1:, None], mia.RMIA_OFFLINE_A)[0]
        worst, inside = max(worst, abs(ours - theirs)), inside + (0 < theirs < 1)
    return worst, inside


def _rmia_check(authors, rng: np.random.Generator, cases: int) -> tuple[float, str]:
    worst, inside = rmia_cases(authors, rng, cases)
    return worst, f" ({inside} cases with a score strictly between 0 and 1)"


def _ez_mia_check(authors, rng: np.random.Generator, cases: int) -> tuple[float, str]:
    worst, nonzero = ez_mia_cases(authors, rng, cases)
    return worst, f" (relative; {nonzero} cases with a non-zero score)"


# {file in --authors: (label, check(module, rng, cases) -> (largest difference, note))}, run in this order on one
# random stream (the order the recorded results were drawn in).
CHECKS = {"authors_dc_pdd.py": ("DC-PDD", lambda m, rng, n: (dc_pdd_cases(m, rng, n), "")),
          "authors_ez_mia.py": ("EZ-MIA", _ez_mia_check),
          "authors_rmia.py": ("RMIA", _rmia_check)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors", type=Path, required=True,
                        help="folder with authors_dc_pdd.py, authors_ez_mia.py, authors_rmia.py (any of them)")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = {name: args.authors / name for name in CHECKS if (args.authors / name).is_file()}
    if not found:
        print(f"{args.authors}: none of {list(CHECKS)}; see this script's docstring for what each must hold",
              file=sys.stderr)
        return 2
    rng, failed = np.random.default_rng(args.seed), False
    for name, (label, check) in CHECKS.items():
        if name not in found:
            print(f"{label:7s} skipped: {args.authors / name} not given")
            continue
        header = [line.strip("# ").strip() for line in found[name].read_text(encoding="utf-8").splitlines()[:12]]
        print(f"{name}: " + "; ".join(h for h in header if h.startswith(("source repo", "commit"))))
        worst, extra = check(_load(found[name]), rng, args.cases)
        ok = worst <= TOLERANCE
        failed |= not ok
        print(f"{label:7s} {args.cases} random cases: largest difference {worst:.3g}{extra}  {'agree' if ok else 'DIFFER'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
