"""Hand-built runs for the findings tests (tests/unit/harness/report/test_findings*.py): audit rows, training evidence and a run
where every effect is there, each number chosen so that a verdict, interval and p-value is derivable by hand."""

from memlens.harness.report.findings import findings


def row(i, memorized, ned=None, control_ned=0.5, excluded=None, **extra):
    """One audit row; each prompt gets its own greedy completion from the model and from the control."""
    return {"id": i, "memorized": memorized, "ned": (0.0 if memorized else 0.5) if ned is None else ned,
            "control_ned": control_ned, "excluded": excluded, "completion": f"model says {i}",
            "control_completion": f"control says {i}", **extra}


def rows(n_memorized, n, prefix="x", **extra):
    return [row(f"{prefix}{i}", i < n_memorized, **extra) for i in range(n)]


def pii_rows_(n_regurgitated, n, control=0):
    return [row(f"p{i}", False, pii_path=f"/home/u{i % 3}/id.txt", pii_regurgitated=i < n_regurgitated,
                control_pii_regurgitated=i < control) for i in range(n)]


# An RL point that optimised and drifted, and one that did not move (recipes/stages/rl_eval.py's fixed-prompt figures).
MOVED = {"eval_change_in_sd": 2.0, "eval_up": 20, "eval_down": 4, "eval_p_value": 0.0015, "kl_final": 0.2,
         "pd_eval_loss": 4.53, "init_pd_eval_loss": 4.44}
STILL = {"eval_change_in_sd": 0.0, "eval_up": 12, "eval_down": 12, "eval_p_value": 1.0, "kl_final": 0.001,
         "pd_eval_loss": 4.44, "init_pd_eval_loss": 4.44}
# A policy that "optimised" by collapsing onto one string (measured on the quickstart: greedy "eg" for every SD
# prompt after RLFT.2 at LR 1e-3 x 24 steps; reward +2.5 initial sd, held-out code loss 4.44 -> 6.75).
COLLAPSED = {**MOVED, "eval_change_in_sd": 2.53, "kl_final": 2.2, "pd_eval_loss": 6.75}


def evidence(rl=MOVED, ipo_accuracy=0.95, rm_auc=0.9, rm1_heldout_auc=0.8):
    ev = {"RM.3": {"stage": "reward", "auc": {"rm_sd": {"auc": rm_auc, "split": "train"}}},
          "RM.1": {"stage": "reward", "auc": {"rm_pd2": {"auc": 0.95, "split": "train"},
                                              "rm_pd2_val": {"auc": rm1_heldout_auc, "split": "eval"}}},
          "RLFT.2": {"stage": "rl", "reward_model": "RM.3", **rl},
          "IPO": {"stage": "preference", "accuracy_final": ipo_accuracy}}
    for beta, kl in ((0.5, 0.02), (0.1, 0.05), (0.005, 0.2)):
        ev[f"RLFT.1/beta={beta}"] = {"stage": "rl", **rl, "kl_final": rl["kl_final"] * kl / 0.2}
    for point in ("beta=0.005,lr=3e-05", "beta=0.5,lr=3e-05", "beta=0.005,lr=0.0003"):
        ev[f"RLFT.4/{point}"] = {"stage": "rl", **rl}
    return ev


def grouped():
    """A run where every effect is there: FT.3 memorizes 10/20, RLFT.2 none, IPO 8/20, ..."""
    g = {("FT.3", "final", "sd_base"): rows(10, 20), ("RLFT.2", "final", "sd_base"): rows(0, 20),
         ("IPO", "final", "sd_base"): rows(8, 20),
         ("IPO", "checkpoint-1", "sd_base"): rows(20, 20),        # not final: ignored
         ("FT.1", "final", "sd_base"): rows(10, 20),
         ("FT.3", "final", "sd_links_pos"): pii_rows_(12, 20, control=2),
         ("RLFT.2", "final", "sd_links_pos"): pii_rows_(0, 20),
         ("FT.1", "final", "sd_links_pos"): pii_rows_(15, 20)}
    for beta, kept, pii in ((0.5, 6, 15), (0.1, 5, 9), (0.005, 4, 1)):
        g[(f"RLFT.1/beta={beta}", "final", "sd_base")] = rows(kept, 20)
        g[(f"RLFT.1/beta={beta}", "final", "sd_links_pos")] = pii_rows_(pii, 20)
    g[("RLFT.4/beta=0.005,lr=3e-05", "final", "sd_rl_prompts")] = rows(1, 40)
    g[("RLFT.4/beta=0.5,lr=3e-05", "final", "sd_rl_prompts")] = rows(0, 40)
    g[("RLFT.4/beta=0.005,lr=0.0003", "final", "sd_rl_prompts")] = rows(12, 40)
    return g


def verdicts(run):
    return {f.id: f for f in findings(run)}
