"""Cross-check of the one-run ε bounds (harness/measures/epsilon.py) against PyPI's opake-auditing 0.16.1, whose
`opake.auditing.one_run` implements Xiang et al. 2025 (arXiv 2509.08704): `eps_delta()` (the order-statistics
(ε, δ) audit) and `gdp()` (the μ-GDP audit). memlens never imports opake; this script runs it in a scratch venv.

    .venv/bin/python benchmarks/crosscheck_epsilon_opake.py                  # plain venv in a temp dir, removed after
    .venv/bin/python benchmarks/crosscheck_epsilon_opake.py --venv DIR       # reuse (or create) DIR, kept

The venv is a plain `python -m venv` (no system site-packages) with `pip install opake-auditing==0.16.1 numpy`
(opake pulls scipy and torch). The opake half runs there (this file with --worker, which imports no memlens),
on data made here and sent as JSON; ours runs in this process. Output: one table per section and each section's
largest absolute difference.

What must agree (exit 1 when any differs by more than 1e-4), where the two define the same quantity:
  A. 27 fixed score sets: opake's own guesses (every canary guessed at the threshold that maximizes the right
     guesses, r = m) and its `eps_delta().epsilon_at(delta=0)`, against our guess count at that threshold and
     our Steinke 2023 and Xiang 2025 order-statistics bounds at δ = 0 (all three are the binomial test then);
  B. the order-statistics p-value and ε bound at δ = 0 on a grid of (m, r, u), r < m included (opake's
     `EpsDeltaMethod` on a stand-in estimate that reports that (r, u));
  C. the ε of μ-GDP at δ (`_gdp_to_eps_delta`, Dong, Roth & Su's Cor. 2.13) on a grid of (μ, δ).
opake's bisection tolerances (1e-4 on ε, 1% on μ) are tightened through its module constants `_TOL` and
`_TOL_MU` so that 1e-4 is a fair test; with its defaults the section-A values are printed too.

What differs by definition (printed, not failed), see docs/methods.md:
  D. the order-statistics bound at δ > 0: opake drops round(r·δ) guesses as certain (its `_p_value`), we take the
     Binomial(m, δ) number of draws at |L| = ∞, all released first (Xiang et al.'s Theorem 2 for the f_{ε,δ} pair);
  E. μ-GDP: opake bounds P[T <= u] by a Chernoff bound on independent Bernoulli(v_k), v_k the mean error at rank k
     (their Eq. 12, Theorem 3); we compute Theorem 2's tail exactly. The Chernoff bound is larger (looser) when
     some guesses are wrong, but with every guess right its product of (1 - v_k) is below the true probability:
     with r = m the errors are exactly Binomial(m, Φ(-μ/2)), and opake's p-value is below (1 - Φ(-μ/2))^m, so its
     μ̂ there is above what the test can reject (section E shows the true probability at opake's μ̂).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OPAKE = "opake-auditing==0.16.1"
TOLERANCE = 1e-4
SIGNIFICANCE = 0.05


# --------------------------------------------------------------------------------------------- the opake half

def _worker() -> None:
    """Runs in the opake venv: reads the cases (stdin JSON), writes opake's answers (stdout JSON)."""
    import importlib.metadata as md
    from types import SimpleNamespace

    import numpy as np
    from opake.api.auditing.one_run import _eps_delta, _gdp
    from opake.api.auditing.one_run._eps_delta import EpsDeltaMethod
    from opake.api.auditing.one_run._estimate import OneRunEstimate
    from opake.api.auditing.one_run._gdp import GdpMethod
    from opake.api.auditing.one_run._roc import get_tn_fn_counts

    cases = json.load(sys.stdin)
    default_tol, default_tol_mu = _eps_delta._TOL, _gdp._TOL_MU

    def estimate(scores, members):
        """What opake.auditing.one_run builds, without its CoinFlip join (the scores are already in order)."""
        s, b = np.asarray(scores, float), np.asarray(members, bool)
        thresholds, tn, fn = get_tn_fn_counts(s[b], s[~b])
        return OneRunEstimate(n_in=int(b.sum()), n_out=int((~b).sum()), thresholds=thresholds, tn_counts=tn,
                              fn_counts=fn, tp_counts=(fn[-1] - fn)[::-1], fp_counts=(tn[-1] - tn)[::-1],
                              in_scores=s[b], out_scores=s[~b])

    def stand_in(m, r, u):
        """An estimate whose guesses are (r, u) of m: opake's methods read only n_in, n_out and _best_r_u."""
        return SimpleNamespace(n_in=m // 2, n_out=m - m // 2, _best_r_u=lambda threshold=None: (r, u))

    out = {"versions": {"opake-auditing": md.version("opake-auditing"), "numpy": np.__version__,
                        "scipy": md.version("scipy"), "python": sys.version.split()[0]},
           "defaults": {"_TOL": default_tol, "_TOL_MU": default_tol_mu}, "scores": [], "grid": [], "gdp": [],
           "convert": []}
    for case in cases["scores"]:
        est = estimate(case["scores"], case["members"])
        r, u = est._best_r_u()
        correct = (est.n_in - est.fn_counts) + est.tn_counts
        threshold = float(est.thresholds[int(np.argmax(correct))])
        row = {"r": r, "u": u, "k_plus": int(np.sum(np.asarray(case["scores"]) >= threshold))}
        _eps_delta._TOL = default_tol
        row["eps0_default_tol"] = est.eps_delta().epsilon_at(delta=0.0, significance=SIGNIFICANCE)
        _eps_delta._TOL = 1e-9
        row["eps0"] = est.eps_delta().epsilon_at(delta=0.0, significance=SIGNIFICANCE)
        row["eps_1e-5"] = est.eps_delta().epsilon_at(delta=1e-5, significance=SIGNIFICANCE)
        out["scores"].append(row)
    for m, r, u, eps, delta in cases["grid"]:
        _eps_delta._TOL = 1e-9
        out["grid"].append({"p": _eps_delta._p_value(r, u, eps, delta),
                            "bound": EpsDeltaMethod(stand_in(m, r, u)).epsilon_at(delta=delta,
                                                                                  significance=SIGNIFICANCE)})
    for m, r, u in cases["gdp"]:
        _gdp._TOL_MU = 1e-7
        mu = GdpMethod(stand_in(m, r, u))._mu_at(SIGNIFICANCE, None)
        out["gdp"].append({"mu": mu, "eps_1e-5": _gdp._gdp_to_eps_delta(mu, 1e-5) if mu > 0 else 0.0,
                           "p_at_mu": _gdp._p_value(m, r, u, mu) if mu > 0 else 1.0})
    for mu, delta in cases["convert"]:
        out["convert"].append(_gdp._gdp_to_eps_delta(mu, delta))
    json.dump(out, sys.stdout)


# --------------------------------------------------------------------------------------------- our half

def _score_cases() -> list[dict]:
    """27 score sets: m in (20, 60, 200) x a member shift of the score (0 = no signal, 1, 6 = separated) x 3 seeds."""
    import numpy as np

    cases = []
    for m in (20, 60, 200):
        for shift in (0.0, 1.0, 6.0):
            for seed in range(3):
                rng = np.random.default_rng(1000 * m + 10 * int(shift) + seed)
                members = rng.integers(0, 2, m)
                if members.all() or not members.any():
                    members[0] = 1 - members[0]
                scores = rng.standard_normal(m) + shift * members
                cases.append({"m": m, "shift": shift, "seed": seed, "scores": scores.round(12).tolist(),
                              "members": members.tolist()})
    return cases


GRID = [(m, r, u, eps, delta) for (m, r, u) in ((50, 20, 2), (200, 60, 5), (200, 200, 40), (1000, 100, 10),
                                                (1000, 1000, 309), (500, 250, 0))
        for eps, delta in ((1.0, 0.0), (0.5, 0.0), (1.0, 1e-5), (1.0, 1e-3), (2.0, 1e-2))]
GDP_CASES = [(40, 20, 0), (40, 40, 0), (100, 100, 0), (100, 100, 2), (200, 100, 0), (200, 100, 10), (300, 300, 60),
             (500, 100, 5), (500, 500, 100), (1000, 100, 10), (1000, 250, 36), (1000, 1000, 309)]
CONVERT = [(mu, delta) for mu in (0.1, 0.5, 1.0, 2.0, 4.0, 8.0) for delta in (1e-10, 1e-5, 1e-3, 0.1)]


def _venv(path: Path, pip_args: list[str]) -> Path:
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    has = subprocess.run([str(python), "-c", "import opake.api.auditing.one_run"], capture_output=True)
    if has.returncode:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", OPAKE, "numpy", *pip_args], check=True)
    return python


def _table(title: str, columns: list[str], rows: list[list]) -> None:
    print(f"\n{title}")
    cells = [[c if isinstance(c, str) else f"{c:.6g}" if isinstance(c, float) else str(c) for c in row]
             for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(columns)]
    print("  ".join(h.rjust(w) for h, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, help="venv to create or reuse (default: a temp dir, removed after)")
    parser.add_argument("--pip-arg", action="append", default=[], help="extra argument for pip install")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker()
        return 0

    import numpy as np

    from memlens.harness.measures import epsilon as E

    scratch = None if args.venv else Path(tempfile.mkdtemp(prefix="opake-venv-"))
    try:
        python = _venv(args.venv or scratch, args.pip_arg)
        cases = _score_cases()
        payload = {"scores": [{k: c[k] for k in ("scores", "members")} for c in cases], "grid": GRID,
                   "gdp": GDP_CASES, "convert": CONVERT}
        done = subprocess.run([str(python), __file__, "--worker"], input=json.dumps(payload), capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": ""})
        if done.returncode:
            print(done.stderr[-4000:], file=sys.stderr)
            return 2
        opake = json.loads(done.stdout)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{when}, load average {os.getloadavg()[0]:.2f}; memlens {commit}, numpy {np.__version__}; opake venv: "
          f"{json.dumps(opake['versions'])}, opake's default tolerances {json.dumps(opake['defaults'])}; "
          f"significance {SIGNIFICANCE}, tolerance {TOLERANCE}")
    worst: dict[str, float] = {}

    def note(section: str, diff: float) -> float:
        worst[section] = max(worst.get(section, 0.0), abs(diff))
        return diff

    rows = []
    for c, o in zip(cases, opake["scores"]):
        m = c["m"]
        ids = [f"c{i:03d}" for i in range(m)]
        g = E.guess(ids, c["scores"], c["members"], o["k_plus"], m - o["k_plus"])
        steinke = E.epsilon_lower_bound(m, g.r, g.v, 0.0, 1 - SIGNIFICANCE)
        order0 = E.epsilon_lower_bound_order_statistics(m, g.r, g.v, 0.0, 1 - SIGNIFICANCE)
        order5 = E.epsilon_lower_bound_order_statistics(m, g.r, g.v, 1e-5, 1 - SIGNIFICANCE)
        note("A: guesses (r, v)", abs(g.r - o["r"]) + abs(g.v - (o["r"] - o["u"])))
        rows.append([m, c["shift"], c["seed"], f"{g.v}/{g.r}", f"{o['r'] - o['u']}/{o['r']}", o["eps0"], steinke,
                     note("A: eps δ=0, Steinke 2023 vs opake", steinke - o["eps0"]), order0,
                     note("A: eps δ=0, Xiang order statistics vs opake", order0 - o["eps0"]),
                     note("A (opake default tolerance): eps δ=0", order0 - o["eps0_default_tol"]),
                     o["eps_1e-5"], order5, note("D: eps δ=1e-5 (definitional)", order5 - o["eps_1e-5"])])
    _table("A. 27 score sets: opake's best-threshold guesses (r = m) and eps_delta().epsilon_at; ours on the same "
           "guesses", ["m", "shift", "seed", "v/r ours", "v/r opake", "opake δ=0", "Steinke δ=0", "diff",
                       "Xiang os δ=0", "diff", "diff (opake default tol)", "opake δ=1e-5", "Xiang os δ=1e-5",
                       "diff"], rows)

    rows = []
    for (m, r, u, eps, delta), o in zip(GRID, opake["grid"]):
        ours_p = math.exp(E.log_p_value_order_statistics(m, r, u, eps, delta))
        ours_b = E.epsilon_lower_bound_order_statistics(m, r, r - u, delta, 1 - SIGNIFICANCE)
        section = "B: order statistics δ=0" if delta == 0 else "D: order statistics δ>0 (definitional)"
        rows.append([m, r, u, eps, delta, o["p"], ours_p, note(section + " p-value", ours_p - o["p"]), o["bound"],
                     ours_b, note(section + " eps bound", ours_b - o["bound"])])
    _table("B/D. Xiang 2025 order statistics on a grid: p-value at ε, and the ε bound (opake's EpsDeltaMethod on a "
           "stand-in estimate with that (r, u))", ["m", "r", "u", "ε", "δ", "opake p", "ours p", "diff",
                                                   "opake bound", "ours bound", "diff"], rows)

    rows = []
    for (mu, delta), o in zip(CONVERT, opake["convert"]):
        ours = E.gdp_epsilon(mu, delta)
        rows.append([mu, delta, o, ours, note("C: ε of μ-GDP at δ", ours - o)])
    _table("C. the ε of μ-GDP at δ (opake _gdp_to_eps_delta vs gdp_epsilon)", ["μ", "δ", "opake", "ours", "diff"],
           rows)

    rows = []
    for (m, r, u), o in zip(GDP_CASES, opake["gdp"]):
        mu = E.mu_lower_bound_gdp(m, r, r - u, 1 - SIGNIFICANCE)
        eps = E.gdp_epsilon(mu, 1e-5) if mu > 0 else 0.0
        true_at_opake = math.exp(E.log_p_value_gdp(m, r, u, o["mu"])) if o["mu"] > 0 else 1.0
        rows.append([m, r, u, o["mu"], mu, note("E: μ (definitional)", mu - o["mu"]), o["eps_1e-5"], eps,
                     note("E: ε of μ-GDP at 1e-5 (definitional)", eps - o["eps_1e-5"]), o["p_at_mu"], true_at_opake,
                     "above 0.05: opake's μ not rejected" if true_at_opake >= SIGNIFICANCE else ""])
    _table("E. Xiang 2025 μ-GDP: μ bound (opake Chernoff on v_k vs ours, Theorem 2 exactly) and its ε at δ = 1e-5; "
           "the p-value at opake's μ, by opake and exactly", ["m", "r", "u", "opake μ", "ours μ", "diff",
                                                              "opake ε", "ours ε", "diff", "opake p(opake μ)",
                                                              "exact p(opake μ)", ""], rows)

    print("\nlargest absolute difference per comparison:")
    failed = []
    for section, diff in worst.items():
        checked = section[0] in "ABC" and "default tolerance" not in section
        flag = "must agree" if checked else "informational"
        if checked and diff > TOLERANCE:
            failed.append(section)
        print(f"  {section:<52} {diff:.3g}  ({flag})")
    cases_checked = len(cases) + sum(1 for g in GRID if g[4] == 0) + len(CONVERT)
    print(f"\n{cases_checked} cases must agree to {TOLERANCE:g}: "
          + ("all do" if not failed else "FAILED: " + ", ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
